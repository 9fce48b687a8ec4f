"""Self-attention that applies a positional encoding's attention-level hooks on every path.

This is the project's one deliberate re-implementation of fairseq code: the forward of
``fairseq.modules.MultiheadAttention``, reduced to self-attention. fairseq's own forward takes
``F.multi_head_attention_forward`` in training and full-pass validation, which skips every Python hook
(``apply_sparse_mask`` included), so an encoding injected there would be missing in training
(docs/fairseq.md §Fused attention). Here one code path serves training, validation and incremental decoding:

    q, k, v  = x W_Q * d^-1/2, x W_K, x W_V                        (B,H,T,d)
    q, k     = transform_qk(q, k, q_pos)                           new keys only; the cache holds them
    v        = transform_values(v, k_pos)                          new values only; the cache holds them
    e_ij     = q_i . k_j + score_bias_ij + mask_ij                 (B,H,Tq,Tk)
    a        = dropout(softmax_j(e))
    z_i      = sum_j a_ij v_j + value_bias(a)_i                    (B,H,Tq,d) -> concat heads -> W_O

What every layer of a pass shares (the positions, the position bias with the causal and padding masks, the
encoding's ``prepare``: RoPE's angles) comes from the pass's ``PassContext`` (``modules/pass_context``), which the
stack builds once and sets as ``self.context``; a module called alone builds one per call.

Three implementations (``--pe-attention-impl``):
  auto (default)  the per-pass context; when no weights are requested, an encoding's own product where it has
                  one (``attention_core``: Shaw's, with its value term and a hand-written backward that keeps no
                  (B,H,Tq,Tk) tensor, ``encodings/shaw``); else, when the encoding has no value bias, the
                  product runs in ``F.scaled_dot_product_attention`` (``modules/sdpa``: on a CPU, a mask that needs a
                  gradient keeps the fused kernel) with no mask, ``is_causal``, or the context's
                  aligned float mask (Shaw's key term joins it per layer); otherwise the explicit product below,
                  with the masks added into the logits in place and the softmax in the compute dtype, so that
                  backward keeps one copy of the probabilities (under fp16 too; Shaw's bucket sums still
                  accumulate in float32)
  triton          auto, where the encoding's ``attention_core`` has fused Triton kernels (Shaw's, on CUDA, without
                  attention dropout: ``kernels/shaw_rpe``); the encoding reads the choice, attention does not
  reference       every layer builds its own context (positions, bias, masks, ``prepare``) and runs the explicit
                  product as the equations read, masks added as new tensors, softmax in float32 or float64;
                  every ``auto`` path is tested against it in float64 (tests/test_fast_paths.py)
Neither reads a value from the device: positions and lengths come from shapes and masks (``Positions``).
Projections, parameter names, the incremental cache layout ("attn_state": prev_key / prev_value as
(B, H, T, d)) and beam reordering are inherited from fairseq, so checkpoints and generators see a normal
``MultiheadAttention``.
"""
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.modules import MultiheadAttention
from torch import Tensor

from ..encoding_parts.base import PositionalEncoding
from .pass_context import PassContext, aligned
from .sdpa import attention as sdpa


class PEAttention(MultiheadAttention):
    def __init__(self, embed_dim: int, num_heads: int, pe: PositionalEncoding, layer: int, dropout: float = 0.0):
        super().__init__(embed_dim, num_heads, dropout=dropout, self_attention=True)
        self._pe = [pe]  # not registered: the stack owns the encoding (shared by its layers)
        self.layer = layer
        self.capture_weights = False  # analysis tools set it to keep the last head-wise probabilities
        self.last_weights: Optional[Tensor] = None
        self.context: Optional[PassContext] = None  # set by the stack for one pass (auto), see pass_context

    @property
    def pe(self) -> PositionalEncoding:
        return self._pe[0]

    def _split_heads(self, x: Tensor) -> Tensor:
        t, b, _ = x.shape
        return x.view(t, b, self.num_heads, self.head_dim).permute(1, 2, 0, 3)  # (T,B,C) -> (B,H,T,d)

    def _explicit(self, q, k, v, ctx: PassContext, q_bias, reference: bool) -> Tuple[Tensor, Tensor]:
        """The attention product with its probabilities in memory (for the value bias, or weights to return):
        (B,H,Tq,d) output and the (B,H,Tq,Tk) probabilities.
            e = q k^T + score_bias + mask,  a = dropout(softmax(e)),  z = a v + value_bias(a)"""
        pe = self.pe
        logits = q @ k.transpose(-1, -2)  # (B,H,Tq,Tk)
        if reference:
            mask = ctx.mask
            if q_bias is not None:
                mask = q_bias if mask is None else q_bias + mask
            if mask is not None:
                logits = logits + mask
            softmax_dtype = torch.promote_types(q.dtype, torch.float32)  # float32 under fp16, float64 stays
            probs = F.softmax(logits, dim=-1, dtype=softmax_dtype).to(q.dtype)
        else:
            for term in ctx.terms + ((q_bias,) if q_bias is not None else ()):  # each broadcasts to the logits
                logits.add_(term)
            probs = F.softmax(logits, dim=-1)  # (B,H,Tq,Tk) in the compute dtype: the one copy backward keeps
        dropped = self.dropout_module(probs)
        attn = dropped @ v  # (B,H,Tq,d)
        bias = pe.value_bias(dropped, ctx.ctx, self.layer) if pe.uses("value_bias") else None
        if bias is not None:
            attn = attn + bias.to(attn.dtype)
        if self.capture_weights:
            self.last_weights = probs.detach()
        return attn, probs

    def _own_core(self, q, k, v, ctx: PassContext, dropout_p: float) -> Optional[Tensor]:
        """The encoding's own attention product (B,H,Tq,d) with the pass's masks (each broadcasts to (B,H,Tq,Tk)),
        e.g. Shaw's with its value term and a backward that keeps no (B,H,Tq,Tk) tensor; None where it has none."""
        if not self.pe.uses("attention_core"):
            return None
        return self.pe.attention_core(q, k, v, ctx.terms, dropout_p, ctx.ctx, self.layer)

    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor],
        value: Optional[Tensor],
        key_padding_mask: Optional[Tensor] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        need_weights: bool = True,
        static_kv: bool = False,
        attn_mask: Optional[Tensor] = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        if static_kv or before_softmax:
            raise NotImplementedError("PEAttention is self-attention only (no static_kv / before_softmax)")
        need_weights = need_weights or need_head_weights
        tgt_len, bsz, embed_dim = query.shape
        pe = self.pe

        q = self._split_heads(self.q_proj(query) * self.scaling)  # (B,H,Tq,d)
        k = self._split_heads(self.k_proj(query))  # (B,H,Tq,d)
        v = self._split_heads(self.v_proj(query))  # (B,H,Tq,d)

        saved = self._get_input_buffer(incremental_state) if incremental_state is not None else None
        n_cached = 0
        if saved is not None and saved.get("prev_key") is not None:
            n_cached = saved["prev_key"].size(2)
        src_len = n_cached + tgt_len
        if saved is not None:
            key_padding_mask = MultiheadAttention._append_prev_key_padding_mask(
                key_padding_mask=key_padding_mask,
                prev_key_padding_mask=saved.get("prev_key_padding_mask"),
                batch_size=bsz,
                src_len=src_len,
                static_kv=False,
            )  # (B, Tk) or None
        # what the layers of this pass share: the stack's context (auto), or one of this call's own
        reference = pe.attention_impl == "reference"
        ctx = self.context if self.context is not None and not reference else PassContext(pe, reference=reference)
        ctx.ready(key_padding_mask, attn_mask, tgt_len, src_len, q.dtype, query.device, self.layer)

        # keys and values are transformed once, before caching: (B,H,Tq,d); the new keys stand at the queries
        q, k = pe.transform_qk(q, k, ctx.ctx, self.layer)
        v = pe.transform_values(v, ctx.ctx, self.layer)
        if saved is not None:
            if n_cached:
                k = torch.cat([saved["prev_key"], k], dim=2)  # (B,H,Tk,d)
                v = torch.cat([saved["prev_value"], v], dim=2)  # (B,H,Tk,d)
            saved["prev_key"], saved["prev_value"] = k, v
            saved["prev_key_padding_mask"] = key_padding_mask
            self._set_input_buffer(incremental_state, saved)

        dropout_p = self.dropout_module.p if (self.training or self.dropout_module.apply_during_inference) else 0.0
        probs = None
        explicit = reference or need_weights or self.capture_weights  # the probabilities in memory
        attn = None if explicit else self._own_core(q, k, v, ctx, dropout_p)  # (B,H,Tq,d) or None
        if attn is None:
            q_bias = pe.score_bias(q, ctx.ctx, self.layer) if pe.uses("score_bias") else None  # (B,H,Tq,Tk) or None
            if explicit or pe.uses("value_bias"):
                attn, probs = self._explicit(q, k, v, ctx, q_bias, reference)
            else:
                mask, is_causal = ctx.mask, ctx.is_causal
                if q_bias is not None:  # the q-dependent term joins the pass's mask: one aligned mask per layer
                    mask, is_causal = aligned(sum(ctx.terms, q_bias)), False
                attn = sdpa(q, k, v, mask, dropout_p, is_causal)  # F.scaled_dot_product_attention, scale 1

        attn = attn.permute(2, 0, 1, 3).reshape(tgt_len, bsz, embed_dim)  # (B,H,Tq,d) -> (Tq,B,C)
        attn = self.out_proj(attn)
        weights = None
        if need_weights and probs is not None:
            weights = probs.to(q.dtype).transpose(0, 1)  # (H,B,Tq,Tk), fairseq's head-weights layout
            if not need_head_weights:
                weights = weights.mean(dim=0)  # (B,Tq,Tk)
        return attn, weights

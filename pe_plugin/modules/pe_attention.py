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

When the encoding has no value bias and no weights are requested, the product runs in the fused
``F.scaled_dot_product_attention`` kernel with the bias as a float mask.

Two implementations (``--pe-attention-impl``): ``auto`` (default) keeps what the layers share for one stack pass
(``PositionalEncoding.memo``: the positions; the position bias with the causal and padding masks folded in, so
T5 and ALiBi build one (B|1,H,Tq,Tk) mask per pass instead of one per layer), adds the masks into the logits in
place and sums the value bias in float32; ``reference`` recomputes everything in every layer, as the equations
read, and is what the fast path is tested against (tests/test_fast_paths.py). Neither reads a value from the
device: positions and lengths come from shapes and masks (``Positions``).
Projections, parameter names, the incremental cache layout ("attn_state": prev_key / prev_value as
(B, H, T, d)) and beam reordering are inherited from fairseq, so checkpoints and generators see a normal
``MultiheadAttention``.
"""
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.modules import MultiheadAttention
from torch import Tensor

from ..encodings.base import PositionalEncoding, Positions


class PEAttention(MultiheadAttention):
    def __init__(self, embed_dim: int, num_heads: int, pe: PositionalEncoding, layer: int, dropout: float = 0.0):
        super().__init__(embed_dim, num_heads, dropout=dropout, self_attention=True)
        self._pe = [pe]  # not registered: the stack owns the encoding (shared by its layers)
        self.layer = layer
        self.capture_weights = False  # analysis tools set it to keep the last head-wise probabilities
        self.last_weights: Optional[Tensor] = None

    @property
    def pe(self) -> PositionalEncoding:
        return self._pe[0]

    def _split_heads(self, x: Tensor) -> Tensor:
        t, b, _ = x.shape
        return x.view(t, b, self.num_heads, self.head_dim).permute(1, 2, 0, 3)  # (T,B,C) -> (B,H,T,d)

    @staticmethod
    def _mask(bias: Optional[Tensor], attn_mask: Optional[Tensor], key_padding_mask: Optional[Tensor],
              bsz: int, src_len: int, dtype) -> Optional[Tensor]:
        """bias (1,H,Tq,Tk) + attn_mask (Tq,Tk), with -inf at padded keys: (B|1,H|1,Tq,Tk) in ``dtype``, or None."""
        mask = bias
        if attn_mask is not None:
            attn_mask = attn_mask.to(dtype if bias is None else bias.dtype)  # (Tq, Tk), -inf above the diagonal
            mask = attn_mask if mask is None else mask + attn_mask
        if key_padding_mask is not None:
            pad = key_padding_mask.bool().view(bsz, 1, 1, src_len)
            mask = torch.zeros(bsz, 1, 1, src_len, dtype=dtype, device=pad.device) if mask is None else mask
            mask = mask.masked_fill(pad, float("-inf"))
        return None if mask is None else mask.to(dtype)

    def _explicit(self, q, k, v, mask, q_bias, pos, pe) -> Tuple[Tensor, Tensor]:
        """The attention product with its probabilities in memory (for the value bias, or weights to return):
        (B,H,Tq,d) output and the (B,H,Tq,Tk) probabilities. The fast path adds the masks into the logits in
        place and keeps the dropped-out probabilities in float32 for the value bias (float32 sums under
        fp16); the reference path is the present formulation, a new tensor at each step."""
        logits = q @ k.transpose(-1, -2)  # (B,H,Tq,Tk)
        softmax_dtype = torch.promote_types(q.dtype, torch.float32)  # float32 under fp16, float64 stays
        if pe.fast:
            for term in (mask, q_bias):  # each broadcasts to the logits' shape: added in place
                if term is not None:
                    logits.add_(term)
            probs = F.softmax(logits, dim=-1, dtype=softmax_dtype)  # (B,H,Tq,Tk), at least float32
            dropped = self.dropout_module(probs)
            attn = dropped.to(v.dtype) @ v  # (B,H,Tq,d)
        else:
            if q_bias is not None:
                mask = q_bias if mask is None else q_bias + mask
            if mask is not None:
                logits = logits + mask
            probs = F.softmax(logits, dim=-1, dtype=softmax_dtype).to(q.dtype)
            dropped = self.dropout_module(probs)
            attn = dropped @ v  # (B,H,Tq,d)
        bias = pe.value_bias(dropped, pos, self.layer) if pe.uses("value_bias") else None
        if bias is not None:
            attn = attn + bias.to(attn.dtype)
        if self.capture_weights:
            self.last_weights = probs.detach()
        return attn, probs

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
        # the positions of the new tokens (queries, and the keys that join the cache), shared by the layers
        pos = pe.memo(("positions", tgt_len, src_len), lambda: Positions.from_mask(
            None if key_padding_mask is None else ~key_padding_mask.bool(), tgt_len, src_len, query.device),
            key_padding_mask)

        # keys and values are transformed once, before caching: (B,H,Tq,d); the new keys stand at pos.q
        q, k = pe.transform_qk(q, k, pos, self.layer)
        v = pe.transform_values(v, pos, self.layer)
        if saved is not None:
            if n_cached:
                k = torch.cat([saved["prev_key"], k], dim=2)  # (B,H,Tk,d)
                v = torch.cat([saved["prev_value"], v], dim=2)  # (B,H,Tk,d)
            saved["prev_key"], saved["prev_value"] = k, v
            saved["prev_key_padding_mask"] = key_padding_mask
            self._set_input_buffer(incremental_state, saved)

        # additive float mask (B|1, H|1, Tq, Tk): position bias, causal mask, key padding. It is the same in
        # every layer, so the fast path builds it once per pass; the q-dependent score bias joins it per layer.
        shared_bias = pe.position_bias_is_shared()
        mask = pe.memo(("mask", q.dtype, None if shared_bias else self.layer),
                       lambda: self._mask(pe.position_bias(pos), attn_mask, key_padding_mask, bsz, src_len, q.dtype),
                       pos, attn_mask)
        q_bias = pe.score_bias(q, pos, self.layer) if pe.uses("score_bias") else None  # (B,H,Tq,Tk) or None

        dropout_p = self.dropout_module.p if (self.training or self.dropout_module.apply_during_inference) else 0.0
        probs = None
        if not (need_weights or self.capture_weights or pe.uses("value_bias")):
            if q_bias is not None:
                mask = q_bias if mask is None else q_bias + mask
            attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=1.0)
        else:
            attn, probs = self._explicit(q, k, v, mask, q_bias, pos, pe)

        attn = attn.permute(2, 0, 1, 3).reshape(tgt_len, bsz, embed_dim)  # (B,H,Tq,d) -> (Tq,B,C)
        attn = self.out_proj(attn)
        weights = None
        if need_weights and probs is not None:
            weights = probs.to(q.dtype).transpose(0, 1)  # (H,B,Tq,Tk), fairseq's head-weights layout
            if not need_head_weights:
                weights = weights.mean(dim=0)  # (B,Tq,Tk)
        return attn, weights

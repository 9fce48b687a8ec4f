"""What the self-attention layers of one stack pass share: built once, handed to every layer.

As x-transformers builds one relative-position term and passes it to every block, the stack builds one
``PassContext`` per pass (``PETransformerEncoder.forward``, ``PETransformerDecoder.extract_features``: a full pass,
or one decoding step) and hands it to each of its ``PEAttention`` layers (``attention.context``) for that pass.
fairseq's layers take no extra argument, and whether a batch has padding is known on the host only through the
arguments fairseq gives every layer alike (it passes no padding mask when there is none), so the first layer
completes the context from them (``ready``) and the others find it complete:

  pos         the ``Positions`` of the pass's new tokens, from the key padding mask (B, Tk)
  ctx         the encoding's ``prepare(pos, dtype)``: what its layer hooks share (RoPE's cos / sin)
  mask, is_causal
              what the attention kernel gets for the position bias, fairseq's causal mask and the key padding:
    * nothing, where nothing is masked;
    * ``is_causal`` where it is exact: decoder self-attention over a full target (Tq = Tk) without a position
      bias, with targets right-padded (``--left-pad-target`` off, fairseq's default): every real query then sees
      only real keys, and what pads compute reaches no real token and no loss term;
    * otherwise one float mask per pass in the compute dtype, the bias plus the causal mask with -inf at padded
      keys, (B|1, H|1, Tq|1, Tk): broadcast over what it does not depend on, and allocated with its last
      dimension padded to a multiple of 8 and sliced (``aligned``), so that a fused kernel takes it as it is
      (PyTorch's memory-efficient kernel copies a bias whose row stride is not a multiple of 8, per call).

A module called alone (no stack) builds a context per call. ``reference`` (--pe-attention-impl reference) builds
one per layer, with the masks as the equations read (``reference_mask``): every layer recomputes everything.
"""
from typing import Any, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..encoding_parts.base import PositionalEncoding, Positions

ALIGN = 8  # elements: the row alignment of the memory-efficient kernel's bias


def aligned(mask: Tensor) -> Tensor:
    """``mask`` (..., Tk) in new memory whose rows start at multiples of 8 elements: allocated (..., Tk8) with
    Tk8 = Tk rounded up to a multiple of 8, and sliced back to Tk (a view; the fused kernel takes it as it is)."""
    extra = -mask.size(-1) % ALIGN
    return F.pad(mask, (0, extra))[..., :mask.size(-1)]  # (..., Tk8) -> (..., Tk), a view


def no_empty_rows(mask: Tensor) -> Tensor:
    """``mask`` (B, H|1, Tq, Tk) with no query row masked at every key: such a row is a pad position of a left-padded
    target under the causal mask (every key it may see is a pad), and its softmax would be NaN, which the next layer
    carries to the real tokens (0 x NaN) and the backward pass to every weight. The row sees every key instead
    (0 everywhere: finite, uniform weights). No real query reads a pad position (its key stays masked) and the loss
    skips pad targets, so the real tokens' outputs and gradients are those of the right-padded batch."""
    empty = torch.isneginf(mask).all(dim=-1, keepdim=True)  # (B, H|1, Tq, 1)
    return mask.masked_fill(empty, 0.0)


class PassContext:
    def __init__(self, pe: PositionalEncoding, *, right_padded: bool = False, reference: bool = False):
        self.pe, self.right_padded, self.reference = pe, right_padded, reference
        self.pos: Optional[Positions] = None
        self.ctx: Any = None
        self.mask: Optional[Tensor] = None
        self.is_causal = False
        self.causal_mask: Optional[Tensor] = None  # fairseq's (Tq,Tk) mask, for code that cannot pass is_causal
        self._shape = None  # (Tq, Tk, dtype) the context was completed for

    @property
    def terms(self) -> Tuple[Tensor, ...]:
        """The masks as additive terms, for code that adds them into its logits itself instead of handing them to
        the fused kernel: ``mask`` and, where ``is_causal`` stands for it, fairseq's causal mask (each broadcasts
        to (B,H,Tq,Tk))."""
        return tuple(t for t in (self.mask, self.causal_mask) if t is not None)

    def ready(self, key_padding_mask: Optional[Tensor], attn_mask: Optional[Tensor], tq: int, tk: int,
              dtype: torch.dtype, device, layer: int) -> "PassContext":
        """Complete the context from the first layer's arguments (every layer of a pass gets the same ones);
        returns itself. key_padding_mask (B, Tk) True at pads or None; attn_mask fairseq's (Tq, Tk) causal mask
        or None."""
        if self._shape is None:
            self._shape = (tq, tk, dtype)
            nonpad = None if key_padding_mask is None else ~key_padding_mask.bool()  # (B, Tk)
            self.pos = Positions.from_mask(nonpad, tq, tk, device)
            self.ctx = self.pe.prepare(self.pos, dtype)
            self._build_mask(key_padding_mask, attn_mask, dtype, layer)
        elif self._shape != (tq, tk, dtype):
            raise ValueError(f"one pass context serves calls of one shape: {self._shape} vs {(tq, tk, dtype)}")
        elif not self.pe.position_bias_is_shared():  # a bias with its own dropout per layer (AT5 in training)
            self._build_mask(key_padding_mask, attn_mask, dtype, layer)
        return self

    def _build_mask(self, key_padding_mask, attn_mask, dtype, layer):
        bias = self.pe.position_bias(self.pos)  # (1,H,Tq,Tk) / (H,Tq,Tk) or None
        if self.reference:
            self.mask = self.reference_mask(bias, attn_mask, key_padding_mask, dtype)
            return
        tq, tk = self.pos.tq, self.pos.tk
        causal = attn_mask is not None
        # with a causal mask over right-padded targets, real queries see real keys only: padding needs no mask
        pad = None if key_padding_mask is None or (causal and self.right_padded and tq == tk) else key_padding_mask
        if bias is None and pad is None:
            self.mask, self.is_causal = None, causal and tq == tk
            self.causal_mask = attn_mask if self.is_causal else None
            if causal and tq != tk:  # not a fairseq call (a full pass has Tq = Tk): keep the mask as given
                self.mask = aligned(attn_mask.to(dtype))
            return
        mask = None if bias is None else bias.to(dtype)  # (1,H,Tq,Tk) or (H,Tq,Tk)
        if causal:
            mask = attn_mask.to(dtype) if mask is None else mask + attn_mask.to(dtype)  # (Tq,Tk): -inf above the diagonal
        if pad is not None:
            b = pad.size(0)
            pad = pad.bool().view(b, 1, 1, tk)
            mask = pad.new_zeros(b, 1, 1, tk, dtype=dtype) if mask is None else mask
            mask = mask.masked_fill(pad, float("-inf"))  # (B, H|1, Tq|1, Tk)
            if causal:
                mask = no_empty_rows(mask)
        while mask.dim() < 4:
            mask = mask.unsqueeze(0)
        self.mask = aligned(mask)

    @staticmethod
    def reference_mask(bias: Optional[Tensor], attn_mask: Optional[Tensor], key_padding_mask: Optional[Tensor],
                       dtype) -> Optional[Tensor]:
        """bias (1,H,Tq,Tk) + attn_mask (Tq,Tk), with -inf at padded keys: (B|1,H|1,Tq,Tk) in ``dtype``, or None."""
        mask = bias
        if attn_mask is not None:
            attn_mask = attn_mask.to(dtype if bias is None else bias.dtype)  # (Tq, Tk), -inf above the diagonal
            mask = attn_mask if mask is None else mask + attn_mask
        if key_padding_mask is not None:
            bsz, src_len = key_padding_mask.shape
            pad = key_padding_mask.bool().view(bsz, 1, 1, src_len)
            mask = torch.zeros(bsz, 1, 1, src_len, dtype=dtype, device=pad.device) if mask is None else mask
            mask = mask.masked_fill(pad, float("-inf"))
            if attn_mask is not None:
                mask = no_empty_rows(mask)
        return None if mask is None else mask.to(dtype)

"""KERPLE: kernelized relative positional embedding, logarithmic variant (Chi et al., NeurIPS 2022), in
self-attention only. The example of a learned bias that docs/extending.md points to.

Head h adds a learned conditionally positive definite kernel of the distance to the (scaled) logits (the equation:
docs/encodings.md §KERPLE, and above ``position_bias``). The decoder is causal, so it meets only j <= i; the encoder
sees both sides with the same (symmetric) kernel.
Positivity as the official code: each r is clamped at 1e-2 from below when used (the gradient is zero while
it sits on the clamp). Init as the official code: r1 ~ U(0, 2), r2 ~ U(0, 1), one pair per head and stack,
shared by the stack's self-attention layers. The bias depends on j - i only, not on q, so it is a
``position_bias``: built once per stack pass and folded into the attention's float mask. As T5 and AT5 it is
computed on the call's W = Tq + Tk - 1 distances and laid out as (H,Tq,Tk) by a strided view
(``relative.offsets_to_pairs``), so backward keeps (H,W) tensors rather than (H,Tq,Tk) ones; for positions given
as values (tests, direct calls) it is computed on ``Positions.rel`` as the equation reads.
"""
import torch
from torch import nn

from . import register_pe
from ..encoding_parts.base import PositionalEncoding
from ..encoding_parts.relative import call_offsets, offsets_to_pairs

EPS = 1e-2  # the official code's lower clamp of r1 and r2


@register_pe
class KerpleLog(PositionalEncoding):
    name = "kerple"
    order = 80
    level = "attention"
    paper = "Chi et al. 2022"

    def __init__(self, cfg, dims):
        super().__init__(cfg, dims)
        self.r1 = nn.Parameter(torch.rand(dims.num_heads, 1, 1) * 2)  # (H,1,1), U(0, 2)
        self.r2 = nn.Parameter(torch.rand(dims.num_heads, 1, 1))  # (H,1,1), U(0, 1)

    # e_ij = q_i . k_j - r1_h log(1 + r2_h |i - j|),   r1_h, r2_h > 0
    def position_bias(self, pos):
        r1, r2 = self.r1.clamp_min(EPS), self.r2.clamp_min(EPS)  # (H,1,1)
        if not pos.columns:  # positions given as values: the equation on their (Tq,Tk) distances
            return -r1 * torch.log1p(r2 * pos.rel.abs().to(r1.dtype))  # (H,Tq,Tk)
        dist = call_offsets(pos.tq, pos.tk, pos.device).abs().to(r1.dtype)  # (W,) |r|, r = -(Tk-1)..Tq-1
        v = -r1 * torch.log1p(r2 * dist)  # (H,1,1) with (W,) -> (H,1,W)
        return offsets_to_pairs(v[:, 0], pos.tq)  # (H,W) -> (H,Tq,Tk), a strided view

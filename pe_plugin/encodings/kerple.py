"""KERPLE: kernelized relative positional embedding, logarithmic variant (Chi et al., NeurIPS 2022), in
self-attention only. The worked example of docs/extending.md.

Head h adds a learned conditionally positive definite kernel of the distance to the (scaled) logits:
    e_ij = q_i . k_j - r1_h log(1 + r2_h |i - j|),        r1_h, r2_h > 0
The decoder is causal, so it meets only j <= i; the encoder sees both sides with the same (symmetric) kernel.
Positivity as the official code: each r is clamped at 1e-2 from below when used (the gradient is zero while
it sits on the clamp). Init as the official code: r1 ~ U(0, 2), r2 ~ U(0, 1), one pair per head and stack,
shared by the stack's self-attention layers. The bias depends on j - i only (``Positions.rel``), not on q, so it
is a ``position_bias``: built once per stack pass and folded into the attention's float mask.
"""
import torch
from torch import nn

from . import register_pe
from .base import PositionalEncoding

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

    def position_bias(self, pos):
        # -r1_h log(1 + r2_h |i - j|): (1,Tq,Tk) distances -> (H,Tq,Tk)
        dist = pos.rel.abs().to(self.r1.dtype).unsqueeze(0)  # (1,Tq,Tk)
        return -self.r1.clamp_min(EPS) * torch.log1p(self.r2.clamp_min(EPS) * dist)  # (H,Tq,Tk)

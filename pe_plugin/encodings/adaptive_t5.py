"""AT5: T5's bias with learnable soft bucketing (Wu et al., AAAI 2021), in self-attention only.

Per stack and per head h: slopes a_h = ReLU(a~_h) / L_max, b_h = ReLU(b~_h) / L_max with a~, b~ ~ U(1, 15)
and L_max = max(256, the side's max positions) unless --at5-max-length is given. With r = j - i:
    r > 0 (key to the right):   f = 1 - exp(-a_h r),   bias = g+_h(f)
    r <= 0 (left, or self):     f = 1 - exp(b_h r),    bias = g-_h(f)
    g(f) = W3 sigmoid(W2 drop(sigmoid(W1 f + c1)) + c2) + c3,  1 -> l1 (32) -> l2 (4) -> 1, dropout 0.5
f runs from 0 (r = 0) to 1 (far keys), so the bias saturates at g(1). The MLPs run once on the distinct
offsets of the call (2T-1 of them in a full pass, t+1 at decoding step t) and are gathered to (1,H,Tq,Tk),
so the bias is also right at every beam-search step (the official code broadcasts the distance-0 value
there, ENCODINGS.md 0.9). Dropout masks are per offset rather than per (i, j). The decoder is causal and
builds only g- (its g+ would never be used). Init as the official code: kernels truncated N(0, 0.1), biases
0.1. Layer 0 only as the official code, or every layer with --at5-all-layers (recomputed per layer).
"""
from dataclasses import dataclass, field
from typing import Optional

import torch
from fairseq.dataclass import FairseqDataclass
from torch import nn

from . import register_pe
from .base import PositionalEncoding
from .relative import distinct_offsets


@dataclass
class AdaptiveT5Config(FairseqDataclass):
    at5_all_layers: bool = field(
        default=False,
        metadata={"help": "bias every self-attention layer (T5 style) instead of layer 0 only (official code)"},
    )
    at5_max_length: Optional[int] = field(
        default=None, metadata={"help": "slope scale L_max (default: max(256, max source/target positions))"}
    )
    at5_slope_min: float = field(default=1.0, metadata={"help": "slopes start U(min, max) / L_max"})
    at5_slope_max: float = field(default=15.0, metadata={"help": "slopes start U(min, max) / L_max"})
    at5_hidden1: int = field(default=32, metadata={"help": "width l1 of the first MLP layer"})
    at5_hidden2: int = field(default=4, metadata={"help": "width l2 of the second MLP layer"})
    at5_mlp_dropout: float = field(default=0.5, metadata={"help": "dropout after the first MLP layer"})


@register_pe
class AdaptiveT5Bias(PositionalEncoding):
    name = "at5"
    order = 50
    level = "attention"
    paper = "Wu et al. 2021"
    config_cls = AdaptiveT5Config

    def __init__(self, cfg, dims):
        super().__init__(cfg, dims)
        s, h, l1, l2 = 1 if dims.causal else 2, dims.num_heads, cfg.at5_hidden1, cfg.at5_hidden2
        self.max_length = cfg.at5_max_length or max(256, dims.max_positions)
        # side 0: r <= 0 (slope b, MLP g-); side 1: r > 0 (slope a, MLP g+), encoder only
        self.slope = nn.Parameter(torch.empty(s, h, 1).uniform_(cfg.at5_slope_min, cfg.at5_slope_max))  # (S,H,1)
        self.w1, self.c1 = self._kernel(s, h, 1, l1), self._bias(s, h, l1)
        self.w2, self.c2 = self._kernel(s, h, l1, l2), self._bias(s, h, l2)
        self.w3, self.c3 = self._kernel(s, h, l2, 1), self._bias(s, h, 1)
        self.dropout = nn.Dropout(cfg.at5_mlp_dropout)

    @staticmethod
    def _kernel(*shape):
        return nn.Parameter(nn.init.trunc_normal_(torch.empty(shape), std=0.1, a=-0.2, b=0.2))

    @staticmethod
    def _bias(s, h, n):
        return nn.Parameter(torch.full((s, h, 1, n), 0.1))

    def applies_to_layer(self, layer):
        return self.cfg.at5_all_layers or layer == 0

    def offset_bias(self, r: torch.Tensor) -> torch.Tensor:
        """The bias of each distance r: (R,) long -> (H, R)."""
        right = r > 0  # (R,)
        side = right.long() if self.slope.size(0) == 2 else torch.zeros_like(r)
        slope = torch.relu(self.slope) / self.max_length  # (S,H,1)
        f = 1 - torch.exp(-slope * r.abs().to(slope.dtype))  # (S,H,R); f of every side at every offset
        x = f.unsqueeze(-1)  # (S,H,R,1)
        x = self.dropout(torch.sigmoid(x @ self.w1 + self.c1))  # (S,H,R,l1)
        x = torch.sigmoid(x @ self.w2 + self.c2)  # (S,H,R,l2)
        g = (x @ self.w3 + self.c3).squeeze(-1)  # (S,H,R)
        g = g.gather(0, side.view(1, 1, -1).expand(1, g.size(1), -1))[0]  # (H,R): g+ for r > 0, else g-
        return g.masked_fill(right, 0) if self.slope.size(0) == 1 else g  # causal: future keys are masked

    def score_bias(self, q, pos, layer):
        r, index = distinct_offsets(pos.rel)  # (R,), (Tq,Tk)
        return self.offset_bias(r)[:, index].unsqueeze(0).to(q.dtype)  # (H,R) -> (1,H,Tq,Tk)

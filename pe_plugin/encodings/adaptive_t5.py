"""AT5: T5's bias with learnable soft bucketing (Wu et al., AAAI 2021), in self-attention only.

Per stack and per head h: slopes a_h = ReLU(a~_h) / L_max, b_h = ReLU(b~_h) / L_max with a~, b~ ~ U(1, 15) and L_max
= 256 unless --at5-max-length is given. 256 is the official trainer's max_length, the divisor of its slopes; it is a
scale, not a length limit (the bias is computed for any distance), so it does not follow
--max-source/target-positions: with 1024 positions the starting slopes would be 4x smaller than the official ones,
and distance would reach f's saturation 4x later. The divisor is saved with the model (buffer ``slope_scale``); a
checkpoint saved before it was, when the divisor was max(256, the side's max positions), loads with that old
divisor, so that it computes what it was trained to. Each side's distance goes through a saturating map f and a
small MLP g (the equations: docs/encodings.md §AT5, and above ``offset_bias``); f runs from 0 (r = 0) to 1 (far
keys), so the bias saturates at g(1). The MLPs run once on the distinct offsets of the call (2T-1 of them in a full
pass, t+1 at decoding step t) and are laid out as (1,H,Tq,Tk) by a strided view (``relative.offsets_to_pairs``; its
backward sums the diagonals: no index_put, no atomic adds), and each offset takes its side's MLP by ``where`` (no
gather), so the bias is also right at every beam-search step (the official code broadcasts the distance-0 value
there, docs/encodings.md §D8). Dropout masks are per offset rather than per (i, j). The decoder is causal and builds
only g- (its g+ would never be used). Init as the official code: kernels truncated N(0, 0.1), biases 0.1. Layer 0
only as the official code, or every layer with --at5-all-layers (recomputed per layer).
"""
import logging
from dataclasses import dataclass, field
from typing import Optional

import torch
from fairseq.dataclass import FairseqDataclass
from torch import nn

from . import register_pe
from ..encoding_parts.base import PositionalEncoding
from ..encoding_parts.relative import call_offsets, distinct_offsets, offsets_to_pairs

logger = logging.getLogger(__name__)
OFFICIAL_MAX_LENGTH = 256  # the official trainer's default max_length, by which it divides the slopes


@dataclass
class AdaptiveT5Config(FairseqDataclass):
    at5_all_layers: bool = field(
        default=False,
        metadata={"help": "bias every self-attention layer (T5 style) instead of layer 0 only (official code)"},
    )
    at5_max_length: Optional[int] = field(
        default=None,
        metadata={"help": "slope scale L_max: slopes are ReLU(a~) / L_max (default 256, the official code's "
                          "max_length, whatever --max-source/target-positions)"},
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
        # the slopes' divisor L_max: a scale, not a length limit; saved with the model
        self.register_buffer("slope_scale", torch.tensor(float(cfg.at5_max_length or OFFICIAL_MAX_LENGTH)))
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

    @property
    def max_length(self) -> float:
        """The slopes' divisor L_max."""
        return float(self.slope_scale)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        key = prefix + "slope_scale"
        if key not in state_dict:  # saved before the divisor was: it was max(256, the side's max positions)
            legacy = float(self.cfg.at5_max_length or max(OFFICIAL_MAX_LENGTH, self.dims.max_positions))
            logger.warning("%s: no %s in the checkpoint (saved by an older pe_plugin); using the slope divisor "
                           "it was trained with, %g", self.dims.side, key, legacy)
            state_dict[key] = torch.tensor(legacy)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def signature(self) -> str:
        return f"{super().signature()}|slope_scale:{self.max_length:g}"  # the divisor in effect

    def applies_to_layer(self, layer):
        return self.cfg.at5_all_layers or layer == 0

    # With r = j - i:  r > 0 (key to the right):  f = 1 - exp(-a_h r),  bias = g+_h(f)
    #                  r <= 0 (left, or self):   f = 1 - exp(b_h r),   bias = g-_h(f)
    #   g(f) = W3 sigmoid(W2 drop(sigmoid(W1 f + c1)) + c2) + c3,  1 -> l1 (32) -> l2 (4) -> 1, dropout 0.5
    def offset_bias(self, r: torch.Tensor) -> torch.Tensor:
        """The bias of each distance r: (R,) long -> (H, R)."""
        s, h = self.slope.shape[:2]
        scaled = r.abs().to(self.slope.dtype).div(self.slope_scale).neg()  # -|r| / L_max, a constant (R,)
        f = 1 - torch.exp(torch.relu(self.slope) * scaled)  # (S,H,R); f of every side at every offset
        # the MLP, its matrix products batched over (side, head): (S*H, R, width)
        x = torch.addcmul(self.c1, f.unsqueeze(-1), self.w1)  # W1 f + c1: an outer product, (S,H,R,1)(S,H,1,l1)
        x = self.dropout(torch.sigmoid(x)).view(s * h, -1, self.w1.size(-1))  # (S,H,R,l1) -> (S*H,R,l1)
        x = torch.sigmoid(torch.baddbmm(self.c2.view(s * h, 1, -1), x, self.w2.view(s * h, *self.w2.shape[2:])))
        g = torch.baddbmm(self.c3.view(s * h, 1, 1), x, self.w3.view(s * h, -1, 1)).view(s, h, -1)  # (S,H,R)
        # each offset's side, a constant (S,1,R): g- for r <= 0, g+ for r > 0; causal (S = 1): future keys get 0
        # (they are masked). A product and a sum rather than a gather (whose backward scatters)
        side = torch.stack([r <= 0, r > 0])[:s].unsqueeze(1).to(g.dtype)
        return (g * side).sum(0)  # (H,R)

    def position_bias_is_shared(self):
        # with --at5-all-layers each layer draws its own MLP dropout in training, as the reference path does
        return not (self.training and self.dropout.p > 0)

    def position_bias(self, pos):
        if not pos.columns:  # positions given as values (tests, direct calls): gathered
            r, index = distinct_offsets(pos.rel)  # (R,), (Tq,Tk)
            return self.offset_bias(r)[:, index].unsqueeze(0)  # (H,R) -> (1,H,Tq,Tk)
        r = call_offsets(pos.tq, pos.tk, pos.device)  # (W,) -(Tk-1)..Tq-1
        return offsets_to_pairs(self.offset_bias(r), pos.tq).unsqueeze(0)  # (H,W) -> (H,Tq,Tk) view -> (1,H,Tq,Tk)

"""ALiBi: attention with linear biases (Press et al., ICLR 2022), in self-attention only; no parameters.

Head h = 1..H adds a penalty linear in the distance between query i and key j to the (scaled) logits, its slope m_h
from the paper's geometric sequence (the equations: docs/encodings.md §ALiBi, and above ``alibi_slopes`` and
``distance_bias``). The paper covers causal language models only. For the encoder its authors suggest the symmetric
bias, which cannot tell a key k places to the left from one k places to the right (only content can).
``--alibi-encoder directional`` keeps the same slopes but gives head h the slope m_h to the left and the
reversed sequence's m_{H+1-h} to the right: head 1 is steep to the left (1/2) and nearly flat to the right,
head H the opposite, so every head but the middle one of an odd H sees direction, and each direction still
spans the whole range of slopes. The decoder computes -m_h |i - j| too; it equals -m_h (i - j) on every key
the causal mask leaves. Cross-attention gets no bias.
The bias depends only on j - i (``Positions.rel``), hence not on the padding side, the batch or the decoding
step, and not on q: as T5's, it is one (1,H,Tq,Tk) tensor (no batch axis, ``position_bias``), computed once per
stack pass on the fast attention path and folded into the float mask of the fused kernel. The slopes are
copied to the device once. Computed in float32, then cast to the attention's dtype (fp16:
the largest penalty, m_1 (T - 1), stays far below the half maximum).
"""
import math
from dataclasses import dataclass, field
from typing import List, Tuple

import torch
from fairseq.dataclass import ChoiceEnum, FairseqDataclass

from . import register_pe
from ..encoding_parts.base import PositionalEncoding


@dataclass
class ALiBiConfig(FairseqDataclass):
    alibi_encoder: ChoiceEnum(["symmetric", "directional"]) = field(
        default="symmetric",
        metadata={"help": "encoder bias: -m_h |i-j| (symmetric), or slope m_h to the left and m_{H+1-h} to the "
                          "right (directional); the decoder is causal, -m_h (i-j)"},
    )


# Slopes, the paper's geometric sequence (its official ``get_slopes``):
#   H a power of 2:  m_h = 2^(-8h/H)                                   H = 8: 1/2, 1/4, ..., 1/256
#   otherwise, with P the largest power of 2 below H: the P slopes of P heads, then the odd-numbered slopes
#   m_1, m_3, m_5, ... of the 2P-head sequence for the remaining H - P heads
#                                                                      H = 6: 1/4, 1/16, 1/64, 1/256, 1/2, 1/8
def alibi_slopes(num_heads: int) -> List[float]:
    """The paper's slopes m_1..m_H."""
    if num_heads < 1:
        raise ValueError(f"ALiBi needs at least one attention head, got {num_heads}")
    p = 2 ** math.floor(math.log2(num_heads))
    powers = [2 ** (-8 * h / p) for h in range(1, p + 1)]
    if p == num_heads:
        return powers
    return powers + alibi_slopes(2 * p)[0::2][: num_heads - p]


@register_pe
class ALiBi(PositionalEncoding):
    name = "alibi"
    order = 75
    level = "attention"
    paper = "Press et al. 2022"
    config_cls = ALiBiConfig

    def __init__(self, cfg, dims):
        super().__init__(cfg, dims)
        slopes = alibi_slopes(dims.num_heads)
        directional = not dims.causal and cfg.alibi_encoder == "directional"
        self.left_slopes = tuple(slopes)  # (H,) for keys j <= i
        self.right_slopes = tuple(reversed(slopes)) if directional else self.left_slopes  # (H,) for j > i
        self._slope_tensors = {}  # device -> the float32 (H,1,1) slopes, copied there once

    def slopes(self, device) -> Tuple[torch.Tensor, torch.Tensor]:
        """The left and right slopes as float32 (H,1,1) tensors on ``device``; copied from the host once per
        device, not per call, and never cast to half with the model."""
        hit = self._slope_tensors.get(device)
        if hit is None:
            hit = self._slope_tensors[device] = tuple(
                torch.tensor(s, dtype=torch.float32, device=device).view(-1, 1, 1)
                for s in (self.left_slopes, self.right_slopes))
        return hit

    #   decoder (causal):             e_ij = q_i . k_j - m_h (i - j)           j <= i
    #   encoder, symmetric (default): e_ij = q_i . k_j - m_h |i - j|
    #   encoder, directional:         e_ij = q_i . k_j - m_h (i - j)           for j <= i (key on the left)
    #                                 e_ij = q_i . k_j - m_{H+1-h} (j - i)     for j >  i (key on the right)
    def distance_bias(self, rel: torch.Tensor) -> torch.Tensor:
        """-slope x distance for relative positions rel = j - i: (Tq,Tk) -> (H,Tq,Tk) float32."""
        dist = rel.abs().float().unsqueeze(0)  # (1,Tq,Tk)
        left, right = self.slopes(rel.device)  # (H,1,1) each
        if self.right_slopes == self.left_slopes:
            return -left * dist
        return -torch.where(rel.unsqueeze(0) > 0, right, left) * dist

    def position_bias(self, pos):
        return self.distance_bias(pos.rel).unsqueeze(0)  # (1,H,Tq,Tk)

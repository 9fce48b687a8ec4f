"""SAPE: fixed sinusoidal absolute positions (Vaswani et al., 2017), in fairseq's tensor2tensor layout.

Sines in the first half of the channels, cosines in the second (the equations: docs/encodings.md §SAPE, and above
``sinusoid_table`` and ``embed``). The row offset padding_idx + 1 is fairseq's numbering (``make_positions``), kept
so that ``transformer_sape_*`` equals fairseq's stock Transformer; it does not change what the model can learn. No
parameters; the table is a non-persistent buffer that grows on demand, so there is no hard length limit.
"""
import math

import torch

from . import register_pe
from ..encoding_parts.base import PositionalEncoding, Positions


# With half = C/2 and omega_m = exp(-m * ln(10000) / (half - 1)), m = 0..half-1:
#   P(q) = [sin(q * omega_0), ..., sin(q * omega_{half-1}), cos(q * omega_0), ..., cos(q * omega_{half-1})]
def sinusoid_table(num_positions: int, dim: int) -> torch.Tensor:
    """(num_positions, dim) table P(q) for q = 0..num_positions-1 (odd dim: last column zero)."""
    half = dim // 2
    omega = torch.exp(torch.arange(half, dtype=torch.float) * -(math.log(10000) / (half - 1)))
    angles = torch.arange(num_positions, dtype=torch.float).unsqueeze(1) * omega.unsqueeze(0)  # (N, half)
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
    if dim % 2 == 1:
        table = torch.cat([table, torch.zeros(num_positions, 1)], dim=1)
    return table


def absolute_index(pos: Positions, padding_idx: int) -> torch.Tensor:
    """fairseq's row index: p + padding_idx + 1 for real tokens and padding_idx for pads. (B|1, T)"""
    idx = pos.q + padding_idx + 1
    return idx if pos.nonpad is None else idx.masked_fill(~pos.nonpad, padding_idx)


@register_pe
class SinusoidalPositionalEncoding(PositionalEncoding):
    name = "sape"
    order = 10
    level = "embedding"
    paper = "Vaswani et al. 2017"

    def __init__(self, cfg, dims):
        super().__init__(cfg, dims)
        self.register_buffer("table", self._table(dims.max_positions + dims.padding_idx + 1), persistent=False)

    def _table(self, rows: int) -> torch.Tensor:
        table = sinusoid_table(rows, self.dims.embed_dim)
        table[self.dims.padding_idx] = 0  # pads get a zero vector, as in fairseq
        return table

    # x_i = x_i + P(p_i + padding_idx + 1)
    def embed(self, x, pos):
        rows = pos.bound + self.dims.padding_idx + 1  # a host bound on the largest row index, plus one
        if rows > self.table.size(0):  # grow on demand (no length limit)
            self.table = self._table(rows).to(self.table)
        idx = absolute_index(pos, self.dims.padding_idx)  # (B|1, T)
        return x + self.table[idx].to(x.dtype)  # (B, T, C)

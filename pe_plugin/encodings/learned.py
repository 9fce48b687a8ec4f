"""LAPE: learned absolute positions (Gehring et al. 2017; fairseq ``--encoder/decoder-learned-pos``).

One learned row per position, added to the embeddings (the equation: docs/encodings.md §LAPE, and above
``embed``), the padding row fixed at zero. Separate tables for encoder and decoder. L_max is the side's
``--max-source-positions`` / ``--max-target-positions``. A longer input raises an error that says so, or, with
``--pe-beyond-max clamp`` (for decoding), its positions >= L_max use the last row E_pos[L_max - 1 + padding_idx
+ 1]; see ``limits``.
"""
from torch import nn

from . import register_pe
from ..encoding_parts.base import PositionalEncoding, Positions
from ..encoding_parts.limits import BoundedPositions
from .sinusoidal import absolute_index


@register_pe
class LearnedPositionalEncoding(BoundedPositions, PositionalEncoding):
    name = "lape"
    order = 20
    level = "embedding"
    paper = "Gehring et al. 2017"

    def __init__(self, cfg, dims):
        super().__init__(cfg, dims)
        # same construction and init order as fairseq's LearnedPositionalEmbedding (seed-for-seed parity)
        self.table = nn.Embedding(dims.max_positions + dims.padding_idx + 1, dims.embed_dim, dims.padding_idx)
        nn.init.normal_(self.table.weight, mean=0, std=dims.embed_dim ** -0.5)
        nn.init.constant_(self.table.weight[dims.padding_idx], 0)

    @property
    def max_positions(self):
        return self.dims.max_positions

    # x_i = x_i + E_pos[p_i + padding_idx + 1],  E_pos in R^{(L_max + padding_idx + 1) x C},  E_pos ~ N(0, C^-1/2)
    def embed(self, x, pos):
        self.check_length(pos)
        pos = Positions(self.clamp_positions(pos.q), None, pos.nonpad)  # unchanged within L_max
        return x + self.table(absolute_index(pos, self.dims.padding_idx))  # (B, T, C)

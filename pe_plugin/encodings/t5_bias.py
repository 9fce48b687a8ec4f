"""T5: a bucketed scalar bias per head on the attention logits (Raffel et al., 2020).

One table E in R^{N x H} per stack, shared by all its self-attention layers (as T5 computes it in the first
layer and reuses it); separate tables for the encoder (bidirectional buckets) and the decoder (causal
buckets, every future key in bucket 0); none in cross-attention. Head h adds E[bucket(j - i), h] to the logits (the
equations: docs/encodings.md §T5, and above ``position_bias``). The bias does not depend on q (``position_bias``):
it is one (1,H,Tq,Tk) tensor, which the fast attention path computes once per stack pass and folds, with the causal
and padding masks, into the float mask of the fused kernel that every layer shares. Init as HF T5: E ~ N(0, C^-1/2).

Without an index into E (whose backward accumulates with index_put: atomic adds on a GPU): every distance with
|r| >= max_distance D falls in the bucket of r = +-D, so the bias is Shaw's clipping of a per-distance vector,
one matrix product and strided views (``position_bias``); backward sums the diagonals and multiplies by the
one-hot's transpose. For positions given as values (tests, direct calls) it is ``E[bucket(rel)]`` as the
equation reads.
"""
from dataclasses import dataclass, field

import torch
from fairseq.dataclass import FairseqDataclass
from torch import nn

from . import register_pe
from ..encoding_parts.base import PositionalEncoding
from ..encoding_parts.relative import clip_to_offsets, offsets_to_pairs, t5_bucket


@dataclass
class T5BiasConfig(FairseqDataclass):
    t5_num_buckets: int = field(default=32, metadata={"help": "number of distance buckets N (T5: 32)"})
    t5_max_distance: int = field(
        default=128, metadata={"help": "distance at which the log buckets end; farther keys share the last (T5: 128)"}
    )


@register_pe
class T5RelativeBias(PositionalEncoding):
    name = "t5"
    order = 40
    level = "attention"
    paper = "Raffel et al. 2020"
    config_cls = T5BiasConfig

    def __init__(self, cfg, dims):
        super().__init__(cfg, dims)
        n, dist = cfg.t5_num_buckets, cfg.t5_max_distance
        exact = n // (2 if not dims.causal else 1) // 2
        if exact < 1 or dist <= exact:
            raise ValueError(
                f"--t5-num-buckets {n} / --t5-max-distance {dist}: need at least 2 buckets per direction "
                f"and a maximum distance above the {exact} exact buckets"
            )
        self.table = nn.Parameter(torch.randn(n, dims.num_heads) * dims.embed_dim ** -0.5)  # (N, H)
        # O[n, r + D] = [bucket(r) = n] for r in -D..D: a constant of the settings, not saved with the model
        bucket = t5_bucket(torch.arange(-dist, dist + 1), not dims.causal, n, dist)  # (2D+1,)
        self.register_buffer("onehot", (bucket == torch.arange(n).unsqueeze(1)).float(), persistent=False)  # (N,2D+1)

    # With q already scaled by d^-1/2:  e_ij = q_i . k_j + E[bucket(j - i), h]   (bucket: ``relative.t5_bucket``)
    # without indexing E:  O[n, r + D] = [bucket(r) = n], r in -D..D (N, 2D+1), the buffer ``onehot``;
    #   v_h[r] = sum_n E[n, h] O[n, clip(r, -D, D) + D]  (H, W) for the call's W distances: E^T O_W, O_W the
    #   columns ``relative.clip_to_offsets`` takes;  bias[h, i, j] = v_h[j - i] (``relative.offsets_to_pairs``)
    def position_bias(self, pos):
        if not pos.columns:  # positions given as values: the equation as it reads
            bucket = t5_bucket(pos.rel, not self.dims.causal, self.cfg.t5_num_buckets, self.cfg.t5_max_distance)
            return self.table[bucket].permute(2, 0, 1).unsqueeze(0)  # (Tq,Tk,H) -> (1,H,Tq,Tk)
        # the one-hot columns of the call's distances, a constant (no backward): (N,2D+1) -> (N,W)
        onehot = clip_to_offsets(self.onehot.to(self.table.dtype), pos.tq, pos.tk, self.cfg.t5_max_distance)
        v = self.table.t() @ onehot  # (H,N) @ (N,W) -> (H,W): v_h at the distances -(Tk-1)..Tq-1
        return offsets_to_pairs(v, pos.tq).unsqueeze(0)  # (H,Tq,Tk) strided view -> (1,H,Tq,Tk)

"""T5: a bucketed scalar bias per head on the attention logits (Raffel et al., 2020).

One table E in R^{N x H} per stack, shared by all its self-attention layers (as T5 computes it in the first
layer and reuses it); separate tables for the encoder (bidirectional buckets) and the decoder (causal
buckets, every future key in bucket 0); none in cross-attention. With q already scaled by d^-1/2:
    e_ij = q_i . k_j + E[bucket(j - i), h]          bucket: ``relative.t5_bucket`` (docs/encodings.md §T5)
The bias does not depend on q (``position_bias``): it is one (1,H,Tq,Tk) tensor, which the fast attention path
computes once per stack pass and folds, with the causal and padding masks, into the float mask of the fused
kernel that every layer shares. Init as HF T5: E ~ N(0, C^-1/2).
"""
from dataclasses import dataclass, field

import torch
from fairseq.dataclass import FairseqDataclass
from torch import nn

from . import register_pe
from .base import PositionalEncoding
from .relative import t5_bucket


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

    def position_bias(self, pos):
        bucket = t5_bucket(pos.rel, not self.dims.causal, self.cfg.t5_num_buckets, self.cfg.t5_max_distance)  # (Tq,Tk)
        return self.table[bucket].permute(2, 0, 1).unsqueeze(0)  # (Tq,Tk,H) -> (1,H,Tq,Tk)

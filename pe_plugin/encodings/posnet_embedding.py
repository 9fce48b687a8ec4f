"""PosNet-Embed: weight concatenation as positional kernels on the embeddings (Zhang et al., ACL 2023, Eq. 22/24).

Token j at position p_j (0-based, from the padding mask) gets a kernel of its own, phi_{p_j}, between two
projections, after the embedding dropout (as released; the equation: docs/encodings.md §PosNet-Embed, and above
``embed``); no biases, parameters 2 C d_p + L_max d_p^2. --posnet-dim d_p: 128 base, 256 big, 16 tiny. The kernel
product is one bmm over positions, and the flags --posnet-sides/-share/-init/-dropout and L_max are shared with
posnet_attn: see ``posnet_kernels``.
Released configuration (PosNet in the encoder only, the decoder without any position signal, L_max 512):
    --arch transformer_posnet_embed_wmt_en_de --posnet-sides encoder --posnet-max-positions 512
Table 1's 66.49M (3.41M for PosNet) fits L_max = 200: --posnet-max-positions 200 (default 256).
"""
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from . import register_pe
from ..encoding_parts.posnet_kernels import PosNetBase, PosNetConfig, init_kernels, positional_matmul


@dataclass
class PosNetEmbedConfig(PosNetConfig):
    posnet_dim: int = field(default=128, metadata={"help": "PosNet kernel size d_p (128 base, 256 big)"})


@register_pe
class PosNetEmbedding(PosNetBase):
    name = "posnet_embed"
    order = 60
    level = "embedding"
    paper = "Zhang et al. 2023"
    config_cls = PosNetEmbedConfig
    embed_after_dropout = True
    size_defaults = {"tiny": {"posnet_dim": 16}, "base": {"posnet_dim": 128}, "big": {"posnet_dim": 256}}

    @classmethod
    def make_kernels(cls, cfg, dims, lmax):
        c, dp = dims.embed_dim, cfg.posnet_dim
        w1, w2, phi = torch.empty(c, dp), torch.empty(dp, c), torch.empty(lmax, dp, dp)
        nn.init.xavier_normal_(w1), nn.init.xavier_normal_(w2), init_kernels(phi, cfg.posnet_init)
        return nn.ParameterDict({"w1": nn.Parameter(w1), "w2": nn.Parameter(w2), "phi": nn.Parameter(phi)})

    @classmethod
    def check_shareable(cls, kernels, dims):
        if kernels["w1"].size(0) != dims.embed_dim:
            raise ValueError(f"a shared PosNet needs equal encoder and decoder embed dims (got {dims.embed_dim} "
                             f"and {kernels['w1'].size(0)}); pass --posnet-share none")

    # h_j = x_j + Dropout_pk( ReLU( (x_j W1) phi_{p_j} ) W2 ),  W1 (C, d_p), phi (L_max, d_p, d_p), W2 (d_p, C)
    def embed(self, x, pos):
        self.check_length(pos)
        k = self.kernels
        u = (x @ k["w1"]).transpose(0, 1).unsqueeze(2)  # (B,T,C) -> (T,B,1,d_p)
        y = positional_matmul(u, k["phi"], pos).squeeze(2).transpose(0, 1)  # (T,B,1,d_p) -> (B,T,d_p)
        return x + self.dropout(F.relu(y) @ k["w2"])  # (B,T,C)

"""PosNet-Attn: positional kernels on the values of self-attention (Zhang et al., ACL 2023, Eq. 20/21/23).

Per head (d = C/H), the value of key j at position p_j (0-based, from the padding mask) gets a kernel of its own,
phi_{p_j} (L_max, d, d): PosNet-Embed without W1/W2 (Fig. 5 caption), no biases (the equation: docs/encodings.md
§PosNet-Attn, and above ``transform_values``). No code was released. Choices (docs/encodings.md §PosNet-Attn): one
kernel tensor shared by all heads and all self-attention layers (Table 1's +1.03M over SAPE fits L_max * 64^2 with
L_max ~ 250; one per layer would be >= 6x more), and by the encoder and decoder self-attention (--posnet-share
enc-dec, as PosNet-Embed's released module); --posnet-attn-per-layer gives each layer its own (layer i of the
decoder then shares layer i of the encoder's unless --posnet-share none). Cross-attention is unchanged. Parameters:
(1 | layers) * L_max * d^2.

The product is one bmm over positions on values in (T, B*H, d) layout (``positional_matmul``; the rotation of
left-padded rows is computed once per pass, ``prepare``). Only new
values are transformed: in incremental decoding v'_t is computed once, with phi_t, and the cache
(prev_value) holds the transformed values (pe_attention.PEAttention).
Flags --posnet-sides/-share/-init/-dropout, L_max and the length check: see posnet_kernels; "released" init
applies PosNet-Embed's 3-D xavier_normal to each layer's (L_max, d, d) tensor.
Layer-1 queries and keys carry no position, so layer-1 attention weights are position-blind; later layers
see order only through earlier layers' transformed values (docs/encodings.md §PosNet-Attn). In the encoder
(no causal mask) the state at position i is therefore f(word_i, {(state_j, p_j)}): two equal words get equal
states in every layer, wherever they stand; each word sees the ordered sentence, but not its own place in it
(tests/test_posnet.py). The decoder's causal mask breaks this symmetry.
"""
from dataclasses import dataclass, field

import torch
from torch import nn

from . import register_pe
from ..encoding_parts.base import as_positions
from ..encoding_parts.posnet_kernels import (PosNetBase, PosNetConfig, RotatedPositions, init_kernels,
                                             positional_matmul, rotation_index)


@dataclass
class PosNetAttnConfig(PosNetConfig):
    posnet_attn_per_layer: bool = field(
        default=False, metadata={"help": "one kernel tensor per self-attention layer instead of one for all"}
    )


@register_pe
class PosNetAttention(PosNetBase):
    name = "posnet_attn"
    order = 65
    level = "attention"
    paper = "Zhang et al. 2023"
    config_cls = PosNetAttnConfig

    @classmethod
    def make_kernels(cls, cfg, dims, lmax):
        n = dims.num_layers if cfg.posnet_attn_per_layer else 1
        phi = torch.empty(n, lmax, dims.head_dim, dims.head_dim)  # (1|layers, L_max, d, d)
        for layer_phi in phi:
            init_kernels(layer_phi, cfg.posnet_init)
        return nn.ParameterDict({"phi": nn.Parameter(phi)})

    @classmethod
    def check_shareable(cls, kernels, dims):
        n, _, d, _ = kernels["phi"].shape
        if d != dims.head_dim or n not in (1, dims.num_layers):
            raise ValueError(
                f"shared PosNet-Attn kernels ({n} x {d}x{d}) do not fit the {dims.side}'s {dims.num_layers} layers "
                f"of head dim {dims.head_dim}; pass --posnet-share none"
            )

    def prepare(self, pos, dtype):
        # the rotation of positions made from a padding mask, once per pass for every layer
        pos = as_positions(pos)
        return RotatedPositions(pos, rotation_index(pos))

    # Attn(Q, K, V) = softmax(Q K^T / sqrt(d) + mask) V',   v'_j = v_j + Dropout_pk( ReLU( v_j phi_{p_j} ) )
    def transform_values(self, v, ctx, layer):
        self.check_length(ctx.pos)
        phi = self.kernels["phi"]
        phi = phi[layer if phi.size(0) > 1 else 0]  # (L_max, d, d)
        u = v.permute(2, 0, 1, 3)  # (B,H,T,d) -> (T,B,H,d)
        y = positional_matmul(u, phi, ctx.pos, ctx.rotation).permute(1, 2, 0, 3)  # (T,B,H,d) -> (B,H,T,d)
        # ReLU(y) = y with 0 where y <= 0: the same values (NaN too) and gradients, but autograd keeps the 1-byte
        # mask y <= 0 for backward where F.relu keeps its float output (a (T,B,C) tensor per layer)
        return v + self.dropout(y.masked_fill(y <= 0, 0.0))  # (B,H,T,d)

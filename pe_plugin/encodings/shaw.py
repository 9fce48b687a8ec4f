"""RPE: learned relative position representations (Shaw et al., 2018), in self-attention only.

Per layer l, and per head h or shared by the heads, tables W^K, W^V in R^{(2k+1) x d}, with the row
idx(i,j) = clip(j - i, -k, k) + k. With q already scaled by d^-1/2 (as fairseq does):
    e_ij = q_i . k_j + q_i . W^K[idx(i,j)]                 (the score hook adds the second term)
    z_i  = sum_j a_ij v_j + sum_j a_ij W^V[idx(i,j)]        (the value hook adds the second term)
Neither term builds a (Tq,Tk,d) tensor, and neither scatters or gathers (docs/encodings.md §RPE). With the pass's
one-hot O[i, j, b] = [idx(i,j) = b] (Tq,Tk,2k+1), ``relative.clipped_onehot``:
    key term:   R = q W^K^T (B,H,Tq,2k+1), then e_ij += R[i, idx(i,j)] = sum_b R[i, b] O[i, j, b]:
                ``relative.buckets_to_pairs``, one product batched over the queries          O(B H Tq (2k+1) (d + Tk))
                R is one bmm per head over q's own memory, (H, Tq*B, d) @ (H, d, 2k+1): q is a view of the
                (Tq,B,H,d) projection, so no copy of q is made (nor kept for backward)
    value term: P[i, b] = sum_j a_ij O[i, j, b] (B,H,Tq,2k+1): ``relative.pairs_to_buckets``, the adjoint product
                (a matrix product in the compute dtype, which the GEMM accumulates in float32); then P W^V
The two maps are adjoint, so each one's backward is the other: no atomic adds in forward or backward, and the
result does not depend on the order of a GPU's threads. Training and validation (``attention_core``) run the
whole product in ``shaw_core``, whose hand-written backward recomputes the probabilities instead of keeping them
(with --pe-attention-impl triton, in ``shaw_triton``'s fused kernels, which hold no (Tq,Tk) tensor in memory);
the hooks above serve the explicit product (weights requested, --pe-attention-impl reference) and the key term
alone (--rpe-no-values, in the fused kernel's mask). The tables are cast and split into layers once per pass
(``prepare``: one unbind, whose backward is one stack), not selected in every layer.
Tables are initialised N(0, d^-1/2) (the paper does not say; our choice, docs/encodings.md §RPE). No absolute
encoding is added (the paper found no gain from adding sinusoids). Clipping makes every distance beyond k share row k.

Defaults per size follow Shaw et al. (2018, section 4.1): the base model has k = 16 and "unique edge
representations per layer and head", i.e. tables (L, H, 2k+1, d), 2 L H (2k+1) d parameters over both stacks'
self-attention layers (12 x 8 x 33 x 64 x 2 = 405,504 at base); the big model has k = 8 and one table per layer
shared by its heads, (L, 1, 2k+1, d). The tiny size shares too (k = 4). A size's defaults hold for every model
built on its architecture, e.g. a base architecture narrowed to 4 heads keeps per-head tables. Flags win:
--rpe-per-head gives per-head tables at any size, --rpe-shared-heads shared ones (it wins over --rpe-per-head
and over the base default).
"""
import dataclasses
from dataclasses import dataclass, field
from typing import NamedTuple, Optional, Tuple

import torch
from fairseq.dataclass import FairseqDataclass
from torch import nn

from . import register_pe
from .base import PositionalEncoding, Positions
from .relative import OneHot, buckets_to_pairs, clipped_onehot, pairs_to_buckets
from .shaw_core import shaw_attention


@dataclass
class ShawConfig(FairseqDataclass):
    rpe_max_relative_position: int = field(
        default=16, metadata={"help": "clipping distance k of the relative tables (Shaw: 16 base, 8 big)"}
    )
    rpe_per_head: bool = field(
        default=False,
        metadata={"help": "one table per layer and head (Shaw's base: on at base size); off, one table per layer "
                          "shared by its heads (Shaw's big: off at tiny and big size)"},
    )
    rpe_shared_heads: bool = field(
        default=False,
        metadata={"help": "one table per layer shared by its heads even where --rpe-per-head is on (off at every "
                          "size: tiny and big share their tables because --rpe-per-head is off there)"},
    )
    rpe_no_keys: bool = field(default=False, metadata={"help": "drop the key term q . a^K (ablation)"})
    rpe_no_values: bool = field(default=False, metadata={"help": "drop the value term sum_j a_ij a^V_ij (ablation)"})


class ShawContext(NamedTuple):
    """What the layers of one pass share: the positions and each layer's tables in the compute dtype."""

    pos: Positions
    keys: Optional[Tuple[torch.Tensor, ...]]  # per layer W^K^T (H, d, 2k+1), a shared table expanded
    values: Optional[Tuple[torch.Tensor, ...]]  # per layer W^V (2k+1, d) shared by the heads, or (H, 2k+1, d)
    onehot: Optional[OneHot]  # (Tq,Tk,2k+1) O[i, j, b] = [idx(i,j) = b] (``relative.clipped_onehot``), or None


@register_pe
class ShawRelativePositionalEncoding(PositionalEncoding):
    name = "rpe"
    order = 30
    level = "attention"
    paper = "Shaw et al. 2018"
    config_cls = ShawConfig
    size_defaults = {
        "tiny": {"rpe_max_relative_position": 4},
        "base": {"rpe_max_relative_position": 16, "rpe_per_head": True},
        "big": {"rpe_max_relative_position": 8},
    }

    @classmethod
    def build(cls, cfg, dims, shared):
        if cfg.rpe_shared_heads and cfg.rpe_per_head:  # the signature then says what was built
            cfg = dataclasses.replace(cfg, rpe_per_head=False)
        return super().build(cfg, dims, shared)

    def __init__(self, cfg, dims):
        super().__init__(cfg, dims)
        self.k = cfg.rpe_max_relative_position
        if self.k < 0:
            raise ValueError(f"--rpe-max-relative-position must be >= 0, got {self.k}")
        heads = dims.num_heads if cfg.rpe_per_head and not cfg.rpe_shared_heads else 1
        shape = (dims.num_layers, heads, 2 * self.k + 1, dims.head_dim)  # (L, H|1, 2k+1, d)
        std = dims.head_dim ** -0.5
        self.key_table = None if cfg.rpe_no_keys else nn.Parameter(torch.randn(shape) * std)
        self.value_table = None if cfg.rpe_no_values else nn.Parameter(torch.randn(shape) * std)

    def uses(self, hook):
        # --rpe-no-keys / --rpe-no-values switch a term off: attention then skips it (without a value term it
        # keeps the fused kernel, with the key term as its float mask)
        if hook == "score_bias":
            return self.key_table is not None
        if hook in ("value_bias", "attention_core"):
            return self.value_table is not None
        return super().uses(hook)

    def prepare(self, pos, dtype):
        keys = values = None
        if self.key_table is not None:  # (L,H|1,2k+1,d) -> L x (H,d,2k+1), views (a shared table expanded)
            table = self.key_table.to(dtype).transpose(-1, -2)  # (L,H|1,d,2k+1)
            keys = table.expand(-1, self.dims.num_heads, -1, -1).unbind(0)
        if self.value_table is not None:  # a table shared by heads drops its head axis: one matrix product below
            table = self.value_table.to(dtype)  # (L,H|1,2k+1,d)
            values = (table.squeeze(1) if table.size(1) == 1 else table).unbind(0)  # L x (2k+1,d) or (H,2k+1,d)
        onehot = None if keys is None and values is None else clipped_onehot(pos.rel, self.k, dtype)
        return ShawContext(pos, keys, values, onehot)

    def score_bias(self, q, ctx, layer):
        if self.key_table is None:
            return None
        b, h, tq, d = q.shape
        # q (B,H,Tq,d) is a view of (Tq,B,H,d) memory: as (H, Tq*B, d) it stays one (no copy)
        r = torch.bmm(q.permute(1, 2, 0, 3).reshape(h, tq * b, d), ctx.keys[layer])  # (H,Tq*B,d)(H,d,2k+1)
        r = r.view(h, tq, b, -1).permute(1, 2, 0, 3).reshape(tq, b * h, -1)  # (Tq,B*H,2k+1): a small copy
        return buckets_to_pairs(r, ctx.onehot).view(b, h, tq, -1)  # (B*H,Tq,Tk) -> (B,H,Tq,Tk), a view

    def attention_core(self, q, k, v, masks, dropout_p, ctx, layer):
        """The whole product with both terms (``shaw_core``), (B,H,Tq,d); used only with a value term (``uses``:
        without one, attention takes the fused kernel, the key term joining its mask)."""
        wv = ctx.values[layer]  # (H,2k+1,d), or (2k+1,d) expanded to the heads (a view)
        wv = wv if wv.dim() == 3 else wv.expand(q.size(1), -1, -1)
        wk = None if self.key_table is None else ctx.keys[layer]  # (H,d,2k+1)
        if self.attention_impl == "triton" and ctx.pos.columns:  # the same product in fused kernels (``shaw_triton``,
            # which take each pair's distance from its columns: queries the last Tq of the Tk keys)
            from .shaw_triton import shaw_attention_triton

            return shaw_attention_triton(q, k, v, wk, wv, masks, ctx.onehot, dropout_p)
        return shaw_attention(q, k, v, wk, wv, masks, ctx.onehot, dropout_p)

    def value_bias(self, probs, ctx, layer):
        if self.value_table is None:
            return None
        b, h, tq, tk = probs.shape
        mass = pairs_to_buckets(probs.reshape(b * h, tq, tk), ctx.onehot)  # (Tq,B*H,2k+1): weight per bucket
        mass = mass.view(tq, b, h, -1).permute(1, 2, 0, 3)  # (B,H,Tq,2k+1), a view
        return mass @ ctx.values[layer]  # (B,H,Tq,2k+1) @ ([H,]2k+1,d) -> (B,H,Tq,d)

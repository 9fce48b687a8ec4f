"""RPE: learned relative position representations (Shaw et al., 2018), in self-attention only; the equations and
our choices are in docs/encodings.md §RPE and at the code below.

Defaults per size follow Shaw et al. (2018, section 4.1): the base model has k = 16 and "unique edge
representations per layer and head", tables (L, H, 2k+1, d), 2 L H (2k+1) d parameters over both stacks'
self-attention layers (12 x 8 x 33 x 64 x 2 = 405,504 at base); the big model has k = 8 and one table per layer
shared by its heads, (L, 1, 2k+1, d). The tiny size shares too (k = 4). A size's defaults hold for every model
built on its architecture (a base architecture narrowed to 4 heads keeps per-head tables). Flags win:
--rpe-per-head gives per-head tables at any size, --rpe-shared-heads shared ones (over --rpe-per-head and the base
default). No absolute encoding is added (the paper found no gain from adding sinusoids).

Training runs the whole product in ``ShawAttention`` (or ``pe_plugin.kernels.shaw_rpe``); the score and value
hooks serve the explicit product (weights requested, --pe-attention-impl reference) and --rpe-no-values."""
import dataclasses
from dataclasses import dataclass, field
from typing import NamedTuple, Optional, Tuple

import torch
from fairseq.dataclass import FairseqDataclass
from torch import nn

from ..encoding_parts.base import PositionalEncoding, Positions
from ..encoding_parts.head_layout import as_heads, by_head, new_tbhd, per_bucket
from ..encoding_parts.relative import OneHot, buckets_to_pairs, clipped_onehot, pairs_to_buckets
from . import register_pe


@dataclass
class ShawConfig(FairseqDataclass):
    rpe_max_relative_position: int = field(default=16, metadata={
        "help": "clipping distance k of the relative tables (Shaw: 16 base, 8 big)"})
    rpe_per_head: bool = field(default=False, metadata={
        "help": "one table per layer and head (Shaw's base: on at base size); off, one table per layer shared by "
                "its heads (Shaw's big: off at tiny and big size)"})
    rpe_shared_heads: bool = field(default=False, metadata={
        "help": "one table per layer shared by its heads even where --rpe-per-head is on (off at every size: tiny "
                "and big share their tables because --rpe-per-head is off there)"})
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
        std = dims.head_dim ** -0.5  # N(0, d^-1/2): the paper does not say (our choice, docs/encodings.md §RPE)
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

    # key term, with q scaled by d^-1/2 (as fairseq does) and idx(i,j) = clip(j - i, -k, k) + k:
    #   e_ij = q_i . k_j + q_i . W^K[idx(i,j)],  i.e. R = q W^K^T (B,H,Tq,2k+1), e_ij += R[i, idx(i,j)] = b2p(R)_ij
    # b2p (``relative.buckets_to_pairs``) is one product with the pass's one-hot O[i,j,b] = [idx(i,j) = b] batched
    # over the queries: no (Tq,Tk,d) tensor, no gather.  O(B H Tq (2k+1) (d + Tk))
    def score_bias(self, q, ctx, layer):
        if self.key_table is None:
            return None
        b, h, tq, d = q.shape
        # q (B,H,Tq,d) is a view of (Tq,B,H,d) memory: as (H, Tq*B, d) it stays one (no copy)
        r = torch.bmm(q.permute(1, 2, 0, 3).reshape(h, tq * b, d), ctx.keys[layer])  # (H,Tq*B,d)(H,d,2k+1)
        r = r.view(h, tq, b, -1).permute(1, 2, 0, 3).reshape(tq, b * h, -1)  # (Tq,B*H,2k+1): a small copy
        return buckets_to_pairs(r, ctx.onehot).view(b, h, tq, -1)  # (B*H,Tq,Tk) -> (B,H,Tq,Tk), a view

    def attention_core(self, q, k, v, masks, dropout_p, ctx, layer):
        """Both terms in one product (``ShawAttention``), (B,H,Tq,d); only with a value term (``uses``)."""
        wv = ctx.values[layer]  # (H,2k+1,d), or (2k+1,d) expanded to the heads (a view)
        wv = wv if wv.dim() == 3 else wv.expand(q.size(1), -1, -1)
        wk = None if self.key_table is None else ctx.keys[layer]  # (H,d,2k+1)
        if self.attention_impl == "triton" and ctx.pos.columns:  # fused kernels, which take each pair's distance
            from ..kernels.shaw_rpe import shaw_attention_triton  # from its columns (queries: the last Tq keys)

            return shaw_attention_triton(q, k, v, wk, wv, masks, ctx.onehot, dropout_p)
        return shaw_attention(q, k, v, wk, wv, masks, ctx.onehot, dropout_p)

    # value term: z_i = sum_j a_ij v_j + sum_j a_ij W^V[idx(i,j)] = (a v)_i + (P W^V)_i with P = p2b(a), the weight
    # of each bucket (B,H,Tq,2k+1): ``relative.pairs_to_buckets``, the adjoint product of b2p (each one's backward
    # is the other: no atomic adds, a result independent of the order of a GPU's threads)
    def value_bias(self, probs, ctx, layer):
        if self.value_table is None:
            return None
        b, h, tq, tk = probs.shape
        mass = pairs_to_buckets(probs.reshape(b * h, tq, tk), ctx.onehot)  # (Tq,B*H,2k+1): weight per bucket
        mass = mass.view(tq, b, h, -1).permute(1, 2, 0, 3)  # (B,H,Tq,2k+1), a view
        return mass @ ctx.values[layer]  # (B,H,Tq,2k+1) @ ([H,]2k+1,d) -> (B,H,Tq,d)


def _logits(q3, k3t, r, masks, b, onehot):
    """e = q k^T + b2p(R) + masks  (B*H,Tq,Tk), from q3 (BH,Tq,d), k3t (BH,d,Tk), R = q W^K^T (Tq,BH,n) or None."""
    e = torch.bmm(q3, k3t)  # (BH,Tq,Tk)
    if r is not None:
        buckets_to_pairs(r, onehot, into=e)
    for m in masks:  # each broadcasts to (B,H,Tq,Tk)
        e.view(b, -1, *e.shape[1:]).add_(m)
    return e


# The whole product with a hand-written backward, n = 2k+1 buckets, M the masks (padding, causal: 0 or -inf):
#   R = q W^K^T (B,H,Tq,n);  e = q k^T + b2p(R) + M;  p = softmax(e), a = dropout(p);  P = p2b(a);  z = a v + P W^V
#   dA = dz v^T + b2p(dz W^V^T);  dE = p (dP - rowsum(dP p)), dP = dropout's backward of dA
#   dq = dE k + p2b(dE) W^K,  dk = dE^T q,  dv = a^T dz,  dW^K = sum_b q^T p2b(dE),  dW^V = sum_b P^T dz
# Backward keeps q, k, v (views of the projections), R, P (Tq,B*H,n query-major, ``head_layout``) and the dropout
# mask, and recomputes e and p (as fused kernels do): no (B,H,Tq,Tk) float tensor is kept. The gradients of q, k, v
# and z are (T,B,H,d) memory, as the projections are, so the head merge and their backward take them as they are.
class ShawAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, wk, wv, masks, onehot, drop: float):
        """q (B,H,Tq,d), k and v (B,H,Tk,d), wk (H,d,n) or None, wv (H,n,d), masks a tuple of terms that broadcast
        to (B,H,Tq,Tk), onehot the pass's O (Tq,Tk,n) (``relative.clipped_onehot``): z (B,H,Tq,d)."""
        b, h, tq, d = q.shape
        tk = k.size(2)
        q3, k3t, v3 = q.reshape(b * h, tq, d), k.reshape(b * h, tk, d).mT, v.reshape(b * h, tk, d)  # views
        r = None if wk is None else per_bucket(q, wk)  # R (Tq,BH,n)
        a = torch.softmax(_logits(q3, k3t, r, masks, b, onehot), dim=-1)  # (BH,Tq,Tk)
        keep = None
        if drop > 0:
            a, keep = torch.native_dropout(a, drop, True)
        mass = pairs_to_buckets(a, onehot)  # P (Tq,BH,n)
        z = new_tbhd(b, h, tq, d, q)
        torch.bmm(by_head(mass, h), wv, out=as_heads(z, b, h))  # P W^V  (H,Tq*B,n)(H,n,d)
        z.view(b * h, tq, d).baddbmm_(a, v3)  # + a v
        ctx.save_for_backward(q3, k3t, v3.mT, r, mass, keep)  # views in the orientations backward reads them
        ctx.tables, ctx.masks, ctx.onehot, ctx.drop = (wk, wv), masks, onehot, drop
        return z

    @staticmethod
    def backward(ctx, dz):
        q3, k3t, v3t, r, mass, keep = ctx.saved_tensors
        wk, wv = ctx.tables
        onehot, drop = ctx.onehot, ctx.drop
        b, h, tq, d = dz.shape
        tk = k3t.size(2)
        dz3 = dz.reshape(b * h, tq, d)
        p = torch.softmax(_logits(q3, k3t, r, ctx.masks, b, onehot), dim=-1)  # recomputed (BH,Tq,Tk)
        a = p if keep is None else torch.ops.aten.native_dropout_backward(p, keep, 1 / (1 - drop))
        da = torch.bmm(dz3, v3t)  # (BH,Tq,Tk)
        buckets_to_pairs(per_bucket(dz, wv.mT), onehot, into=da)
        if keep is not None:
            da = torch.ops.aten.native_dropout_backward(da, keep, 1 / (1 - drop))
        de = torch._softmax_backward_data(da, p, -1, p.dtype)  # (BH,Tq,Tk)
        dq, dk, dv = new_tbhd(b, h, tq, d, dz), new_tbhd(b, h, tk, d, dz), new_tbhd(b, h, tk, d, dz)
        torch.bmm(de.mT, q3, out=dk.view(b * h, tk, d))
        torch.bmm(a.mT, dz3, out=dv.view(b * h, tk, d))
        dwv = torch.bmm(by_head(mass, h, transpose=True), as_heads(dz, b, h))  # (H,n,Tq*B)(H,Tq*B,d)
        dwk = None
        if wk is None:
            torch.bmm(de, k3t.mT, out=dq.view(b * h, tq, d))
        else:
            dr = by_head(pairs_to_buckets(de, onehot), h)  # (Tq,BH,n) -> (H,Tq*B,n) view
            torch.bmm(dr, wk.mT, out=as_heads(dq, b, h))  # p2b(dE) W^K
            dq.view(b * h, tq, d).baddbmm_(de, k3t.mT)  # + dE k
            dwk = torch.bmm(as_heads(q3, b, h, transpose=True), dr)  # (H,d,Tq*B)(H,Tq*B,n)
        return dq, dk, dv, dwk, dwv, None, None, None


def shaw_attention(q, k, v, wk: Optional[torch.Tensor], wv: torch.Tensor, masks, onehot: OneHot, drop: float):
    return ShawAttention.apply(q, k, v, wk, wv, tuple(masks), onehot, drop)

"""Shaw's attention core with a hand-written backward (the ``attention_core`` of ``shaw``): what autograd would
keep and dispatch for the explicit product, reduced to views of q, k, v and two small tensors (docs/encodings.md §RPE).

With q scaled by d^-1/2, n = 2k+1 buckets, M the masks (padding, causal: 0 or -inf):
    R  = q W^K^T                                           (B,H,Tq,n)
    e  = q k^T + b2p(R) + M                                (B,H,Tq,Tk)
    p  = softmax(e),           a = dropout(p) = p * m / (1 - drop)
    P  = p2b(a)                                            (B,H,Tq,n): the weight of each bucket
    z  = a v + P W^V                                       (B,H,Tq,d)
b2p (``relative.buckets_to_pairs``) and p2b (``relative.pairs_to_buckets``) are adjoint, so backward is
    dA = dz v^T + b2p(dz W^V^T)                            (B,H,Tq,Tk)
    dE = p * (dP - rowsum(dP * p)),  dP = dA m / (1 - drop)     the softmax backward through dropout
    dq = dE k + p2b(dE) W^K,   dk = dE^T q,   dW^K = sum_b q^T p2b(dE)
    dv = a^T dz,               dW^V = sum_b P^T dz
Backward keeps q, k, v (views of the projections, which fused attention keeps too), R and P (each (B,H,Tq,n))
and the dropout mask; it recomputes e and p (one more q k^T and softmax, as fused kernels do), so no (B,H,Tq,Tk)
float tensor is kept. Nothing scatters or adds by index.

Layouts. The bucket maps are products with the pass's one-hot O (Tq,Tk,n) batched over the queries, so R, P and
the other per-bucket tensors live query-major, as (Tq, B*H, n) memory: b2p adds into the logits through their
(Tq, B*H, Tk) view and p2b reads the probabilities through it (no copy). The table terms run per head over the
(Tq,B) rows: (H, Tq*B, d) views of q and dz and (H, Tq*B, n) views of the per-bucket tensors (``_by_head``), no
copy either. The gradients of q, k, v and the output are laid out as (T,B,H,d), as the projections are, so the
head merge and the projections' backward take them without a copy.
"""
from typing import Optional

import torch

from .relative import OneHot, buckets_to_pairs, pairs_to_buckets


def _heads(x: torch.Tensor, b: int, h: int, transpose: bool = False) -> torch.Tensor:
    """(B,H,T,d) or its (B*H,T,d) view -> (H, T*B, d), or (H, d, T*B) with ``transpose``: one view when x is one
    of (T,B,H,d) memory (the projections, their gradients)."""
    t, d = x.shape[-2:]
    sb, sh = (x.stride(0), x.stride(1)) if x.dim() == 4 else (x.stride(0) * h, x.stride(0))
    st, sd = x.stride()[-2:]
    if st != b * sb:  # the (T,B) rows do not merge: a copy
        x = x.reshape(b, h, t, d).permute(1, 2, 0, 3).reshape(h, t * b, d)
        return x.mT if transpose else x
    if transpose:
        return x.as_strided((h, d, t * b), (sh, sd, sb), x.storage_offset())
    return x.as_strided((h, t * b, d), (sh, sb, sd), x.storage_offset())


def _tbhd(b: int, h: int, t: int, d: int, like: torch.Tensor) -> torch.Tensor:
    """New (B,H,T,d) memory laid out as (T,B,H,d), as the projections are: the head merge (Tq,B,C) after it, and
    the projections' backward, then take it as it is (no copy)."""
    return like.new_empty_strided((b, h, t, d), (h * d, d, b * h * d, 1))


def _by_head(x: torch.Tensor, h: int, transpose: bool = False) -> torch.Tensor:
    """Contiguous (Tq, B*H, n) query-major memory -> its (H, Tq*B, n) view, or (H, n, Tq*B) with ``transpose``
    (no copy): the rows each head's table meets."""
    tq, bh, n = x.shape
    rows = tq * (bh // h)
    if transpose:
        return x.as_strided((h, n, rows), (n, 1, h * n), x.storage_offset())
    return x.as_strided((h, rows, n), (n, h * n, 1), x.storage_offset())


def _per_bucket(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """x (B,H,Tq,d) (a view of (Tq,B,H,d) memory) times a per-head (H,d,n) table: (Tq, B*H, n) query-major, one
    product per head written through ``_by_head`` (R = q W^K^T, and dz W^V^T in backward)."""
    b, h, tq, _ = x.shape
    out = x.new_empty(tq, b * h, table.size(-1))
    torch.bmm(_heads(x, b, h), table, out=_by_head(out, h))  # (H,Tq*B,d)(H,d,n)
    return out


def _logits(q3, k3t, r, masks, b, onehot):
    """e = q k^T + b2p(R) + masks  (B*H,Tq,Tk), from q3 (BH,Tq,d), k3t (BH,d,Tk), R = q W^K^T (Tq,BH,n) or None."""
    e = torch.bmm(q3, k3t)  # (BH,Tq,Tk)
    if r is not None:
        buckets_to_pairs(r, onehot, into=e)
    bh, tq, tk = e.shape
    e4 = e.view(b, bh // b, tq, tk)
    for m in masks:  # each broadcasts to (B,H,Tq,Tk)
        e4.add_(m)
    return e


class ShawAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, wk, wv, masks, onehot, drop: float):
        """q (B,H,Tq,d), k and v (B,H,Tk,d), wk (H,d,n) or None, wv (H,n,d), masks a tuple of terms that broadcast
        to (B,H,Tq,Tk), onehot the pass's O (Tq,Tk,n) (``relative.clipped_onehot``): z (B,H,Tq,d)."""
        b, h, tq, d = q.shape
        tk = k.size(2)
        q3, k3t, v3 = q.reshape(b * h, tq, d), k.reshape(b * h, tk, d).mT, v.reshape(b * h, tk, d)  # views
        r = None if wk is None else _per_bucket(q, wk)  # R = q W^K^T  (Tq,BH,n)
        a = torch.softmax(_logits(q3, k3t, r, masks, b, onehot), dim=-1)  # (BH,Tq,Tk)
        keep = None
        if drop > 0:
            a, keep = torch.native_dropout(a, drop, True)
        mass = pairs_to_buckets(a, onehot)  # P (Tq,BH,n)
        z = _tbhd(b, h, tq, d, q)
        torch.bmm(_by_head(mass, h), wv, out=_heads(z, b, h))  # P W^V  (H,Tq*B,n)(H,n,d)
        z.view(b * h, tq, d).baddbmm_(a, v3)  # + a v
        # views of q, k, v (no copies) in the orientations backward reads them, and the small R and P
        ctx.save_for_backward(q3, k3t, v3.mT, r, mass, keep)
        ctx.tables, ctx.masks, ctx.onehot, ctx.drop = (wk, wv), masks, onehot, drop
        return z

    @staticmethod
    def backward(ctx, dz):
        q3, k3t, v3t, r, mass, keep = ctx.saved_tensors
        wk, wv = ctx.tables
        onehot, drop = ctx.onehot, ctx.drop
        b, h, tq, d = dz.shape
        tk = k3t.size(2)
        dzh, dz3 = _heads(dz, b, h), dz.reshape(b * h, tq, d)
        p = torch.softmax(_logits(q3, k3t, r, ctx.masks, b, onehot), dim=-1)  # recomputed (BH,Tq,Tk)
        a = p if keep is None else torch.ops.aten.native_dropout_backward(p, keep, 1 / (1 - drop))
        # dA = dz v^T + b2p(dz W^V^T)
        da = torch.bmm(dz3, v3t)  # (BH,Tq,Tk)
        buckets_to_pairs(_per_bucket(dz, wv.mT), onehot, into=da)
        if keep is not None:
            da = torch.ops.aten.native_dropout_backward(da, keep, 1 / (1 - drop))
        de = torch._softmax_backward_data(da, p, -1, p.dtype)  # p * (da - rowsum(da * p))  (BH,Tq,Tk)
        # the gradients in (T,B,H,d) memory, as the projections' backward takes them
        dq, dk, dv = _tbhd(b, h, tq, d, dz), _tbhd(b, h, tk, d, dz), _tbhd(b, h, tk, d, dz)
        torch.bmm(de.mT, q3, out=dk.view(b * h, tk, d))  # dE^T q
        torch.bmm(a.mT, dz3, out=dv.view(b * h, tk, d))  # a^T dz
        dwv = torch.bmm(_by_head(mass, h, transpose=True), dzh)  # (H,n,Tq*B)(H,Tq*B,d): summed over the batch
        dwk = None
        if wk is None:
            torch.bmm(de, k3t.mT, out=dq.view(b * h, tq, d))
        else:
            dr = _by_head(pairs_to_buckets(de, onehot), h)  # (Tq,BH,n) -> (H,Tq*B,n) view
            torch.bmm(dr, wk.mT, out=_heads(dq, b, h))  # p2b(dE) W^K
            dq.view(b * h, tq, d).baddbmm_(de, k3t.mT)  # + dE k
            dwk = torch.bmm(_heads(q3, b, h, transpose=True), dr)  # (H,d,Tq*B)(H,Tq*B,n)
        return dq, dk, dv, dwk, dwv, None, None, None


def shaw_attention(q, k, v, wk: Optional[torch.Tensor], wv: torch.Tensor, masks, onehot: OneHot, drop: float):
    return ShawAttention.apply(q, k, v, wk, wv, tuple(masks), onehot, drop)

"""Pure functions over relative distances r = j - i (key minus query), shared by the relative encodings.

Every function takes the (Tq, Tk) integer matrix ``Positions.rel`` and depends on nothing else, so a bias
built from it is the same for any shift of the sequence, any padding side and any decoding step.
References: Shaw et al. 2018 (clipping); Raffel et al. 2020 / HF ``T5Attention._relative_position_bucket``
(log buckets); docs/encodings.md §RPE, §T5 and §AT5.
"""
import math
from typing import NamedTuple, Optional, Tuple

import torch


def clipped_index(rel: torch.Tensor, k: int) -> torch.Tensor:
    """Shaw's table row: idx(i,j) = clip(j - i, -k, k) + k, in {0..2k}.  (Tq,Tk) long"""
    return rel.clamp(-k, k) + k


def t5_bucket(rel: torch.Tensor, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128) -> torch.Tensor:
    """T5's bucket of each relative distance (mesh-tf / HF semantics).  (Tq,Tk) long

    With n = i - j (positive when the key is to the left of the query):
      bidirectional: N' = N/2; keys to the right (n < 0) use buckets N'..N-1, the others 0..N'-1; n = |n|
      causal:        N' = N;  n = max(n, 0), so every future key falls in bucket 0
      e = N'/2 exact buckets, then b = min(N'-1, e + floor(ln(n/e) / ln(max_distance/e) * (N'-e)))
    The logarithm is taken in float32 like the references (a distance on a bucket boundary can flip by one
    in another precision).
    """
    n = -rel.long()
    offset = torch.zeros_like(n)
    if bidirectional:
        num_buckets //= 2
        offset = (n < 0).long() * num_buckets
        n = n.abs()
    else:
        n = n.clamp_min(0)
    exact = num_buckets // 2
    ratio = torch.log(n.float() / exact) / math.log(max_distance / exact)  # float32; -inf at n = 0 (unused)
    log_bucket = exact + (ratio * (num_buckets - exact)).clamp(-1, num_buckets).long()
    log_bucket = log_bucket.clamp_max(num_buckets - 1)
    return offset + torch.where(n < exact, n, log_bucket)


def call_offsets(tq: int, tk: int, device) -> torch.Tensor:
    """(W,) the distances -(Tk-1)..Tq-1 of a self-attention call (queries the last Tq of Tk keys), in order."""
    return torch.arange(1 - tk, tq, device=device)


def distinct_offsets(rel: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """The distinct distances of ``rel`` (a ``Positions.rel``) as a contiguous range, and each pair's index.

    offsets: (R,) long, R = Tq + Tk - 1 (2T - 1 for a square T x T pass, t + 1 for a decoding step)
    index:   (Tq,Tk) long, rel = offsets[index]
    rel[i, j] = j - (Tk - Tq + i) runs from -(Tk - 1) (last query, first key) to Tq - 1 (first query, last
    key), so the range comes from the shape alone, without reading the device. A function of r evaluated on
    ``offsets`` and gathered with ``index`` costs O(R) instead of O(Tq Tk).
    """
    tq, tk = rel.shape
    lo = -(tk - 1)
    return torch.arange(lo, tq, device=rel.device), rel - lo


# ---- a distance clipped at k (Shaw's buckets, T5's table columns) -------------------------------------------
# A (Tq,Tk) call has W = Tq + Tk - 1 distances r = j - i, from -(Tk-1) to Tq-1 (``distinct_offsets``); clipped at
# k they fall into a left tail r < -k (bucket 0), one distance per bucket for |r| <= k, and a right tail r > k
# (bucket 2k).
def _bucket_split(tq: int, tk: int, k: int):
    """(left, lo, hi, right): distances r in the left tail (r < -k), buckets lo..hi-1 met once (|r| <= k, in
    order) and distances in the right tail (r > k) of a (Tq,Tk) call; host numbers from the shape."""
    left, right = max(0, tk - 1 - k), max(0, tq - 1 - k)
    lo, hi = max(-(tk - 1), -k) + k, min(tq - 1, k) + k + 1
    return left, lo, hi, right


def _skew(rel_layout: torch.Tensor, tq: int, tk: int) -> torch.Tensor:
    """The (...,Tq,Tk) pair view of a contiguous (...,Tq,W) rel layout (no copy): row i of the layout holds pair
    (i, j) at column m = j - i + Tq - 1, so pairs[i, j] = layout.flat[i (W - 1) + j + Tq - 1] (row stride W - 1;
    the skewing of Huang et al. 2019)."""
    width = tq + tk - 1
    lead = rel_layout.shape[:-2]
    return rel_layout.as_strided((*lead, tq, tk), (*rel_layout.stride()[:-2], width - 1, 1),
                                 rel_layout.storage_offset() + tq - 1)


def clip_to_offsets(r: torch.Tensor, tq: int, tk: int, k: int) -> torch.Tensor:
    """out[..., m] = r[..., clip(m - (Tk-1), -k, k) + k] for r (...,2k+1): (...,W), the W = Tq + Tk - 1 distances
    of a (Tq,Tk) call in order (the rel layout's columns); an expand and a cat, so its backward sums the tails."""
    left, lo, hi, right = _bucket_split(tq, tk, k)
    parts = [r[..., :1].expand(*r.shape[:-1], left), r[..., lo:hi], r[..., 2 * k:].expand(*r.shape[:-1], right)]
    return torch.cat(parts, dim=-1)  # [r_0 repeated, r_lo..r_hi-1, r_2k repeated]  (...,W)


# ---- Shaw's clipped buckets as products with a one-hot (no scatter, gather or index) -----------------------
# Pair (i, j) takes bucket idx(i, j) = clip(rel_ij, -k, k) + k of n = 2k + 1. With the per-pass constant
#     O[i, j, b] = [idx(i, j) = b]                                            (Tq,Tk,n) in the compute dtype
# the two maps between per-bucket and per-pair terms are batched matrix products over the queries i, with
# N = B*H rows per query:
#     buckets -> pairs (key term):    E[:, i, :] += R[i] O[i]^T      R (Tq,N,n), E (N,Tq,Tk)   (Tq,N,n)(Tq,n,Tk)
#     pairs -> buckets (value term):  P[i] = A[:, i, :] O[i]         A (N,Tq,Tk), P (Tq,N,n)   (Tq,N,Tk)(Tq,Tk,n)
# They are adjoint (<b2p(R), A> = <R, p2b(A)>), so each one's backward is the other; a product's backward is two
# products, so nothing scatters, gathers or adds atomically, forward or backward, and the result does not depend
# on the order of a GPU's threads. Each reads the (N,Tq,Tk) tensor once, through its view with N and Tq swapped
# (a batch stride BLAS takes as it is), writes no (N,Tq,Tk)-sized tensor but the one it adds into, and costs
# 2 N Tq Tk n FLOPs (n/d of the q k^T product). O comes from ``rel`` alone, so it holds for positions given as
# values as for columns, and serves every layer of a pass.
class OneHot(NamedTuple):
    """The per-pass one-hot of each pair's clipped bucket, in the compute dtype."""

    o: torch.Tensor  # (Tq,Tk,n)  O[i, j, b] = [idx(i, j) = b]
    t: torch.Tensor  # (Tq,n,Tk)  its transposed view, taken once per pass


def clipped_onehot(rel: torch.Tensor, k: int, dtype) -> OneHot:
    """O[i, j, b] = [clip(rel_ij, -k, k) + k = b] (Tq,Tk,2k+1) in ``dtype``, from ``Positions.rel`` (Tq,Tk)."""
    o = (rel.clamp(-k, k).unsqueeze(-1) == torch.arange(-k, k + 1, device=rel.device)).to(dtype)  # clip(r) = b - k
    return OneHot(o, o.mT)


def buckets_to_pairs(r: torch.Tensor, onehot: OneHot, into: Optional[torch.Tensor] = None) -> torch.Tensor:
    """R (Tq,N,n) per bucket -> (N,Tq,Tk) per pair, E[m, i, j] = R[i, m, idx(i, j)]: a new tensor (the (N,Tq,Tk)
    view of (Tq,N,Tk) memory), or added in place into ``into`` (N,Tq,Tk) and returned."""
    if into is None:
        return torch.bmm(r, onehot.t).transpose(0, 1)  # (Tq,N,n)(Tq,n,Tk) -> (Tq,N,Tk) -> (N,Tq,Tk)
    into.transpose(0, 1).baddbmm_(r, onehot.t)  # (Tq,N,Tk) view += (Tq,N,n)(Tq,n,Tk)
    return into


def pairs_to_buckets(a: torch.Tensor, onehot: OneHot) -> torch.Tensor:
    """A (N,Tq,Tk) per pair -> (Tq,N,n) summed per bucket, P[i, m, b] = sum_j A[m, i, j] [idx(i, j) = b]."""
    return torch.bmm(a.transpose(0, 1), onehot.o)  # (Tq,N,Tk)(Tq,Tk,n) -> (Tq,N,n)


# ---- a function of the distance alone (T5, AT5): one value per distance, the same in every row --------------
# With v (...,W) indexed by m = r + Tk - 1 (the rel layout's column), every row of the (Tq,W) layout is v, so
#     pairs[i, j] = v[j - i + Tq - 1]:  v expanded to (...,Tq,W), made contiguous, seen through ``_skew``
# (a Toeplitz matrix; a strided view of v alone would need a negative stride). Its adjoint sums each diagonal of
# a (...,Tq,Tk) tensor: written into the rel layout through the same view and summed over the rows.
class OffsetsToPairs(torch.autograd.Function):
    """A per-distance vector as its (Tq,Tk) pair matrix: backward sums the diagonals (no index_put)."""

    @staticmethod
    def forward(ctx, v, tq: int):
        w = v.size(-1)
        ctx.tq = tq
        layout = v.unsqueeze(-2).expand(*v.shape[:-1], tq, w).contiguous()  # (...,Tq,W): every row v
        return _skew(layout, tq, w - tq + 1)  # (...,Tq,Tk), a strided view

    @staticmethod
    def backward(ctx, grad):
        tq, tk = grad.shape[-2:]
        layout = grad.new_zeros(*grad.shape[:-2], tq, tq + tk - 1)  # (...,Tq,W)
        _skew(layout, tq, tk).copy_(grad)
        return layout.sum(-2), None  # (...,W): the sum of each diagonal


def offsets_to_pairs(v: torch.Tensor, tq: int) -> torch.Tensor:
    """(...,W) values of the distances -(Tk-1)..Tq-1 in order -> (...,Tq,Tk), pair (i, j) taking the value of
    its distance j - i (queries the last Tq of Tk positions, W = Tq + Tk - 1)."""
    return OffsetsToPairs.apply(v, tq)

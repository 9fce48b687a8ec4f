"""Pure functions over relative distances r = j - i (key minus query), shared by the relative encodings.

Every function takes the (Tq, Tk) integer matrix ``Positions.rel`` and depends on nothing else, so a bias
built from it is the same for any shift of the sequence, any padding side and any decoding step.
References: Shaw et al. 2018 (clipping); Raffel et al. 2020 / HF ``T5Attention._relative_position_bucket``
(log buckets); docs/encodings.md §RPE, §T5 and §AT5.
"""
import math
from typing import Tuple

import torch
import torch.nn.functional as F


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


# ---- Shaw's clipped buckets without scatter or gather ----------------------------------------------------------
# A (Tq,Tk) call has W = Tq + Tk - 1 distances r = j - i, from -(Tk-1) to Tq-1 (``distinct_offsets``). With the
# queries the last Tq of Tk positions, row i of a (Tq, W) tensor indexed by m = r + Tk - 1 ... (the "rel" layout)
# holds pair (i, j) at m = j - i + Tq - 1, so the (Tq,Tk) pairs are the strided view
#     pairs[i, j] = rel_layout.flat[i (W - 1) + j + Tq - 1]                       (row stride W - 1, no copy)
# (the skewing of Huang et al. 2019). Shaw's buckets idx = clip(r, -k, k) + k split the W distances into a left
# tail r < -k (bucket 0), one distance per bucket for |r| <= k (2k-1 diagonals and the two clip distances), and a
# right tail r > k (bucket 2k). So
#     buckets -> pairs  (key term):   R (...,Tq,2k+1) -> rel layout [R_0 repeated, R_lo..R_hi, R_2k repeated]
#                                     (an expand and a cat) -> strided view (...,Tq,Tk)
#     pairs -> buckets  (value term): a (...,Tq,Tk) written into the rel layout through the same view, then the two
#                                     tails summed and the middle sliced (...,Tq,2k+1)
# are adjoint linear maps (<pairs(R), a> = <R, buckets(a)>): each one's backward is the other, and neither
# scatters, gathers or adds atomically.
def _bucket_split(tq: int, tk: int, k: int):
    """(left, lo, hi, right): distances r in the left tail (r < -k), buckets lo..hi-1 met once (|r| <= k, in
    order) and distances in the right tail (r > k) of a (Tq,Tk) call; host numbers from the shape."""
    left, right = max(0, tk - 1 - k), max(0, tq - 1 - k)
    lo, hi = max(-(tk - 1), -k) + k, min(tq - 1, k) + k + 1
    return left, lo, hi, right


def _skew(rel_layout: torch.Tensor, tq: int, tk: int) -> torch.Tensor:
    """The (...,Tq,Tk) pair view of a contiguous (...,Tq,W) rel layout (no copy)."""
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


def buckets_to_pairs_raw(r: torch.Tensor, tk: int, k: int) -> torch.Tensor:
    """out[..., i, j] = r[..., i, clip(j - i, -k, k) + k] for r (...,Tq,2k+1): (...,Tq,Tk), without autograd."""
    tq = r.size(-2)
    return _skew(clip_to_offsets(r, tq, tk, k), tq, tk)  # (...,Tq,W) -> (...,Tq,Tk), a strided view


def pairs_to_buckets_raw(a: torch.Tensor, k: int, dtype=None) -> torch.Tensor:
    """out[..., i, b] = sum_j a[..., i, j] [clip(j - i, -k, k) + k = b] for a (...,Tq,Tk): (...,Tq,2k+1) in
    ``dtype`` (default a's; the tail sums accumulate in it), without autograd."""
    if k == 0:  # one bucket: every pair
        return a.sum(-1, keepdim=True, dtype=dtype or a.dtype)
    tq, tk = a.shape[-2:]
    left, lo, hi, right = _bucket_split(tq, tk, k)
    rel_layout = a.new_zeros(*a.shape[:-2], tq, tq + tk - 1, dtype=dtype or a.dtype)  # (...,Tq,W)
    _skew(rel_layout, tq, tk).copy_(a)
    # the W distances in order: [left tail + r = -k] [one per bucket] [r = k + right tail]
    inner = hi - lo - (left > 0) - (right > 0)  # buckets met by exactly one distance
    parts = [rel_layout[..., :left + 1].sum(-1, keepdim=True)] if left else []
    start = left + 1 if left else 0
    parts.append(rel_layout[..., start:start + inner])
    if right:
        parts.append(rel_layout[..., start + inner:].sum(-1, keepdim=True))
    out = torch.cat(parts, dim=-1) if len(parts) > 1 else parts[0]  # (...,Tq,hi-lo): buckets lo..hi-1
    return F.pad(out, (lo, 2 * k + 1 - hi)) if (lo, hi) != (0, 2 * k + 1) else out  # buckets no pair meets: 0


class BucketsToPairs(torch.autograd.Function):
    """Shaw's key term from the per-bucket scores: backward is ``pairs_to_buckets`` (no scatter)."""

    @staticmethod
    def forward(ctx, r, tk: int, k: int):
        ctx.k = k
        return buckets_to_pairs_raw(r, tk, k)

    @staticmethod
    def backward(ctx, grad):
        return pairs_to_buckets_raw(grad, ctx.k), None, None


class PairsToBuckets(torch.autograd.Function):
    """Shaw's value term's bucket weights from the attention weights: backward is ``buckets_to_pairs`` (no gather)."""

    @staticmethod
    def forward(ctx, a, k: int, dtype):
        ctx.k, ctx.tk, ctx.in_dtype = k, a.size(-1), a.dtype
        return pairs_to_buckets_raw(a, k, dtype)

    @staticmethod
    def backward(ctx, grad):
        return buckets_to_pairs_raw(grad, ctx.tk, ctx.k).to(ctx.in_dtype), None, None


def buckets_to_pairs(r: torch.Tensor, tk: int, k: int) -> torch.Tensor:
    """(...,Tq,2k+1) per-bucket terms -> (...,Tq,Tk) per-pair terms, pair (i, j) taking bucket clip(j-i,-k,k)+k
    (queries the last Tq of Tk positions)."""
    return BucketsToPairs.apply(r, tk, k)


def pairs_to_buckets(a: torch.Tensor, k: int, dtype=None) -> torch.Tensor:
    """(...,Tq,Tk) per-pair weights -> (...,Tq,2k+1) their sums per bucket, in ``dtype`` (default a's)."""
    return PairsToBuckets.apply(a, k, dtype or a.dtype)


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

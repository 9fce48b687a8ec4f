"""Pure functions over relative distances r = j - i (key minus query), shared by the relative encodings.

Every function takes the (Tq, Tk) integer matrix ``Positions.rel`` and depends on nothing else, so a bias
built from it is the same for any shift of the sequence, any padding side and any decoding step.
References: Shaw et al. 2018 (clipping); Raffel et al. 2020 / HF ``T5Attention._relative_position_bucket``
(log buckets); docs/encodings.md §RPE, §T5 and §AT5.
"""
import math
from typing import Tuple

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

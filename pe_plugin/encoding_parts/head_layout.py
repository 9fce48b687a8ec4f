"""Per-head views of (T,B,H,d) projection memory, for products that run per head over all (T,B) rows at once
without a copy: Shaw's table terms (``encodings.shaw``) and its Triton launcher (``kernels.shaw_rpe``).

Per-bucket tensors live query-major, as (Tq, B*H, n) memory, n the number of buckets."""
import torch


def as_heads(x: torch.Tensor, b: int, h: int, transpose: bool = False) -> torch.Tensor:
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


def new_tbhd(b: int, h: int, t: int, d: int, like: torch.Tensor) -> torch.Tensor:
    """New (B,H,T,d) memory laid out as (T,B,H,d), as the projections are: the head merge (Tq,B,C) after it, and
    the projections' backward, then take it as it is (no copy)."""
    return like.new_empty_strided((b, h, t, d), (h * d, d, b * h * d, 1))


def by_head(x: torch.Tensor, h: int, transpose: bool = False) -> torch.Tensor:
    """Contiguous (Tq, B*H, n) query-major memory -> its (H, Tq*B, n) view, or (H, n, Tq*B) with ``transpose``
    (no copy): the rows each head's table meets."""
    tq, bh, n = x.shape
    rows = tq * (bh // h)
    if transpose:
        return x.as_strided((h, n, rows), (n, 1, h * n), x.storage_offset())
    return x.as_strided((h, rows, n), (n, h * n, 1), x.storage_offset())


def per_bucket(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """x (B,H,Tq,d) (a view of (Tq,B,H,d) memory) times a per-head (H,d,n) table: (Tq, B*H, n) query-major, one
    product per head written through ``by_head`` (Shaw's R = q W^K^T, and dz W^V^T in backward)."""
    b, h, tq, _ = x.shape
    out = x.new_empty(tq, b * h, table.size(-1))
    torch.bmm(as_heads(x, b, h), table, out=by_head(out, h))  # (H,Tq*B,d)(H,d,n)
    return out

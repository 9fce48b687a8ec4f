"""Shaw's attention core as fused Triton kernels (``--pe-attention-impl triton``): the product of ``shaw_core`` with
no (B,H,Tq,Tk) tensor in memory at all, as flash attention computes softmax attention (docs/encodings.md §RPE).

Same equations as ``shaw_core`` (n = 2k+1 buckets, idx(i,j) = clip(j - i, -k, k) + k, q scaled by d^-1/2):
    e_ij = q_i . k_j + R[i, idx(i,j)] + M_ij,   R = q W^K^T        p = softmax_j(e),   P = p2b(p)
    z_i  = sum_j p_ij v_j + sum_b P_ib W^V_b
Forward, one program per (batch, head, block of queries), over blocks of keys with an online softmax (running max
m, sum l): the key term is gathered from the query's row of R inside the tile; the two clipped tails of P are running
sums like l (r <= -k: bucket 0, r >= k: bucket 2k); each inner bucket (|r| < k) holds one pair, j = i + r, whose
logit is recomputed after the loop from q_i, k_j and R (2k-1 dot products per query). It writes z, the log-sum-exp
L = m + log l and P; nothing of size (Tq,Tk).
Backward recomputes p = exp(e - L) tile by tile (as flash attention does), with
    dA_ij = dz_i . v_j + G[i, idx(i,j)],   G = dz W^V^T (B,H,Tq,n),   D_i = dz_i . z_i = sum_j p_ij dA_ij
    dE = p (dA - D),   dv = p^T dz,   dk = dE^T q,   dq = dE k + dR W^K,   dR = p2b(dE)
one kernel per block of keys (dk, dv) and one per block of queries (dq, dR: tails as running sums, inner buckets
recomputed as in forward); the table products (R, G, dR W^K, dW^K = q^T dR, dW^V = P^T dz) are per-head matrix
products in PyTorch (``shaw_core``'s). No atomics: every program writes its own rows.

Scope: no attention dropout (the fairseq default; Shaw's value term then needs no mask replay), masks given as
additive terms (padding, causal) read through their broadcast strides. Kernels run on CUDA, or on a CPU under
``TRITON_INTERPRET=1`` (how the tests run them). Triton is imported only when this implementation is chosen.
"""
import os
from typing import Optional, Sequence, Tuple

import torch

from .relative import OneHot
from .shaw_core import _by_head, _heads, _per_bucket, _tbhd


def _kernels():
    """The kernels module (``pe_plugin.kernels.shaw_rpe``), imported on first use: the plugin needs no Triton."""
    try:
        import triton.language as tl

        from ..kernels import shaw_rpe
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("--pe-attention-impl triton needs the triton package (PyTorch's CUDA wheels ship it; "
                          "else `pip install triton`), or choose --pe-attention-impl auto") from e
    return shaw_rpe, tl


def _strides(x: Optional[torch.Tensor]) -> Tuple[int, ...]:
    """A 4-D tensor's strides, or zeros for an absent one (its kernel branch is compiled out)."""
    return (0, 0, 0, 0) if x is None else x.stride()


def _mask_views(masks: Sequence[torch.Tensor], b: int, h: int, tq: int, tk: int):
    """Up to two additive masks as (B,H,Tq,Tk) broadcast views (stride 0 where a mask does not vary): the
    pointer and strides each kernel reads; more are summed first."""
    masks = list(masks)
    if len(masks) > 2:
        masks = [sum(masks[1:], masks[0])]
    views = [m.reshape((1,) * (4 - m.dim()) + tuple(m.shape)).expand(b, h, tq, tk) for m in masks]
    views += [None] * (2 - len(views))
    return [x for view in views for x in (view, *_strides(view))], [view is not None for view in views]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _query_major_4d(x: Optional[torch.Tensor], b: int, h: int) -> Optional[torch.Tensor]:
    """(Tq, B*H, n) query-major memory seen as (B,H,Tq,n) (a view); None stays None."""
    if x is None:
        return None
    tq, bh, n = x.shape
    return x.view(tq, b, h, n).permute(1, 2, 0, 3)


def _launch_settings(q: torch.Tensor, block: Optional[int], tl) -> Tuple[int, object, str]:
    """(block size, the kernels' accumulation dtype, tl.dot's input precision) for q's dtype and device."""
    dt = tl.float64 if q.dtype == torch.float64 else tl.float32
    prec = "tf32" if q.dtype in (torch.float16, torch.bfloat16) else "ieee"
    return block or (64 if q.is_cuda else 16), dt, prec


class ShawTriton(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, wk, wv, masks, block):
        """q (B,H,Tq,d), k and v (B,H,Tk,d), wk (H,d,n) or None, wv (H,n,d), masks additive terms that broadcast
        to (B,H,Tq,Tk), the queries the last Tq of the Tk keys: z (B,H,Tq,d)."""
        kern, tl = _kernels()
        b, h, tq, d = q.shape
        tk, n = k.size(2), wv.size(1)
        kc = (n - 1) // 2
        bm, dt, prec = _launch_settings(q, block, tl)
        r = None if wk is None else _per_bucket(q, wk)  # R (Tq,BH,n)
        r4 = _query_major_4d(r, b, h)
        mask_args, (m1, m2) = _mask_views(masks, b, h, tq, tk)
        z = _tbhd(b, h, tq, d, q)
        lse = q.new_empty(b * h, tq, dtype=torch.float64 if q.dtype == torch.float64 else torch.float32)
        mass = q.new_empty(tq, b * h, n)  # P, query-major as ``shaw_core`` keeps it
        mass4 = _query_major_4d(mass, b, h)
        grid = (_cdiv(tq, bm), b * h)
        kern.forward[grid](
            q, k, v, r4, wv, mask_args[0], mask_args[5], z, lse, mass4,
            *q.stride(), *k.stride(), *v.stride(), *_strides(r4), *wv.stride(),
            *mask_args[1:5], *mask_args[6:10], *z.stride(), *mass4.stride(),
            h, tq, tk, tk - tq, KC=kc, D=d, BLOCK_M=bm, BLOCK_N=bm, DT=dt, PREC=prec,
            HAS_R=r is not None, HAS_M1=m1, HAS_M2=m2)
        ctx.save_for_backward(q, k, v, r, mass, z, lse)
        ctx.tables, ctx.masks, ctx.block = (wk, wv), tuple(masks), block
        return z

    @staticmethod
    def backward(ctx, dz):
        kern, tl = _kernels()
        q, k, v, r, mass, z, lse = ctx.saved_tensors
        wk, wv = ctx.tables
        b, h, tq, d = q.shape
        tk, n = k.size(2), wv.size(1)
        kc = (n - 1) // 2
        bm, dt, prec = _launch_settings(q, ctx.block, tl)
        r4 = _query_major_4d(r, b, h)
        mask_args, (m1, m2) = _mask_views(ctx.masks, b, h, tq, tk)
        g = _per_bucket(dz, wv.mT)  # G = dz W^V^T (Tq,BH,n)
        g4 = _query_major_4d(g, b, h)
        dd = (dz.to(lse.dtype) * z.to(lse.dtype)).sum(-1).reshape(b * h, tq)  # D_i = dz_i . z_i  (BH,Tq)
        dq, dk, dv = _tbhd(b, h, tq, d, dz), _tbhd(b, h, tk, d, dz), _tbhd(b, h, tk, d, dz)
        dr = None if r is None else torch.empty_like(r)  # dR (Tq,BH,n)
        dr4 = _query_major_4d(dr, b, h)
        common = (*q.stride(), *k.stride(), *v.stride(), *_strides(r4), *g4.stride(), *mask_args[1:5],
                  *mask_args[6:10], *dz.stride())
        flags = dict(KC=kc, D=d, BLOCK_M=bm, BLOCK_N=bm, DT=dt, PREC=prec, HAS_R=r is not None, HAS_M1=m1,
                     HAS_M2=m2)
        kern.backward_kv[(_cdiv(tk, bm), b * h)](
            q, k, v, r4, g4, mask_args[0], mask_args[5], dz, lse, dd, dk, dv, *common, *dk.stride(),
            h, tq, tk, tk - tq, **flags)
        kern.backward_q[(_cdiv(tq, bm), b * h)](
            q, k, v, r4, g4, mask_args[0], mask_args[5], dz, lse, dd, dq, dr4, *common, *dq.stride(),
            h, tq, tk, tk - tq, **flags)
        dzh = _heads(dz, b, h)
        dwv = torch.bmm(_by_head(mass, h, transpose=True), dzh)  # P^T dz  (H,n,Tq*B)(H,Tq*B,d)
        dwk = None
        if wk is not None:
            drh = _by_head(dr, h)  # (H,Tq*B,n)
            _heads(dq, b, h).baddbmm_(drh, wk.mT)  # dq += dR W^K
            dwk = torch.bmm(_heads(q, b, h, transpose=True), drh)  # q^T dR  (H,d,Tq*B)(H,Tq*B,n)
        return dq, dk, dv, dwk, dwv, None, None


def shaw_attention_triton(q, k, v, wk: Optional[torch.Tensor], wv: torch.Tensor, masks, onehot: OneHot,
                          drop: float, block: Optional[int] = None):
    """``shaw_core.shaw_attention`` in fused kernels; ``onehot`` is unused (the kernels compute each pair's bucket)
    and ``drop`` must be 0."""
    if drop > 0:
        raise ValueError(f"--pe-attention-impl triton runs Shaw's RPE without attention dropout, but it is {drop}: "
                         "set --attention-dropout 0, or use --pe-attention-impl auto")
    if not q.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError(f"--pe-attention-impl triton runs on CUDA (or, slowly, on a CPU under TRITON_INTERPRET=1), "
                         f"but this model is on {q.device.type}: use --pe-attention-impl auto")
    d = q.size(-1)
    if d < 16 or d & (d - 1):
        raise ValueError(f"--pe-attention-impl triton needs a head size that is a power of 2 and at least 16 (embed "
                         f"dim / heads), but it is {d}: use --pe-attention-impl auto")
    return ShawTriton.apply(q, k, v, wk, wv, tuple(masks), block)

"""Shaw's attention core as fused Triton kernels with their launcher (``--pe-attention-impl triton``): the product of
``pe_plugin.encodings.shaw.ShawAttention`` (its equations are there) with no (B,H,Tq,Tk) tensor in memory at all, as
flash attention computes softmax attention (docs/encodings.md §RPE).

Forward, one program per (batch, head, block of queries), over blocks of keys with an online softmax (running max
m, sum l): the key term is gathered from the query's row of R inside the tile; the two clipped tails of P are running
sums like l (r <= -k: bucket 0, r >= k: bucket 2k); each inner bucket (|r| < k) holds one pair, j = i + r, whose
logit is recomputed after the loop from q_i, k_j and R (2k-1 dot products per query). It writes z, the log-sum-exp
L = m + log l and P; nothing of size (Tq,Tk).
Backward recomputes p = exp(e - L) tile by tile (as flash attention does), with G = dz W^V^T and D_i = dz_i . z_i
= sum_j p_ij dA_ij, so that dE = p (dA - D): one kernel per block of keys (dk, dv) and one per block of queries
(dq, dR: tails as running sums, inner buckets recomputed as in forward); the table products (R, G, dR W^K,
dW^K, dW^V) are per-head matrix products in PyTorch (``encoding_parts.head_layout``). No atomics: every program
writes its own rows. Shapes: BM queries x BN keys per tile, D the head size (a power of 2, >= 16).

Scope: no attention dropout (the fairseq default; Shaw's value term then needs no mask replay), masks given as
additive terms (padding, causal) read through their broadcast strides. Kernels run on CUDA, or on a CPU under
``TRITON_INTERPRET=1`` (how the tests run them). Imported only when this implementation runs (``encodings.shaw``),
so the plugin itself needs no Triton.
"""
import os
from typing import Optional, Sequence, Tuple

import torch

from ..encoding_parts.head_layout import as_heads, by_head, new_tbhd, per_bucket
from ..encoding_parts.relative import OneHot

try:
    import triton
    import triton.language as tl
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("--pe-attention-impl triton needs the triton package (PyTorch's CUDA wheels ship it; else "
                      "`pip install triton`), or choose --pe-attention-impl auto") from e


@triton.jit
def _rows(X, b, h, sb, sh, st, sd, rows, od, mask):
    """A (rows, D) block of a (B,H,T,D) tensor read through its strides, 0 where ``mask`` is off."""
    return tl.load(X + b * sb + h * sh + rows[:, None] * st + od[None, :] * sd, mask=mask[:, None], other=0.)


@triton.jit
def _logits(q, kt, om, on, qm, km, b, h, OFF, R, srb, srh, srt, src, M1, s1b, s1h, s1i, s1j,
            M2, s2b, s2h, s2i, s2j, KC: tl.constexpr, HAS_R: tl.constexpr, HAS_M1: tl.constexpr,
            HAS_M2: tl.constexpr, PREC: tl.constexpr):
    """e of a (queries om) x (keys on) tile, -inf beyond the keys, and r = j - i."""
    s = tl.dot(q, tl.trans(kt), input_precision=PREC)  # (BM,BN)
    rel = on[None, :] - (om[:, None] + OFF)
    valid = qm[:, None] & km[None, :]
    if HAS_R:  # R[i, idx(i,j)]: a gather from the query's own row
        idx = tl.minimum(tl.maximum(rel, -KC), KC) + KC
        s += tl.load(R + b * srb + h * srh + om[:, None] * srt + idx * src, mask=valid, other=0.).to(s.dtype)
    if HAS_M1:
        s += tl.load(M1 + b * s1b + h * s1h + om[:, None] * s1i + on[None, :] * s1j, mask=valid,
                     other=0.).to(s.dtype)
    if HAS_M2:
        s += tl.load(M2 + b * s2b + h * s2h + om[:, None] * s2i + on[None, :] * s2j, mask=valid,
                     other=0.).to(s.dtype)
    return tl.where(km[None, :], s, float("-inf")), rel


@triton.jit
def _pair(q, om, qm, c, b, h, OFF, TK, K, skb, skh, skt, skd, od, R, srb, srh, srt, src,
          M1, s1b, s1h, s1i, s1j, M2, s2b, s2h, s2i, s2j, DT: tl.constexpr, KC: tl.constexpr,
          HAS_R: tl.constexpr, HAS_M1: tl.constexpr, HAS_M2: tl.constexpr):
    """e of the one pair (i, j = i + c) of inner bucket c + k per query, -inf where j is not a key; j."""
    j = om + OFF + c
    jm = qm & (j >= 0) & (j < TK)
    kj = _rows(K, b, h, skb, skh, skt, skd, j, od, jm)
    s = tl.sum(q.to(DT) * kj.to(DT), 1)
    if HAS_R:
        s += tl.load(R + b * srb + h * srh + om * srt + (c + KC) * src, mask=jm, other=0.).to(DT)
    if HAS_M1:
        s += tl.load(M1 + b * s1b + h * s1h + om * s1i + j * s1j, mask=jm, other=0.).to(DT)
    if HAS_M2:
        s += tl.load(M2 + b * s2b + h * s2h + om * s2i + j * s2j, mask=jm, other=0.).to(DT)
    return tl.where(jm, s, float("-inf")), j, jm


@triton.jit
def _query_rows(Q, DZ, LSE, DD, b, h, bh, om, od, qm, TQ, sqb, sqh, sqt, sqd, sdb, sdh, sdt, sdd):
    """What backward reads per block of queries: q and dz (rows, D), L and D_i (rows,)."""
    return (_rows(Q, b, h, sqb, sqh, sqt, sqd, om, od, qm), _rows(DZ, b, h, sdb, sdh, sdt, sdd, om, od, qm),
            tl.load(LSE + bh * TQ + om, mask=qm, other=0.), tl.load(DD + bh * TQ + om, mask=qm, other=0.))


@triton.jit
def _tile_grads(q, kt, vt, dz, lse, dd, om, on, qm, km, b, h, OFF, R, srb, srh, srt, src, G, sgb, sgh, sgt, sgc,
                M1, s1b, s1h, s1i, s1j, M2, s2b, s2h, s2i, s2j, DT: tl.constexpr, KC: tl.constexpr,
                HAS_R: tl.constexpr, HAS_M1: tl.constexpr, HAS_M2: tl.constexpr, PREC: tl.constexpr):
    """The probabilities of a tile recomputed from the log-sum-exp, p = exp(e - L), and
    dE = p (dA - D) with dA_ij = dz_i . v_j + G[i, idx(i,j)]; and r = j - i.  (BM,BN) each"""
    s, rel = _logits(q, kt, om, on, qm, km, b, h, OFF, R, srb, srh, srt, src, M1, s1b, s1h, s1i, s1j,
                     M2, s2b, s2h, s2i, s2j, KC, HAS_R, HAS_M1, HAS_M2, PREC)
    p = tl.where(qm[:, None], tl.exp(s.to(DT) - lse[:, None]), 0.)
    idx = tl.minimum(tl.maximum(rel, -KC), KC) + KC
    da = tl.dot(dz, tl.trans(vt), input_precision=PREC).to(DT)
    da += tl.load(G + b * sgb + h * sgh + om[:, None] * sgt + idx * sgc, mask=qm[:, None] & km[None, :],
                  other=0.).to(DT)
    return p, p * (da - dd[:, None]), rel


@triton.jit
def forward_kernel(Q, K, V, R, WV, M1, M2, Z, LSE, P,
            sqb, sqh, sqt, sqd, skb, skh, skt, skd, svb, svh, svt, svd, srb, srh, srt, src, swh, swn, swd,
            s1b, s1h, s1i, s1j, s2b, s2h, s2i, s2j, szb, szh, szt, szd, spb, sph, spt, spc,
            H, TQ, TK, OFF, KC: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
            DT: tl.constexpr, PREC: tl.constexpr, HAS_R: tl.constexpr, HAS_M1: tl.constexpr,
            HAS_M2: tl.constexpr):
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    om = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)  # this program's queries
    od = tl.arange(0, D)
    qm = om < TQ
    q = _rows(Q, b, h, sqb, sqh, sqt, sqd, om, od, qm)
    m = tl.full([BLOCK_M], float("-inf"), DT)  # running max, sum, tail sums (unnormalised) and output
    ell = tl.zeros([BLOCK_M], DT)
    left = tl.zeros([BLOCK_M], DT)
    right = tl.zeros([BLOCK_M], DT)
    acc = tl.zeros([BLOCK_M, D], DT)
    for start in range(0, TK, BLOCK_N):
        on = start + tl.arange(0, BLOCK_N)
        km = on < TK
        kt = _rows(K, b, h, skb, skh, skt, skd, on, od, km)
        vt = _rows(V, b, h, svb, svh, svt, svd, on, od, km)
        s, rel = _logits(q, kt, om, on, qm, km, b, h, OFF, R, srb, srh, srt, src, M1, s1b, s1h, s1i, s1j,
                         M2, s2b, s2h, s2i, s2j, KC, HAS_R, HAS_M1, HAS_M2, PREC)
        s = s.to(DT)
        m_new = tl.maximum(m, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0., m_new)  # a row with no key yet: nothing to rescale
        alpha = tl.exp(m - m_use)
        p = tl.exp(s - m_use[:, None])  # (BM,BN)
        ell = ell * alpha + tl.sum(p, 1)
        left = left * alpha + tl.sum(tl.where(rel <= -KC, p, 0.), 1)
        right = right * alpha + tl.sum(tl.where(rel >= KC, p, 0.), 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(vt.dtype), vt, input_precision=PREC).to(DT)
        m = m_new
    m_use = tl.where(m == float("-inf"), 0., m)
    inv = 1. / tl.where(ell == 0., 1., ell)
    tl.store(LSE + bh * TQ + om, m_use + tl.log(tl.where(ell == 0., 1., ell)), mask=qm)
    out = acc * inv[:, None]
    wv = WV + h * swh
    pbase = P + b * spb + h * sph + om * spt
    if KC == 0:  # one bucket: every pair
        out += (ell * inv)[:, None] * tl.load(wv + od * swd).to(DT)[None, :]
        tl.store(pbase, (ell * inv).to(P.dtype.element_ty), mask=qm)
    else:
        out += (left * inv)[:, None] * tl.load(wv + od * swd).to(DT)[None, :]
        out += (right * inv)[:, None] * tl.load(wv + 2 * KC * swn + od * swd).to(DT)[None, :]
        tl.store(pbase, (left * inv).to(P.dtype.element_ty), mask=qm)
        tl.store(pbase + 2 * KC * spc, (right * inv).to(P.dtype.element_ty), mask=qm)
    for c in tl.static_range(1 - KC, KC):  # inner buckets: one pair each
        sc, j, jm = _pair(q, om, qm, c, b, h, OFF, TK, K, skb, skh, skt, skd, od, R, srb, srh, srt, src,
                          M1, s1b, s1h, s1i, s1j, M2, s2b, s2h, s2i, s2j, DT, KC, HAS_R, HAS_M1, HAS_M2)
        pc = tl.exp(sc - m_use) * inv
        out += pc[:, None] * tl.load(wv + (c + KC) * swn + od * swd).to(DT)[None, :]
        tl.store(pbase + (c + KC) * spc, pc.to(P.dtype.element_ty), mask=qm)
    tl.store(Z + b * szb + h * szh + om[:, None] * szt + od[None, :] * szd, out.to(Z.dtype.element_ty),
             mask=qm[:, None])


@triton.jit
def backward_kv_kernel(Q, K, V, R, G, M1, M2, DZ, LSE, DD, DK, DV,
                sqb, sqh, sqt, sqd, skb, skh, skt, skd, svb, svh, svt, svd, srb, srh, srt, src,
                sgb, sgh, sgt, sgc, s1b, s1h, s1i, s1j, s2b, s2h, s2i, s2j, sdb, sdh, sdt, sdd,
                sob, soh, sot, sod,
                H, TQ, TK, OFF, KC: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr, DT: tl.constexpr, PREC: tl.constexpr, HAS_R: tl.constexpr,
                HAS_M1: tl.constexpr, HAS_M2: tl.constexpr):
    """dk = dE^T q and dv = p^T dz for one block of keys, over every query."""
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    on = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    od = tl.arange(0, D)
    km = on < TK
    kt = _rows(K, b, h, skb, skh, skt, skd, on, od, km)
    vt = _rows(V, b, h, svb, svh, svt, svd, on, od, km)
    dk = tl.zeros([BLOCK_N, D], DT)
    dv = tl.zeros([BLOCK_N, D], DT)
    for start in range(0, TQ, BLOCK_M):
        om = start + tl.arange(0, BLOCK_M)
        qm = om < TQ
        q, dz, lse, dd = _query_rows(Q, DZ, LSE, DD, b, h, bh, om, od, qm, TQ, sqb, sqh, sqt, sqd, sdb, sdh, sdt, sdd)
        p, de, rel = _tile_grads(q, kt, vt, dz, lse, dd, om, on, qm, km, b, h, OFF, R, srb, srh, srt, src,
                                 G, sgb, sgh, sgt, sgc, M1, s1b, s1h, s1i, s1j, M2, s2b, s2h, s2i, s2j,
                                 DT, KC, HAS_R, HAS_M1, HAS_M2, PREC)
        dv += tl.dot(tl.trans(p).to(dz.dtype), dz, input_precision=PREC).to(DT)
        dk += tl.dot(tl.trans(de).to(q.dtype), q, input_precision=PREC).to(DT)
    base = b * sob + h * soh + on[:, None] * sot + od[None, :] * sod
    tl.store(DK + base, dk.to(DK.dtype.element_ty), mask=km[:, None])
    tl.store(DV + base, dv.to(DV.dtype.element_ty), mask=km[:, None])


@triton.jit
def backward_q_kernel(Q, K, V, R, G, M1, M2, DZ, LSE, DD, DQ, DR,
               sqb, sqh, sqt, sqd, skb, skh, skt, skd, svb, svh, svt, svd, srb, srh, srt, src,
               sgb, sgh, sgt, sgc, s1b, s1h, s1i, s1j, s2b, s2h, s2i, s2j, sdb, sdh, sdt, sdd,
               sob, soh, sot, sod,
               H, TQ, TK, OFF, KC: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               DT: tl.constexpr, PREC: tl.constexpr, HAS_R: tl.constexpr, HAS_M1: tl.constexpr,
               HAS_M2: tl.constexpr):
    """dq = dE k and dR = p2b(dE) for one block of queries, over every key (dR in R's layout)."""
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    om = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    od = tl.arange(0, D)
    qm = om < TQ
    q, dz, lse, dd = _query_rows(Q, DZ, LSE, DD, b, h, bh, om, od, qm, TQ, sqb, sqh, sqt, sqd, sdb, sdh, sdt, sdd)
    dq = tl.zeros([BLOCK_M, D], DT)
    left = tl.zeros([BLOCK_M], DT)
    right = tl.zeros([BLOCK_M], DT)
    for start in range(0, TK, BLOCK_N):
        on = start + tl.arange(0, BLOCK_N)
        km = on < TK
        kt = _rows(K, b, h, skb, skh, skt, skd, on, od, km)
        vt = _rows(V, b, h, svb, svh, svt, svd, on, od, km)
        p, de, rel = _tile_grads(q, kt, vt, dz, lse, dd, om, on, qm, km, b, h, OFF, R, srb, srh, srt, src,
                                 G, sgb, sgh, sgt, sgc, M1, s1b, s1h, s1i, s1j, M2, s2b, s2h, s2i, s2j,
                                 DT, KC, HAS_R, HAS_M1, HAS_M2, PREC)
        dq += tl.dot(de.to(kt.dtype), kt, input_precision=PREC).to(DT)
        if KC == 0:
            left += tl.sum(de, 1)
        else:
            left += tl.sum(tl.where(rel <= -KC, de, 0.), 1)
            right += tl.sum(tl.where(rel >= KC, de, 0.), 1)
    tl.store(DQ + b * sob + h * soh + om[:, None] * sot + od[None, :] * sod, dq.to(DQ.dtype.element_ty),
             mask=qm[:, None])
    if HAS_R:
        rbase = DR + b * srb + h * srh + om * srt
        tl.store(rbase, left.to(DR.dtype.element_ty), mask=qm)
        if KC > 0:
            tl.store(rbase + 2 * KC * src, right.to(DR.dtype.element_ty), mask=qm)
        for c in tl.static_range(1 - KC, KC):  # inner buckets: one pair each
            sc, j, jm = _pair(q, om, qm, c, b, h, OFF, TK, K, skb, skh, skt, skd, od, R, srb, srh, srt, src,
                              M1, s1b, s1h, s1i, s1j, M2, s2b, s2h, s2i, s2j, DT, KC, HAS_R, HAS_M1, HAS_M2)
            pc = tl.exp(sc - lse)
            vj = _rows(V, b, h, svb, svh, svt, svd, j, od, jm)
            dac = tl.sum(dz.to(DT) * vj.to(DT), 1)
            dac += tl.load(G + b * sgb + h * sgh + om * sgt + (c + KC) * sgc, mask=jm, other=0.).to(DT)
            tl.store(rbase + (c + KC) * src, (pc * (dac - dd)).to(DR.dtype.element_ty), mask=qm)


# The launcher: strides, grids and the autograd function around the kernels above
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


def _launch_settings(q: torch.Tensor, block: Optional[int]) -> Tuple[int, object, str]:
    """(block size, the kernels' accumulation dtype, tl.dot's input precision) for q's dtype and device."""
    dt = tl.float64 if q.dtype == torch.float64 else tl.float32
    prec = "tf32" if q.dtype in (torch.float16, torch.bfloat16) else "ieee"
    return block or (64 if q.is_cuda else 16), dt, prec


class ShawTriton(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, wk, wv, masks, block):
        """q (B,H,Tq,d), k and v (B,H,Tk,d), wk (H,d,n) or None, wv (H,n,d), masks additive terms that broadcast
        to (B,H,Tq,Tk), the queries the last Tq of the Tk keys: z (B,H,Tq,d)."""
        b, h, tq, d = q.shape
        tk, n = k.size(2), wv.size(1)
        kc = (n - 1) // 2
        bm, dt, prec = _launch_settings(q, block)
        r = None if wk is None else per_bucket(q, wk)  # R (Tq,BH,n)
        r4 = _query_major_4d(r, b, h)
        mask_args, (m1, m2) = _mask_views(masks, b, h, tq, tk)
        z = new_tbhd(b, h, tq, d, q)
        lse = q.new_empty(b * h, tq, dtype=torch.float64 if q.dtype == torch.float64 else torch.float32)
        mass = q.new_empty(tq, b * h, n)  # P, query-major as ``encodings.shaw`` keeps it
        mass4 = _query_major_4d(mass, b, h)
        grid = (_cdiv(tq, bm), b * h)
        forward_kernel[grid](
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
        q, k, v, r, mass, z, lse = ctx.saved_tensors
        wk, wv = ctx.tables
        b, h, tq, d = q.shape
        tk, n = k.size(2), wv.size(1)
        kc = (n - 1) // 2
        bm, dt, prec = _launch_settings(q, ctx.block)
        r4 = _query_major_4d(r, b, h)
        mask_args, (m1, m2) = _mask_views(ctx.masks, b, h, tq, tk)
        g = per_bucket(dz, wv.mT)  # G = dz W^V^T (Tq,BH,n)
        g4 = _query_major_4d(g, b, h)
        dd = (dz.to(lse.dtype) * z.to(lse.dtype)).sum(-1).reshape(b * h, tq)  # D_i = dz_i . z_i  (BH,Tq)
        dq, dk, dv = new_tbhd(b, h, tq, d, dz), new_tbhd(b, h, tk, d, dz), new_tbhd(b, h, tk, d, dz)
        dr = None if r is None else torch.empty_like(r)  # dR (Tq,BH,n)
        dr4 = _query_major_4d(dr, b, h)
        common = (*q.stride(), *k.stride(), *v.stride(), *_strides(r4), *g4.stride(), *mask_args[1:5],
                  *mask_args[6:10], *dz.stride())
        flags = dict(KC=kc, D=d, BLOCK_M=bm, BLOCK_N=bm, DT=dt, PREC=prec, HAS_R=r is not None, HAS_M1=m1,
                     HAS_M2=m2)
        backward_kv_kernel[(_cdiv(tk, bm), b * h)](
            q, k, v, r4, g4, mask_args[0], mask_args[5], dz, lse, dd, dk, dv, *common, *dk.stride(),
            h, tq, tk, tk - tq, **flags)
        backward_q_kernel[(_cdiv(tq, bm), b * h)](
            q, k, v, r4, g4, mask_args[0], mask_args[5], dz, lse, dd, dq, dr4, *common, *dq.stride(),
            h, tq, tk, tk - tq, **flags)
        dzh = as_heads(dz, b, h)
        dwv = torch.bmm(by_head(mass, h, transpose=True), dzh)  # P^T dz  (H,n,Tq*B)(H,Tq*B,d)
        dwk = None
        if wk is not None:
            drh = by_head(dr, h)  # (H,Tq*B,n)
            as_heads(dq, b, h).baddbmm_(drh, wk.mT)  # dq += dR W^K
            dwk = torch.bmm(as_heads(q, b, h, transpose=True), drh)  # q^T dR  (H,d,Tq*B)(H,Tq*B,n)
        return dq, dk, dv, dwk, dwv, None, None


def shaw_attention_triton(q, k, v, wk: Optional[torch.Tensor], wv: torch.Tensor, masks, onehot: OneHot,
                          drop: float, block: Optional[int] = None):
    """``encodings.shaw.shaw_attention`` in fused kernels; ``onehot`` is unused (the kernels compute each pair's bucket)
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

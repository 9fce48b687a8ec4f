"""Triton kernels of Shaw's attention core (``encodings/shaw_triton`` launches them; the equations are there).

Imported only when ``--pe-attention-impl triton`` runs, so the plugin itself needs no Triton. Every program owns
the rows it writes (no atomics). Shapes: BM queries x BN keys per tile, D the head size (a power of 2, >= 16).
"""
import triton
import triton.language as tl


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
def forward(Q, K, V, R, WV, M1, M2, Z, LSE, P,
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
def backward_kv(Q, K, V, R, G, M1, M2, DZ, LSE, DD, DK, DV,
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
def backward_q(Q, K, V, R, G, M1, M2, DZ, LSE, DD, DQ, DR,
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

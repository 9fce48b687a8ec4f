"""Indicators of the positional structure of an attention map (numpy only; no fairseq, no torch).

A map ``A`` is an (L, L) array, rows = queries i, columns = keys j, rows summing to 1 (softmax
probabilities). ``causal=True`` marks a decoder self-attention map, which is zero above the diagonal.
Definitions, choices and pitfalls: docs/analysis.md (one section per indicator).

References:
  * Wang et al., "On position embeddings in BERT", ICLR 2021, App. B: translation invariance (AIV),
    monotonicity (OPR), symmetry deviation (SD) and direction balance (DB).
  * Chen et al., "A Simple and Effective Positional Encoding for Transformers" / "Word order matters when you
    increase masking" (2023): Locality, Symmetry (per-row min-max pooled, as in the official code) and the
    attenuated encoding of Eq. 8.

Conventions chosen here (each stated where it is implemented):
  * AIV uses population variances (ddof=0) and returns NaN when var(A) < 1e-12 (uniform maps).
  * OPR excludes sequences of length 1; ties count 0 (``ties="wang"``, Wang's rule) or 0.5 (``ties="half"``).
  * DB is the text-consistent direction: preceding over succeeding mass, so DB > 1 means "attends more to
    preceding tokens" and a causal map gives +inf.
"""
from typing import Dict, Optional

import numpy as np

VAR_EPS = 1e-12  # below this var(A), AIV is undefined (NaN)


def as_map(A) -> np.ndarray:
    """A square float64 copy of ``A`` (numpy array or torch tensor)."""
    if hasattr(A, "detach"):
        A = A.detach().cpu().double().numpy()
    A = np.asarray(A, dtype=np.float64)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"an attention map must be square (L, L), got shape {A.shape}")
    return A


def _offsets(L: int) -> np.ndarray:
    idx = np.arange(L)
    return idx[None, :] - idx[:, None]  # (L, L): j - i


# ---- Chen et al. ---------------------------------------------------------------------------------------

def locality(A) -> float:
    """Loc = mean_i sum_j A_ij 2^-|i-j|, in (0, 1]; 1 for the identity. Depends on L: a uniform map gives
    (3L - 4 + 2^(2-L)) / L^2. For causal maps the entries above the diagonal are 0, so the sum runs over j <= i."""
    A = as_map(A)
    return float((A * np.exp2(-np.abs(_offsets(len(A))))).sum(axis=1).mean())


def _mirror_pairs(A: np.ndarray):
    """Per row i with m_i = min(i, L-1-i) > 0: the keys left and right of i at distance d = 1..m_i."""
    L = len(A)
    for i in range(L):
        m = min(i, L - 1 - i)
        if m > 0:
            d = np.arange(1, m + 1)
            yield A[i, i - d], A[i, i + d]


def symmetry_code(A) -> float:
    """Chen et al.'s Symmetry as in the official code: per row, the discrepancies |A[i,i-d] - A[i,i+d]|
    (d = 1..min(i, L-1-i); rows with none are skipped) are min-max normalised within the row (a constant row
    gives zeros); the normalised values of all rows are pooled; Sym = 1 - mean(pool). Magnitude-blind: 1e-9 of
    noise on a symmetric map already gives about 0.62."""
    pool = []
    for left, right in _mirror_pairs(as_map(A)):
        delta = np.abs(left - right)
        span = delta.max() - delta.min()
        pool.append((delta - delta.min()) / span if span > 0 else np.zeros_like(delta))
    return float(1.0 - np.concatenate(pool).mean()) if pool else float("nan")


def symmetry_abs(A) -> float:
    """Magnitude-aware companion: 1 - sum |A[i,i-d] - A[i,i+d]| / sum (A[i,i-d] + A[i,i+d]) over the same
    pairs as ``symmetry_code``; in [0, 1], 1 = symmetric around every query."""
    num = den = 0.0
    for left, right in _mirror_pairs(as_map(A)):
        num += np.abs(left - right).sum()
        den += (left + right).sum()
    return float(1.0 - num / den) if den > 0 else float("nan")


def attenuated_map(L: int, w: float, s: float = 1.0) -> np.ndarray:
    """Chen et al. Eq. 8: softmax_j(a_ij), a_ij = -s w (j-i)^2 for j >= i and -w (j-i)^2 for j < i.
    w > 0 sets locality; s = 1 is symmetric, s > 1 suppresses the right (succeeding) side."""
    rel = _offsets(L).astype(np.float64)
    a = np.where(rel >= 0, -s * w * rel ** 2, -w * rel ** 2)
    a -= a.max(axis=1, keepdims=True)
    e = np.exp(a)
    return e / e.sum(axis=1, keepdims=True)


# ---- Wang et al. ---------------------------------------------------------------------------------------

def aiv(A, causal: bool = False) -> float:
    """Translation invariance: [sum_l var(tau_l) |tau_l| / sum_l |tau_l|] / var(A), tau_l = {A_ij : j-i = l}.
    0 = every diagonal constant (Toeplitz). Causal maps: l <= 0 only, var over the lower triangle.
    NaN when var(A) < 1e-12 (a uniform map has no positional structure to be invariant)."""
    A = as_map(A)
    L = len(A)
    offsets = range(-(L - 1), 1 if causal else L)
    groups = [np.diagonal(A, offset=l) for l in offsets]
    entries = A[np.tril_indices(L)] if causal else A.ravel()
    var_all = entries.var()
    if var_all < VAR_EPS:
        return float("nan")
    within = sum(g.var() * g.size for g in groups) / sum(g.size for g in groups)
    return float(within / var_all)


def _increasing_pairs(s: np.ndarray, ties: str) -> float:
    """OPR of one sequence ordered by increasing distance: the share of ordered pairs (a, b), a != b, with
    (s_a - s_b)(a - b) > 0; each unordered pair is counted twice, so this is the share of unordered pairs that
    increase. Ties: 0 (``wang``) or 0.5 (``half``)."""
    n = len(s)
    later_minus_earlier = (s[None, :] - s[:, None])[np.triu_indices(n, k=1)]  # s_b - s_a for a < b
    score = np.count_nonzero(later_minus_earlier > 0)
    if ties == "half":
        score += 0.5 * np.count_nonzero(later_minus_earlier == 0)
    return score / (n * (n - 1) / 2)


def opr(A, causal: bool = False, ties: str = "wang", first_k: Optional[int] = None) -> float:
    """Monotonicity (Ordered Pair Ratio): for every query i the sequences S_i+ = (A_ii, A_i,i+1, ...) and
    S_i- = (A_ii, A_i,i-1, ...) ordered by increasing distance; OPR = sum_S OPR(S) |S| / sum_S |S| over the
    sequences with |S| >= 2. 0 = attention decreases with distance everywhere, ~0.5 = no order, 1 = increases.
    ``first_k`` keeps the first k elements of each sequence (offsets 0..k-1). Causal maps: S_i- only.
    ``ties``: "wang" (a tie counts as decreasing, so a uniform map scores 0) or "half" (0.5, uniform -> 0.5)."""
    if ties not in ("wang", "half"):
        raise ValueError(f"ties must be 'wang' or 'half', got {ties!r}")
    A = as_map(A)
    L = len(A)
    total = weight = 0.0
    for i in range(L):
        seqs = [A[i, i::-1]] + ([] if causal else [A[i, i:]])
        for s in seqs:
            s = s[:first_k] if first_k is not None else s
            if len(s) >= 2:
                total += _increasing_pairs(s, ties) * len(s)
                weight += len(s)
    return float(total / weight) if weight else float("nan")


def symmetry_deviation(A) -> float:
    """SD = sum_{i<j} |A_ij - A_ji| / (L(L-1)/2); 0 = symmetric matrix."""
    A = as_map(A)
    L = len(A)
    iu = np.triu_indices(L, k=1)
    return float(np.abs(A[iu] - A.T[iu]).sum() / (L * (L - 1) / 2)) if L > 1 else float("nan")


def direction_balance(A, l: int = 20) -> float:
    """DB_l = sum_{0 < i-j <= l} A_ij / sum_{0 < j-i <= l} A_ij: preceding over succeeding keys within l
    (the direction of Wang et al.'s text: > 1 attends more to preceding tokens; +inf for a causal map)."""
    A = as_map(A)
    rel = _offsets(len(A))
    preceding = A[(rel < 0) & (rel >= -l)].sum()
    succeeding = A[(rel > 0) & (rel <= l)].sum()
    if succeeding == 0:
        return float("inf") if preceding > 0 else float("nan")
    return float(preceding / succeeding)


# ---- maps ----------------------------------------------------------------------------------------------

def drop_position(A, index: int) -> np.ndarray:
    """The map without query/key ``index`` (a special token), rows re-normalised to sum to 1."""
    A = np.delete(np.delete(as_map(A), index, axis=0), index, axis=1)
    sums = A.sum(axis=1, keepdims=True)
    return np.divide(A, sums, out=np.zeros_like(A), where=sums > 0)


def all_indicators(A, causal: bool = False, db_range: int = 20, first_k: int = 20) -> Dict[str, float]:
    """Every indicator of one map. Causal maps: AIV and OPR use j <= i only; the symmetry indicators are
    undefined (NaN) and DB is +inf."""
    A = as_map(A)
    return {
        "locality": locality(A),
        "sym_code": float("nan") if causal else symmetry_code(A),
        "sym_abs": float("nan") if causal else symmetry_abs(A),
        "aiv": aiv(A, causal),
        "opr": opr(A, causal, "wang"),
        "opr_tie_half": opr(A, causal, "half"),
        f"opr_first{first_k}": opr(A, causal, "wang", first_k),
        f"opr_first{first_k}_tie_half": opr(A, causal, "half", first_k),
        "sd": float("nan") if causal else symmetry_deviation(A),
        f"db{db_range}": direction_balance(A, db_range),
    }

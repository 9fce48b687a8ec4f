"""Independent references and inputs shared by the encodings' tests: masks and padded batches of the attention
tests, HF's T5 bucket of one distance, PosNet's per-token loop, the closed forms and tables of the analysis
indicators (docs/analysis.md). Written from the papers and docs, never from the code under test."""
import math

import numpy as np
import torch

from pe_plugin.encoding_parts.base import Positions


# ---- attention inputs ------------------------------------------------------------------------------------
def future_mask(t):
    """fairseq's causal mask (T,T): -inf above the diagonal, 0 elsewhere."""
    return torch.triu(torch.full((t, t), float("-inf")), 1)


def padded_input(t=11, lengths=(11, 7, 4), left=(False, True, False), c=16):
    """(T,B,C) input drawn with seed 2 and its (B,T) key padding mask, rows of the given lengths; ``left``: per row,
    or one bool for every row, whether it is padded on the left (fairseq's sources) or the right (its targets). The
    default: one full row, one left-padded, one right-padded."""
    left = (left,) * len(lengths) if isinstance(left, bool) else left
    torch.manual_seed(2)
    pad = torch.zeros(len(lengths), t, dtype=torch.bool)
    for b, (n, lp) in enumerate(zip(lengths, left)):
        if lp:
            pad[b, : t - n] = True
        else:
            pad[b, n:] = True
    return torch.randn(t, len(lengths), c), pad


# ---- T5 ---------------------------------------------------------------------------------------------------
def hf_bucket(r, bidirectional, num_buckets=32, max_distance=128):
    """HF T5Attention._relative_position_bucket for one distance r = key - query, in float32."""
    ret, n = 0, -r
    if bidirectional:
        num_buckets //= 2
        ret += num_buckets if n < 0 else 0
        n = abs(n)
    else:
        n = max(n, 0)
    exact = num_buckets // 2
    if n < exact:
        return ret + n
    ratio = np.log(np.float32(n) / np.float32(exact)) / np.float32(math.log(max_distance / exact))
    return ret + min(exact + int(ratio * np.float32(num_buckets - exact)), num_buckets - 1)


# docs/encodings.md §T5 (N=32, max distance 128): first distance n = i - j of each log bucket
BIDIRECTIONAL_STARTS = [8, 12, 16, 23, 32, 46, 64, 91]  # buckets 8..15 (16..31 for keys to the right)
CAUSAL_STARTS = [16, 19, 21, 24, 27, 31, 35, 40, 46, 52, 59, 67, 77, 87, 99, 113]  # buckets 16..31


# ---- PosNet -----------------------------------------------------------------------------------------------
def padded_positions(lengths, t, left):
    """(B,T) positions and nonpad mask of rows of the given lengths, padded on the left or the right."""
    nonpad = torch.zeros(len(lengths), t, dtype=torch.bool)
    for b, n in enumerate(lengths):
        nonpad[b, slice(t - n, None) if left else slice(0, n)] = True
    return Positions.from_padding(nonpad, t, "cpu"), nonpad


def loop_matmul(u, phi, pos, nonpad):
    """The reference: y[t,b,n] = u[t,b,n] phi[pos[b,t]], one token at a time (pads: 0)."""
    y = u.new_zeros(*u.shape[:3], phi.size(-1))
    for b in range(u.size(1)):
        for t in range(u.size(0)):
            if nonpad[b, t]:
                y[t, b] = u[t, b] @ phi[pos[b if pos.size(0) > 1 else 0, t]]
    return y


# ---- attention-map indicators (docs/analysis.md) ------------------------------------------------------------
def uniform_locality(L):
    """sum_ij 2^-|i-j| / L^2 = (L + 2 sum_d (L-d) 2^-d) / L^2 = (3L - 4 + 2^(2-L)) / L^2."""
    return (3 * L - 4 + 2.0 ** (2 - L)) / L ** 2


# docs/analysis.md §Attenuated map: (w, Loc/Sym at s=1, s=0.5, s=2), L=128, Sym_code
CHEN_TABLE = [
    (0.005, (0.126, 1.000), (0.107, 0.534), (0.145, 0.632)),
    (0.01, (0.171, 1.000), (0.145, 0.632), (0.196, 0.720)),
    (0.02, (0.230, 1.000), (0.196, 0.720), (0.262, 0.793)),
    (0.05, (0.333, 1.000), (0.287, 0.812), (0.373, 0.863)),
    (0.1, (0.427, 1.000), (0.373, 0.863), (0.470, 0.899)),
    (0.5, (0.671, 1.000), (0.609, 0.932), (0.716, 0.953)),
]

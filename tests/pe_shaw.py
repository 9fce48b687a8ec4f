"""Shaw's RPE attention layers and core inputs, in float64, shared by the tests of its two implementations
(tests/test_shaw_attention.py: the PyTorch core against the reference path; tests/test_shaw_triton.py: the Triton
kernels against the core)."""
import torch

from pe_references import padded_input
from pe_testing import make_attention, make_pe

from pe_plugin.encoding_parts.relative import clipped_onehot

C, H, LAYERS = 16, 2, 2  # model dimension, heads, layers of make's layers
CONFIGS = {
    "per_head": dict(rpe_max_relative_position=3, rpe_per_head=True),
    "shared": dict(rpe_max_relative_position=3),
    "values_only": dict(rpe_max_relative_position=3, rpe_no_keys=True),
    "k0": dict(rpe_max_relative_position=0, rpe_per_head=True),
    "k_beyond_length": dict(rpe_max_relative_position=20, rpe_per_head=True),
}


def large_tables(pe):
    torch.manual_seed(0)
    with torch.no_grad():
        for p in pe.parameters():
            p.normal_(0, 1.0)


def make(config, side, impl, c=C):
    """A float64 attention layer (model dimension ``c``, H heads), in training mode, with Shaw's RPE of ``config``,
    large random tables."""
    pe = make_pe("rpe", side, dim=c, heads=H, layers=LAYERS, init=large_tables, **CONFIGS[config])
    pe.attention_impl = impl
    return make_attention(pe).train().double()


def padded(side, t=9, lengths=(9, 6, 3)):
    """(T,B,C) float64 input and (B,T) padding: left-padded sources (encoder) or right-padded targets."""
    x, pad = padded_input(t, lengths, left=side == "encoder", c=C)
    return x.double(), pad


def core_inputs(b=3, h=2, tq=5, tk=7, d=4, k=2, shared=False):
    """float64 inputs of the core: q, k, v as the projections lay them out (views of (T,B,H,d) memory), the
    queries the last tq of tk keys, a padding mask and the causal one."""
    torch.manual_seed(4)
    n = 2 * k + 1
    q = torch.randn(tq, b, h, d, dtype=torch.double).permute(1, 2, 0, 3).requires_grad_()
    kk = torch.randn(tk, b, h, d, dtype=torch.double).permute(1, 2, 0, 3).requires_grad_()
    v = torch.randn(tk, b, h, d, dtype=torch.double).permute(1, 2, 0, 3).requires_grad_()
    wk = torch.randn(1 if shared else h, d, n, dtype=torch.double, requires_grad=True)
    wv = torch.randn(1 if shared else h, n, d, dtype=torch.double, requires_grad=True)
    pad = torch.zeros(b, 1, 1, tk, dtype=torch.double)
    pad[1, ..., -2:] = float("-inf")  # a right-padded row (every query keeps a real key under the causal mask)
    causal = torch.full((tq, tk), float("-inf"), dtype=torch.double).triu(tk - tq + 1)
    rel = torch.arange(tk) - torch.arange(tk - tq, tk)[:, None]  # (Tq,Tk) key minus query
    return q, kk, v, wk, wv, (pad, causal), clipped_onehot(rel, k, torch.double)

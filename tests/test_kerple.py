"""KERPLE (log variant): the bias against its closed form, attention against a naive loop over heads and
sentences, and the positivity clamp; the registry-driven tests (test_fast_paths, test_contract, test_end_to_end,
test_standalone, ...) cover it like every other encoding."""
import math

import pytest
import torch

from pe_plugin.encoding_parts.base import Positions
import pe_testing
from pe_references import future_mask, padded_input
from pe_testing import make_attention, make_pe

C, H = 16, 2


def away_from_the_clamp(pe):
    """r1, r2 drawn away from the positivity clamp."""
    torch.manual_seed(0)
    with torch.no_grad():
        pe.r1.uniform_(0.5, 2.0)
        pe.r2.uniform_(0.2, 1.5)


@pytest.mark.parametrize("side", ["encoder", "decoder"])
def test_kerple_bias_is_the_closed_form(side):
    pe = make_pe("kerple", side, init=away_from_the_clamp)
    with torch.no_grad():
        pe.r1.copy_(torch.tensor([0.5, 1.5]).view(H, 1, 1))
        pe.r2.copy_(torch.tensor([0.25, 2.0]).view(H, 1, 1))
    t = 7
    bias = pe.position_bias(Positions.from_mask(None, t, t, "cpu"))  # (H,Tq,Tk)
    for h, (r1, r2) in enumerate([(0.5, 0.25), (1.5, 2.0)]):
        for i in range(t):
            for j in range(t):
                assert bias[h, i, j].item() == pytest.approx(-r1 * math.log(1 + r2 * abs(i - j)), rel=1e-6)
    # a decoding step's row (query 6 of 7 keys) is the full pass's last row
    step = pe.position_bias(Positions.from_mask(None, 1, t, "cpu"))
    torch.testing.assert_close(step, bias[:, -1:], rtol=0, atol=0)


def test_kerple_parameters_stay_positive():
    pe = make_pe("kerple", "encoder", init=away_from_the_clamp)
    with torch.no_grad():
        pe.r1.fill_(-3.0)
        pe.r2.fill_(-1.0)
    bias = pe.position_bias(Positions.from_mask(None, 4, 4, "cpu"))
    torch.testing.assert_close(bias[0, 0, 3], torch.tensor(-1e-2 * math.log(1 + 1e-2 * 3)))


@pytest.mark.parametrize("side", ["encoder", "decoder"])
def test_kerple_attention_equals_naive_attention(side):
    """Per head and sentence, softmax(q k^T - r1 log(1 + r2 |i - j|) + masks) v over the real tokens."""
    attn = make_attention(make_pe("kerple", side, init=away_from_the_clamp))
    x, pad = padded_input(left=side == "encoder")
    causal = side == "decoder"
    out, _ = attn(x, x, x, key_padding_mask=pad, attn_mask=future_mask(x.size(0)) if causal else None,
                  need_weights=False)
    T, B, C = x.shape
    d = C // H
    q, k, v = attn.q_proj(x) * d ** -0.5, attn.k_proj(x), attn.v_proj(x)
    r1, r2 = attn.pe.r1.flatten().tolist(), attn.pe.r2.flatten().tolist()
    z = torch.zeros(T, B, C)
    for b in range(B):
        real = (~pad[b]).nonzero().flatten().tolist()
        for h in range(H):
            sl = slice(h * d, (h + 1) * d)
            for n, i in enumerate(real):
                keys = real[:n + 1] if causal else real
                e = torch.stack([q[i, b, sl] @ k[j, b, sl] - r1[h] * math.log(1 + r2[h] * abs(real.index(j) - n))
                                 for j in keys])
                z[i, b, sl] = torch.softmax(e, 0) @ torch.stack([v[j, b, sl] for j in keys])
    expected = attn.out_proj(z)
    real_mask = ~pad.t()
    torch.testing.assert_close(out[real_mask], expected[real_mask], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("tq,tk", [(7, 7), (1, 7), (3, 9)])
def test_kerple_bias_on_distances_equals_the_pairwise_equation(tq, tk):
    """The bias built on the call's W distinct distances and laid out by a strided view (positions from a mask)
    equals the equation on the (Tq,Tk) distances (positions given as values), values and gradients of r1, r2."""
    pe = make_pe("kerple", "encoder", init=away_from_the_clamp).double()
    by_columns = Positions.from_mask(None, tq, tk, "cpu")
    by_values = Positions(torch.arange(tk - tq, tk).unsqueeze(0), torch.arange(tk).unsqueeze(0))
    w = torch.randn(H, tq, tk, dtype=torch.double)
    got, want = (pe.position_bias(p) for p in (by_columns, by_values))
    torch.testing.assert_close(got, want, rtol=0, atol=1e-15)
    for g, e in zip(torch.autograd.grad((got * w).sum(), (pe.r1, pe.r2)),
                    torch.autograd.grad((want * w).sum(), (pe.r1, pe.r2))):
        torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-12)


# ---- KERPLE: positions given as values, in the parameters' dtype -----------------------------------------------
@pytest.mark.parametrize("model_dtype,pos_dtype", [(torch.float32, torch.float64), (torch.float16, torch.float32),
                                                   (torch.float64, torch.int32)])
@pytest.mark.parametrize("side", ["encoder", "decoder"])
def test_kerple_bias_of_positions_given_as_values_is_in_its_parameters_dtype(side, model_dtype, pos_dtype):
    """KERPLE's bias of positions given as values (a direct call) of another dtype, float or integer: the
    distances are taken in the parameters' dtype, so the bias is in that dtype and equals, bit for bit, the bias
    of the same positions as long; that one is -r1 log(1 + r2 |j - i|) (float64 closed form, the parameters'
    precision)."""
    pe = pe_testing.make_pe("kerple", side, dim=16, heads=2).to(model_dtype)
    q, k = torch.tensor([[0, 3, 9, 40]]), torch.tensor([[0, 2, 3, 9, 40, 41]])
    want = pe.position_bias(Positions(q, k))
    got = pe.position_bias(Positions(q.to(pos_dtype), k.to(pos_dtype)))
    assert got.dtype == want.dtype == model_dtype
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    r1, r2 = pe.r1.double().clamp_min(1e-2), pe.r2.double().clamp_min(1e-2)
    dist = (k[0].unsqueeze(0) - q[0].unsqueeze(1)).abs().double()
    tol = {torch.float16: 2e-2, torch.float32: 1e-5, torch.float64: 1e-12}[model_dtype]
    torch.testing.assert_close(want.double(), -r1 * torch.log1p(r2 * dist), rtol=tol, atol=tol)

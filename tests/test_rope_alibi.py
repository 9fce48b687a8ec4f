"""RoPE and ALiBi, each against independent math written here (never numbers taken from the code):

* RoPE: a naive float64 rotation (one explicit 2x2 rotation per pair, Python loops) of the half-split pairs;
  scores q_m . k_n depend on n - m only (a shift of every position changes nothing, left and right padding
  agree); the decoding cache holds keys rotated once; partial rotation leaves the other dimensions alone;
* ALiBi: slopes equal the paper's rule worked out by hand for H = 1, 2, 4, 8 and the non-powers 6 and 12;
  the bias is -m |i - j| (encoder), -m (i - j) (causal decoder) and the directional closed form; attention
  equals a naive per-head softmax with that bias;
* both: the fused F.scaled_dot_product_attention path is taken and no (T,T,d) tensor is built; step-by-step
  decoding equals the full pass; fp16 matches fp32; beam search equals a full forward pass; two half
  batches give the gradients of the full batch (--update-freq 2); fp16 training runs.
"""
import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import pe_testing
from pe_references import future_mask, padded_input
from pe_testing import logit_bias, make_attention, make_pe
from pe_plugin.encoding_parts.base import Positions, as_positions
from pe_plugin.modules import pe_attention
from pe_plugin.modules.pe_attention import PEAttention
from pe_tools.fairseq_plugin import CPU_FP16_FLAGS

C, H, LAYERS = 16, 2, 2
D = C // H


# ==== RoPE ==================================================================================================
def naive_rotate(x, pos, base, rotary_dim):
    """float64 reference: for every (b, h, t) and pair i, the 2x2 rotation of (x[i], x[i + r/2]) by
    pos * base^(-2i/r), written as a loop; dimensions from r on are copied."""
    x = x.double()
    out = x.clone()
    half = rotary_dim // 2
    B, Hh, T, _ = x.shape
    for b in range(B):
        for t in range(T):
            p = float(pos[b if pos.size(0) > 1 else 0, t])
            for i in range(half):
                angle = p * base ** (-2.0 * i / rotary_dim)
                c, s = math.cos(angle), math.sin(angle)
                for h in range(Hh):
                    a, bb = x[b, h, t, i].item(), x[b, h, t, i + half].item()
                    out[b, h, t, i] = c * a - s * bb
                    out[b, h, t, i + half] = s * a + c * bb
    return out


def rope_qk(pe, q, k, pos):
    """RoPE's transform of q and k at positions ``pos`` (a ``Positions`` or a bare (B|1,T) tensor), with the angles
    its ``prepare`` computes for a pass."""
    return pe.transform_qk(q, k, pe.prepare(as_positions(pos), q.dtype), 0)


@pytest.mark.parametrize("fraction,base,rotary_dim", [(1.0, 10000.0, 8), (0.5, 10000.0, 4), (0.3, 500.0, 2),
                                                       (1.0, 137.0, 8), (0.5, 2.5, 4)])
def test_rope_equals_a_naive_pairwise_rotation(fraction, base, rotary_dim):
    """Padded positions (from the mask) and positions far beyond the initial table (it grows). The non-default
    bases rotate several pairs (theta_i = base^(-2i/r) differs from 10000's for i > 0), so --rope-base counts both
    in the first tables (64 rows: the padded positions fit) and in the grown ones (4 rows: they grow at once)."""
    torch.manual_seed(0)
    q, k = torch.randn(3, H, 6, D), torch.randn(3, H, 6, D)
    nonpad = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]], dtype=torch.bool)
    for rows in (64, 4):
        pe = make_pe("rope", "encoder", max_positions=rows, rope_fraction=fraction, rope_base=base)
        for pos in (Positions.from_padding(nonpad, 6, "cpu"), torch.arange(2990, 2996)[None]):
            before = pe.cos.size(0)
            grows = int(pos.max()) >= before
            assert grows == (rows == 4 or pos.max() > 6)
            rq, rk = rope_qk(pe, q, k, pos)
            # the tables double (or reach the bound): amortised growth, documented in the module
            assert pe.cos.size(0) == (max(int(pos.max()) + 1, 2 * before) if grows else before)
            torch.testing.assert_close(rq.double(), naive_rotate(q, pos, base, rotary_dim), rtol=0, atol=2e-5)
            torch.testing.assert_close(rk.double(), naive_rotate(k, pos, base, rotary_dim), rtol=0, atol=2e-5)
            assert torch.equal(rq[..., rotary_dim:], q[..., rotary_dim:])  # the unrotated part passes through
        assert pe.cos.size(0) >= 2996  # grown from 4 or 64 rows


@pytest.mark.parametrize("fraction,rotary_dim", [(1.0, 8), (0.3, 2)])
def test_rope_gradient_is_the_inverse_rotation(fraction, rotary_dim):
    """The rotation's own backward against finite differences (gradcheck, float64) and against the closed
    form: R_p is orthogonal, so dL/dx = R_p^T dL/dy = R_{-p} dL/dy, the naive rotation at -p; the input is
    a permuted view, as the attention's heads are (the tables are float32, hence 1e-6)."""
    pe = make_pe("rope", "encoder", max_positions=8, rope_fraction=fraction).double()
    nonpad = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]], dtype=torch.bool)
    pos = Positions.from_padding(nonpad, 5, "cpu")
    torch.manual_seed(0)
    x = torch.randn(5, 2, H, D, dtype=torch.float64).permute(1, 2, 0, 3).requires_grad_()  # (B,H,T,d) view
    assert torch.autograd.gradcheck(lambda t: rope_qk(pe, t, t, pos)[0], (x,))
    grad_out = torch.randn(2, H, 5, D, dtype=torch.float64)
    (grad_x,) = torch.autograd.grad(rope_qk(pe, x, x, pos)[0], x, grad_out)
    torch.testing.assert_close(grad_x, naive_rotate(grad_out, -pos, 10000.0, rotary_dim), rtol=0, atol=1e-6)


def test_rope_fraction_too_small_names_the_flag():
    with pytest.raises(ValueError, match="--rope-fraction 0.1 rotates no pair.*at least 0.25"):
        make_pe("rope", "encoder", rope_fraction=0.1)
    with pytest.raises(ValueError, match="--rope-fraction must be in"):
        make_pe("rope", "encoder", rope_fraction=1.5)


def _scores(pe, q, k, qpos, kpos):
    rq, _ = rope_qk(pe, q, q, qpos)
    _, rk = rope_qk(pe, k, k, kpos)
    return rq @ rk.transpose(-1, -2)  # (B,H,Tq,Tk)


def test_rope_scores_depend_only_on_the_distance():
    pe = make_pe("rope", "encoder")
    torch.manual_seed(0)
    # one query vector and one key vector at every position: the score matrix must be Toeplitz
    q = torch.randn(1, H, 1, D).expand(1, H, 12, D)
    k = torch.randn(1, H, 1, D).expand(1, H, 12, D)
    pos = torch.arange(12)[None]
    s = _scores(pe, q, k, pos, pos)
    for shift in range(1, 12):
        torch.testing.assert_close(s[..., shift:, shift:], s[..., :-shift, :-shift], rtol=0, atol=1e-5)
    # any q, k: shifting every position by the same constant leaves every score unchanged ...
    q, k = torch.randn(2, H, 12, D), torch.randn(2, H, 12, D)
    s = _scores(pe, q, k, pos, pos)
    torch.testing.assert_close(_scores(pe, q, k, pos + 37, pos + 37), s, rtol=0, atol=1e-4)
    # ... while shifting the keys alone changes them (the test can fail)
    assert (_scores(pe, q, k, pos, pos + 3) - s).abs().max() > 0.1
    # and the scores are q . R_(n-m) k: the rotation of k by n - m, q left unrotated
    rel = naive_rotate(k[:, :, 5:6], torch.tensor([[5 - 2]]), 10000.0, D)  # key 5 seen from query 2
    torch.testing.assert_close(s[:, :, 2, 5].double(), (q[:, :, 2].double() * rel[:, :, 0]).sum(-1), rtol=0, atol=1e-5)


@pytest.mark.parametrize("name,overrides", [("rope", {}), ("rope", {"rope_fraction": 0.5}),
                                            ("alibi", {}), ("alibi", {"alibi_encoder": "directional"})])
def test_attention_ignores_padding_side_and_batch(name, overrides):
    """The same sentences left- and right-padded, and each alone: equal outputs at every real token."""
    attn = make_attention(make_pe(name, "encoder", **overrides))
    x, _ = padded_input()
    lengths = (11, 7, 4)

    def run(left):
        xs = torch.zeros(11, 3, C)
        pad = torch.ones(3, 11, dtype=torch.bool)
        for b, n in enumerate(lengths):
            cols = slice(11 - n, 11) if left else slice(0, n)
            xs[cols, b], pad[b, cols] = x[:n, b], False
        out, _ = attn(xs, xs, xs, key_padding_mask=pad, need_weights=False)
        return [out[11 - n:, b] if left else out[:n, b] for b, n in enumerate(lengths)]

    left, right = run(True), run(False)
    for b, n in enumerate(lengths):
        alone, _ = attn(x[:n, b:b + 1], x[:n, b:b + 1], x[:n, b:b + 1], need_weights=False)
        torch.testing.assert_close(left[b], right[b], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(left[b], alone[:, 0], rtol=1e-5, atol=1e-5)


def test_rope_attention_equals_naive_rotated_attention():
    """PEAttention with RoPE equals softmax((R q)(R k)^T + masks) v, with the float64 loop rotation."""
    attn = make_attention(make_pe("rope", "encoder"))
    x, pad = padded_input()
    out, _ = attn(x, x, x, key_padding_mask=pad, need_weights=False)
    T, B, _ = x.shape
    with torch.no_grad():
        split = lambda y: y.view(T, B, H, D).permute(1, 2, 0, 3)  # noqa: E731  (T,B,C) -> (B,H,T,d)
        q, k, v = split(attn.q_proj(x) * D ** -0.5), split(attn.k_proj(x)), split(attn.v_proj(x))
        pos = Positions.from_padding(~pad, T, "cpu")
        rq, rk = naive_rotate(q, pos, 10000.0, D), naive_rotate(k, pos, 10000.0, D)
        e = (rq @ rk.transpose(-1, -2)).masked_fill(pad[:, None, None], float("-inf"))
        z = (e.softmax(-1) @ v.double()).permute(2, 0, 1, 3).reshape(T, B, C)
        ref = attn.out_proj(z.float())
    real = ~pad.T.unsqueeze(-1)
    torch.testing.assert_close(out * real, ref * real, rtol=1e-5, atol=1e-5)


def test_rope_decoding_caches_keys_rotated_once():
    """Step by step equals the full pass; the cache holds W_K x rotated at its own position, exactly once."""
    attn = make_attention(make_pe("rope", "decoder"))
    torch.manual_seed(3)
    x = torch.randn(9, 2, C)
    full, _ = attn(x, x, x, attn_mask=future_mask(9), need_weights=False)
    before = full
    state, steps, rotated = {}, [], []
    original = attn.pe.transform_qk

    def recording(q, k, q_pos, layer):
        rotated.append(k.size(2))
        return original(q, k, q_pos, layer)

    attn.pe.transform_qk = recording
    for t in range(9):
        steps.append(attn(x[t:t + 1], x[t:t + 1], x[t:t + 1], incremental_state=state, need_weights=False)[0])
        if t == 4:  # beam reordering permutes the cache along the batch
            attn.reorder_incremental_state(state, torch.tensor([1, 0]))
            x = x[:, [1, 0]]
            full = full[:, [1, 0]]
    torch.testing.assert_close(torch.cat(steps[:5]), before[:5], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.cat(steps[5:]), full[5:], rtol=1e-5, atol=1e-5)
    assert rotated == [1] * 9  # one new key rotated per step, never the cached ones
    cached = attn._get_input_buffer(state)["prev_key"]  # (B,H,T,d)
    keys = attn.k_proj(x).view(9, 2, H, D).permute(1, 2, 0, 3)
    expected = naive_rotate(keys.detach(), torch.arange(9)[None], 10000.0, D)
    torch.testing.assert_close(cached.double(), expected, rtol=0, atol=2e-5)


# ==== ALiBi =================================================================================================
# The paper's rule by hand: H a power of 2 -> m_h = 2^(-8h/H); otherwise P = largest power of 2 below H, the
# P-head slopes followed by the 1st, 3rd, 5th, ... slopes of the 2P-head sequence.
HAND_SLOPES = {
    1: [1 / 256],
    2: [1 / 16, 1 / 256],
    4: [1 / 4, 1 / 16, 1 / 64, 1 / 256],
    8: [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256],
    # P = 4: the 4 above, then m_1, m_3 of the 8-head sequence (1/2, 1/8)
    6: [1 / 4, 1 / 16, 1 / 64, 1 / 256, 1 / 2, 1 / 8],
    # P = 8: the 8 above, then m_1, m_3, m_5, m_7 of the 16-head sequence 2^(-h/2)
    12: [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256,
         2 ** -0.5, 2 ** -1.5, 2 ** -2.5, 2 ** -3.5],
}


def _bias(pe, t, heads):
    q = torch.zeros(1, heads, t, 4)
    return logit_bias(pe, q, Positions(torch.arange(t)[None], torch.arange(t)[None]), 0)


@pytest.mark.parametrize("heads", sorted(HAND_SLOPES))
def test_alibi_slopes_follow_the_paper(heads):
    """Read back from the encoder's bias at distance 1: -m_h."""
    pe = make_pe("alibi", "encoder", heads=heads, dim=4 * heads)
    bias = _bias(pe, 3, heads)
    assert bias.shape == (1, heads, 3, 3)
    torch.testing.assert_close(-bias[0, :, 0, 1].double(), torch.tensor(HAND_SLOPES[heads], dtype=torch.double),
                               rtol=1e-6, atol=0)


@pytest.mark.parametrize("heads", [4, 6])
@pytest.mark.parametrize("side,variant", [("encoder", "symmetric"), ("decoder", "symmetric"),
                                          ("decoder", "directional"), ("encoder", "directional")])
def test_alibi_bias_is_the_closed_form(heads, side, variant):
    pe = make_pe("alibi", side, heads=heads, dim=4 * heads, alibi_encoder=variant)
    t = 9
    bias = _bias(pe, t, heads)[0]
    m = HAND_SLOPES[heads]
    for h in range(heads):
        for i in range(t):
            for j in range(t):
                if side == "decoder":
                    if j > i:
                        continue  # the causal mask hides future keys
                    expected = -m[h] * (i - j)
                elif variant == "symmetric":
                    expected = -m[h] * abs(i - j)
                else:  # head h: slope m_h to the left, m_{H+1-h} (1-based) to the right
                    expected = -m[h] * (i - j) if j <= i else -m[heads - 1 - h] * (j - i)
                assert bias[h, i, j].item() == pytest.approx(expected, rel=1e-6, abs=1e-7), (h, i, j)


def test_alibi_directional_tells_left_from_right():
    sym = _bias(make_pe("alibi", "encoder", heads=4, dim=16), 7, 4)[0]
    dire = _bias(make_pe("alibi", "encoder", heads=4, dim=16, alibi_encoder="directional"), 7, 4)[0]
    assert torch.equal(sym, sym.transpose(-1, -2)) and not torch.equal(dire, dire.transpose(-1, -2))
    assert torch.equal(dire.tril(), sym.tril())  # keys on the left: the same slopes


def test_alibi_bias_depends_only_on_distance():
    pe = make_pe("alibi", "decoder")
    full = _bias(pe, 10, H)
    shifted = logit_bias(pe, torch.zeros(1, H, 10, D), Positions(torch.arange(30, 40)[None], torch.arange(30, 40)[None]), 0)
    step = logit_bias(pe, torch.zeros(1, H, 1, D), Positions(torch.tensor([[9]]), torch.arange(10)[None]), 0)
    assert torch.equal(shifted, full) and torch.equal(step, full[:, :, -1:])
    # a query in the middle (position 34 of keys 30..39): its own row, not the last one; the bias comes from the
    # given positions' differences
    middle = logit_bias(pe, torch.zeros(1, H, 1, D), Positions(torch.tensor([[34]]), torch.arange(30, 40)[None]), 0)
    assert torch.equal(middle, full[:, :, 4:5]) and not torch.equal(middle, full[:, :, -1:])


@pytest.mark.parametrize("side,variant", [("encoder", "symmetric"), ("encoder", "directional"), ("decoder", "symmetric")])
def test_alibi_attention_equals_naive_attention(side, variant):
    """Per head and sentence, softmax(q k^T - slope x distance + masks) v with the hand-derived slopes."""
    attn = make_attention(make_pe("alibi", side, alibi_encoder=variant))
    x, pad = padded_input()
    causal = side == "decoder"
    out, _ = attn(x, x, x, key_padding_mask=pad, attn_mask=future_mask(11) if causal else None, need_weights=False)
    T, B, _ = x.shape
    m = HAND_SLOPES[H]
    q, k, v = attn.q_proj(x) * D ** -0.5, attn.k_proj(x), attn.v_proj(x)
    z = torch.zeros(T, B, C)
    for b in range(B):
        real = (~pad[b]).nonzero().flatten().tolist()
        for h in range(H):
            sl = slice(h * D, (h + 1) * D)
            for i in real:
                e = []
                for j in real:
                    if causal and j > i:
                        continue
                    dist = real.index(i) - real.index(j)  # distance between real tokens
                    slope = m[h] if dist >= 0 or variant == "symmetric" else m[H - 1 - h]
                    e.append((q[i, b, sl] @ k[j, b, sl] - slope * abs(dist), j))
                a = torch.stack([s for s, _ in e]).softmax(0)
                z[i, b, sl] = sum(a[n] * v[j, b, sl] for n, (_, j) in enumerate(e))
    ref = attn.out_proj(z)
    real = ~pad.T.unsqueeze(-1)
    torch.testing.assert_close(out * real, ref * real, rtol=1e-5, atol=1e-5)


# ==== both: the fused kernel, decoding, fp16 ================================================================
CASES = [("rope", {}), ("rope_partial", {"rope_fraction": 0.5}), ("alibi", {}),
         ("alibi_directional", {"alibi_encoder": "directional"})]


def _name(case):
    return case.split("_")[0]


class ShapeLog(TorchDispatchMode):
    """Records the shape of every tensor an operator returns."""

    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                self.shapes.append(tuple(t.shape))
        return out


@pytest.mark.parametrize("side", ["encoder", "decoder"])
@pytest.mark.parametrize("case,overrides", CASES, ids=[c[0] for c in CASES])
def test_fused_kernel_and_no_pairwise_vectors(case, overrides, side, monkeypatch):
    """Training and full-pass validation run in F.scaled_dot_product_attention, with no weights built by the
    module, and no operator returns a (T,T,d)-shaped tensor; ALiBi's mask has no batch axis."""
    attn = make_attention(make_pe(_name(case), side, **overrides)).train()
    attn.dropout_module.p = 0.0
    x = torch.randn(11, 3, C)
    masks = []
    sdpa = pe_attention.sdpa  # modules/sdpa.attention(q, k, v, mask, dropout_p, is_causal): the fused kernel

    def spy(*a, **k):
        masks.append(a[3])
        return sdpa(*a, **k)

    softmax_calls = []
    softmax = F.softmax
    monkeypatch.setattr(pe_attention, "sdpa", spy)
    monkeypatch.setattr(pe_attention.F, "softmax", lambda *a, **k: softmax_calls.append(1) or softmax(*a, **k))
    log = ShapeLog()
    with log:
        out, weights = attn(x, x, x, attn_mask=future_mask(11) if side == "decoder" else None, need_weights=False)
    out.sum().backward()
    assert len(masks) == 1 and weights is None and softmax_calls == [] and attn.last_weights is None
    if case.startswith("alibi"):
        assert masks[0].shape == (1, H, 11, 11)
    elif side == "encoder":
        assert masks[0] is None  # RoPE adds nothing to the logits
    assert not [s for s in log.shapes if s.count(11) >= 2 and len(s) >= 3 and s[-1] == D]


@pytest.mark.parametrize("case,overrides", CASES, ids=[c[0] for c in CASES])
def test_incremental_steps_equal_full_pass(case, overrides):
    attn = make_attention(make_pe(_name(case), "decoder", **overrides))
    torch.manual_seed(3)
    x = torch.randn(9, 2, C)
    full, _ = attn(x, x, x, attn_mask=future_mask(9), need_weights=False)
    state = {}
    steps = [attn(x[t:t + 1], x[t:t + 1], x[t:t + 1], incremental_state=state, need_weights=False)[0] for t in range(9)]
    torch.testing.assert_close(torch.cat(steps), full, rtol=1e-5, atol=1e-5)
    # the explicit path (weights requested) gives the same output as the fused one
    explicit, weights = attn(x, x, x, attn_mask=future_mask(9), need_weights=True)
    assert weights is not None
    torch.testing.assert_close(explicit, full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case,overrides", CASES, ids=[c[0] for c in CASES])
def test_fp16_matches_fp32(case, overrides):
    """CPU half, the encoding left in fp32 and converted as by model.half(): finite, within 2e-2 of fp32."""
    attn = make_attention(make_pe(_name(case), "decoder", max_positions=4, **overrides))
    x, pad = padded_input(left=(False, False, False))  # right-padded, as fairseq's targets
    mask = future_mask(x.size(0))
    ref, _ = attn(x, x, x, key_padding_mask=pad, attn_mask=mask, need_weights=False)
    attn.half()
    for pe_dtype in (torch.float32, torch.float16):
        attn.pe.to(pe_dtype)
        for need_weights in (False, True):
            out, _ = attn(*[x.half()] * 3, key_padding_mask=pad, attn_mask=mask, need_weights=need_weights)
            assert out.dtype == torch.float16 and torch.isfinite(out).all()
            assert (out.float() - ref)[~pad.t()].abs().max() < 2e-2


# ==== model level ===========================================================================================
MODELS = [("rope", "transformer_rope_tiny", []),
          ("rope_partial", "transformer_rope_tiny", ["--rope-fraction", "0.25", "--rope-base", "100"]),
          ("alibi", "transformer_alibi_tiny", []),
          ("alibi_directional", "transformer_alibi_tiny", ["--alibi-encoder", "directional"])]


@pytest.mark.parametrize("case,arch,extra", MODELS, ids=[m[0] for m in MODELS])
def test_beam_search_equals_full_forward(data_bin, case, arch, extra):
    task, model, _ = pe_testing.build_model(data_bin, arch, extra)
    assert pe_testing.rescore_max_diff(task, model, pe_testing.batch(task), beam=4) < 1e-4


def test_model_flags_reach_the_encodings(data_bin):
    _, model, _ = pe_testing.build_model(data_bin, "transformer_rope_tiny", ["--rope-fraction", "0.25"])
    assert model.encoder.pe.rotary_dim == 8 and model.decoder.pe.rotary_dim == 8  # 0.25 of d = 32
    assert all(layer.self_attn.pe is model.encoder.pe for layer in model.encoder.layers)
    assert all(layer.self_attn.pe is model.decoder.pe for layer in model.decoder.layers)
    assert not any(type(layer.encoder_attn) is PEAttention for layer in model.decoder.layers)  # no cross-attention
    six_heads = ["--encoder-embed-dim", "48", "--decoder-embed-dim", "48",
                 "--encoder-attention-heads", "6", "--decoder-attention-heads", "6"]
    _, model, _ = pe_testing.build_model(data_bin, "transformer_alibi_tiny", ["--alibi-encoder", "directional", *six_heads])
    enc, dec = model.encoder.pe, model.decoder.pe
    assert enc.left_slopes == dec.left_slopes == pytest.approx(HAND_SLOPES[6], rel=1e-12)
    assert enc.right_slopes == pytest.approx(HAND_SLOPES[6][::-1], rel=1e-12) and dec.right_slopes == dec.left_slopes
    assert sum(p.numel() for p in enc.parameters()) == 0


@pytest.mark.parametrize("arch", ["transformer_rope_tiny", "transformer_alibi_tiny"])
def test_two_half_batches_give_the_gradients_of_the_full_batch(arch, data_bin):
    """What --update-freq 2 computes (summed micro-batch gradients / total sample size) equals one batch of
    twice the size."""
    task, model, args = pe_testing.build_model(data_bin, arch)
    model.double().train()
    criterion = task.build_criterion(args)
    task.load_dataset("train")
    ds = task.dataset("train")

    pe_testing.assert_micro_batches_add_up(model, criterion, lambda ids: ds.collater([ds[i] for i in ids]))


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["transformer_rope_tiny", "transformer_alibi_tiny"])
def test_fp16_training_runs(arch, data_bin, tmp_path):
    log = pe_testing.run("fairseq_cli.train", [
        data_bin, "--user-dir", pe_testing.PLUGIN, "--arch", arch, *pe_testing.TRAIN_FLAGS, *CPU_FP16_FLAGS,
        "--max-update", "3", "--no-save", "--save-dir", tmp_path]).stdout
    assert "num_updates 3" in log or "num_updates=3" in log, log[-3000:]
    assert "loss_scale" in log and " nan" not in log.lower()


# ---- RoPE: the angles in the compute dtype ----------------------------------------------------------------
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rope_rotates_in_the_compute_dtype_whatever_its_tables_dtype(dtype, padded):
    """A float32 model computing in half precision (autocast: --amp, or bfloat16 on a CPU) rotates q and k exactly
    as the same model converted to that dtype: ``prepare(pos, dtype)`` hands the layers cos and sin in the compute
    dtype, the closed-form cos / sin of p theta_i rounded to it."""
    pe = pe_testing.make_pe("rope", dim=16, heads=2, max_positions=32)
    converted = copy.deepcopy(pe).to(dtype)  # its tables in the compute dtype: nothing to cast
    b, t = 3, 7
    mask = None
    if padded:
        mask = torch.ones(b, t, dtype=torch.bool)
        mask[0, :2] = False  # two left pads
    pos = Positions.from_mask(mask, t, t, "cpu")
    angles = pe.prepare(pos, dtype)
    assert pe.cos.dtype == torch.float32 and [a.dtype for a in angles] == [dtype, dtype]
    r = pe.rotary_dim
    theta = 10000.0 ** (-torch.arange(0, r, 2, dtype=torch.float64) / r)
    p = pos.q.double().unsqueeze(-1) * theta  # (B|1,T,r/2)
    torch.testing.assert_close(angles[0].squeeze(1), torch.cos(p).to(dtype), rtol=0, atol=1e-3)
    torch.testing.assert_close(angles[1].squeeze(1), torch.sin(p).to(dtype), rtol=0, atol=1e-3)
    torch.manual_seed(0)
    q, k = torch.randn(2, b, 2, t, 8).to(dtype)
    got = pe.transform_qk(q, k, angles, 0)
    want = converted.transform_qk(q, k, converted.prepare(pos, dtype), 0)
    for g, w in zip(got, want):
        assert g.dtype == dtype
        torch.testing.assert_close(g, w, rtol=0, atol=0)


# ---- RoPE: the base ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("base,ok", [(1.0, False), (0.5, False), (1.0 + 1e-6, True), (2.0, True)])
def test_rope_base_must_be_above_one(base, ok):
    """--rope-base is refused at 1 and below (base 1 gives every pair the frequency theta_i = 1: one rotation
    for all, as if the encoding had one pair) and taken just above it: the frequencies base^(-2i/r), i = 0..r/2-1,
    are then strictly decreasing from 1."""
    build = lambda: pe_testing.make_pe("rope", dim=16, heads=2, max_positions=8, rope_base=base)  # noqa: E731
    if not ok:
        with pytest.raises(ValueError, match=rf"--rope-base must be above 1 \(RoFormer: 10000\), got {base}"):
            build()
        return
    pe = build()
    r = pe.rotary_dim
    theta = base ** (-torch.arange(0, r, 2, dtype=torch.float64) / r)
    torch.testing.assert_close(pe.cos[1].double(), torch.cos(theta), rtol=0, atol=1e-6)  # position 1: cos theta_i
    assert theta[0] == 1 and bool((theta[1:] < theta[:-1]).all())


# ---- ALiBi: the slopes in float32 ------------------------------------------------------------------------------
@pytest.mark.parametrize("default", [torch.float64, torch.bfloat16])
@pytest.mark.parametrize("side,directional", [("encoder", False), ("encoder", True), ("decoder", False)])
def test_alibi_bias_is_float32_whatever_the_default_dtype(side, directional, default):
    """ALiBi's bias is computed in float32 from the slopes rounded once to float32, then cast to the attention's
    dtype: under torch.set_default_dtype(float64 or bfloat16), where the encoding is built and called, its
    12 heads' slopes (1/2, 1/4, ..., 1/256, then 2^-1/2, 2^-3/2, ...: not all powers of two) are the float32 ones
    and the bias is -m_h |j - i| in float32 (directional: m_{H+1-h} to the right), the closed form."""
    from pe_plugin.encodings.alibi import alibi_slopes

    heads = 12
    slopes = [2 ** (-h) for h in range(1, 9)] + [2 ** (-(2 * h - 1) / 2) for h in range(1, 5)]
    assert alibi_slopes(heads) == pytest.approx(slopes, rel=1e-15)
    before = torch.get_default_dtype()
    torch.set_default_dtype(default)
    try:
        pe = pe_testing.make_pe("alibi", side, dim=24, heads=heads,
                                alibi_encoder="directional" if directional else "symmetric")
        bias = pe.position_bias(Positions.from_mask(None, 6, 6, "cpu"))
    finally:
        torch.set_default_dtype(before)
    left = torch.tensor(slopes, dtype=torch.float32)
    right = left.flip(0) if directional else left
    want = torch.tensor([[[-(right[h] if j > i else left[h]).item() * abs(j - i) for j in range(6)]
                          for i in range(6)] for h in range(heads)], dtype=torch.float32).unsqueeze(0)
    assert bias.dtype == torch.float32
    torch.testing.assert_close(bias, want, rtol=0, atol=0)


@pytest.mark.parametrize("heads", [0, -2])
def test_alibi_without_heads_is_refused_by_name(heads):
    """The slopes of a geometric sequence per head: no heads is the settings' error, named as such, not a math
    domain error from the logarithm of 0 (or of a negative count)."""
    from pe_plugin.encodings.alibi import alibi_slopes

    with pytest.raises(ValueError, match=rf"ALiBi needs at least one attention head, got {heads}"):
        alibi_slopes(heads)
    assert alibi_slopes(1) == [2 ** -8] and alibi_slopes(2) == [2 ** -4, 2 ** -8]  # the paper's sequence


@pytest.mark.parametrize("extra", [1, 2, 9])
@pytest.mark.parametrize("padded", [False, True])
def test_rope_angles_one_past_its_table_are_the_closed_form_ones(extra, padded):
    """A RoPE built for 8 positions (its tables' first size) given 8 + extra positions, one past the table and
    more, with and without padding (a slice of the tables vs a gather): cos and sin of p theta_i, theta_i =
    base^(-2i/r), in float64 and rounded to float32 as the tables store them."""
    pe = make_pe("rope", dim=16, heads=2, max_positions=8)
    assert pe.cos.size(0) == 8
    t = 8 + extra
    nonpad = torch.ones(2, t, dtype=torch.bool)
    if padded:
        nonpad[1, :3] = False  # left padding: row 1 has positions 0..t-4
    pos = Positions.from_mask(nonpad if padded else None, t, t, "cpu")
    cos, sin = pe.prepare(pos, torch.float32)
    r = pe.rotary_dim
    theta = 10000.0 ** (-torch.arange(0, r, 2, dtype=torch.float64) / r)
    p = Positions.from_padding(nonpad if padded else None, t, "cpu").double()  # (B|1, T)
    angles = p.unsqueeze(-1) * theta  # (B|1, T, r/2)
    torch.testing.assert_close(cos.squeeze(1), torch.cos(angles).float().expand_as(cos.squeeze(1)), rtol=0, atol=0)
    torch.testing.assert_close(sin.squeeze(1), torch.sin(angles).float().expand_as(sin.squeeze(1)), rtol=0, atol=0)

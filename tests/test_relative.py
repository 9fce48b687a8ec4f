"""Relative encodings (rpe, t5, at5): each against an independent, materialised reference.

* module level: ``PEAttention`` with each encoding equals attention computed naively from the paper's
  formulas (Shaw's [Tq,Tk,d] tensors built explicitly, T5 buckets from a scalar HF-style function, the
  AT5 MLP evaluated on the whole (i, j) grid as the official code does), on padded batches, in both
  stacks, on the fused and the explicit path, for gradients too, and step by step as in decoding;
* the defining properties: the bias depends only on j - i, saturates (Shaw beyond k, T5 at the last
  bucket, AT5 as f -> 1), T5 buckets match the table of docs/encodings.md §T5;
* model level: beam search equals a full forward pass, the encoder output of a sentence does not depend
  on padding side or batch, parameter counts are closed-form, fp16 matches fp32.
"""
import copy
import math

import pytest
import torch
import torch.nn.functional as F

import pe_testing
from pe_references import BIDIRECTIONAL_STARTS, CAUSAL_STARTS, future_mask, hf_bucket, padded_input
from pe_testing import logit_bias, make_attention, make_pe
from pe_plugin.encodings import PE_REGISTRY
from pe_plugin.encoding_parts.base import Dims, Positions
from pe_plugin.encoding_parts.relative import (buckets_to_pairs, call_offsets, clip_to_offsets, clipped_index,
                                          clipped_onehot, distinct_offsets, offsets_to_pairs, pairs_to_buckets,
                                          t5_bucket)
from pe_plugin.modules import pe_attention
from pe_plugin.modules.pe_attention import PEAttention

C, H, LAYERS = 16, 2, 2
D = C // H

# (test id, encoding, config overrides)
CASES = [
    ("rpe", "rpe", dict(rpe_max_relative_position=3)),
    ("rpe_per_head", "rpe", dict(rpe_max_relative_position=3, rpe_per_head=True)),
    ("rpe_keys_only", "rpe", dict(rpe_max_relative_position=3, rpe_no_values=True)),
    ("rpe_values_only", "rpe", dict(rpe_max_relative_position=3, rpe_no_keys=True)),
    ("t5", "t5", dict(t5_num_buckets=8, t5_max_distance=6)),
    ("at5", "at5", dict(at5_all_layers=True)),
]


def excite(pe):
    """Large random encoding parameters, so that a missing or misplaced term shows in every comparison."""
    torch.manual_seed(0)
    for name, p in pe.named_parameters():
        with torch.no_grad():
            if name == "slope":  # slopes / L_max of 0.02 .. 0.3 per token
                p.uniform_(0.02 * pe.max_length, 0.3 * pe.max_length)
            else:
                p.normal_(0, 1.0)


def naive_bias_and_values(pe, q, pq, pk, layer):
    """(B,H,Tq,Tk) logit term and a function probs -> (B,H,Tq,d) value term, from real positions pq, pk
    (B,T) and per-pair materialised tensors."""
    r = pk[:, None, :] - pq[:, :, None]  # (B,Tq,Tk) real-token distance
    if pe.name == "rpe":
        idx = torch.clamp(r, -pe.k, pe.k) + pe.k

        def materialise(table):  # (H|1, 2k+1, d) -> (B,H,Tq,Tk,d)
            table = table[layer].expand(H, -1, -1)
            return torch.stack([table[h][idx] for h in range(H)], dim=1)

        bias = 0 if pe.key_table is None else torch.einsum("bhid,bhijd->bhij", q, materialise(pe.key_table))
        if pe.value_table is None:
            return bias, lambda probs: 0
        a_v = materialise(pe.value_table)
        return bias, lambda probs: torch.einsum("bhij,bhijd->bhid", probs, a_v)
    if pe.name == "t5":
        cfg = pe.cfg
        buckets = torch.tensor([[[hf_bucket(int(x), not pe.dims.causal, cfg.t5_num_buckets, cfg.t5_max_distance)
                                  for x in row] for row in mat] for mat in r])  # (B,Tq,Tk)
        return pe.table[buckets].permute(0, 3, 1, 2), lambda probs: 0
    # at5: the official code's grid evaluation, one (i, j) pair at a time per head
    out = torch.zeros(r.shape[0], H, *r.shape[1:])
    for h in range(H):
        for side, sel in ((0, r <= 0), (1, r > 0)):
            if side >= pe.slope.size(0):
                continue  # causal: future keys are masked
            slope = torch.relu(pe.slope[side, h, 0]) / pe.max_length
            f = 1 - torch.exp(-slope * r[sel].abs().float())  # (P,)
            x = torch.sigmoid(f[:, None] * pe.w1[side, h, 0] + pe.c1[side, h, 0])  # (P, l1)
            x = torch.sigmoid(x @ pe.w2[side, h] + pe.c2[side, h, 0])  # (P, l2)
            out[:, h][sel] = (x @ pe.w3[side, h])[:, 0] + pe.c3[side, h, 0, 0]
    return out, lambda probs: 0


def naive_attention(attn, x, pad, causal, keep=None):
    """Attention of x (T,B,C) with key padding ``pad`` (B,T), materialised pair by pair; ``keep`` (B,H,T,T), if
    given, is attention dropout's mask (0 or 1 / (1 - p)), applied to the probabilities. (T,B,C)"""
    t, b, _ = x.shape
    split = lambda y: y.view(t, b, H, D).permute(1, 2, 0, 3)  # noqa: E731  (T,B,C) -> (B,H,T,d)
    q, k, v = split(attn.q_proj(x) * D ** -0.5), split(attn.k_proj(x)), split(attn.v_proj(x))
    p = (~pad).long().cumsum(1) - 1  # (B,T) real-token positions
    bias, value_term = naive_bias_and_values(attn.pe, q, p, p, attn.layer)
    logits = q @ k.transpose(-1, -2) + bias
    logits = logits.masked_fill(pad[:, None, None, :], float("-inf"))
    if causal:
        logits = logits.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    probs = logits.softmax(-1) * (1 if keep is None else keep)  # what dropout leaves of each probability
    z = probs @ v + value_term(probs)  # (B,H,T,d): both terms of Shaw's equation (3) take the dropped weights
    return attn.out_proj(z.permute(2, 0, 1, 3).reshape(t, b, C))


@pytest.mark.parametrize(
    "bidirectional,bucket,start",
    [(True, 8 + i, s) for i, s in enumerate(BIDIRECTIONAL_STARTS)]
    + [(False, 16 + i, s) for i, s in enumerate(CAUSAL_STARTS)],
)
def test_t5_bucket_starts(bidirectional, bucket, start):
    n = torch.tensor([start - 1, start])
    assert t5_bucket(-n, bidirectional).tolist() == [bucket - 1, bucket]  # key to the left
    if bidirectional:
        assert t5_bucket(n, bidirectional).tolist() == [bucket + 15, bucket + 16]  # key to the right


def test_t5_bucket_exact_range_saturation_and_causal_future():
    n = torch.arange(0, 2000)
    assert t5_bucket(-n[:8], True).tolist() == list(range(8))
    assert t5_bucket(n[1:8], True).tolist() == list(range(17, 24))
    assert t5_bucket(-n[:16], False).tolist() == list(range(16))
    assert set(t5_bucket(-n[91:], True).tolist()) == {15} and set(t5_bucket(n[91:], True).tolist()) == {31}
    assert set(t5_bucket(-n[113:], False).tolist()) == {31}
    assert set(t5_bucket(n, False).tolist()) == {0}  # every future key (and self) in bucket 0


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets,max_distance", [(32, 128), (64, 128), (8, 6)])
def test_t5_bucket_matches_hf_reference(bidirectional, num_buckets, max_distance):
    r = torch.arange(-400, 401)
    expected = [hf_bucket(int(x), bidirectional, num_buckets, max_distance) for x in r]
    assert t5_bucket(r, bidirectional, num_buckets, max_distance).tolist() == expected


def test_clipping_and_distinct_offsets():
    rel = Positions(torch.arange(3, 9)[None], torch.arange(9)[None]).rel  # a decoding step: 6 queries, 9 keys
    assert torch.equal(clipped_index(torch.arange(-6, 7), 2), torch.tensor([0] * 5 + [1, 2, 3] + [4] * 5))
    offsets, index = distinct_offsets(rel)
    assert torch.equal(offsets[index], rel) and offsets.tolist() == list(range(-8, 6))


# (Tq, Tk): full passes, decoding steps (one query, the last key), and Tk > Tq
CALL_SHAPES = [(12, 12), (5, 5), (1, 9), (1, 1), (3, 8), (15, 15)]


@pytest.mark.parametrize("tq,tk", CALL_SHAPES)
def test_offsets_to_pairs_is_the_gather_by_distance_and_its_adjoint(tq, tk):
    """The strided view of a per-distance vector against indexing it with j - i, in float64, values and gradients
    (the view's backward sums the diagonals); the clipping of Shaw / T5 against ``clipped_index``."""
    torch.manual_seed(0)
    pos = Positions.from_mask(None, tq, tk, "cpu")
    offsets, index = distinct_offsets(pos.rel)  # (W,), (Tq,Tk)
    assert pos.columns and torch.equal(call_offsets(tq, tk, "cpu"), offsets)
    v = torch.randn(2, 3, tq + tk - 1, dtype=torch.double, requires_grad=True)  # (..., W)
    w = torch.randn(2, 3, tq, tk, dtype=torch.double)
    out, ref = offsets_to_pairs(v, tq), v[..., index]
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    torch.testing.assert_close(torch.autograd.grad((out * w).sum(), v)[0], torch.autograd.grad((ref * w).sum(), v)[0],
                               rtol=1e-12, atol=1e-12)
    for k in (0, 1, 3, 20):  # clip(r, -k, k): tails on both sides, one side, none
        r = torch.randn(2, 2 * k + 1, dtype=torch.double, requires_grad=True)
        out, ref = clip_to_offsets(r, tq, tk, k), r[..., clipped_index(offsets, k)]
        torch.testing.assert_close(out, ref, rtol=0, atol=0)
        g = torch.randn_like(ref)
        torch.testing.assert_close(torch.autograd.grad((out * g).sum(), r)[0],
                                   torch.autograd.grad((ref * g).sum(), r)[0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("k", [0, 1, 3, 20])
@pytest.mark.parametrize("tq,tk", CALL_SHAPES + [(4, 6)])
def test_shaw_bucket_maps_are_the_indexed_equations_and_adjoint(tq, tk, k):
    """Shaw's maps (products with the pass's one-hot) against the equations by index, element by element, in
    float64: pairs E[m,i,j] = R[i,m,idx(i,j)] (new, and added into a tensor), buckets P[i,m,b] = sum of A[m,i,j]
    over idx(i,j) = b; adjoint. (4, 6): positions given as values, not the last Tq keys."""
    torch.manual_seed(0)
    if (tq, tk) == (4, 6):
        pos = Positions(torch.tensor([[0, 4, 5, 9]]), torch.tensor([[1, 2, 3, 6, 7, 8]]))
    else:
        pos = Positions.from_mask(None, tq, tk, "cpu")
    idx, onehot = clipped_index(pos.rel, k), clipped_onehot(pos.rel, k, torch.double)  # (Tq,Tk), (Tq,Tk,n)
    n_rows, n = 3, 2 * k + 1
    r = torch.randn(tq, n_rows, n, dtype=torch.double)
    a = torch.randn(n_rows, tq, tk, dtype=torch.double)
    pairs, buckets = torch.zeros(n_rows, tq, tk, dtype=torch.double), torch.zeros(tq, n_rows, n, dtype=torch.double)
    for i in range(tq):
        for j in range(tk):
            pairs[:, i, j] = r[i, :, idx[i, j]]
            buckets[i, :, idx[i, j]] += a[:, i, j]
    torch.testing.assert_close(buckets_to_pairs(r, onehot), pairs, rtol=0, atol=0)
    torch.testing.assert_close(buckets_to_pairs(r, onehot, into=a.clone()), a + pairs, rtol=0, atol=1e-15)
    torch.testing.assert_close(pairs_to_buckets(a, onehot), buckets, rtol=1e-15, atol=1e-15)
    torch.testing.assert_close((pairs * a).sum(), (r * buckets).sum(), rtol=1e-12, atol=0)


@pytest.mark.parametrize("side", ["encoder", "decoder"])
@pytest.mark.parametrize("name,overrides", [("t5", dict(t5_num_buckets=8, t5_max_distance=6)), ("t5", {}),
                                            ("at5", {})], ids=["t5_small", "t5", "at5"])
@pytest.mark.parametrize("tq,tk", CALL_SHAPES)
def test_strided_position_bias_equals_the_indexed_equation(name, overrides, side, tq, tk):
    """T5 and AT5 on positions made from a mask (strided views, a one-hot product: no index, so no index_put in
    backward) against the same positions given as values (``E[bucket(rel)]``, the MLP gathered per pair), in
    float64: the bias and the gradients of every parameter. Lengths beyond T5's max distance reach its tails."""
    pe = make_pe(name, side, init=excite, **overrides).double()
    columns = Positions.from_mask(None, tq, tk, "cpu")
    values = Positions(torch.arange(tk - tq, tk)[None], torch.arange(tk)[None])
    assert columns.columns and not values.columns and torch.equal(columns.rel, values.rel)
    torch.manual_seed(1)
    w = torch.randn(1, H, tq, tk, dtype=torch.double)
    biases, grads = [], []
    for pos in (columns, values):
        bias = pe.position_bias(pos)
        biases.append(bias)
        grads.append(torch.autograd.grad((bias * w).sum(), list(pe.parameters())))
    torch.testing.assert_close(biases[0], biases[1], rtol=1e-12, atol=1e-12)
    for g, ref in zip(*grads):
        torch.testing.assert_close(g, ref, rtol=1e-10, atol=1e-12)


# ---- module level -------------------------------------------------------------------------------------
@pytest.mark.parametrize("side", ["encoder", "decoder"])
@pytest.mark.parametrize("case,name,overrides", CASES, ids=[c[0] for c in CASES])
def test_attention_matches_naive_reference(case, name, overrides, side):
    attn = make_attention(make_pe(name, side, init=excite, **overrides))
    x, pad = padded_input(left=side == "encoder")
    mask = future_mask(x.size(0)) if side == "decoder" else None
    expected = naive_attention(attn, x, pad, causal=side == "decoder")
    real = ~pad.t()  # (T,B)
    for need_weights in (False, True):  # the fused path (bias-only encodings) and the explicit one
        out, _ = attn(x, x, x, key_padding_mask=pad, attn_mask=mask, need_weights=need_weights)
        assert (out - expected)[real].abs().max() < 1e-5


@pytest.mark.parametrize("impl,need_weights", [("reference", False), ("reference", True), ("auto", True)])
@pytest.mark.parametrize("side", ["encoder", "decoder"])
def test_rpe_value_term_in_training_takes_the_probabilities_dropout_left(side, impl, need_weights):
    """Training with attention dropout (p = 0.3) on the path that holds the probabilities (--pe-attention-impl
    reference, or auto when weights are asked for): Shaw's value term sums the relative values with the same
    dropped probabilities as the a v term (Shaw et al., eq. 3, with dropout on a). The reference draws dropout's
    mask itself from the same seed (the layer's only random draw) and applies it to the naive probabilities."""
    p = 0.3
    pe = make_pe("rpe", side, init=excite, rpe_max_relative_position=3, rpe_per_head=True)
    if impl == "reference":
        pe.attention_impl = "reference"
    torch.manual_seed(1)
    attn = PEAttention(C, H, pe, 1, dropout=p).train()
    x, pad = padded_input(left=side == "encoder")
    t, b = x.size(0), x.size(1)
    mask = future_mask(t) if side == "decoder" else None
    torch.manual_seed(5)
    out, _ = attn(x, x, x, key_padding_mask=pad, attn_mask=mask, need_weights=need_weights)
    torch.manual_seed(5)
    keep = F.dropout(torch.ones(b, H, t, t), p, training=True)  # (B,H,Tq,Tk): 0 or 1 / (1 - p)
    assert 0 < (keep == 0).float().mean() < 1
    expected = naive_attention(attn, x, pad, causal=side == "decoder", keep=keep)
    real = ~pad.t()  # (T,B)
    assert (out - expected)[real].abs().max() < 1e-5
    undropped = naive_attention(attn, x, pad, causal=side == "decoder")
    assert (out - undropped)[real].abs().max() > 1e-2  # dropout changed the output: the comparison tells


@pytest.mark.parametrize("case,name,overrides", CASES, ids=[c[0] for c in CASES])
def test_gradients_match_naive_reference(case, name, overrides):
    """Gradients reach the encoding's parameters through the fused kernel's float mask, and are right."""
    grads = []
    for fn in ("module", "naive"):
        attn = make_attention(make_pe(name, "encoder", init=excite, **overrides))
        x, pad = padded_input(left=True)
        if fn == "module":
            out, _ = attn(x, x, x, key_padding_mask=pad, need_weights=False)
        else:
            out = naive_attention(attn, x, pad, causal=False)
        (out[~pad.t()] ** 2).sum().backward()
        grads.append({n: p.grad for n, p in attn.pe.named_parameters()})
    for n, g in grads[0].items():
        assert g is not None and g.abs().max() > 0 and torch.allclose(g, grads[1][n], atol=1e-4, rtol=1e-4), n


@pytest.mark.parametrize("case,name,overrides", CASES, ids=[c[0] for c in CASES])
def test_incremental_steps_equal_full_pass(case, name, overrides):
    attn = make_attention(make_pe(name, "decoder", init=excite, **overrides))
    torch.manual_seed(3)
    x = torch.randn(9, 2, C)
    full, _ = attn(x, x, x, attn_mask=future_mask(9), need_weights=False)
    state = {}
    steps = [attn(x[t:t + 1], x[t:t + 1], x[t:t + 1], incremental_state=state, need_weights=False)[0] for t in range(9)]
    assert (torch.cat(steps) - full).abs().max() < 1e-5


def assert_value_term_depends_only_on_distance(pe):
    """Shaw's value term sum_j a_ij W^V[clip(j - i) + k] with all of query i's weight on key i + s: the same row
    W^V[clip(s) + k] for every query i and every shift of the positions, a different one for each |s| <= k."""
    rows = {}
    for shift in (0, 5):
        pos = Positions(torch.arange(12)[None] + shift, torch.arange(12)[None] + shift)
        ctx = pe.prepare(pos, torch.float32)
        for s in range(-11, 12):
            probs = torch.zeros(1, H, 12, 12)
            queries = [i for i in range(12) if 0 <= i + s < 12]
            for i in queries:
                probs[0, :, i, i + s] = 1.0
            z = pe.value_bias(probs, ctx, 1)[0][:, queries]  # (H, queries, d)
            torch.testing.assert_close(z, z[:, :1].expand_as(z), rtol=1e-6, atol=1e-6)  # the same for every i
            rows.setdefault(s, z[:, 0])
            torch.testing.assert_close(z[:, 0], rows[s], rtol=1e-6, atol=1e-6)  # and for every shift
    distinct = [rows[s] for s in range(-pe.k, pe.k + 1)]
    assert all(not torch.allclose(a, b) for i, a in enumerate(distinct) for b in distinct[i + 1:])
    assert all(torch.allclose(rows[s], rows[max(-pe.k, min(pe.k, s))]) for s in rows)  # clipped beyond k


@pytest.mark.parametrize("side", ["encoder", "decoder"])
@pytest.mark.parametrize("case,name,overrides", CASES, ids=[c[0] for c in CASES])
def test_bias_depends_only_on_distance(case, name, overrides, side):
    """Same q at every position: the bias is Toeplitz (a function of j - i), whatever the offset of the
    positions; a decoding step's row equals the full pass's last row."""
    pe = make_pe(name, side, init=excite, **overrides)
    q = torch.randn(1, H, 1, D).expand(2, H, 12, D)
    full = logit_bias(pe, q, Positions(torch.arange(12)[None], torch.arange(12)[None]), 1)
    if full is None:  # values-only Shaw: no logit term; its value term is the property's subject
        assert name == "rpe" and pe.uses("value_bias")
        assert_value_term_depends_only_on_distance(pe)
        return
    full = full.expand(2, H, 12, 12)
    # Toeplitz up to float rounding: a matmul may round rows differently by CPU kernel (AVX2 vs AVX-512
    # tails), so bitwise equality across rows is not a property of the math. A wrong row index moves a
    # value by O(1) (tables ~ N(0, 1)), far beyond this tolerance.
    for s in range(1, 12):
        torch.testing.assert_close(full[..., s:, s:], full[..., :-s, :-s], rtol=1e-6, atol=1e-6)
    # positions given as values: rel is their difference, so a shift of every position must change nothing
    shifted = logit_bias(pe, q, Positions(torch.arange(5, 17)[None], torch.arange(5, 17)[None]), 1)
    torch.testing.assert_close(shifted.expand_as(full), full, rtol=1e-6, atol=1e-6)
    # a position bias computed pair by pair: queries 3..6 of the 12 keys are rows 3..6 of the full pass (AT5 runs
    # its MLP on the distances of a self-attention call, whose queries are the last Tq keys: not this case)
    if not pe.uses("score_bias") and name != "at5":
        middle = pe.position_bias(Positions(torch.arange(3, 7)[None] + 20, torch.arange(12)[None] + 20))
        torch.testing.assert_close(middle.expand(2, H, 4, 12), full[:, :, 3:7], rtol=1e-6, atol=1e-6)
        assert not torch.allclose(middle.expand(2, H, 4, 12), full[:, :, 8:12])  # not the last rows
    step = logit_bias(pe, q[:, :, -1:], Positions(torch.arange(11, 12)[None], torch.arange(12)[None]), 1)
    assert torch.allclose(step.expand(2, H, 1, 12), full[:, :, -1:], atol=1e-6)


def test_rpe_clips_beyond_k():
    pe = make_pe("rpe", "encoder", rpe_max_relative_position=3, init=excite)
    q = torch.randn(1, H, 1, D).expand(1, H, 20, D)
    pos = Positions(torch.arange(20)[None], torch.arange(20)[None])
    bias = logit_bias(pe, q, pos, 0)[0, :, 10]  # (H, Tk): query 10
    assert (bias[:, :7] == bias[:, :1]).all() and (bias[:, 13:] == bias[:, 19:]).all()  # |j - i| >= 3
    assert len({round(v, 5) for v in bias[0, 7:13].tolist()}) == 6  # the 2k+1 = 7 rows between are distinct
    probs = torch.full((1, H, 20, 20), 1 / 20)  # uniform attention
    out = pe.value_bias(probs, pe.prepare(pos, probs.dtype), 0)[:, :, 10:]  # query 10
    table = pe.value_table[0, 0]  # (2k+1, d)
    expected = (8 * table[0] + table[1] + table[2] + table[3] + table[4] + table[5] + 7 * table[6]) / 20
    assert torch.allclose(out[0, 0, 0], expected, atol=1e-6)


def test_t5_bias_is_query_independent_and_keeps_the_fused_kernel(monkeypatch):
    attn = make_attention(make_pe("t5", "encoder", t5_num_buckets=8, t5_max_distance=6, init=excite))
    x, pad = padded_input(left=True)
    bias = logit_bias(attn.pe, torch.randn(3, H, 11, D), Positions(torch.arange(11)[None], torch.arange(11)[None]), 0)
    assert bias.shape == (1, H, 11, 11)
    calls = []
    sdpa = pe_attention.sdpa  # modules/sdpa.attention: the fused kernel (on a CPU too, for a learned mask)
    spy = lambda *a, **k: calls.append(1) or sdpa(*a, **k)  # noqa: E731
    monkeypatch.setattr(pe_attention, "sdpa", spy)
    attn(x, x, x, key_padding_mask=pad, need_weights=False)
    assert calls == [1]


def test_at5_saturates_and_uses_the_right_branch():
    pe = make_pe("at5", "encoder", init=excite)
    r = torch.tensor([-10 ** 6, -1, 0, 1, 10 ** 6])
    g = pe.offset_bias(r)  # (H, 5)
    ones = torch.ones(1)
    for h in range(H):
        for side, col in ((0, 0), (1, 4)):  # f -> 1 far to the left (g-) and far to the right (g+)
            x = torch.sigmoid(ones[:, None] * pe.w1[side, h, 0] + pe.c1[side, h, 0])
            x = torch.sigmoid(x @ pe.w2[side, h] + pe.c2[side, h, 0])
            assert torch.allclose(g[h, col], (x @ pe.w3[side, h])[0, 0] + pe.c3[side, h, 0, 0], atol=1e-5)
    assert not torch.allclose(g[:, 0], g[:, 4])  # separate MLPs per direction
    causal = make_pe("at5", "decoder", init=excite)
    assert causal.slope.size(0) == 1 and (causal.offset_bias(torch.arange(1, 5)) == 0).all()


def test_at5_decoding_step_bias_is_the_full_row_not_the_official_constant():
    """The official code slices its bias grid to [:1, :1] at each decoding step and broadcasts the
    distance-0 value over all keys (docs/encodings.md §D8); ours is the full pass's row for the last query."""
    pe = make_pe("at5", "decoder", init=excite)
    t = 10
    q = torch.zeros(1, H, t, D)
    full = logit_bias(pe, q, Positions(torch.arange(t)[None], torch.arange(t)[None]), 0)  # (1,H,T,T)
    step = logit_bias(pe, q[:, :, -1:], Positions(torch.tensor([[t - 1]]), torch.arange(t)[None]), 0)  # (1,H,1,T)
    assert torch.allclose(step, full[:, :, -1:], atol=1e-6)
    official = full[:, :, :1, :1].expand_as(step)  # distance 0, broadcast
    assert (step - official).abs().max() > 0.1


@pytest.mark.parametrize("case,name,overrides", CASES, ids=[c[0] for c in CASES])
def test_fp16_matches_fp32(case, name, overrides):
    """CPU half: biases cast to half without overflow (masks are -inf, never a large finite constant) and
    the output matches fp32 within 2e-2 (outputs are O(1); fp16 has 11 significant bits)."""
    attn = make_attention(make_pe(name, "decoder", init=excite, **overrides))
    x, pad = padded_input(left=False)
    mask = future_mask(x.size(0))
    ref, _ = attn(x, x, x, key_padding_mask=pad, attn_mask=mask, need_weights=False)
    attn.half()
    for pe_dtype in (torch.float32, torch.float16):  # the encoding left in fp32, then converted as by model.half()
        attn.pe.to(pe_dtype)
        for need_weights in (False, True):
            out, _ = attn(*[x.half()] * 3, key_padding_mask=pad, attn_mask=mask, need_weights=need_weights)
            assert out.dtype == torch.float16 and torch.isfinite(out).all()
            assert (out.float() - ref)[~pad.t()].abs().max() < 2e-2


# ---- model level ---------------------------------------------------------------------------------------
MODELS = [
    ("rpe", "transformer_rpe_tiny", []),
    ("rpe_per_head", "transformer_rpe_tiny", ["--rpe-per-head"]),
    ("t5", "transformer_t5_tiny", []),
    ("at5", "transformer_at5_tiny", []),
    ("at5_all_layers", "transformer_at5_tiny", ["--at5-all-layers"]),
]


def build_excited(data_bin, arch, extra=()):
    task, model, args = pe_testing.build_model(data_bin, arch, extra)
    for stack in (model.encoder, model.decoder):
        excite(stack.pe)
    return task, model


@pytest.mark.parametrize("case,arch,extra", MODELS, ids=[m[0] for m in MODELS])
def test_beam_search_equals_full_forward(data_bin, case, arch, extra):
    task, model = build_excited(data_bin, arch, extra)
    assert pe_testing.rescore_max_diff(task, model, pe_testing.batch(task), beam=4) < 1e-4


def test_rescoring_catches_the_official_at5_decoding_bias(data_bin, monkeypatch):
    """Negative control: with the official code's constant decoding bias the re-scoring check fails."""
    cls = PE_REGISTRY["at5"]
    task, model = build_excited(data_bin, "transformer_at5_tiny")
    right = cls.position_bias

    def official(self, pos):
        bias = right(self, pos)
        return bias[..., :1].expand_as(bias) if bias.size(2) == 1 else bias  # distance-0 value everywhere

    monkeypatch.setattr(cls, "position_bias", official)
    assert pe_testing.rescore_max_diff(task, model, pe_testing.batch(task), beam=4) > 1e-2


@pytest.mark.parametrize("arch", ["transformer_rpe_tiny", "transformer_t5_tiny", "transformer_at5_tiny"])
def test_encoder_output_ignores_padding_side_and_batch(data_bin, arch):
    task, model = build_excited(data_bin, arch)

    def outputs(sample, left):  # sentence id -> (len, C) encoder output of its real tokens
        src, lengths = sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"]
        with torch.no_grad():
            enc = model.encoder(src, lengths)["encoder_out"][0]  # (T,B,C)
        return {int(i): (enc[-n:, b] if left else enc[:n, b]) for b, (i, n) in enumerate(zip(sample["id"], lengths))}

    left = outputs(pe_testing.batch(task, n=8, left_pad_source=True), True)
    right = outputs(pe_testing.batch(task, n=8, left_pad_source=False), False)
    small = outputs(pe_testing.batch(task, n=3, left_pad_source=True), True)
    assert len(set(s.size(0) for s in left.values())) > 1  # the batch is padded
    for i, out in left.items():
        assert (out - right[i]).abs().max() < 1e-5
        if i in small:
            assert (out - small[i]).abs().max() < 1e-5


def _pe_params(name, layers, heads, d, cfg):
    """Closed-form encoding parameters of a whole model (both stacks)."""
    if name == "nope":
        return 0
    if name == "rpe":
        return 2 * layers * (heads if cfg.get("per_head") else 1) * (2 * cfg["k"] + 1) * d * 2
    if name == "t5":
        return 2 * 32 * heads
    mlp = 2 * 32 + 32 * 4 + 2 * 4 + 1  # 1 -> 32 -> 4 -> 1 with biases
    return (2 + 1) * heads * (1 + mlp)  # encoder: both directions; decoder: the left one


@pytest.mark.parametrize(
    "name,extra,cfg",
    [("nope", [], {}), ("rpe", [], dict(k=4)), ("rpe", ["--rpe-per-head", "--rpe-max-relative-position", "6"], dict(k=6, per_head=True)),
     ("t5", [], {}), ("at5", [], {})],
)
def test_parameter_counts_are_closed_form(data_bin, name, extra, cfg):
    from pe_plugin.models.validation import pe_parameter_count

    _, sape, _ = pe_testing.build_model(data_bin, "transformer_sape_tiny")
    _, model, _ = pe_testing.build_model(data_bin, f"transformer_{name}_tiny", extra)
    expected = _pe_params(name, 2, 2, 32, cfg)
    assert pe_parameter_count(model) == expected
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(model) == count(sape) + expected


@pytest.mark.parametrize("suffix,k,per_head", [("tiny", 4, False), ("wmt_en_de", 16, True),
                                              ("wmt_en_de_big", 8, False)])
def test_rpe_size_defaults_and_flags(data_bin, suffix, k, per_head):
    args = pe_testing.parse_train_args(data_bin, f"transformer_rpe_{suffix}")
    assert args.rpe_max_relative_position == k and getattr(args, "rpe_per_head", False) == per_head
    args = pe_testing.parse_train_args(data_bin, f"transformer_rpe_{suffix}", ["--rpe-max-relative-position", "2"])
    assert args.rpe_max_relative_position == 2


def _rpe_tables(model):
    """Shapes of every relative table of the model's two stacks."""
    return {tuple(t.shape) for stack in (model.encoder, model.decoder) for t in (stack.pe.key_table, stack.pe.value_table)}


def test_rpe_base_tables_are_per_layer_and_head_and_big_shares(data_bin):
    """Shaw et al. 2018, section 4.1: base k = 16 with "unique edge representations per layer and head", big
    k = 8 per layer (shared by heads). Shapes (L, H|1, 2k+1, d_h) and the closed-form count 2 stacks x L x (H|1)
    x (2k+1) x d_h x 2 tables. Base used to share one table across heads: (6, 1, 33, 64), 50,688 parameters."""
    from pe_plugin.models.validation import pe_parameter_count

    # shapes and counts only: the models are built on the meta device (no storage, no initialisation)
    _, base, _ = pe_testing.build_model(data_bin, "transformer_rpe_wmt_en_de", device="meta")
    assert _rpe_tables(base) == {(6, 8, 33, 64)}
    assert pe_parameter_count(base) == 2 * 6 * 8 * 33 * 64 * 2 == 405_504
    assert "rpe_per_head:True|rpe_shared_heads:False" in base.encoder.pe.signature()
    del base
    _, big, _ = pe_testing.build_model(data_bin, "transformer_rpe_wmt_en_de_big", device="meta")
    assert _rpe_tables(big) == {(6, 1, 17, 64)}  # d 1024 / 16 heads
    assert pe_parameter_count(big) == 2 * 6 * 1 * 17 * 64 * 2 == 26_112
    del big
    # flags win over the size defaults, either way
    _, shared, _ = pe_testing.build_model(data_bin, "transformer_rpe_wmt_en_de", ["--rpe-shared-heads"], device="meta")
    assert _rpe_tables(shared) == {(6, 1, 33, 64)} and pe_parameter_count(shared) == 2 * 6 * 33 * 64 * 2
    assert "rpe_per_head:False|rpe_shared_heads:True" in shared.encoder.pe.signature()
    del shared
    _, narrow, _ = pe_testing.build_model(data_bin, "transformer_rpe_wmt_en_de", [  # multi30k's small size
        "--encoder-layers", "3", "--decoder-layers", "3", "--encoder-embed-dim", "256", "--decoder-embed-dim", "256",
        "--encoder-attention-heads", "4", "--decoder-attention-heads", "4"], device="meta")
    assert _rpe_tables(narrow) == {(3, 4, 33, 64)}
    _, tiny, _ = pe_testing.build_model(data_bin, "transformer_rpe_tiny", ["--rpe-per-head"])
    assert _rpe_tables(tiny) == {(2, 2, 9, 32)}


def test_at5_layer_placement(data_bin):
    for extra, biased in (([], [True, False]), (["--at5-all-layers"], [True, True])):
        _, model, _ = pe_testing.build_model(data_bin, "transformer_at5_tiny", extra)
        for stack in (model.encoder, model.decoder):
            assert [isinstance(layer.self_attn, PEAttention) for layer in stack.layers] == biased
            assert stack.pe.max_length == 256  # the official divisor, whatever --max-*-positions (1024 here)
        assert all(not isinstance(layer.encoder_attn, PEAttention) for layer in model.decoder.layers)


@torch.no_grad()
def _at5_reference(pe, r, divisor):
    """AT5's bias of each distance r (R,) per head, from the module's raw parameters and the equations of
    Wu et al. / the official code, with slopes ReLU(a~) / ``divisor``: (H, R)."""
    out = torch.zeros(pe.slope.size(1), r.numel(), dtype=torch.float64)
    for h in range(out.size(0)):
        for i, dist in enumerate(r.tolist()):
            side = 1 if dist > 0 else 0  # g+ / slope a to the right, g- / slope b to the left and at 0
            if side >= pe.slope.size(0):
                continue  # causal: no g+, future keys are masked (bias 0)
            slope = max(float(pe.slope[side, h, 0]), 0.0) / divisor
            f = 1 - math.exp(-slope * abs(dist))
            x = torch.sigmoid(f * pe.w1[side, h, 0].double() + pe.c1[side, h, 0].double())  # (l1,)
            x = torch.sigmoid(x @ pe.w2[side, h].double() + pe.c2[side, h, 0].double())  # (l2,)
            out[h, i] = float(x @ pe.w3[side, h, :, 0].double() + pe.c3[side, h, 0, 0].double())
    return out


@pytest.mark.slow
def test_at5_slopes_are_divided_by_256_whatever_the_max_positions(data_bin):
    """The official code divides the slopes by its trainer's max_length = 256. With --max-source/target-positions
    1024 (every recipe's), the bias at base size must be the one of slopes ReLU(a~) / 256, computed here from the
    module's raw parameters; the old divisor max(256, max positions) = 1024 gives slopes 4x smaller and fails
    (the MLPs are excited so that f's change shows in the bias; the check below proves it does).
    --at5-max-length still overrides the divisor."""
    lims = ["--max-source-positions", "1024", "--max-target-positions", "1024"]
    r = torch.arange(-300, 301)
    for extra, divisor in (([], 256), (["--at5-max-length", "1024"], 1024)):
        _, model, _ = pe_testing.build_model(data_bin, "transformer_at5_wmt_en_de", lims + extra)
        for stack in (model.encoder, model.decoder):
            pe = stack.pe
            torch.manual_seed(0)
            with torch.no_grad():
                for name, p in pe.named_parameters():
                    if name != "slope":  # slopes keep their U(1, 15) init
                        p.normal_(0, 1.0)
            assert pe.dims.max_positions == 1024 and 1 <= pe.slope.min() and pe.slope.max() <= 15
            with torch.no_grad():
                bias = pe.offset_bias(r).double()  # (H, R), eval mode: no MLP dropout
            torch.testing.assert_close(bias, _at5_reference(pe, r, divisor), rtol=0, atol=1e-5)
            other = _at5_reference(pe, r, 1024 if divisor == 256 else 256)
            assert (bias - other).abs().max() > 1e-2  # the other divisor would not pass


def test_at5_checkpoint_without_slope_scale_keeps_its_old_divisor(data_bin):
    """A model saved before the divisor was stored had max(256, max positions): loading its state dict (no
    ``slope_scale``) restores that divisor, so that an old checkpoint computes what it was trained to."""
    for lims, old in ((["--max-source-positions", "1024", "--max-target-positions", "1024"], 1024.0),
                      (["--max-source-positions", "100", "--max-target-positions", "100"], 256.0)):
        _, model, _ = pe_testing.build_model(data_bin, "transformer_at5_tiny", lims)
        state = {k: v for k, v in model.state_dict().items() if not k.endswith("slope_scale")}
        assert len(state) == len(model.state_dict()) - 2  # one per stack
        _, fresh, _ = pe_testing.build_model(data_bin, "transformer_at5_tiny", lims)
        fresh.load_state_dict(state)
        assert fresh.encoder.pe.max_length == fresh.decoder.pe.max_length == old
        fresh.load_state_dict(model.state_dict())  # a new checkpoint carries its divisor
        assert fresh.encoder.pe.max_length == 256.0 and fresh.encoder.pe.signature().endswith("|slope_scale:256")


@pytest.mark.parametrize("suffix", ["tiny", "wmt_en_de", "wmt_en_de_big"])
def test_rpe_help_states_the_defaults_each_size_builds_with(data_bin, suffix):
    """``python -m pe_plugin transformer_rpe_<size>`` prints the flags' values next to their help: the sizes the help
    of --rpe-per-head names as on / off are the values each architecture sets, --rpe-shared-heads is off at every
    size as its help says, and the tables built have one head or H accordingly."""
    import dataclasses
    import re

    from pe_plugin.encodings.shaw import ShawConfig
    from pe_plugin.naming import CLASS_OF_SUFFIX

    helps = {f.name: f.metadata.get("help", "") for f in dataclasses.fields(ShawConfig)}
    sizes = lambda state, text: set(re.search(rf"{state} at ((?:\w+(?: and )?)+) size", text).group(1).split(" and "))
    on, off = sizes("on", helps["rpe_per_head"]), sizes("off", helps["rpe_per_head"])
    assert on | off == set(CLASS_OF_SUFFIX.values()) and not on & off
    assert "off at every size" in helps["rpe_shared_heads"]
    _, model, args = pe_testing.build_model(data_bin, f"transformer_rpe_{suffix}")
    cfg = model.encoder.pe.cfg  # the values the flags took (the printed ones)
    assert cfg.rpe_per_head == (CLASS_OF_SUFFIX[suffix] in on) and cfg.rpe_shared_heads is False
    assert model.encoder.pe.key_table.size(1) == (args.encoder_attention_heads if cfg.rpe_per_head else 1)


# ---- issue 44: behaviours a planted bug could change unseen -------------------------------------------------
# (N, max distance, bidirectional, n = i - j): n / e = (D / e)^(k / (N' - e)) exactly, so ln(n/e) / ln(D/e) (N' - e)
# is an integer k in exact arithmetic; float32 lands on it or above (bucket e + k), float64 just below (e + k - 1)
T5_FLOAT32_BOUNDARIES = [(10, 160, False, 10), (10, 160, False, 20), (10, 160, False, 80), (20, 160, True, 10),
                         (20, 320, False, 40)]


@pytest.mark.parametrize("num_buckets,max_distance,bidirectional,n", T5_FLOAT32_BOUNDARIES)
def test_t5_bucket_takes_the_logarithm_in_float32(num_buckets, max_distance, bidirectional, n):
    """The docstring's claim: on a bucket boundary the float32 logarithm of the references (HF, numpy float32
    here) and float64 disagree by one, and t5_bucket gives the float32 bucket."""
    nb = num_buckets // 2 if bidirectional else num_buckets
    exact = nb // 2
    in_float64 = exact + int(math.log(n / exact) / math.log(max_distance / exact) * (nb - exact))
    expected = hf_bucket(-n, bidirectional, num_buckets, max_distance)  # key n to the left
    assert expected == in_float64 + 1  # a boundary indeed: the precision decides
    assert t5_bucket(torch.tensor([-n]), bidirectional, num_buckets, max_distance).tolist() == [expected]


@pytest.mark.parametrize("side", ["encoder", "decoder"])
@pytest.mark.parametrize("from_mask", [True, False], ids=["columns", "values"])
def test_at5_training_bias_applies_the_mlp_dropout_after_the_first_sigmoid(side, from_mask):
    """In training, g(f) = W3 sigmoid(W2 drop(sigmoid(W1 f + c1)) + c2) + c3 with the default dropout 0.5, one mask
    per (side, head, offset, unit): the reference draws the same mask from the same seed (a dropout of ones of the
    (S,H,R,l1) shape) and evaluates the MLP per offset and head in float64."""
    pe = make_pe("at5", side, init=excite)  # default --at5-mlp-dropout 0.5
    pe.train()
    t = 7
    pos = Positions.from_mask(None, t, t, "cpu") if from_mask else Positions(torch.arange(t)[None], torch.arange(t)[None])
    offsets = torch.arange(1 - t, t)  # r = j - i of the pass, in order (R,)
    s, l1 = pe.slope.size(0), pe.w1.size(-1)
    torch.manual_seed(5)
    mask = F.dropout(torch.ones(s, H, len(offsets), l1), 0.5, training=True).double()  # 0 or 1 / (1 - p)
    torch.manual_seed(5)
    with torch.no_grad():
        got = pe.position_bias(pos)[0].double()  # (H,T,T)
    p = {n: v.detach().double() for n, v in pe.named_parameters()}
    ref = torch.zeros(H, t, t, dtype=torch.float64)
    for h in range(H):
        for ri, r in enumerate(offsets.tolist()):
            side_ = 0 if r <= 0 else 1
            if side_ >= s:
                continue  # causal: future keys get 0 (masked)
            f = 1 - math.exp(-max(p["slope"][side_, h, 0].item(), 0.0) / pe.max_length * abs(r))
            x = torch.sigmoid(f * p["w1"][side_, h, 0] + p["c1"][side_, h, 0]) * mask[side_, h, ri]  # (l1,)
            x = torch.sigmoid(x @ p["w2"][side_, h] + p["c2"][side_, h, 0])  # (l2,)
            g = x @ p["w3"][side_, h][:, 0] + p["c3"][side_, h, 0, 0]
            for i in range(t):
                if 0 <= i + r < t:
                    ref[h, i, i + r] = g
    keep = torch.ones(t, t, dtype=torch.bool) if side == "encoder" else torch.ones(t, t).tril().bool()
    torch.testing.assert_close(got[:, keep], ref[:, keep], rtol=1e-5, atol=1e-5)
    pe.eval()  # and the dropout is what made the difference: without it the bias is another
    assert (pe.position_bias(pos)[0].double() - got)[:, keep].abs().max() > 1e-3


def test_rpe_tables_start_normal_with_std_d_to_the_minus_half():
    """Shaw's tables are initialised N(0, d^-1/2) (docs/encodings.md §RPE): mean 0 and that std, within the sampling
    error of 2 x 33 x 32 values per table (about 2%)."""
    cls = PE_REGISTRY["rpe"]
    torch.manual_seed(0)
    pe = cls.build(cls.config_cls(rpe_max_relative_position=16), Dims(64, 2, 2, 64, 1, "encoder"), {})
    d = 32
    for table in (pe.key_table, pe.value_table):
        assert abs(table.std().item() / d ** -0.5 - 1) < 0.1 and abs(table.mean().item()) < 0.02


@pytest.mark.parametrize("side,buckets,distance,exact", [("encoder", 8, 2, 2), ("decoder", 8, 4, 4),
                                                         ("encoder", 3, 10, 0)])
def test_t5_settings_without_room_for_log_buckets_are_refused(side, buckets, distance, exact):
    """N buckets: N/2 per direction for the encoder (both signs), N for the decoder (causal); half of them exact.
    A maximum distance at or below the exact ones, or under 2 buckets per direction, is refused with the counts
    as whole numbers: exact = N // 2 // 2 (encoder) or N // 2 (decoder), computed here from the definition."""
    with pytest.raises(ValueError) as err:
        make_pe("t5", side, t5_num_buckets=buckets, t5_max_distance=distance, init=excite)
    assert f"--t5-num-buckets {buckets} / --t5-max-distance {distance}" in str(err.value)
    assert f"above the {exact} exact buckets" in str(err.value)


@pytest.mark.parametrize("side,buckets,distance,ok", [
    ("encoder", 4, 8, True),  # one exact bucket per direction: the fewest that works
    ("encoder", 3, 8, False),  # none
    ("decoder", 2, 8, True),  # causal: one direction, one exact bucket
    ("encoder", 8, 3, True),  # two exact buckets, a maximum distance just above them
    ("encoder", 8, 2, False),  # ... and at them
])
def test_t5_takes_the_fewest_buckets_that_work(side, buckets, distance, ok):
    """T5's bias at the edges of its settings (survivor: pe_plugin/encodings/t5_bias.py:47 `exact < 1` ->
    `exact <= 1`, which refuses one exact bucket per direction): exact = buckets / directions / 2 must be at least
    1 and the maximum distance above it."""
    from pe_plugin.encodings import PE_REGISTRY, Dims

    cls = PE_REGISTRY["t5"]
    cfg = cls.config_cls(t5_num_buckets=buckets, t5_max_distance=distance)
    build = lambda: cls.build(cfg, Dims(8, 2, 1, 64, 1, side), {})  # noqa: E731
    if ok:
        assert build().table.shape == (buckets, 2)
    else:
        with pytest.raises(ValueError, match=f"--t5-num-buckets {buckets} / --t5-max-distance {distance}"):
            build()


# ---- RPE (Shaw): per-head or shared tables -----------------------------------------------------------------
@pytest.mark.parametrize("per_head,shared_heads,heads", [(False, False, 1), (True, False, 4), (True, True, 1),
                                                         (False, True, 1)])
def test_rpe_builds_per_head_tables_unless_told_to_share(per_head, shared_heads, heads):
    """Shaw's tables (L, H|1, 2k+1, d): one per layer and head with --rpe-per-head, one per layer shared by the
    heads without it or with --rpe-shared-heads (which wins, and the built encoding's config says so): 2 L H
    (2k+1) d parameters for the two tables."""
    pe = pe_testing.make_pe("rpe", dim=16, heads=4, layers=2, rpe_max_relative_position=3, rpe_per_head=per_head,
                            rpe_shared_heads=shared_heads)
    assert tuple(pe.key_table.shape) == tuple(pe.value_table.shape) == (2, heads, 7, 4)
    assert sum(p.numel() for p in pe.parameters()) == 2 * 2 * heads * 7 * 4
    assert pe.cfg.rpe_per_head == (heads > 1)


# ---- T5: the bias in the table's dtype -----------------------------------------------------------------------
def t5_reference(pe, tq, tk):
    """E[bucket(j - i), h] as T5 reads, (1,H,Tq,Tk), in the table's dtype."""
    from pe_plugin.encoding_parts.relative import t5_bucket

    rel = torch.arange(tk).unsqueeze(0) - torch.arange(tk - tq, tk).unsqueeze(1)  # (Tq,Tk) j - i
    bucket = t5_bucket(rel, not pe.dims.causal, pe.cfg.t5_num_buckets, pe.cfg.t5_max_distance)
    return pe.table[bucket].permute(2, 0, 1).unsqueeze(0)


def test_t5_bias_of_a_model_built_in_float64_is_float64():
    """A T5 encoding built under torch.set_default_dtype(torch.float64) (its table float64, its constant one-hot
    float32) computes its bias in float64, the table's values at each pair's bucket."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        pe = pe_testing.make_pe("t5", "encoder", dim=16, heads=2, t5_num_buckets=8, t5_max_distance=6)
        assert pe.table.dtype == torch.float64
        bias = pe.position_bias(Positions.from_mask(None, 9, 9, "cpu"))
    finally:
        torch.set_default_dtype(before)
    assert bias.dtype == torch.float64
    torch.testing.assert_close(bias, t5_reference(pe, 9, 9), rtol=0, atol=1e-12)


def test_t5_bias_follows_a_table_loaded_in_half_precision():
    """A T5 table assigned from a float16 state dict (``load_state_dict(assign=True)``, as a checkpoint saved by a
    --fp16 run is loaded onto a model built on the meta device) gives a float16 bias, the table's values."""
    pe = pe_testing.make_pe("t5", "decoder", dim=16, heads=2, t5_num_buckets=8, t5_max_distance=6)
    pe.load_state_dict({"table": torch.randn(8, 2).half()}, assign=True)
    bias = pe.position_bias(Positions.from_mask(None, 5, 5, "cpu"))
    assert bias.dtype == torch.float16
    torch.testing.assert_close(bias, t5_reference(pe, 5, 5), rtol=0, atol=0)


# ---- T5's buckets: long whatever the distances' dtype ----------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32])
@pytest.mark.parametrize("side", ["encoder", "decoder"])
def test_t5_buckets_distances_of_any_real_dtype_as_long(side, dtype):
    """``relative.t5_bucket`` of whole distances held in another dtype (float positions a caller computed, int32)
    gives the long buckets of the distances, T5's own; and T5's bias of positions given as such values is the
    table's rows at those buckets, the bias of the same positions given as long."""
    from pe_plugin.encoding_parts.relative import t5_bucket

    bidirectional = side == "encoder"
    rel = torch.arange(-30, 31)
    got = t5_bucket(rel.to(dtype), bidirectional, 8, 20)
    assert got.dtype == torch.long
    assert got.tolist() == [hf_bucket(r, bidirectional, 8, 20) for r in rel.tolist()]
    pe = pe_testing.make_pe("t5", side, dim=16, heads=2, t5_num_buckets=8, t5_max_distance=20)
    q, k = torch.tensor([[0, 3, 9, 25]]), torch.tensor([[0, 3, 9, 25, 31]])
    want = pe.position_bias(Positions(q, k))
    torch.testing.assert_close(pe.position_bias(Positions(q.to(dtype), k.to(dtype))), want, rtol=0, atol=0)
    rows = torch.tensor([[hf_bucket(j - i, bidirectional, 8, 20) for j in k[0].tolist()]
                         for i in q[0].tolist()])
    torch.testing.assert_close(want, pe.table[rows].permute(2, 0, 1).unsqueeze(0), rtol=0, atol=0)


# ---- AT5: the distances in the slopes' dtype -------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float16, torch.float64])
@pytest.mark.parametrize("side", ["encoder", "decoder"])
def test_at5_bias_of_an_old_checkpoint_assigned_in_another_dtype_is_in_its_parameters_dtype(side, dtype):
    """An AT5 state dict in float16 or float64 saved before the slope divisor was (no ``slope_scale``: loading
    restores the old divisor, here --at5-max-length 300, as a float32 tensor), assigned onto the encoding
    (``load_state_dict(assign=True)``): the distances are taken in the slopes' dtype, so the bias is in that dtype
    and equals, bit for bit, that of the same encoding converted to it (its divisor in that dtype too: |r| / 300
    rounds differently in float32), over a full pass and a decoding step."""
    pe = pe_testing.make_pe("at5", side, dim=16, heads=2, at5_max_length=300)
    converted = copy.deepcopy(pe).to(dtype)
    old = {k: v.to(dtype) for k, v in pe.state_dict().items() if k != "slope_scale"}
    loaded = copy.deepcopy(pe)
    loaded.load_state_dict(old, assign=True)
    assert loaded.slope.dtype == dtype and loaded.slope_scale.dtype == torch.float32 and loaded.max_length == 300
    for tq, tk in ((9, 9), (1, 300)):
        pos = Positions.from_mask(None, tq, tk, "cpu")
        got, want = loaded.position_bias(pos), converted.position_bias(pos)
        assert got.dtype == want.dtype == dtype
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
@pytest.mark.parametrize("side", ["encoder", "decoder"])
def test_t5_bias_converts_nothing_per_call_in_the_models_dtype(side, dtype):
    """T5's bias in a float32 encoding, and in one converted to float16 or float64 with the model (``.half()`` as
    --fp16 does, ``.double()``): one matrix product of the table with its constant one-hot of the buckets, which
    is already in the table's dtype, so a call converts and copies nothing (no ``_to_copy``); the values are the
    table's at each pair's bucket."""
    pe = pe_testing.make_pe("t5", side, dim=16, heads=2, t5_num_buckets=8, t5_max_distance=6).to(dtype)
    for tq, tk in ((9, 9), (1, 12)):
        with pe_testing.OpLog() as log:
            bias = pe.position_bias(Positions.from_mask(None, tq, tk, "cpu"))
        assert log.ops["_to_copy"] == 0 and log.ops["mm"] == 1, dict(log.ops)
        assert bias.dtype == dtype
        torch.testing.assert_close(bias, t5_reference(pe, tq, tk), rtol=0, atol=0)

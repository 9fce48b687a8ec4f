"""The attention's fast paths (``--pe-attention-impl auto``) against the reference formulation, and the host syncs
of a training step and of a decoding step against stock fairseq's.

A GPU step stalls whenever Python reads a value from the device. The syncs are counted with a dispatch mode on
the CPU: the aten ops that read a value back (``_local_scalar_dense`` for ``int()``/``bool()``/``.item()``,
``nonzero``, ``is_nonzero``, ``equal``) are the ones that wait for the GPU there.
"""
import traceback
from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import pe_testing
from pe_references import loop_matmul
from pe_testing import SMALL, OpLog, assert_same_step, make_attention, make_pe
from pe_plugin.encodings import PE_REGISTRY
from pe_plugin.encoding_parts.base import Positions
from pe_plugin.encoding_parts.posnet_kernels import positional_matmul
from pe_plugin.modules.pe_attention import PEAttention

SYNC_OPS = {"_local_scalar_dense", "nonzero", "is_nonzero", "item", "equal"}
PLUGIN_DIR = str(pe_testing.REPO / "pe_plugin")

# settings that take other code paths than the defaults
VARIANTS = {
    "rpe": [["--rpe-no-values"], ["--rpe-no-keys"], ["--rpe-shared-heads"]],
    "at5": [["--at5-all-layers"]],
    "alibi": [["--alibi-encoder", "directional"]],
    "posnet_attn": [["--posnet-attn-per-layer"]],
    "rope": [["--rope-fraction", "0.5"]],
}
CASES = [(pe, []) for pe in PE_REGISTRY] + [(pe, v) for pe, vs in VARIANTS.items() for v in vs]
IDS = [pe + "".join(v).replace("--", "-") for pe, v in CASES]


class SyncCounter(TorchDispatchMode):
    """Counts the ops that read a value from the device, and where in pe_plugin they were asked for."""

    def __init__(self):
        super().__init__()
        self.count, self.from_plugin = 0, Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ in SYNC_OPS:
            self.count += 1
            frames = [f for f in traceback.extract_stack() if "fairseq" in f.filename or PLUGIN_DIR in f.filename]
            if frames and PLUGIN_DIR in frames[-1].filename:  # the innermost library frame is the plugin's
                self.from_plugin[f"{frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}"] += 1
        return func(*args, **(kwargs or {}))


def _syncs(data_bin, arch, extra=()):
    """Syncs of one training step (forward and backward of the loss, left-padded sources, right-padded targets)
    and of one incremental decoding step after two."""
    task, model, args = pe_testing.build_model(data_bin, arch, SMALL + list(extra))
    sample = pe_testing.batch(task, "train", n=8)
    criterion = task.build_criterion(args)
    model.train()
    train = SyncCounter()
    with train:
        loss, _, _ = criterion(model, sample)
        loss.backward()
    model.eval()
    net, step, state = sample["net_input"], SyncCounter(), {}
    with torch.no_grad():
        enc = model.encoder(net["src_tokens"], net["src_lengths"])
        prev = net["prev_output_tokens"][:, :3]
        model.decoder(prev[:, :1], enc, incremental_state=state)
        model.decoder(prev[:, :2], enc, incremental_state=state)
        with step:
            model.decoder(prev[:, :3], enc, incremental_state=state)
    return train, step


@pytest.fixture(scope="module")
def stock_syncs(data_bin):
    train, step = _syncs(data_bin, "transformer_wmt_en_de")
    assert train.count > 0 and step.count > 0  # the counter sees fairseq's own (its padding checks)
    return train.count, step.count


@pytest.mark.parametrize("pe,extra", CASES, ids=IDS)
def test_no_host_syncs_beyond_stock_fairseq(data_bin, stock_syncs, pe, extra):
    train, step = _syncs(data_bin, f"transformer_{pe}_wmt_en_de", extra)
    assert not train.from_plugin and not step.from_plugin, (train.from_plugin, step.from_plugin)
    assert train.count <= stock_syncs[0] and step.count <= stock_syncs[1], (train.count, step.count, stock_syncs)


def test_the_sync_counter_sees_a_read_from_the_plugin(data_bin, monkeypatch):
    """Negative control: a position check that reads the device, as the released code's, is caught."""
    cls = PE_REGISTRY["lape"]
    check = cls.check_length
    monkeypatch.setattr(cls, "check_length", lambda self, pos: (int(pos.q.max()), check(self, pos)))
    train, _ = _syncs(data_bin, "transformer_lape_wmt_en_de")
    assert sum(train.from_plugin.values()) == 2  # encoder and decoder embeddings


# ---- fast paths equal the reference ----------------------------------------------------------------------------
def _pair(data_bin, pe, extra):
    """The same float64 model (same seed) with the fast and the reference attention."""
    models = []
    for impl in ("auto", "reference"):
        flags = SMALL + list(extra) + ["--pe-attention-impl", impl, "--attention-dropout", "0"]
        task, model, _ = pe_testing.build_model(data_bin, f"transformer_{pe}_wmt_en_de", flags)
        models.append(model.double())
    return task, models


@pytest.mark.parametrize("pe,extra", CASES, ids=IDS)
def test_fast_path_equals_reference_in_training_and_decoding(data_bin, pe, extra):
    task, (fast, ref) = _pair(data_bin, pe, extra)
    sample = pe_testing.batch(task, "train", n=8)
    assert_same_step(task, fast, ref, sample)
    # incremental decoding: beam search step by step equals the full pass, on both paths
    for model in (fast, ref):
        model.eval()
        assert pe_testing.rescore_max_diff(task, model, pe_testing.batch(task, "test", n=6), beam=3) < 1e-5  # the generator keeps scores in float32


def test_fast_path_builds_the_shared_bias_once_per_pass(data_bin):
    """T5's bias: once per stack pass on the fast path (encoder + decoder = 2), once per layer on the reference."""
    counts = {}
    for impl in ("auto", "reference"):
        task, model, _ = pe_testing.build_model(data_bin, "transformer_t5_wmt_en_de",
                                                SMALL + ["--pe-attention-impl", impl])
        calls = []
        for pe in (model.encoder.pe, model.decoder.pe):
            original = pe.position_bias
            pe.position_bias = lambda pos, original=original: calls.append(1) or original(pos)
        net = pe_testing.batch(task, "train", n=4)["net_input"]
        model(net["src_tokens"], net["src_lengths"], net["prev_output_tokens"])
        counts[impl] = len(calls)
    assert counts == {"auto": 2, "reference": 6}


def test_rpe_without_values_keeps_the_fused_kernel(monkeypatch):
    """--rpe-no-values: no value term, so attention takes the fused kernel with the key term as its mask."""
    from pe_plugin.modules import pe_attention

    calls = []
    sdpa = pe_attention.sdpa  # modules/sdpa.attention: F.scaled_dot_product_attention, or the CPU's fused kernel
    monkeypatch.setattr(pe_attention, "sdpa", lambda *a, **k: calls.append(1) or sdpa(*a, **k))
    for no_values, expected in ((True, [1]), (False, [])):
        calls.clear()
        attn = make_attention(make_pe("rpe", "encoder", rpe_max_relative_position=2, rpe_no_values=no_values))
        attn(torch.randn(5, 3, attn.embed_dim), None, None, need_weights=False)
        assert calls == expected


# ---- the kernel product of positions made from a padding mask -----------------------------------------------
@pytest.mark.parametrize("lengths,left,lmax", [
    ([7, 5, 1, 3], True, 9), ([7, 5, 1, 3], False, 9), ([1, 1], True, 9), ([6, 6], False, 9), ([9, 3, 12], True, 5)])
def test_rotated_kernel_product_equals_per_token_loop(lengths, left, lmax):
    """The sync-free rotation (positions from a mask) against a loop over tokens, values and gradients; with
    L_max 5, positions beyond it reuse the last kernel."""
    torch.manual_seed(0)
    t, b = max(lengths), len(lengths)
    nonpad = torch.zeros(b, t, dtype=torch.bool)
    for row, n in enumerate(lengths):
        nonpad[row, slice(t - n, None) if left else slice(0, n)] = True
    pos = Positions.from_mask(nonpad, t, t, "cpu")
    assert pos.first_real() is not None  # the rotation, not the gather
    u = torch.randn(t, b, 2, 4, dtype=torch.double, requires_grad=True)
    phi = torch.randn(lmax, 4, 3, dtype=torch.double, requires_grad=True)
    y = positional_matmul(u, phi, pos) * nonpad.t()[:, :, None, None]
    ref = loop_matmul(u, phi, pos.q.clamp_max(lmax - 1), nonpad)  # phi[min(p, L_max - 1)], token by token
    torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12)
    w = torch.randn_like(y)
    for g, r in zip(torch.autograd.grad((y * w).sum(), (u, phi)), torch.autograd.grad((ref * w).sum(), (u, phi))):
        torch.testing.assert_close(g, r, rtol=1e-12, atol=1e-12)


def test_fp16_check_compares_half_with_the_fp32_reference():
    """The GPU check's own machinery on the CPU (tiny size): fp16 on the fast path stays within fp16 rounding of
    the fp32 reference, and a broken fp16 model (a position bias off by a constant per head) is flagged."""
    from pe_tools.bench.fp16_check import compare

    row = compare("t5", "tiny", batch=3, length=10, vocab=100, device="cpu")
    assert 0 < row["max_abs_lprob_diff"] < 0.05 and row["grad_rel_diff"] < 0.05 and row["argmax_agreement"] > 0.9
    cls = PE_REGISTRY["t5"]
    original = cls.position_bias
    try:
        cls.position_bias = lambda self, pos: original(self, pos) + (
            torch.arange(self.dims.num_heads, dtype=torch.float32).view(1, -1, 1, 1) * pos.rel.clamp_min(0)
            if self.attention_impl == "auto" else 0)
        broken = compare("t5", "tiny", batch=3, length=10, vocab=100, device="cpu")
    finally:
        cls.position_bias = original
    assert broken["max_abs_lprob_diff"] > 0.05


@pytest.mark.parametrize("pe", ["rpe", "t5", "alibi", "kerple", "rope"])
def test_fast_path_equals_reference_with_right_padded_sources(data_bin, pe):
    """Padding on the other side of the sources (targets stay right-padded, as fairseq pads them)."""
    task, (fast, ref) = _pair(data_bin, pe, [])
    assert_same_step(task, fast, ref, pe_testing.batch(task, "train", n=8, left_pad_source=False))


# ---- what a training step dispatches and keeps ------------------------------------------------------------------
def op_step(model, sample) -> Counter:
    """The ATen ops of one training step (forward and backward) of ``model`` on ``sample``."""
    net = sample["net_input"]
    log = OpLog()
    with log:
        logits, _ = model(net["src_tokens"], net["src_lengths"], net["prev_output_tokens"])
        logits.sum().backward()
    return log.ops


ATOMIC_OPS = {"scatter_add", "scatter_add_", "index_add", "index_add_", "scatter_reduce", "index_put", "index_put_",
              "_index_put_impl_", "gather"}  # (the token embedding's backward is fairseq's own: not listed)


@pytest.mark.parametrize("extra", [[], ["--rpe-shared-heads"], ["--rpe-no-values"]], ids=["per-head", "shared", "keys"])
def test_rpe_training_step_scatters_nothing(data_bin, extra):
    """Shaw's terms by strided views and matrix products: no scatter, gather or index add (atomic adds on a GPU)
    in forward or backward. Negative control: the same step with a gather-based key term is caught."""
    from pe_plugin.encodings import shaw

    task, model, _ = pe_testing.build_model(data_bin, "transformer_rpe_wmt_en_de", SMALL + extra)
    model.train()
    sample = pe_testing.batch(task, "train", n=6)
    ops = op_step(model, sample)
    assert ops["bmm"] + ops["mm"] > 0 and not set(ops) & ATOMIC_OPS, set(ops) & ATOMIC_OPS

    def gathered(r, onehot, into=None):  # the released formulation: gather (forward) and scatter_add (its backward)
        idx = onehot.o.argmax(-1)  # (Tq,Tk) each pair's bucket
        pairs = r.gather(-1, idx[:, None].expand(-1, r.size(1), -1)).transpose(0, 1)  # (Tq,N,Tk) -> (N,Tq,Tk)
        return pairs if into is None else into.add_(pairs)

    original = shaw.buckets_to_pairs
    try:
        shaw.buckets_to_pairs = gathered
        caught = set(op_step(model, sample))
        assert "gather" in caught and ("scatter_add" in caught or "--rpe-no-values" not in extra), caught
    finally:
        shaw.buckets_to_pairs = original


@pytest.mark.parametrize("pe,extra", [("t5", []), ("at5", []), ("at5", ["--at5-all-layers"])],
                         ids=["t5", "at5", "at5-all-layers"])
def test_distance_bias_training_step_scatters_nothing(data_bin, monkeypatch, pe, extra):
    """T5's table and AT5's per-distance MLP reach the (Tq,Tk) bias by strided views and a one-hot product: no
    index_put (accumulating in backward), gather or scatter in forward or backward. Negative control: the indexed
    equation (positions given as values take it) is caught."""
    from pe_plugin.encoding_parts.base import Positions

    task, model, _ = pe_testing.build_model(data_bin, f"transformer_{pe}_wmt_en_de", SMALL + extra)
    model.train()
    sample = pe_testing.batch(task, "train", n=6)
    ops = op_step(model, sample)
    assert ops["as_strided"] > 0 and not set(ops) & ATOMIC_OPS, set(ops) & ATOMIC_OPS
    monkeypatch.setattr(Positions, "columns", property(lambda self: False))  # the indexed path
    assert "index_put" in op_step(model, sample)


def test_half_precision_rpe_step_keeps_one_copy_of_the_probabilities(data_bin):
    """Under float16, Shaw's core (training) keeps no (B,H,Tq,Tk) tensor for backward (it recomputes the
    probabilities); the explicit path (weights requested) keeps them once per layer, in float16: no float32 copy."""
    task, model, _ = pe_testing.build_model(data_bin, "transformer_rpe_wmt_en_de", SMALL + ["--attention-dropout", "0"])
    model.half().train()
    net = pe_testing.batch(task, "train", n=6)["net_input"]
    src_t, tgt_t = net["src_tokens"].size(1), net["prev_output_tokens"].size(1)
    layers = [m for m in model.modules() if isinstance(m, PEAttention)]

    def kept_by_a_step():
        kept = {}

        def pack(t):
            if t.dim() == 4 and t.shape[-2:] in ((src_t, src_t), (tgt_t, tgt_t)):
                kept[t.untyped_storage().data_ptr()] = t.dtype
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(net["src_tokens"], net["src_lengths"], net["prev_output_tokens"])
        return kept

    assert kept_by_a_step() == {}  # the core
    for m in layers:
        m.capture_weights = True  # the explicit product
    kept = kept_by_a_step()
    assert float16_only(kept) and 0 < len(kept) <= len(layers) + 2, kept  # + the two stacks' masks


def float16_only(kept):
    return set(kept.values()) == {torch.float16}


# ---- a learned float mask in the CPU's fused kernel (modules/sdpa) ----------------------------------------------
@pytest.mark.parametrize("b,h,tq,tk,kind", [(3, 2, 5, 5, "bias"), (3, 2, 9, 9, "padded"), (2, 3, 9, 9, "left-causal"),
                                            (2, 2, 1, 6, "bias"), (2, 3, 4, 7, "padded")])
def test_learned_mask_attention_equals_the_math_path(b, h, tq, tk, kind):
    """``sdpa.attention`` with a mask that requires grad (a (1,H,Tq,Tk) bias; with -inf at padded keys; with a causal
    mask over left-padded rows, whose first queries see no key) against torch's own call, which takes its math path
    for such a mask: output and the gradients of q, k, v and the bias, in float64; and it runs the fused kernel."""
    from pe_plugin.modules.pass_context import aligned
    from pe_plugin.modules.sdpa import attention

    torch.manual_seed(0)
    q, k, v = (torch.randn(b, h, n, 8, dtype=torch.double, requires_grad=True) for n in (tq, tk, tk))
    bias = torch.randn(1, h, tq, tk, dtype=torch.double, requires_grad=True)
    pad = torch.zeros(b, 1, 1, tk, dtype=torch.bool)
    pad[0, ..., :2] = pad[1, ..., -1:] = kind != "bias"
    mask = bias.masked_fill(pad, float("-inf"))
    if kind == "left-causal":
        mask = mask + torch.full((tq, tk), float("-inf"), dtype=torch.double).triu(1)
    mask = aligned(mask)
    w = torch.randn(b, h, tq, 8, dtype=torch.double)
    ops = OpLog()
    with ops:
        out = attention(q, k, v, mask)
        grads = torch.autograd.grad((out * w).sum(), (q, k, v, bias), retain_graph=True)
    assert ops.ops["_scaled_dot_product_flash_attention_for_cpu"] == 1 and "_safe_softmax" not in ops.ops
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    for g, e in zip(grads, torch.autograd.grad((expected * w).sum(), (q, k, v, bias))):
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g, e, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("pe", ["t5", "kerple"])
def test_learned_bias_step_keeps_no_probabilities(data_bin, pe):
    """A learned position bias keeps the fused kernel in training: backward keeps no layer's (B,H,Tq,Tk)
    probabilities, only the two stacks' masks (torch's math path kept one per layer: 6 here), and the bias still
    gets its gradient."""
    task, model, _ = pe_testing.build_model(data_bin, f"transformer_{pe}_wmt_en_de", SMALL + ["--attention-dropout", "0"])
    model.train()
    net = pe_testing.batch(task, "train", n=6)["net_input"]
    src_t, tgt_t = net["src_tokens"].size(1), net["prev_output_tokens"].size(1)
    kept = set()

    def pack(t):
        if t.dim() == 4 and t.shape[-2:] in ((src_t, src_t), (tgt_t, tgt_t)):
            kept.add(t.untyped_storage().data_ptr())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits, _ = model(net["src_tokens"], net["src_lengths"], net["prev_output_tokens"])
    assert len(kept) <= 2, len(kept)
    logits.float().sum().backward()
    params = [p for side in (model.encoder, model.decoder) for p in side.pe.parameters()]
    assert params and all(p.grad is not None and p.grad.abs().sum() > 0 for p in params)  # the bias is learned


# ---- attention: the causal flag and the masks' dtype ---------------------------------------------------------
def stock_twin(attn):
    """fairseq's own MultiheadAttention with ``attn``'s weights (self-attention), in eval mode."""
    from fairseq.modules import MultiheadAttention

    stock = MultiheadAttention(attn.embed_dim, attn.num_heads, self_attention=True)
    stock.load_state_dict(attn.state_dict())
    return stock.eval()


@pytest.mark.parametrize("name", ["nope", "rope", "sape"])
def test_self_attention_without_a_causal_mask_sees_every_key(name):
    """Encoder self-attention of a batch without padding (fairseq passes no mask at all) attends to every key, the
    later ones too: what fairseq's stock attention computes (RoPE: with q and k rotated alike, a function of j - i;
    checked against the stock module for the encodings that leave attention alone, and for RoPE through the first
    query's dependence on the last token)."""
    pe = pe_testing.make_pe(name, dim=16, heads=2)
    attn = pe_testing.make_attention(pe)
    torch.manual_seed(0)
    x = torch.randn(6, 3, 16)  # (T, B, C)
    with torch.no_grad():
        out, _ = attn(x, x, x, need_weights=False)
        if name != "rope":
            want, _ = stock_twin(attn)(x, x, x, need_weights=False)
            torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-6)
        moved = x.clone()
        moved[-1] += 1.0  # the last token changes: the first query's output must change too
        out2, _ = attn(moved, moved, moved, need_weights=False)
    assert (out2[0] - out[0]).abs().max() > 1e-3


@pytest.mark.parametrize("call", ["full-pass-padded", "incremental"])
def test_a_causal_mask_of_another_float_dtype_is_taken_in_the_layers_dtype(call):
    """A layer called alone with fairseq's causal mask in float64 on a float32 layer: over a padded batch (the
    padding and the causal mask together), and in incremental decoding with two new queries over five keys (a
    (Tq, Tk) mask): the mask is taken in the layer's dtype (PyTorch's fused kernel refuses a mask of a wider dtype
    than the queries'), and the output is fairseq's stock attention's for the same calls with the same mask in
    float32."""
    pe = pe_testing.make_pe("nope", dim=16, heads=2, side="decoder")
    attn = pe_testing.make_attention(pe)
    stock = stock_twin(attn)
    torch.manual_seed(0)
    x = torch.randn(5, 2, 16)  # (T, B, C)
    causal = torch.triu(torch.full((5, 5), float("-inf"), dtype=torch.float64), 1)
    pads = torch.zeros(2, 5, dtype=torch.bool)
    pads[1, 3:] = True  # the second sentence: two pads at the end (every query still sees a real key)
    outs = []
    with torch.no_grad():
        for module, causal in ((attn, causal), (stock, causal.float())):
            if call == "full-pass-padded":
                out, _ = module(x, x, x, key_padding_mask=pads, attn_mask=causal, need_weights=False)
            else:
                state = {}
                module(x[:3], x[:3], x[:3], incremental_state=state, attn_mask=causal[:3, :3].float(),
                       need_weights=False)
                out, _ = module(x[3:], x[3:], x[3:], incremental_state=state, attn_mask=causal[3:, :],
                                need_weights=False)
            outs.append(out)
    assert outs[0].dtype == torch.float32
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-5, atol=1e-6)


def test_the_reference_attention_differentiates_its_softmax_in_float32_under_fp16():
    """--pe-attention-impl reference in float16 takes the softmax, and so its backward, in float32: the gradient
    of the logits is the exact (float64) one rounded once to float16. One head of 16 dimensions over 16 tokens
    whose keys, values and output projection are the identity, so that q's gradient is the logits' gradient
    times the scaling 1/4 (exact in float16)."""
    c = 16
    pe = pe_testing.make_pe("nope", dim=c, heads=1)
    pe.attention_impl = "reference"
    attn = pe_testing.make_attention(pe)
    torch.manual_seed(0)
    with torch.no_grad():
        for proj in (attn.k_proj, attn.v_proj, attn.out_proj):
            proj.weight.copy_(torch.eye(c))
            proj.bias.zero_()
        attn.q_proj.weight.normal_(0, 2.0)
        attn.q_proj.bias.zero_()
    attn = attn.half()
    x = torch.eye(c).unsqueeze(1).half()  # (T=C, B=1, C): q = W_q^T / 4, k = v = I
    grad_out = torch.randn(c, 1, c).half()
    out, _ = attn(x, x, x)
    out.backward(grad_out)
    logits = (attn.q_proj.weight.t().double() * attn.scaling)  # (T, C) = q k^T with k = I
    p = torch.softmax(logits, dim=-1)
    g = grad_out[:, 0].double()
    dlogits = p * (g - (p * g).sum(-1, keepdim=True))  # the softmax's backward, exact
    want = (dlogits * attn.scaling).t().half()  # W_q's gradient: x = I, q = x W_q^T * scaling
    got = attn.q_proj.weight.grad
    off = (got != want).sum().item()
    assert off <= 0.02 * got.numel(), f"{off} of {got.numel()} gradients are not the exact one rounded once"
    torch.testing.assert_close(got.double(), want.double(), rtol=2e-3, atol=1e-6)


def test_the_masked_cpu_attention_refuses_a_mask_with_the_causal_flag_as_pytorch_does():
    """modules/sdpa.attention with a float mask that needs a gradient: without the causal flag it is PyTorch's
    scaled_dot_product_attention (output and gradients); with it (a mask and is_causal together) it is refused
    as PyTorch refuses it, never computed without the causal part."""
    from pe_plugin.modules.sdpa import attention

    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 2, 5, 4).unbind(0)
    mask = torch.randn(1, 2, 5, 5, requires_grad=True)
    got = attention(q, k, v, mask)
    (g_mine,) = torch.autograd.grad(got.sum(), mask)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0)
    (g_torch,) = torch.autograd.grad(want.sum(), mask)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(g_mine, g_torch)
    with pytest.raises(RuntimeError) as torch_error:
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=True, scale=1.0)
    with pytest.raises(RuntimeError) as mine:
        attention(q, k, v, mask, is_causal=True)
    assert str(mine.value) == str(torch_error.value)


def test_the_masked_cpu_attention_leaves_dropout_and_a_mask_of_another_dtype_to_pytorch():
    """modules/sdpa.attention with a float mask that needs a gradient takes its own fused path only where that path
    computes what PyTorch computes: with attention dropout (training) the output is PyTorch's dropped-out one under
    the same seed, not the undropped one; a float32 mask with bfloat16 queries (PyTorch takes it, the CPU kernel
    wants one dtype) gives PyTorch's output and mask gradient."""
    from pe_plugin.modules.sdpa import attention

    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 2, 5, 4).unbind(0)
    mask = torch.randn(1, 2, 5, 5, requires_grad=True)
    torch.manual_seed(1)
    got = attention(q, k, v, mask, dropout_p=0.5)
    torch.manual_seed(1)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.5, scale=1.0)
    torch.testing.assert_close(got, want)
    assert not torch.allclose(got, attention(q, k, v, mask))  # dropout applied
    half = [t.bfloat16() for t in (q, k, v)]
    got = attention(*half, mask)
    (g_mine,) = torch.autograd.grad(got.float().sum(), mask)
    want = F.scaled_dot_product_attention(*half, attn_mask=mask, scale=1.0)
    (g_torch,) = torch.autograd.grad(want.float().sum(), mask)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(g_mine, g_torch)



def test_the_decoder_drops_its_padding_mask_only_for_right_padded_targets(data_bin):
    """Under the causal mask a real query of a right-padded target sees no pad key, so the fast path leaves the
    padding mask out there (pass_context); with --left-pad-target the pads stand before the real tokens and the
    mask must stay: the decoder is told which (``right_padded``), from the flag."""
    for extra, right in (([], True), (["--left-pad-target"], False)):
        _, model, _ = pe_testing.build_model(data_bin, "transformer_rope_wmt_en_de", SMALL + extra)
        assert model.decoder.right_padded is right, extra

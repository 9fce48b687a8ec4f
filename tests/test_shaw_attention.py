"""Shaw's attention core (``encodings.shaw.ShawAttention``, --pe-attention-impl auto) against the reference path (the
equations as they read, autograd's own backward) in float64: outputs and the gradients of q, k, v (through the
projections) and of both tables, on left- and right-padded batches, causal and not, per-head and shared tables,
keys switched off; ``gradcheck`` of the core itself, dropout included (its mask drawn once and replayed); fp16
close to fp32; what backward keeps; and no scatter, gather or index add in forward or backward."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from pe_shaw import C, CONFIGS, H, LAYERS, core_inputs, make, padded
from pe_testing import OpLog, make_pe

from pe_plugin.encodings.shaw import shaw_attention

D = C // H


def step(attn, x, pad, causal):
    """Output at real tokens and every gradient (input, projections, tables) of one weighted loss."""
    x = x.clone().requires_grad_()
    mask = torch.full((x.size(0),) * 2, float("-inf"), dtype=x.dtype).triu(1) if causal else None
    out, _ = attn(x, x, x, key_padding_mask=pad, attn_mask=mask, need_weights=False)
    real = ~pad.t()  # (T,B)
    torch.manual_seed(3)
    loss = (out * torch.randn_like(out))[real].sum()
    params = [x] + list(attn.parameters()) + list(attn.pe.parameters())
    return out[real], torch.autograd.grad(loss, params)


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("side,causal", [("encoder", False), ("decoder", True), ("decoder", False)])
def test_core_equals_reference_in_float64(config, side, causal):
    x, pad = padded(side)
    out, grads = step(make(config, side, "auto"), x, pad, causal)
    ref_out, ref_grads = step(make(config, side, "reference"), x, pad, causal)
    torch.testing.assert_close(out, ref_out, rtol=1e-10, atol=1e-10)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-10)


def test_core_is_the_path_taken_and_keeps_no_pair_tensor():
    """The auto path runs the core (no autograd softmax): backward keeps q, k, v views, R and P, and no
    (B,H,Tq,Tk) tensor; nothing scatters, gathers or adds by index in forward or backward."""
    attn = make("per_head", "encoder", "auto").train()
    x, pad = padded("encoder")
    kept = []

    def pack(t):
        kept.append(tuple(t.shape))
        return t

    log = OpLog()
    with log, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out, _ = attn(x, x, x, key_padding_mask=pad, need_weights=False)
        out.sum().backward()
    t = x.size(0)
    assert not [s for s in kept if len(s) >= 3 and s[-2:] == (t, t)], kept
    assert log.ops["_softmax"] == 2 and log.ops["_softmax_backward_data"] == 1  # forward, recomputed in backward
    atomic = {"scatter", "scatter_add", "scatter_add_", "index_add", "index_add_", "index_put", "index_put_",
              "_index_put_impl_", "gather", "scatter_reduce"}
    assert not set(log.ops) & atomic


@pytest.mark.parametrize("shape", [dict(), dict(tq=7, tk=7), dict(tq=1, tk=6), dict(k=0), dict(k=9),
                                   dict(shared=True)])
def test_gradcheck(shape):
    q, k, v, wk, wv, masks, consts = core_inputs(**shape)
    h = q.size(1)

    def f(q, k, v, wk, wv):
        return shaw_attention(q, k, v, wk.expand(h, -1, -1), wv.expand(h, -1, -1), masks, consts, 0.0)

    assert torch.autograd.gradcheck(f, (q, k, v, wk, wv))


def test_gradcheck_with_dropout_replays_its_mask():
    """With dropout the forward's mask must be the one backward applies: gradcheck reseeds before every call,
    so every evaluation draws the same mask, and the analytical gradient must match the numerical one."""
    q, k, v, wk, wv, masks, consts = core_inputs()

    def f(q, k, v, wk, wv):
        torch.manual_seed(5)
        return shaw_attention(q, k, v, wk, wv, masks, consts, 0.3)

    assert torch.autograd.gradcheck(f, (q, k, v, wk, wv))
    out = f(q, k, v, wk, wv)
    assert not torch.allclose(out, shaw_attention(q, k, v, wk, wv, masks, consts, 0.0))  # dropout applied


def test_incremental_step_equals_full_pass():
    """A decoding step (Tq = 1 of Tk keys, no gradient) takes the core too and matches the full pass's row."""
    attn = make("per_head", "decoder", "auto").eval()
    x, _ = padded("decoder", lengths=(9, 9, 9))
    t = x.size(0)
    mask = torch.full((t, t), float("-inf"), dtype=x.dtype).triu(1)
    full, _ = attn(x, x, x, attn_mask=mask, need_weights=False)
    state, steps = {}, []
    with torch.no_grad():
        for i in range(t):
            out, _ = attn(x[i:i + 1], x[i:i + 1], x[i:i + 1], incremental_state=state, need_weights=False)
            steps.append(out)
    torch.testing.assert_close(torch.cat(steps), full, rtol=1e-10, atol=1e-10)


def test_fp16_forward_close_to_fp32():
    attn = make("per_head", "decoder", "auto").float().eval()
    attn.pe.float()
    x, pad = padded("decoder")
    x = x.float()
    mask = torch.full((x.size(0),) * 2, float("-inf")).triu(1)
    ref, _ = attn(x, x, x, key_padding_mask=pad, attn_mask=mask, need_weights=False)
    attn.half()
    attn.pe.half()
    out, _ = attn(x.half(), x.half(), x.half(), key_padding_mask=pad, attn_mask=mask.half(), need_weights=False)
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    assert (out.float() - ref)[~pad.t()].abs().max() < 2e-2


class PairSized(TorchDispatchMode):
    """Every new tensor (not a view, not written in place) of at least ``size`` elements: (op, bytes)."""

    def __init__(self, size):
        super().__init__()
        self.size, self.log = size, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not any(r.alias_info is not None for r in func._schema.returns):
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor) and t.numel() >= self.size:
                    self.log.append((str(func.overloadpacket), t.numel() * t.element_size()))
        return out


@pytest.mark.parametrize("tq,tk", [(7, 7), (5, 7)])  # (q, k, v gradients are smaller: d < Tq)
def test_core_writes_no_pair_sized_tensor_but_the_attention_products(tq, tk):
    """The bucket maps are products with the pass's one-hot: the only (B,H,Tq,Tk)-sized (or larger) tensors a
    training step of the core allocates are those of any explicit attention with dropout: forward the logits, the
    probabilities, the dropped-out ones and the dropout mask; backward the recomputed logits and probabilities and
    their dropout, dA, its dropout backward and dE. Nothing laid out by distance (a (Tq, Tq+Tk-1) row per query,
    about twice the size) or summed through a buffer: 9 1/8 float64 pair tensors in all (the earlier layout by
    distance allocated 15 such tensors, 18.4 pair tensors' bytes)."""
    q, k, v, wk, wv, masks, onehot = core_inputs(tq=tq, tk=tk)
    b, h = q.shape[:2]
    pairs = b * h * tq * tk
    log = PairSized(pairs)
    with log:
        z = shaw_attention(q, k, v, wk, wv, masks, onehot, 0.2)
        z.backward(torch.randn_like(z))
    ops = [op.split(".")[-1] for op, _ in log.log]
    assert sorted(ops) == sorted(["bmm", "_softmax", "native_dropout", "native_dropout"]  # forward
                                 + ["bmm", "_softmax", "native_dropout_backward",  # recomputed
                                    "bmm", "native_dropout_backward", "_softmax_backward_data"]), ops  # dA, dE
    assert sum(n for _, n in log.log) == pairs * (9 * 8 + 1)  # float64 tensors and one bool mask


@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("memory", ["tbhd", "bhtd"])
def test_as_heads_puts_each_token_of_each_batch_row_in_its_head(memory, transpose):
    """pe_plugin/encoding_parts/head_layout.as_heads, on (T,B,H,d) memory (a view) and on (B,H,T,d) memory (the
    copy: survivor ``permute(1, 2, 0, 3)`` -> ``permute(1, 0, 2, 3)`` there), against a loop: row t*B + b of head
    h is x[b, h, t]."""
    from pe_plugin.encoding_parts.head_layout import as_heads

    b, h, t, d = 3, 2, 5, 4
    torch.manual_seed(0)
    x = torch.randn(t, b, h, d).permute(1, 2, 0, 3) if memory == "tbhd" else torch.randn(b, h, t, d)
    out = as_heads(x, b, h, transpose=transpose)
    want = torch.empty(h, t * b, d)
    for hh in range(h):
        for tt in range(t):
            for bb in range(b):
                want[hh, tt * b + bb] = x[bb, hh, tt]
    torch.testing.assert_close(out, want.mT if transpose else want, rtol=0, atol=0)


def dropped_outputs(side, causal, train=True, retain=False, p=0.3):
    """One padded batch through a layer with attention dropout ``p`` on each path: the core (need_weights=False),
    the explicit product of the fast path (need_weights=True) and the reference path, each drawing its dropout
    mask after the same seed (the core's native_dropout and fairseq's F.dropout draw the same Bernoulli mask on a
    CPU); and the same layer without dropout."""
    x, pad = padded(side)
    mask = torch.full((x.size(0),) * 2, float("-inf"), dtype=x.dtype).triu(1) if causal else None
    outs = {}
    for name, impl, weights in (("core", "auto", False), ("explicit", "auto", True), ("reference", "reference", False)):
        attn = make("per_head", side, impl).train(train)
        attn.dropout_module.p, attn.dropout_module.apply_during_inference = p, retain
        torch.manual_seed(5)
        outs[name] = attn(x, x, x, key_padding_mask=pad, attn_mask=mask, need_weights=weights)[0][~pad.t()]
    attn.dropout_module.p = 0.0
    outs["none"] = attn(x, x, x, key_padding_mask=pad, attn_mask=mask, need_weights=False)[0][~pad.t()]
    return outs


@pytest.mark.parametrize("side,causal", [("encoder", False), ("decoder", True)])
def test_with_attention_dropout_every_path_takes_the_value_term_of_the_dropped_probabilities(side, causal):
    """Training with --attention-dropout: z = a v + p2b(a) W^V with a = dropout(p), on the core and on the explicit
    product (need_weights, the reference path) alike; a value term of the undropped p would differ."""
    outs = dropped_outputs(side, causal)
    assert not torch.allclose(outs["core"], outs["none"])  # dropout applied
    torch.testing.assert_close(outs["explicit"], outs["core"], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(outs["reference"], outs["core"], rtol=1e-10, atol=1e-10)


def test_dropout_retained_at_inference_is_applied_on_every_path():
    """fairseq's --retain-dropout (``apply_during_inference``): a layer in eval mode still drops attention, on the
    core as on the reference path; without the flag eval mode drops nothing."""
    outs = dropped_outputs("encoder", False, train=False, retain=True)
    assert not torch.allclose(outs["core"], outs["none"])
    torch.testing.assert_close(outs["reference"], outs["core"], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(outs["explicit"], outs["core"], rtol=1e-10, atol=1e-10)
    plain = dropped_outputs("encoder", False, train=False, retain=False)
    for name in ("core", "explicit", "reference"):
        torch.testing.assert_close(plain[name], plain["none"], rtol=1e-10, atol=1e-10)


def test_positions_given_as_values_take_the_pytorch_core_even_under_triton():
    """The Triton kernels compute each pair's distance from its columns (queries the last Tq of the Tk keys), so
    positions given as values (``Positions(q, k)``, e.g. probing a shuffled order) take the PyTorch core whatever
    --pe-attention-impl says: the same output as the core with impl auto, and no refusal on a CPU without Triton's
    interpreter. The positions here are not columns: keys 0..6, queries at 6, 2, 4, 0, 5."""
    from pe_plugin.encoding_parts.base import Positions

    pe = make("per_head", "encoder", "auto").pe
    q, k, v, *_ = core_inputs(b=3, h=H, tq=5, tk=7, d=D, k=3)
    pos = Positions(torch.tensor([[6, 2, 4, 0, 5]]), torch.arange(7).unsqueeze(0))
    assert not pos.columns
    ctx = pe.prepare(pos, torch.double)
    want = pe.attention_core(q, k, v, [], 0.0, ctx, 1)
    pe.attention_impl = "triton"
    torch.testing.assert_close(pe.attention_core(q, k, v, [], 0.0, ctx, 1), want, rtol=0, atol=0)


@pytest.mark.parametrize("per_head, shared, heads", [(False, False, 1), (True, False, H), (True, True, 1),
                                                      (False, True, 1)])
def test_shared_heads_wins_over_per_head_however_the_encoding_is_made(per_head, shared, heads):
    """--rpe-shared-heads gives one table per layer even with --rpe-per-head on: built as the model builds it (its
    configuration then says per_head off) and constructed directly from a configuration with both on."""
    from pe_plugin.encoding_parts.base import Dims
    from pe_plugin.encodings import PE_REGISTRY

    pe = make_pe("rpe", dim=C, heads=H, layers=LAYERS, rpe_max_relative_position=2, rpe_per_head=per_head,
                 rpe_shared_heads=shared)
    direct = PE_REGISTRY["rpe"](pe.config_cls(rpe_max_relative_position=2, rpe_per_head=per_head,
                                              rpe_shared_heads=shared), Dims(C, H, LAYERS, 64, 1, "encoder"))
    for made in (pe, direct):
        assert made.key_table.shape == made.value_table.shape == (LAYERS, heads, 5, D)
    assert pe.cfg.rpe_per_head == (heads == H)

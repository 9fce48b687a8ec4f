"""Shaw's attention core in Triton kernels (``--pe-attention-impl triton``), run on the CPU by Triton's interpreter,
against ``encodings.shaw.shaw_attention`` (itself held to the equations by tests/test_shaw_attention.py) and the
reference path, in float64: outputs and every gradient, several key and query tiles, a decoding step, k = 0 and k
beyond the length, shared tables, no key table, two masks and three; through the attention module on left- and
right-padded batches and in incremental decoding; and the settings it refuses, each named with its fix. The tests
that launch kernels are slow (Triton's interpreter: seconds per launch); the refusals launch none: fast tier."""
import importlib
import os
import sys

import pytest
import torch

from pe_plugin.encodings.shaw import shaw_attention
from pe_shaw import core_inputs, make as core_make, padded

kernels = None  # pe_plugin.kernels.shaw_rpe, imported under the interpreter by ``triton_interpreter``


def shaw_attention_triton(*args, **kwargs):
    return kernels.shaw_attention_triton(*args, **kwargs)


def _triton_modules():
    """Triton's Python modules and the plugin's kernels (not its compiled core, ``triton._C``, which loads once)."""
    return [n for n in sys.modules if (n == "triton" or n.startswith(("triton.", "pe_plugin.kernels")))
            and not n.startswith("triton._C")]


@pytest.fixture(scope="module", autouse=True)
def triton_interpreter():
    """Triton's interpreter (``TRITON_INTERPRET=1``) for this file's tests only. Triton reads the variable when a
    function is decorated with ``@triton.jit``, and it decorates its own standard library (``tl.max``, ``tl.cdiv``)
    when first imported: so Triton and the kernels are imported afresh under the variable, and the earlier modules
    and the variable's old value come back afterwards, for later tests and their child processes."""
    saved = {n: sys.modules.pop(n) for n in _triton_modules()}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRITON_INTERPRET", "1")
        global kernels
        kernels = importlib.import_module("pe_plugin.kernels.shaw_rpe")
        yield
    for n in _triton_modules():  # kept in sys.modules under another name: Python then frees them at exit
        sys.modules[f"_interpreted_{n}"] = sys.modules.pop(n)  # (else nanobind reports Triton's objects leaked)
    sys.modules.update(saved)


def both(shape, masks=None, no_keys=False):
    """(output, gradients of q, k, v, W^K, W^V) of the core and of the kernels on the same float64 inputs."""
    q, k, v, wk, wv, given, onehot = core_inputs(**shape)
    h = q.size(1)
    masks = given if masks is None else masks(given)
    results = []
    for fn in (shaw_attention, lambda *a: shaw_attention_triton(*a, block=16)):
        wk_h = None if no_keys else wk.expand(h, -1, -1)
        z = fn(q, k, v, wk_h, wv.expand(h, -1, -1), masks, onehot, 0.0)
        torch.manual_seed(7)
        g = torch.randn_like(z)
        inputs = (q, k, v, wv) if no_keys else (q, k, v, wk, wv)
        results.append((z, torch.autograd.grad((z * g).sum(), inputs)))
    return results


SHAPES = {"one_tile": dict(d=16), "tiles": dict(d=16, tq=37, tk=37, k=3), "step": dict(d=16, tq=1, tk=6),
          "k0": dict(d=16, k=0), "k_beyond": dict(d=16, k=9), "shared": dict(d=16, shared=True),
          "tq_below_tk": dict(d=16, tq=18, tk=21, k=4)}


@pytest.mark.slow
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_kernels_equal_the_core_in_float64(shape, causal):
    (z, grads), (ref, ref_grads) = both(SHAPES[shape], None if causal else (lambda m: m[:1]))[::-1]
    torch.testing.assert_close(z, ref, rtol=1e-10, atol=1e-10)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-10)


@pytest.mark.slow
@pytest.mark.parametrize("masks", [lambda m: (), lambda m: m[:1], lambda m: m + (torch.zeros_like(m[1]),)],
                         ids=["none", "padding", "three"])
def test_kernels_take_any_number_of_masks(masks):
    (ref, ref_grads), (z, grads) = both(dict(d=16, tq=7, tk=7), masks)
    torch.testing.assert_close(z, ref, rtol=1e-10, atol=1e-10)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-10)


@pytest.mark.slow
def test_kernels_without_a_key_table():
    (ref, ref_grads), (z, grads) = both(dict(d=16, tq=7, tk=7), no_keys=True)
    torch.testing.assert_close(z, ref, rtol=1e-10, atol=1e-10)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-10)


@pytest.fixture
def kernel_calls(monkeypatch):
    """How many times the kernels ran: a module or model test must reach them, not fall back on the core."""
    calls, apply = [], kernels.ShawTriton.apply
    monkeypatch.setattr(kernels.ShawTriton, "apply", lambda *a: calls.append(1) or apply(*a))
    return calls


C = 32  # two heads of 16: the kernels' smallest head size


def make(side, impl):
    return core_make("per_head", side, impl, c=C)


@pytest.mark.slow
@pytest.mark.parametrize("side,causal", [("encoder", False), ("decoder", True)])
def test_module_with_triton_equals_reference(side, causal, kernel_calls):
    """--pe-attention-impl triton against reference through the attention module: padded batches (sources
    left-padded, targets right-padded), values and the gradients of the input, projections and tables."""
    torch.manual_seed(2)
    _, pad = padded(side)
    x = torch.randn(pad.size(1), pad.size(0), C, dtype=torch.double)
    outs = []
    for impl in ("triton", "reference"):
        attn = make(side, impl).train()
        xi = x.clone().requires_grad_()
        mask = torch.full((x.size(0),) * 2, float("-inf"), dtype=x.dtype).triu(1) if causal else None
        out, _ = attn(xi, xi, xi, key_padding_mask=pad, attn_mask=mask, need_weights=False)
        real = ~pad.t()
        loss = (out * torch.linspace(-1, 1, out.numel(), dtype=x.dtype).view_as(out))[real].sum()
        outs.append((out[real], torch.autograd.grad(loss, [xi] + list(attn.parameters()) + list(attn.pe.parameters()))))
    (out, grads), (ref, ref_grads) = outs
    assert kernel_calls == [1]
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-10)


@pytest.mark.slow
def test_incremental_decoding_with_triton_equals_the_full_pass(kernel_calls):
    attn = make("decoder", "triton").eval()
    torch.manual_seed(3)
    x = torch.randn(5, 2, C, dtype=torch.double)
    full, _ = attn(x, x, x, attn_mask=torch.full((5, 5), float("-inf"), dtype=x.dtype).triu(1), need_weights=False)
    state, steps = {}, []
    for t in range(5):
        steps.append(attn(x[t:t + 1], x[t:t + 1], x[t:t + 1], incremental_state=state, need_weights=False)[0])
    assert len(kernel_calls) == 1 + 5  # the full pass and each step
    torch.testing.assert_close(torch.cat(steps), full, rtol=1e-10, atol=1e-10)


@pytest.mark.slow
def test_float32_close_to_float64():
    q, k, v, wk, wv, masks, onehot = core_inputs(d=16, tq=20, tk=20, k=3)
    ref = shaw_attention(q, k, v, wk, wv, masks, onehot, 0.0)
    f = [t.detach().float() for t in (q, k, v, wk, wv)]
    onehot32 = type(onehot)(onehot.o.float(), onehot.t.float())
    z = shaw_attention_triton(*f, [m.float() for m in masks], onehot32, 0.0, block=16)
    assert z.dtype == torch.float32 and (z.double() - ref).abs().max() < 1e-4


def test_refusals_name_the_setting_and_the_fix(monkeypatch):
    q, k, v, wk, wv, masks, onehot = core_inputs(d=16)
    with pytest.raises(ValueError, match="--attention-dropout 0"):
        shaw_attention_triton(q, k, v, wk, wv, masks, onehot, 0.1)
    monkeypatch.delenv("TRITON_INTERPRET")
    with pytest.raises(ValueError, match="runs on CUDA.*--pe-attention-impl auto"):
        shaw_attention_triton(q, k, v, wk, wv, masks, onehot, 0.0)


@pytest.mark.parametrize("d", [8, 12, 15, 16, 24, 32, 48, 64])
def test_the_kernels_take_head_sizes_that_are_powers_of_two_from_16_and_refuse_the_rest(d, monkeypatch):
    """The kernels tile a head with ``tl.arange(0, d)``, which Triton compiles for a power of 2 only: every other
    head size is refused with the fix named before any kernel is launched, multiples of 16 (24, 48) as well as
    sizes under 16; 16, 32 and 64 reach the kernels (a stand-in here, so that nothing is launched)."""
    launched = []
    monkeypatch.setattr(kernels.ShawTriton, "apply", lambda *a: launched.append(a) or "launched")
    q, k, v, wk, wv, masks, onehot = core_inputs(d=d)
    if d in (16, 32, 64):
        assert shaw_attention_triton(q, k, v, wk, wv, masks, onehot, 0.0) == "launched" and len(launched) == 1
    else:
        with pytest.raises(ValueError, match=f"head size that is a power of 2 and at least 16 .*but it is {d}: "
                                             "use --pe-attention-impl auto"):
            shaw_attention_triton(q, k, v, wk, wv, masks, onehot, 0.0)
        assert launched == []


@pytest.mark.slow
def test_model_with_triton_equals_reference_in_a_training_step(data_bin, kernel_calls):
    """A float64 RPE model (1+1 layers, head size 16; the interpreter is slow) built with --pe-attention-impl triton
    against the same model on the reference path: outputs and every parameter's gradient of a training step on a
    fairseq batch (sources left-padded, targets right-padded). Decoding: test_incremental_decoding_... above."""
    import pe_testing
    from pe_testing import SMALL, assert_same_step

    one_layer = SMALL + ["--encoder-layers", "1", "--decoder-layers", "1"]  # (later flags win)
    models = []
    for impl in ("triton", "reference"):
        flags = one_layer + ["--pe-attention-impl", impl, "--attention-dropout", "0"]
        task, model, _ = pe_testing.build_model(data_bin, "transformer_rpe_wmt_en_de", flags)
        models.append(model.double())
    fast, ref = models
    assert fast.encoder.pe.attention_impl == "triton" and len(fast.encoder.layers) == 1
    assert_same_step(task, fast, ref, pe_testing.batch(task, "train", n=3))
    assert len(kernel_calls) == 2  # the encoder's and the decoder's self-attention


PROBE = '''
import os, sys
def pytest_sessionstart(session):
    import triton.language  # compiled, as any earlier test of the process would have imported it
def pytest_sessionfinish(session, exitstatus):
    from triton.runtime.interpreter import InterpretedFunction
    import triton.language as tl
    with open(os.environ["PROBE_OUT"], "w") as f:
        f.write(repr((os.environ.get("TRITON_INTERPRET"), isinstance(tl.cdiv, InterpretedFunction))))
'''


@pytest.mark.slow
def test_the_interpreter_stays_in_this_file(tmp_path):
    """Triton imported without the interpreter before this file runs (as in a worker that ran other tests first):
    the kernels still run interpreted here, and afterwards the process has its variable and compiled Triton
    back. A pytest run in a child process, with a plugin that imports Triton at the start and looks at the end."""
    import subprocess

    (tmp_path / "triton_probe.py").write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(PYTHONPATH=os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")]), PROBE_OUT=str(tmp_path / "out"))
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-p",
                          "triton_probe", "-q", f"{__file__}::test_kernels_equal_the_core_in_float64[one_tile-causal]"],
                         env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert (tmp_path / "out").read_text() == "(None, False)"
    assert "leaked" not in run.stderr

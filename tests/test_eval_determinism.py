"""Inference never drops anything: with every dropout of a model above 0 (the stack's, attention's, the FFN's
activation dropout, and each encoding's own: AT5's MLP, PosNet's branch), a model in eval mode computes what the
same model built with every dropout at 0 computes, whatever the random state, in the full pass (validation) and in
incremental decoding (beam search), for every encoding of the registry and every ``--pe-attention-impl``.

The reference is the model without dropout: same seed, same parameters (checked), so no number of the code under
test is copied. The weak spot this guards is the choice of ``dropout_p`` for the fused kernel in
``modules/pe_attention.py`` (a condition dropped there applies attention dropout at inference on the fused path
only, which the float64 comparisons of tests/test_fast_paths.py run with attention dropout 0 and cannot see).
"""
from argparse import Namespace

import pytest
import torch

import pe_testing
from pe_plugin.encodings import PE_REGISTRY, config_fields
from pe_plugin.models.pe_transformer import ATTENTION_IMPLS

DROP = "0.3"
# 2+2 layers, 4 heads of 16 (a power of two: the Triton path's head size), FFN 64
TINY = ["--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "64", "--decoder-embed-dim", "64",
        "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
        "--encoder-attention-heads", "4", "--decoder-attention-heads", "4"]
# Shaw's Triton kernels run on CUDA only (tests/test_shaw_triton.py runs them in Triton's interpreter); every other
# encoding has no Triton kernel, so triton takes the auto path, which this test runs on the CPU as well
CUDA_ONLY = {("rpe", "triton")}
CASES = [pytest.param(pe, impl, marks=pytest.mark.skipif(
    (pe, impl) in CUDA_ONLY and not torch.cuda.is_available(), reason="Shaw's Triton kernels need CUDA"))
    for pe in PE_REGISTRY for impl in ATTENTION_IMPLS]


def dropout_flags(pe: str, p: str) -> list:
    """Every dropout flag of a model with encoding ``pe``, at p: the stack's, and the encoding's own (its config
    fields named ``*dropout*``, read from the registry, so a new encoding's dropout is covered when it is added)."""
    own = [f for f in config_fields(PE_REGISTRY[pe]) if "dropout" in f]
    flags = ["--dropout", p, "--attention-dropout", p, "--activation-dropout", p]
    return flags + [x for f in own for x in ("--" + f.replace("_", "-"), p)]


def test_every_encoding_dropout_flag_is_set():
    """Control of dropout_flags: the encodings with a dropout of their own get it (AT5's MLP, PosNet's branch)."""
    assert "--at5-mlp-dropout" in dropout_flags("at5", DROP)
    assert "--posnet-dropout" in dropout_flags("posnet_attn", DROP)
    assert dropout_flags("rope", DROP) == ["--dropout", DROP, "--attention-dropout", DROP, "--activation-dropout", DROP]


def build(data_bin, pe, impl, p, device):
    flags = TINY + dropout_flags(pe, p) + ["--pe-attention-impl", impl]
    task, model, args = pe_testing.build_model(data_bin, f"transformer_{pe}_wmt_en_de", flags)
    return task, model.to(device), args


def decode(task, model, sample):
    gen = task.build_generator([model], Namespace(beam=2, max_len_b=12, max_len_a=0, min_len=1))
    with torch.no_grad():
        return [(h["tokens"].tolist(), h["positional_scores"]) for nbest in gen.generate([model], sample) for h in nbest]


@pytest.mark.parametrize("pe,impl", CASES)
def test_eval_mode_applies_no_dropout(data_bin, pe, impl):
    device = "cuda" if (pe, impl) in CUDA_ONLY else "cpu"
    task, dropped, args = build(data_bin, pe, impl, DROP, device)
    _, plain, _ = build(data_bin, pe, impl, "0", device)
    assert args.attention_dropout == args.activation_dropout == float(DROP)  # the flags reached the model
    assert not dropped.training and not plain.training
    for (name, a), (_, b) in zip(dropped.state_dict().items(), plain.state_dict().items()):
        assert torch.equal(a, b), name  # the same parameters: dropout draws nothing at build time
    sample = pe_testing.batch(task, "test", n=4)
    net = {k: v.to(device) for k, v in sample["net_input"].items()}
    sample = dict(sample, net_input=net)
    with torch.no_grad():
        want = plain(**net)[0]
        for seed in (0, 1):  # two random states: a dropout applied at inference draws differently in each
            torch.manual_seed(seed)
            torch.testing.assert_close(dropped(**net)[0], want, rtol=1e-5, atol=1e-5)
    expected = decode(task, plain, sample)
    for seed in (0, 1):
        torch.manual_seed(seed)
        got = decode(task, dropped, sample)
        assert [t for t, _ in got] == [t for t, _ in expected]
        for (_, s), (_, e) in zip(got, expected):
            torch.testing.assert_close(s, e, rtol=1e-5, atol=1e-5)

"""What every registered encoding must satisfy, checked on its tiny architecture:
  * incremental (beam-search) decoding equals the full forward pass, with beam reordering;
  * a sentence's encoder and decoder outputs do not depend on the padding side or on the rest of the batch.
"""
import pytest
import torch
from pe_testing import batch, build_model, rescore_max_diff

from pe_plugin.encodings import PE_REGISTRY


@pytest.fixture(scope="module")
def models(data_bin):
    return {pe: build_model(data_bin, f"transformer_{pe}_tiny") for pe in PE_REGISTRY}


@pytest.mark.parametrize("pe", list(PE_REGISTRY))
def test_incremental_decoding_equals_full_pass(pe, models):
    task, model, _ = models[pe]
    sample = batch(task, n=8)
    assert rescore_max_diff(task, model, sample, beam=4) < 1e-4


def _outputs(model, sample, pad):
    """Per sentence: encoder states of its real tokens (T_i, C) and decoder outputs of its real tokens."""
    net = sample["net_input"]
    with torch.no_grad():
        enc = model.encoder(net["src_tokens"], net["src_lengths"])
        dec, _ = model.decoder(net["prev_output_tokens"], encoder_out=enc)
    states = enc["encoder_out"][0].transpose(0, 1)  # (B, T, C)
    src_real = net["src_tokens"].ne(pad)
    tgt_real = net["prev_output_tokens"].ne(pad)
    return [(states[i][src_real[i]], dec[i][tgt_real[i]]) for i in range(states.size(0))]


@pytest.mark.parametrize("pe", list(PE_REGISTRY))
def test_outputs_do_not_depend_on_padding_or_batch(pe, models):
    task, model, _ = models[pe]
    pad = task.source_dictionary.pad()
    left = _outputs(model, batch(task, n=6, left_pad_source=True), pad)
    right = _outputs(model, batch(task, n=6, left_pad_source=False), pad)
    assert batch(task, n=6)["net_input"]["src_tokens"][:, 0].eq(pad).any()  # some rows really are padded
    for (el, dl), (er, dr) in zip(left, right):
        torch.testing.assert_close(el, er, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(dl, dr, atol=1e-5, rtol=1e-5)
    ds = task.dataset("test")
    for i in range(3):  # each sentence alone
        alone = _outputs(model, ds.collater([ds[i]]), pad)[0]
        idx = batch(task, n=6)["id"].tolist().index(i)
        torch.testing.assert_close(alone[0], left[idx][0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(alone[1], left[idx][1], atol=1e-5, rtol=1e-5)


@pytest.fixture(scope="module")
def reference_models(data_bin):
    return {pe: build_model(data_bin, f"transformer_{pe}_tiny", ["--pe-attention-impl", "reference"])
            for pe in PE_REGISTRY}


def _target_padded(task, left: bool, n: int = 6):
    ds = task.dataset("test")
    ds.left_pad_target = left
    try:
        return ds.collater([ds[i] for i in range(n)])
    finally:
        ds.left_pad_target = False


@pytest.mark.parametrize("impl", ["default", "reference"])
@pytest.mark.parametrize("pe", list(PE_REGISTRY))
def test_a_left_padded_target_gives_its_real_tokens_what_a_right_padded_one_gives(pe, impl, models,
                                                                                     reference_models):
    """--left-pad-target (the decoder told so: right_padded False): a left pad position under the causal mask sees
    no real key, and would softmax to NaN, which the next layer carries to the real tokens. Each real token's
    decoder output equals the right-padded batch's, and a training step's loss and gradients are finite, on the
    default path and on the float64-style reference path."""
    task, model, _ = (models if impl == "default" else reference_models)[pe]
    pad = task.source_dictionary.pad()
    batch(task, n=6)  # loads the split
    left, right = _target_padded(task, True), _target_padded(task, False)
    assert left["net_input"]["prev_output_tokens"][:, 0].eq(pad).any()  # some targets really are left-padded
    model.decoder.right_padded = False  # as build_decoder sets it under --left-pad-target
    try:
        for (_, dl), (_, dr) in zip(_outputs(model, left, pad), _outputs(model, right, pad)):
            torch.testing.assert_close(dl, dr, atol=1e-5, rtol=1e-5)
        model.train()
        net = left["net_input"]
        out, _ = model(net["src_tokens"], net["src_lengths"], net["prev_output_tokens"])
        real = net["prev_output_tokens"].ne(pad)
        loss = out[real].float().logsumexp(-1).sum()
        loss.backward()
        assert torch.isfinite(loss)
        assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    finally:
        model.decoder.right_padded = True
        model.zero_grad(set_to_none=True)
        model.eval()

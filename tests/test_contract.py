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

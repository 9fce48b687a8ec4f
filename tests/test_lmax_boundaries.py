"""Every check of a length against a limit accepts exactly the limit and refuses one more, on each side it checks.

A sentence of n tokens counts its end of sentence (as fairseq binarises it: docs/length.md), so it takes positions
0..n-1 and fits L_max positions when n <= L_max. The places that check it:
* the encodings' own limit (LAPE's table, PosNet's kernels: ``check_length``), in the encoder and the decoder, in
  the full pass and step by step in incremental decoding;
* the hub (``pe_plugin/hub.py``): a source sentence against the model's source positions;
* pe-generate before decoding (``pe_tools/recipes/generate.check_positions`` with ``pe_plugin/decode_limits``):
  sources and references under ``--pe-beyond-max error``, sources under ``clamp``; after decoding, the hypotheses
  against the decoder's positions (``count_long_hypotheses``);
* pe-length's check that the model has room for the long split (``--max-positions``, with the decoding margin);
* the data preparation's cleaning (clean-corpus-n's MIN/MAX words per side; words, no end of sentence);
* fairseq's size error explained (``pe_plugin/cli_errors.length_hint``): L_max blamed when it is at most the limit.
pe-swap-probe's is pinned by tests/test_position_limits.py (its test set holds sentences of exactly L_max = 8
tokens and of 9). The reference for each is the arithmetic n <= limit on lengths this file writes, never the code's
own count; the source and target limits differ (7 and 9), so a check that reads the other side's limit fails.
"""
from argparse import Namespace
import numpy as np
import pytest
import torch

import pe_testing
from pe_lengths import L_SRC, L_TGT, LIMS, TINY, hub, tokens
from pe_plugin import decode_limits
from pe_plugin.encodings import PE_REGISTRY

def encode(model, task, n: int, pad: int = 0):
    return model.encoder(tokens(task, n, pad), src_lengths=torch.tensor([n]))


def decode_full(model, task, n: int, pad: int = 0):
    """The decoder's full pass over n target positions (teacher forcing: eos then n - 1 words), right-padded."""
    prev = tokens(task, n, pad, left=False)
    prev[:, :n] = prev[:, :n].roll(1, dims=1)
    return model.decoder(prev, encoder_out=encode(model, task, 2))


def decode_steps(model, task, n: int, pad: int = 0):
    """Incremental decoding, one token at a time, over n target positions (no padding: one sentence)."""
    enc, state = encode(model, task, 2), {}
    prev = tokens(task, n).roll(1, dims=1)
    for t in range(1, n + 1):
        model.decoder(prev[:, :t], encoder_out=enc, incremental_state=state)


@pytest.fixture(scope="module", params=list(PE_REGISTRY))
def built(request, data_bin):
    task, model, args = pe_testing.build_model(data_bin, f"transformer_{request.param}_wmt_en_de", TINY + LIMS)
    return request.param, task, model, args


def test_fairseq_limits_are_the_flags_of_each_side(built):
    """What fairseq-train filters and fairseq-generate checks: (source, target) from the two flags, not swapped."""
    _, _, model, _ = built
    assert tuple(model.max_positions()) == (L_SRC, L_TGT)
    assert decode_limits.model_limits(model).fairseq == (L_SRC, L_TGT)


# incremental decoding has no padding columns (one column per step)
RUNS = {"encoder": ("encoder", encode, 0), "encoder-padded": ("encoder", encode, 2),
        "decoder-full-pass": ("decoder", decode_full, 0), "decoder-full-pass-padded": ("decoder", decode_full, 2),
        "decoder-incremental": ("decoder", decode_steps, 0)}


@pytest.mark.parametrize("side,run,pad", RUNS.values(), ids=RUNS.keys())
def test_an_encoding_limit_takes_exactly_l_max_and_refuses_one_more(built, side, run, pad):
    """Each side of every encoding of the registry: an encoding with a position limit (``model_limits``: LAPE,
    PosNet) takes a sequence of exactly L_max tokens and refuses L_max + 1 with a ValueError naming the side and
    the length; one without a limit takes both (what fairseq filters is the flags', above). Padded: two padding
    columns beyond the sentence (the padded width is then over L_max while the positions are not)."""
    _, task, model, _ = built
    limits = decode_limits.model_limits(model)
    lmax = getattr(limits, side)
    flag = L_SRC if side == "encoder" else L_TGT
    with torch.no_grad():
        if lmax is None:  # no limit of its own: well past the flag
            run(model, task, flag + 1, pad)
            return
        assert lmax >= flag  # a limit shorter than the flag would refuse what fairseq lets through
        run(model, task, lmax, pad)
        with pytest.raises(ValueError, match=rf"^{side} sequence of length {lmax + 1} exceeds the {lmax} positions"):
            run(model, task, lmax + 1, pad)


def test_the_hub_translates_exactly_the_source_limit_and_names_one_more(built):
    """The hub checks sources against the model's source positions (the target is the generator's: fairseq caps
    max_len at the decoder's positions): L_SRC tokens are translated, L_SRC + 1 refused before decoding."""
    _, task, model, args = built
    h = hub(task, model, args)
    fits, over = tokens(task, L_SRC)[0], tokens(task, L_SRC + 1)[0]
    h.check_lengths([fits])
    out = h.generate([fits], beam=1, max_len_b=3, max_len_a=0)  # the whole way: the encoder takes it too
    assert len(out) == 1 and out[0][0]["tokens"].numel() >= 1
    with pytest.raises(ValueError, match=rf"sentence 1 is {L_SRC + 1} tokens long .* more than the {L_SRC} source") as e:
        h.check_lengths([fits, over])
    own = decode_limits.model_limits(model).encoder  # L_max is blamed when it sets the limit (LAPE: equal)
    assert (f"has L_max = {own} positions" in str(e.value)) == (own is not None and own <= L_SRC), str(e.value)
    assert "fairseq's learned positions" not in str(e.value)  # ours; fairseq's: tests/test_hub.py
    with pytest.raises(ValueError, match=rf"sentence 0 is {L_SRC + 1} tokens"):
        h.generate([over], beam=1, max_len_b=3, max_len_a=0)


# ---- pe-generate: before decoding (both sides under error, the source under clamp) and after ------------------
def test_beyond_names_exactly_the_sizes_over_the_limit():
    sizes = np.array([L_SRC - 1, L_SRC, L_SRC + 1, L_SRC, 2 * L_SRC])
    assert decode_limits.beyond(sizes, L_SRC) == [i for i, n in enumerate(sizes) if n > L_SRC] == [2, 4]
    assert decode_limits.beyond(sizes, None) == [] and decode_limits.beyond(None, L_SRC) == []


@pytest.fixture
def pe_generate(monkeypatch, tmp_path):
    """generate.check_positions on given sizes: a model of encoder L_SRC and decoder L_TGT positions."""
    from pe_tools.recipes import generate

    def check(src_sizes, tgt_sizes, mode):
        limits = decode_limits.Limits("lape", L_SRC, L_TGT, (L_SRC, L_TGT))
        monkeypatch.setattr(decode_limits, "checkpoint_limits", lambda checkpoint, data: limits)
        monkeypatch.setattr(decode_limits, "split_sizes", lambda *a: (np.array(src_sizes), np.array(tgt_sizes)))
        return generate.check_positions(tmp_path / "checkpoint.pt", tmp_path, "test", "en", "de", mode)
    return check


@pytest.mark.parametrize("side", ["source", "reference"])
def test_pe_generate_error_mode_takes_exactly_l_max_on_each_side(pe_generate, capsys, side):
    fits = [L_SRC, 3, L_SRC], [L_TGT, L_TGT, 3]
    assert pe_generate(*fits, "error")["sources"] == []
    src, tgt = [list(s) for s in fits]
    if side == "source":  # sentence 1: one token over its limit on this side only
        src[1] = L_SRC + 1
    else:
        tgt[1] = L_TGT + 1
    assert pe_generate(src, tgt, "error") is None  # nothing is decoded
    err = capsys.readouterr().err
    assert "1 of 3 test sentences" in err and f"1 ({src[1]} source, {tgt[1]} reference tokens)" in err


def test_pe_generate_clamp_names_the_sources_over_l_max(pe_generate, capsys):
    meta = pe_generate([L_SRC, L_SRC + 1, 3, L_SRC], [L_TGT + 1] * 4, "clamp")  # references are not decoded
    assert meta["sources"] == [1] and meta["encoder_limit"] == L_SRC and meta["decoder_limit"] == L_TGT
    assert "1 (8 tokens)" in capsys.readouterr().err


def test_pe_generate_names_the_hypotheses_past_the_decoder_limit(capsys):
    from pe_tools.recipes.generate import count_long_hypotheses

    lengths = {0: L_TGT, 1: L_TGT + 1, 2: 1}  # tokens, end of sentence included: one score each on its P- line
    # fairseq-generate's lines of each sentence: S-, T-, H-, D- and P- (only P- has one score per token)
    text = "".join(f"S-{i}\tw w\nT-{i}\tv\nH-{i}\t-0.5\t{' '.join(['x'] * (m - 1))}\nD-{i}\t-0.5\tx\n"
                   f"P-{i}\t{' '.join(['-0.5'] * m)}\n" for i, m in lengths.items())
    limits = {"decoder_limit": L_TGT}
    count_long_hypotheses(text, limits)
    assert limits["hypotheses"] == [i for i, m in lengths.items() if m > L_TGT] == [1]
    assert f"1 ({L_TGT + 1} tokens)" in capsys.readouterr().err


# ---- pe-length: room for the long split and the decoding margin ---------------------------------------------
@pytest.mark.parametrize("longer", ["source", "target"])
def test_pe_length_takes_exactly_the_positions_the_long_split_needs(longer):
    from pe_tools.length_experiment import DECODE_MARGIN, LengthExperiment

    lengths = {"long": {"source": 20, "target": 20}}
    lengths["long"][longer] = 30  # the other side shorter: the check must read this side
    need = 30 + DECODE_MARGIN
    exp = Namespace(a=Namespace(max_positions=need), tag="length")
    LengthExperiment.check_positions(exp, lengths)
    exp.a.max_positions = need - 1
    with pytest.raises(SystemExit, match=rf"--max-positions {need - 1}: the long split needs {need}"):
        LengthExperiment.check_positions(exp, lengths)


# ---- the data preparation's cleaning (words per side, no end of sentence) -------------------------------------
def test_cleaning_keeps_exactly_min_and_max_words_on_each_side(tmp_path):
    from pe_tools.data.text import clean_corpus

    lo, hi = 2, 5
    pairs = [(hi, hi), (lo, lo), (hi + 1, hi), (hi, hi + 1), (lo - 1, lo), (lo, lo - 1), (lo, hi), (hi, lo)]
    src, tgt = tmp_path / "c.en", tmp_path / "c.de"
    src.write_text("".join(" ".join(["w"] * a) + "\n" for a, _ in pairs))
    tgt.write_text("".join(" ".join(["v"] * b) + "\n" for _, b in pairs))
    out_src, out_tgt = tmp_path / "o.en", tmp_path / "o.de"
    stats = clean_corpus(src, tgt, out_src, out_tgt, min_len=lo, max_len=hi, ratio=0)
    kept = [(a, b) for a, b in pairs if lo <= a <= hi and lo <= b <= hi]
    got = list(zip((len(x.split()) for x in out_src.read_text().splitlines()),
                   (len(x.split()) for x in out_tgt.read_text().splitlines())))
    assert got == kept == [(hi, hi), (lo, lo), (lo, hi), (hi, lo)]
    assert stats["kept"] == 4 and stats["length"] == 4


@pytest.mark.parametrize("side", ["source", "target"])
def test_fairseqs_size_error_names_l_max_exactly_when_the_encoding_sets_the_limit(built, side):
    """pe_plugin/cli_errors.length_hint on fairseq's size error of a sentence one token over a side's limit: it
    blames the encoding's L_max when that is at most fairseq's limit (LAPE: L_max is the flag itself, the equal
    case), and the flags otherwise; for every encoding of the registry, each side."""
    from pe_plugin.cli_errors import length_hint

    _, _, model, _ = built
    limit = L_SRC if side == "source" else L_TGT
    n = (L_SRC + 1, 2) if side == "source" else (2, L_TGT + 1)
    error = Exception(f"Size of sample #3 is invalid (=({n[0]}, {n[1]})) since max_positions=({L_SRC}, {L_TGT})")
    hint = length_hint(error, [model])
    own = getattr(decode_limits.model_limits(model), "encoder" if side == "source" else "decoder")
    assert hint.startswith(f"pe_plugin: test sentence #3 has {limit + 1} {side} tokens")
    assert (f"has L_max = {own} {side} positions" in hint) == (own is not None and own <= limit), hint


# ---- fairseq's size error: which flag to raise -----------------------------------------------------------------
@pytest.mark.parametrize("side", ["source", "target"])
def test_the_length_hint_names_the_training_limit_when_it_is_fairseqs_limit(data_bin, side):
    """fairseq's size error for a model whose encoding has no limit of its own (RoPE) trained with
    --max-source-positions 7 and --max-target-positions 9: when fairseq-generate's limit is the training limit
    (the equal case) the model's own --max-*-positions must grow, so the hint names the training value and the
    override; when the limit is one below it (a smaller --max-*-positions at decoding), raising the decoding
    flag is enough and the hint says that alone."""
    from pe_plugin.cli_errors import length_hint

    _, model, _ = pe_testing.build_model(data_bin, "transformer_rope_wmt_en_de", TINY + LIMS)
    trained = L_SRC if side == "source" else L_TGT
    for limit in (trained, trained - 1):
        lims = (limit, L_TGT) if side == "source" else (L_SRC, limit)
        n = limit + 1
        sizes = (n, 2) if side == "source" else (2, n)
        error = Exception(f"Size of sample #4 is invalid (=({sizes[0]}, {sizes[1]})) since max_positions={lims}")
        hint = length_hint(error, [model])
        assert hint.startswith(f"pe_plugin: test sentence #4 has {n} {side} tokens"), hint
        at_training = f"(--max-{side}-positions {trained} at training)" in hint
        override = f"--model-overrides \"{{'max_{side}_positions': {2 * n}}}\" and --max-{side}-positions {2 * n}"
        assert at_training == (override in hint) == (limit == trained), hint
        assert (f"(its --max-{side}-positions, 1024 unless given). Fix: pass --max-{side}-positions {2 * n};"
                in hint) == (limit < trained), hint

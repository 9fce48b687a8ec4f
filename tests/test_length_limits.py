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
* fairseq's size error explained (``pe_plugin/cli_errors.length_hint``): L_max blamed when it is at most the limit;
* pe-swap-probe's (its test set holds sentences of exactly L_max = 8 tokens and of 9).
The reference for each is the arithmetic n <= limit on lengths this file writes, never the code's own count; the
source and target limits differ (7 and 9), so a check that reads the other side's limit fails.

Beyond the limit (--pe-beyond-max), for the encodings with a position limit (LAPE's table, PosNet's kernels):
* clamp: positions >= L_max use row L_max - 1. References: a per-token loop over phi[min(p, L_max - 1)], and a
  second model with more positions whose extra rows are copies of the last one (built and filled here);
* error: the message names the side, the length, L_max and the flag, and fairseq-generate stops before it
  decodes anything;
* the recipe's decode (scripts/launch.py generate) on a test set holding sentences longer than L_max: under
  the default every sentence is translated and the long ones are named in a warning; with
  --pe-beyond-max error they are named, with the flag, before anything is decoded.
Which sentences are too long is counted here from the raw test file (words + end of sentence), not by the code.
"""
import json
import os
import re
import subprocess
import sys
from argparse import Namespace

import numpy as np
import pytest
import torch

import pe_testing
from pe_lengths import L_SRC, L_TGT, LIMS, TINY, hub, tokens
from pe_references import loop_matmul, padded_positions
from pe_testing import PLUGIN, REPO, build_model, run, save_checkpoint

from pe_plugin import decode_limits
from pe_plugin.encoding_parts.base import Positions
from pe_plugin.encoding_parts.limits import UNLIMITED
from pe_plugin.encoding_parts.posnet_kernels import positional_matmul
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


# ==== beyond the limit: --pe-beyond-max (LAPE's table, PosNet's kernels), clamp and error ========================
LMAX = 8


LMAX_LIMS = ["--max-source-positions", str(LMAX), "--max-target-positions", str(LMAX)]


ARCHS = ["transformer_posnet_embed_tiny", "transformer_posnet_attn_tiny", "transformer_lape_tiny"]


# ---- the kernel product beyond L_max -----------------------------------------------------------------------
@pytest.mark.parametrize("lengths,left", [([9, 3, 12], True), ([9, 3, 12], False), ([12], False)])
def test_kernel_product_reuses_the_last_kernel_beyond_lmax(lengths, left):
    torch.manual_seed(0)
    phi = torch.randn(5, 4, 3)  # L_max = 5
    pos, nonpad = padded_positions(lengths, 12, left)
    u = torch.randn(12, len(lengths), 2, 4)
    ref = loop_matmul(u, phi, pos.clamp_max(4), nonpad)  # phi[min(p, L_max - 1)], token by token
    y = positional_matmul(u, phi, pos) * nonpad.t()[:, :, None, None]
    torch.testing.assert_close(y, ref, rtol=0, atol=1e-6)
    for p in (4, 5, 30):  # one decoding step at, just past and far past L_max
        step = torch.randn(1, 2, 2, 4)
        torch.testing.assert_close(positional_matmul(step, phi, torch.tensor([[p]])), step @ phi[min(p, 4)])


# ---- model level: clamp equals a model whose extra rows copy the last one ------------------------------------
def _extra(arch):
    # per-matrix init makes PosNet's branch O(1) (the released init starts it ~100x smaller), so that a wrong
    # kernel shows far above the tolerances
    return ["--posnet-init", "per-matrix"] if "posnet" in arch else []


def _widened(data_bin, arch, model, row=LMAX - 1):
    """The same model built with 2 L_max positions, its position rows >= L_max copies of row ``row``."""
    _, wide, _ = build_model(data_bin, arch, ["--max-source-positions", str(2 * LMAX),
                                              "--max-target-positions", str(2 * LMAX), *_extra(arch)])
    small = model.state_dict()
    state = {}
    for name, value in wide.state_dict().items():
        have = small[name]
        if have.shape == value.shape:
            state[name] = have
        elif name.endswith("kernels.phi"):  # (..., L_max, d, d): extend along positions
            extra = have.narrow(-3, row, 1).expand(*have.shape[:-3], LMAX, *have.shape[-2:])
            state[name] = torch.cat([have, extra], dim=-3)
        else:  # LAPE's table: rows 0..pad are special, position p is row p + pad + 1
            assert name.endswith("pe.table.weight"), name
            state[name] = torch.cat([have, have[row + 2: row + 3].expand(LMAX, -1)])  # padding_idx 1
    wide.load_state_dict(state)
    return wide.eval()


@pytest.mark.parametrize("arch", ARCHS)
def test_clamp_equals_repeating_the_last_row_and_error_names_the_flag(arch, data_bin):
    _, model, _ = build_model(data_bin, arch, LMAX_LIMS + _extra(arch))
    assert model.max_positions() == (LMAX, LMAX)  # error (default): fairseq filters and checks with L_max
    src = torch.randint(4, 20, (2, LMAX + 4))
    lengths = torch.tensor([LMAX + 4, LMAX + 4])
    src[1, :3] = 1  # left padding: the second row has L_max + 1 real tokens
    lengths[1] = LMAX + 1
    with pytest.raises(ValueError) as err:
        model.encoder(src, lengths)
    msg = str(err.value)
    assert f"encoder sequence of length {LMAX + 4} exceeds the {LMAX} positions" in msg
    assert "--pe-beyond-max clamp" in msg and "--model-overrides" in msg and "--max-source-positions" in msg

    _, clamped, _ = build_model(data_bin, arch, LMAX_LIMS + _extra(arch) + ["--pe-beyond-max", "clamp"])
    clamped.load_state_dict(model.state_dict())
    assert clamped.max_positions() == (UNLIMITED, UNLIMITED) and clamped.max_decoder_positions() == UNLIMITED
    wide = _widened(data_bin, arch, model)
    prev = torch.randint(4, 20, (2, LMAX + 3))
    with torch.no_grad():
        out, _ = clamped(src, lengths, prev)  # (B, T, V)
        ref, _ = wide(src, lengths, prev)
        torch.testing.assert_close(out, ref, rtol=0, atol=1e-5)
        assert (out - _widened(data_bin, arch, model, row=0)(src, lengths, prev)[0]).abs().max() > 1e-2  # control
        # decoding step by step past L_max gives the same as the full pass (the cache and the clamped step)
        enc = clamped.encoder(src, lengths)
        state, steps = {}, []
        for t in range(1, prev.size(1) + 1):
            steps.append(clamped.decoder(prev[:, :t], encoder_out=enc, incremental_state=state)[0])
        torch.testing.assert_close(torch.cat(steps, dim=1), out, rtol=0, atol=1e-5)


def test_lape_clamp_reads_the_last_row():
    from pe_plugin.encodings import PE_REGISTRY
    from pe_plugin.encoding_parts.base import Dims

    pe = PE_REGISTRY["lape"](None, Dims(6, 2, 1, 4, 1, "decoder"))
    pe.beyond_max = "clamp"
    x = torch.zeros(1, 7, 6)
    y = pe.embed(x, Positions.for_tokens(torch.full((1, 7), 5), 1))  # positions 0..6, L_max 4
    table = pe.table.weight  # rows: 0, pad (1), then positions 0..3 at rows 2..5
    torch.testing.assert_close(y[0], table[[2, 3, 4, 5, 5, 5, 5]])


# ---- the recipe's decode on a test set with sentences beyond L_max ---------------------------------------------
def _launch(*args):
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, str(REPO / "scripts" / "launch.py"), *map(str, args)], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["posnet_embed", "lape"])
def test_every_test_sentence_is_translated_or_named_before_decoding(method, data_bin, raw_corpus, tmp_path):
    """A tiny model with L_max = 8 and a test set of 13 sentences, some longer: the recipe's generate translates
    all of them and names the long ones (clamp, the default); with --pe-beyond-max error it names them and the
    flag and decodes nothing. Plain fairseq-generate stops before its first hypothesis."""
    src = (raw_corpus / "test.en").read_text().splitlines()
    ref = (raw_corpus / "test.de").read_text().splitlines()
    long_ids = [i for i, line in enumerate(src) if len(line.split()) + 1 > LMAX]  # + end of sentence
    assert 0 < len(long_ids) < len(src)
    runs = tmp_path / "runs"
    train = _launch("train", method, "--size", "tiny", "--data", data_bin, "--runs-dir", runs, "--",
                    *LMAX_LIMS, "--skip-invalid-size-inputs-valid-test", "--max-update", "2", "--save-interval-updates", "1",
                    "--max-tokens", "200", "--update-freq", "1", "--cpu", "--num-workers", "0")
    assert train.returncode == 0, train.stdout[-3000:] + train.stderr[-3000:]
    run_dir = runs / f"{method}.en-de.tiny.seed1"
    gen = run_dir / "gen"

    err = _launch("generate", run_dir, "--no-detok", "--pe-beyond-max", "error")
    assert err.returncode == 2, err.stdout[-2000:] + err.stderr[-2000:]
    message = next(line for line in err.stderr.splitlines() if line.startswith("error:"))
    named = [int(i) for i in re.findall(r"(\d+) \(\d+ source", message)]
    assert named == long_ids and "--pe-beyond-max clamp" in message
    assert "fairseq_cli.generate" not in err.stdout and not (gen / "hyp.detok.de").exists()
    assert not list(gen.glob("generate.*.out"))  # nothing was decoded

    ok = _launch("generate", run_dir, "--no-detok")
    assert ok.returncode == 0, ok.stdout[-2000:] + ok.stderr[-2000:]
    assert "--model-overrides" in ok.stdout
    warning = next(line for line in ok.stderr.splitlines() if "source positions" in line)
    assert [int(i) for i in re.findall(r"(\d+) \(\d+ tokens\)", warning)] == long_ids
    assert f"{len(long_ids)} of {len(src)} test sentences" in warning
    hyps = (gen / "hyp.detok.de").read_text().splitlines()
    assert len(hyps) == len(src) and (gen / "ref.detok.de").read_text().splitlines() == ref
    meta = json.loads((gen / "hyp.detok.de.meta.json").read_text())["positions_beyond_max"]
    assert meta["mode"] == "clamp" and meta["sources"] == long_ids and meta["encoder_limit"] == LMAX

    # fairseq-generate on its own (no override): its length check stops it before the first hypothesis
    plain = run("fairseq_cli.generate", [data_bin, "--user-dir", PLUGIN, "--path", next(gen.glob("checkpoint.avg*.pt")),
                                         "--beam", "2", "--cpu", "--batch-size", "4"], check=False)
    assert plain.returncode != 0 and "Size of sample #" in plain.stdout
    assert not re.search(r"^H-\d+", plain.stdout, flags=re.M)


def test_swap_probe_leaves_out_sentences_beyond_lmax_and_names_them(data_bin, raw_corpus, tmp_path, capsys):
    """pe-swap-probe (pe_tools.swap_probe) on a LAPE model with L_max = 8: the test sentences longer than that are left out of
    the probe and named (warning and JSON), the others probed; without the check it stopped at the first batch
    holding one (LAPE's ValueError)."""
    from pe_tools import swap_probe as swap_probe_cli

    src = (raw_corpus / "test.en").read_text().splitlines()
    long_ids = [i for i, line in enumerate(src) if len(line.split()) + 1 > LMAX]
    _, model, args = build_model(data_bin, "transformer_lape_tiny", LMAX_LIMS)
    ckpt = save_checkpoint(model, args, tmp_path / "checkpoint_last.pt")
    assert swap_probe_cli.main([str(ckpt), "--data", str(data_bin), "--beam", "2", "--max-len-b", "8",
                                       "--out", str(tmp_path / "swap")]) == 0
    rep = json.loads((tmp_path / "swap" / "swap_probe.json").read_text())
    assert rep["left_out"] == long_ids and rep["n_sentences"] == len(src) - len(long_ids)
    warning = next(line for line in capsys.readouterr().err.splitlines() if "left out of the probe" in line)
    assert [int(i) for i in re.findall(r"(\d+) \(\d+ tokens\)", warning)] == long_ids


def test_the_limit_reads_the_device_only_beyond_lmax_and_warns_once(caplog):
    """``check_length`` reads the largest position (a host sync) only when the padded length exceeds L_max, under
    clamp only until it has warned, and warns once per module. Reference: the calls of ``max`` on the positions,
    counted by a tensor subclass, and the warnings logged."""
    from pe_plugin.encodings import PE_REGISTRY
    from pe_plugin.encoding_parts.base import Dims

    reads = []

    class Counted(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if getattr(func, "__name__", "") == "max":
                reads.append(func)
            return super().__torch_function__(func, types, args, kwargs or {})

    def positions(t):  # (1, t) positions 0..t-1 of an unpadded side, bound t
        return Positions(torch.arange(t).view(1, t).as_subclass(Counted), None, bound=t)

    pe = PE_REGISTRY["lape"](None, Dims(6, 2, 1, 4, 1, "decoder"))  # L_max 4
    pe.check_length(positions(4))  # the padded length is L_max: no position can reach it
    assert reads == []
    with pytest.raises(ValueError, match="length 5 exceeds the 4 positions"):
        pe.check_length(positions(5))
    assert len(reads) == 1
    pe.beyond_max = "clamp"
    with caplog.at_level("WARNING", logger="pe_plugin"):
        pe.check_length(positions(6))  # read, and warn
        pe.check_length(positions(7))  # warned already: no read, no second warning
    assert len(reads) == 2
    assert sum("exceeds its 4 positions" in r.getMessage() for r in caplog.records) == 1


# ---- decode_limits: the sizes of a binarised split, their description, the hypotheses' lengths -----------------
def test_split_sizes_are_each_sides_token_counts_in_either_direction_of_the_files(tmp_path):
    """The token counts per sentence of a binarised split, per side: files of en-de written here with fairseq's
    own builder (sentences of 3, 5, 2 tokens in English, 4, 1, 6 in German); asked en-de, the files' direction;
    asked de-en, the same files read the other way round, each side's counts where that side is asked."""
    from fairseq.data import indexed_dataset

    counts = {"en": [3, 5, 2], "de": [4, 1, 6]}
    for lang, sizes in counts.items():
        prefix = str(tmp_path / f"test.en-de.{lang}")
        builder = indexed_dataset.MMapIndexedDatasetBuilder(prefix + ".bin", dtype=np.int32)
        for n in sizes:
            builder.add_item(torch.arange(4, 4 + n, dtype=torch.int32))
        builder.finalize(prefix + ".idx")
    for src, tgt in (("en", "de"), ("de", "en")):
        sizes = decode_limits.split_sizes(str(tmp_path), "test", src, tgt)
        assert [s.tolist() for s in sizes] == [counts[src], counts[tgt]], (src, tgt)
    with pytest.raises(FileNotFoundError, match=r"no binarised test split of en-fr: looked for .*test\.en-fr\.en\.idx"):
        decode_limits.split_sizes(str(tmp_path), "test", "en", "fr")


@pytest.mark.parametrize("n, more", [(2, ""), (3, ""), (4, " and 1 more"), (6, " and 3 more")])
def test_describe_names_the_first_ids_and_counts_only_those_left_out(n, more):
    ids = list(range(n))
    text = decode_limits.describe(ids, {i: f"{i + 9} tokens" for i in ids}, shown=3)
    assert text == ", ".join(f"{i} ({i + 9} tokens)" for i in ids[:3]) + more


def test_hypothesis_lengths_read_each_sentences_best_hypothesis():
    """fairseq-generate --nbest 2 prints each sentence's hypotheses best first: the length (scores on its P- line)
    is the first one's, whatever the order of the sentences."""
    out = "\n".join(["S-1\ta b", "H-1\t-0.1\tx y", "P-1\t-0.1 -0.2 -0.3", "H-1\t-0.5\tx", "P-1\t-0.4 -0.5",
                     "S-0\tc", "H-0\t-0.2\tz", "P-0\t-0.2 -0.1", "H-0\t-0.9\tz z z", "P-0\t-1 -1 -1 -1"])
    assert decode_limits.hypothesis_lengths(out) == {1: 3, 0: 2}

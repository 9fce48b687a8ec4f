"""Encodings with a position limit (LAPE's table, PosNet's kernels) beyond that limit: --pe-beyond-max.

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

import pytest
import torch

from pe_testing import PLUGIN, REPO, build_model, run, save_checkpoint
from pe_references import loop_matmul, padded_positions

from pe_plugin.encoding_parts.base import Positions
from pe_plugin.encoding_parts.limits import UNLIMITED
from pe_plugin.encoding_parts.posnet_kernels import positional_matmul

LMAX = 8
LIMS = ["--max-source-positions", str(LMAX), "--max-target-positions", str(LMAX)]
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
    _, model, _ = build_model(data_bin, arch, LIMS + _extra(arch))
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

    _, clamped, _ = build_model(data_bin, arch, LIMS + _extra(arch) + ["--pe-beyond-max", "clamp"])
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
                    *LIMS, "--skip-invalid-size-inputs-valid-test", "--max-update", "2", "--save-interval-updates", "1",
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
    _, model, args = build_model(data_bin, "transformer_lape_tiny", LIMS)
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

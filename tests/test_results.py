"""Recorded runs (pe_tools/recipes/results.py): the training summary of a fairseq-train log, the training columns
of pe-evaluate's table, and pe-record / pe-report's checks. The end-to-end path (a real tiny run trained, resumed,
decoded, recorded and reported) is in tests/test_recipes.py::test_train_resume_and_generate."""
import json
import os
import pickle
import subprocess
import sys
import zipfile
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from pe_tools import machine
from pe_tools.recipes import generate, launch, results, train
from pe_tools.scoring import cli as scoring_cli

# Two segments of one run, in fairseq 0.12's simple log format: 4 updates in 14 s, then resumed an hour later to 6
# updates in 8 s. A resumed fairseq logs wall=0 (its restored wall meter is stopped): the timestamps are what counts.
LOG = """\
2026-01-01 10:00:00 | INFO | fairseq_cli.train | {'_name': None, 'common': {'_name': None}}
2026-01-01 10:00:00 | INFO | pe_plugin | arch transformer_rope_tiny | params total 1,234,567 | pe-only 0 | pe:rope|side:both
2026-01-01 10:00:00 | INFO | fairseq_cli.train | num. shared model params: 1,234,567 (num. trained: 1,234,567)
2026-01-01 10:00:05 | INFO | train_inner | epoch 001:      2 / 9 loss=9.5, nll_loss=9.4, ppl=675.6, wps=10, ups=0.5, num_updates=2, lr=1e-07, gnorm=3.1, train_wall=4, wall=5
2026-01-01 10:00:09 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 9.1 | nll_loss 9 | ppl 512 | wps 40 | wpb 30 | bsz 2 | num_updates 2 | best_loss 9.1
2026-01-01 10:00:12 | INFO | train_inner | epoch 001:      4 / 9 loss=8.75, nll_loss=8.6, ppl=388, wps=10, ups=0.5, num_updates=4, lr=2e-07, gnorm=3, train_wall=8, wall=14
2026-01-01 10:00:14 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 8.5 | nll_loss 8.4 | ppl 338 | wps 40 | wpb 30 | bsz 2 | num_updates 4 | best_loss 8.5
/venv/lib/python3.11/site-packages/torch/nn/functional.py:6802: UserWarning: Support for mismatched key_padding_mask
2026-01-01 11:00:00 | INFO | fairseq_cli.train | {'_name': None, 'common': {'_name': None}}
2026-01-01 11:00:00 | INFO | pe_plugin | arch transformer_rope_tiny | params total 1,234,567 | pe-only 0 | pe:rope|side:both
2026-01-01 11:00:06 | INFO | train_inner | epoch 001:      6 / 9 loss=8.25, nll_loss=8.1, ppl=274, wps=10, ups=0.5, num_updates=6, lr=3e-07, gnorm=2.9, train_wall=12, wall=0
2026-01-01 11:00:08 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 8.7 | nll_loss 8.6 | ppl 416 | wps 40 | wpb 30 | bsz 2 | num_updates 6 | best_loss 8.5
"""
COMMAND = {"recipe": "multi30k", "method": "rope", "pair": "en-de", "size": "small", "seed": 1, "data": "d",
           "argv": ["python", "-m", "fairseq_cli.train", "d", "--arch", "transformer_rope_tiny", "--max-update", "4",
                    "--max-update", "6"], "threads": "1", "device": "Some CPU"}


def test_training_summary_of_a_resumed_log():
    s = results.training_summary(LOG, COMMAND)
    assert s == {"arch": "transformer_rope_tiny", "params": 1234567, "pe_params": 0, "updates": 6,
                 "train_seconds": 14 + 8, "segments": 2, "train_loss": 8.25, "valid_loss": 8.7,
                 "best_valid_loss": 8.5, "max_update": 6, "threads": "1", "device": "Some CPU"}


def test_training_summary_of_a_stock_fairseq_log():
    log = "\n".join(ln for ln in LOG.splitlines() if "| pe_plugin |" not in ln)
    s = results.training_summary(log, dict(COMMAND, argv=["--arch", "transformer", "--max-update", "6"]))
    assert (s["arch"], s["params"], "pe_params" in s) == ("transformer", 1234567, False)


# --max-update 7 with --log-interval 2: train_inner logs num_updates=2, 4, 6; update 7 appears only in the '| num_updates
# 7 |' form of the validation and end-of-epoch lines
LOG_ODD_END = """\
2026-01-01 10:00:00 | INFO | fairseq_cli.train | {'_name': None, 'common': {'_name': None}}
2026-01-01 10:00:04 | INFO | train_inner | epoch 001:      2 / 9 loss=9.5, nll_loss=9.4, ppl=675.6, num_updates=2, lr=1e-07, wall=4
2026-01-01 10:00:08 | INFO | train_inner | epoch 001:      4 / 9 loss=9.1, nll_loss=9, ppl=512, num_updates=4, lr=2e-07, wall=8
2026-01-01 10:00:12 | INFO | train_inner | epoch 001:      6 / 9 loss=8.8, nll_loss=8.7, ppl=445, num_updates=6, lr=3e-07, wall=12
2026-01-01 10:00:14 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 8.5 | nll_loss 8.4 | ppl 338 | wps 40 | wpb 30 | bsz 2 | num_updates 7 | best_loss 8.5
2026-01-01 10:00:14 | INFO | train | epoch 001 | loss 8.9 | nll_loss 8.8 | ppl 477 | wps 10 | ups 0.5 | wpb 30 | bsz 2 | num_updates 7 | lr 3.5e-07 | gnorm 2.9 | train_wall 13 | wall 14
2026-01-01 10:00:15 | INFO | fairseq_cli.train | done training in 14.9 seconds
"""


def test_the_last_update_logged_only_in_its_spaced_form_counts(tmp_path):
    """A run whose --max-update is not a multiple of --log-interval has finished: its last update is read from the
    '| num_updates 7 |' lines, for the summary and pe-record's check."""
    assert "num_updates=7" not in LOG_ODD_END and LOG_ODD_END.count("| num_updates 7 |") == 2
    argv = ["--arch", "transformer_rope_tiny", "--max-update", "7"]
    s = results.training_summary(LOG_ODD_END, dict(COMMAND, argv=argv))
    assert (s["updates"], s["max_update"], s["valid_loss"]) == (7, 7, 8.5)


def run_log(params: int, seconds: int, updates: int) -> str:
    """A one-segment fairseq-train log of ``params`` parameters that ran ``seconds`` to update ``updates``."""
    end = datetime(2026, 1, 1, 10) + timedelta(seconds=seconds)
    return (f"2026-01-01 10:00:00 | INFO | fairseq_cli.train | {{'_name': None}}\n"
            f"2026-01-01 10:00:00 | INFO | pe_plugin | arch transformer_x_tiny | params total {params:,} | pe-only 0 | pe:x\n"
            f"{end:%Y-%m-%d %H:%M:%S} | INFO | train_inner | epoch 001:  1 / 9 loss=5.0, num_updates={updates}, wall=0\n"
            "/venv/lib/python3.11/site-packages/torch/nn/functional.py:6802: UserWarning: deprecated\n")


def stand_in_checkpoint(path, updates: int) -> None:
    """A file laid out as torch.save lays out a fairseq checkpoint (a zip archive holding ARCHIVE/data.pkl) with
    only the update count, in its last optimizer_history entry: what checkpoint_files.updates_of reads."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"optimizer_history": [{"num_updates": updates}]}))


def write_run(tmp_path, method, seed, hyp_lines, seconds, params=7_000_000, updates=6, max_update=6,
              reached=None, decoded=None, extra=None):
    """A finished, decoded run directory as pe-train and pe-generate leave it: checkpoint_last.pt holds update
    ``reached`` (default ``updates``) and the decode averaged checkpoints ending at ``decoded`` (default: the same),
    no trainer holds it; ``extra``: pe-train's flags after --."""
    reached = updates if reached is None else reached
    decoded = reached if decoded is None else decoded
    run = tmp_path / "runs" / f"{method}.en-de.small.seed{seed}"
    (run / "gen").mkdir(parents=True)
    command = dict(COMMAND, method=method, seed=seed, argv=["--arch", f"transformer_{method}_tiny",
                                                            "--max-update", str(max_update), *(extra or [])],
                   **({"extra": extra} if extra is not None else {}))
    (run / "command.json").write_text(json.dumps(command))
    (run / "train.log").write_text(run_log(params, seconds, updates))
    stand_in_checkpoint(run / "checkpoint_last.pt", reached)
    (run / "gen" / "hyp.detok.de").write_text("".join(x + "\n" for x in hyp_lines))
    checkpoints = [f"checkpoint_1_{u}.pt" for u in range(max(decoded - 2, 1), decoded + 1)]
    (run / "gen" / "hyp.detok.de.meta.json").write_text(json.dumps({"pe_signature": f"pe:{method}",
                                                                    "checkpoints": checkpoints}))
    return run


REF = ["ein mann fährt fahrrad .", "zwei hunde spielen im schnee .", "eine frau liest ein buch im park .",
       "kinder spielen fußball auf der straße ."] * 5
GOOD = ["ein mann fährt ein fahrrad .", "zwei hunde spielen im schnee .", "eine frau liest im park .",
        "kinder spielen fußball auf der straße ."] * 5
BAD = ["mann fahrrad .", "hunde schnee spielen .", "frau buch park .", "straße kinder ."] * 5


def test_record_copies_the_small_files_and_report_scores_them(tmp_path, capsys):
    into = tmp_path / "recorded"
    runs = [write_run(tmp_path, "sape", 1, GOOD, 3600), write_run(tmp_path, "sape", 2, GOOD[::-1], 3000),
            write_run(tmp_path, "nope", 1, BAD, 1200, params=6_500_000), write_run(tmp_path, "nope", 2, BAD, 1800),
            write_run(tmp_path, "rope", 1, GOOD[1:] + BAD[:1], 600)]
    for run in runs:
        assert launch.main(["record", str(run), "--into", str(into)]) == 0
    rec = into / "sape.en-de.small.seed1"
    assert sorted(p.name for p in rec.iterdir()) == ["command.json", "hyp.detok.de", "hyp.detok.de.meta.json",
                                                     "train.log"]
    assert "UserWarning" not in (rec / "train.log").read_text() and "| train_inner |" in (rec / "train.log").read_text()
    meta = json.loads((rec / "hyp.detok.de.meta.json").read_text())
    assert meta["pe_signature"] == "pe:sape" and meta["training"]["train_seconds"] == 3600
    assert not [p for p in into.iterdir() if p.name.startswith(".")]  # no temporary folder left
    (tmp_path / "ref.de").write_text("".join(x + "\n" for x in REF))
    capsys.readouterr()
    out = tmp_path / "report"
    assert launch.main(["report", "--recipe", "multi30k", "--results", str(into), "--ref", str(tmp_path / "ref.de"),
                        "--out-dir", str(out), "--", "--n-samples", "100"]) == 0
    printed = capsys.readouterr().out
    hyp = {f"{m}{seed}": into / f"{m}.en-de.small.seed{seed}" / "hyp.detok.de" for m in ("sape", "nope", "rope")
           for seed in (1, 2)}
    # seed 1 of every method against sape's seed 1, in the recipe table's order (nope before rope)
    assert f"--prefix results --baseline sape={hyp['sape1']} --system nope={hyp['nope1']} --system rope={hyp['rope1']}" in printed
    # the methods recorded with every seed of the baseline, run i against the baseline's run i
    assert f"--prefix results_seeds --baseline sape={hyp['sape1']},{hyp['sape2']} --system nope={hyp['nope1']},{hyp['nope2']} --n-samples" in printed

    def rows(name):
        return {ln.split(" | ")[0].strip("| "): ln.split(" | ") for ln in (out / name).read_text().splitlines()
                if ln.startswith("| ")}

    seed1, seeds = rows("results.md"), rows("results_seeds.md")
    assert seed1["System"][-3:] == ["Params", "Train min", "PE |"]
    assert seed1["sape (baseline)"][-3:-1] == ["7.00M", "60"] and seed1["nope"][-3:-1] == ["6.50M", "20"]
    assert seeds["sape (baseline)"][-3:-1] == ["7.00M", "55"]  # (3600 s + 3000 s) / 2 = 55 min
    assert set(seeds) == {"System", "sape (baseline)", "nope"}
    assert "on Some CPU, 1 thread(s)." in (out / "results.md").read_text()
    # the scores are pe-evaluate's own, on the same files: the report only assembles the command
    direct = tmp_path / "direct"
    assert scoring_cli.main(["--ref", str(tmp_path / "ref.de"), "--trg-lang", "de", "--out-dir", str(direct),
                             "--baseline", f"sape={hyp['sape1']}", "--system", f"rope={hyp['rope1']}",
                             "--n-samples", "100"]) == 0
    report, alone = (json.loads((d / "results.json").read_text()) for d in (out, direct))
    assert report["systems"][2]["name"] == "rope"
    assert report["systems"][2]["runs"][0]["scores"] == alone["systems"][1]["runs"][0]["scores"]


@pytest.mark.parametrize("case, expect", [
    ("finished", None),  # the other side of each boundary: a finished run, decoded at its last update
    ("unfinished", "has not finished training: checkpoint_last.pt holds update 4 of 6"),
    ("no checkpoint", "it has no whole checkpoint_last.pt (of 6 updates)"),
    ("still training", "is still training (checkpoint_last.pt holds update 6 of 6; trainer pid"),
    ("early decode", "averages checkpoints ending at update 4, not the run's last update 6"),
    ("partial decode", "was made with --partial"),
    ("old meta", "names no update checkpoints in its meta file"),
    ("log behind", "its train.log stopped at update 5 of 6, though checkpoint_last.pt holds update 6"),
    ("stale", "older than checkpoint_last.pt"),
    ("undecoded", "decode it first"),
])
def test_record_refuses_what_a_table_must_not_trust(case, expect, tmp_path, capsys):
    """pe-record takes a run only when ``train.finished`` says so (no live trainer, checkpoint_last.pt at the
    --max-update) and each decode's checkpoints end at that last update (issue 56: a decode of checkpoints 20-80 of
    a 100-update run was recorded). Seen failing with each guard removed in turn."""
    run = write_run(tmp_path, "sape", 1, GOOD, 60, reached={"unfinished": 4, "log behind": 6}.get(case),
                    decoded=4 if case in ("early decode", "unfinished") else None,
                    updates=5 if case == "log behind" else 6)
    meta_file = run / "gen" / "hyp.detok.de.meta.json"
    if case == "no checkpoint":
        (run / "checkpoint_last.pt").unlink()
    if case == "partial decode":
        meta_file.write_text(json.dumps(dict(json.loads(meta_file.read_text()), partial={"why": "w"})))
    if case == "old meta":
        meta_file.write_text(json.dumps({"pe_signature": "pe:sape"}))
    if case == "stale":
        hyp = run / "gen" / "hyp.detok.de"
        os.utime(hyp, (hyp.stat().st_mtime - 60, hyp.stat().st_mtime - 60))
    if case == "undecoded":
        (run / "gen" / "hyp.detok.de").unlink()
    with train.trainer_lock(run) if case == "still training" else open(os.devnull):
        rc = launch.main(["record", str(run), "--into", str(tmp_path / "recorded")])
    err = capsys.readouterr().err
    if expect is None:
        assert rc == 0 and (tmp_path / "recorded" / run.name / "hyp.detok.de").is_file(), err
        return
    assert rc == 2 and expect in err and str(run) in err, err
    assert not (tmp_path / "recorded" / run.name).exists()


def test_report_needs_the_baseline_and_known_methods(tmp_path, capsys):
    into = tmp_path / "recorded"
    (tmp_path / "ref.de").write_text("".join(x + "\n" for x in REF))
    argv = ["report", "--recipe", "multi30k", "--results", str(into), "--ref", str(tmp_path / "ref.de"),
            "--out-dir", str(tmp_path / "out")]
    assert launch.main(["record", str(write_run(tmp_path, "nope", 1, BAD, 60)), "--into", str(into)]) == 0
    assert launch.main(argv) == 2
    assert "no recorded sape run for en-de small" in capsys.readouterr().err
    assert launch.main(["record", str(write_run(tmp_path, "sape", 1, GOOD, 60)), "--into", str(into)]) == 0
    assert launch.main(argv[:-4] + ["--ref", str(tmp_path / "missing.de"), "--out-dir", str(tmp_path / "o")]) == 2
    assert "missing.de not found" in capsys.readouterr().err
    cmd = into / "nope.en-de.small.seed1" / "command.json"
    cmd.write_text(json.dumps(dict(json.loads(cmd.read_text()), method="posnet")))
    assert launch.main(argv) == 2
    assert "method 'posnet' is not in the recipe table" in capsys.readouterr().err


@pytest.mark.parametrize("arch, stock", [("transformer", True), ("transformer_wmt_en_de", True),
                                         ("transformer_wmt_en_de_big", True), ("transformer_sape_wmt_en_de", False),
                                         ("transformer_posnet_embed_tiny", False), ("transformer_rope_wmt_en_fr_big", False)])
def test_meta_of_a_stock_fairseq_model_names_its_architecture(arch, stock, tmp_path):
    """pe-generate's meta file: pe_plugin's signature for its models, ``fairseq:ARCH|positions:KIND`` for
    fairseq's own (this log sets no position flag: fairseq's sinusoidal default)."""
    log = tmp_path / "train.log"
    lines = LOG.splitlines()
    if stock:  # a stock model's log has no pe_plugin summary line
        lines = [ln for ln in lines if "| pe_plugin |" not in ln]
    log.write_text("\n".join(lines).replace("transformer_rope_tiny", arch) + "\n")
    generated = "S-1\tb\nT-1\tzwei\nH-1\t-0.1\tzwei\nS-0\ta\nT-0\teins\nH-0\t-0.2\teins\n"
    command = dict(COMMAND, argv=["--arch", arch, "--max-update", "6"])
    assert generate.write_outputs(generated, tmp_path, "de", log, True, {"x": 1}, command) == 0
    meta = json.loads((tmp_path / "hyp.detok.de.meta.json").read_text())
    assert meta["pe_signature"] == (f"fairseq:{arch}|positions:sinusoidal" if stock else "pe:rope|side:both")
    assert meta["x"] == 1 and meta["training"]["updates"] == 6 and meta["training"]["params"] == 1234567
    assert (tmp_path / "hyp.detok.de").read_text() == "eins\nzwei\n"


def test_summary_names_the_gpu_a_run_trains_on(monkeypatch, tmp_path):
    """The meta file's device: the GPU fairseq-train logged (its CUDA environment line, as an H100 run printed
    it), else command.json's processor (/proc/cpuinfo: a fixed sample here)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel\t\t: 143\n"
                       "model name\t: Intel(R) Xeon(R) Platinum 8480+\nstepping\t: 8\n\n"
                       "processor\t: 1\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n")
    monkeypatch.setattr(machine, "CPUINFO", str(cpuinfo))
    cpu = "Intel(R) Xeon(R) Platinum 8480+"
    assert results.machine() == {"threads": "1", "device": cpu}
    command = dict(COMMAND, **results.machine())
    assert results.training_summary(LOG, command)["device"] == cpu
    gpu = ("2026-11-24 13:05:18 | INFO | fairseq.utils | rank   0: capabilities =  9.0  ; total memory = 79.179 GB "
           "; name = NVIDIA H100 80GB HBM3                   \n")
    assert results.training_summary(gpu + LOG, command)["device"] == "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize("flags, kind", [
    ("", "sinusoidal"),
    ("encoder_learned_pos=True, decoder_learned_pos=True, no_token_positional_embeddings=False", "learned"),
    ("encoder_learned_pos=True, decoder_learned_pos=False", "learned/sinusoidal"),
    ("encoder_learned_pos=True, decoder_learned_pos=True, no_token_positional_embeddings=True", "none"),
])
def test_stock_signature_names_fairseqs_positions(flags, kind):
    """The stock parity runs (fairseq_transformer, fairseq_transformer_lape) differ only in their position flags;
    their signatures must tell them apart. A resumed run's last config wins."""
    old = "Namespace(arch='transformer', encoder_learned_pos=False, decoder_learned_pos=False)"
    log = f"2026-01-01 00:00:00 | INFO | fairseq_cli.train | {old}\n... | fairseq_cli.train | Namespace({flags})\n"
    assert results.stock_signature(log, "transformer") == f"fairseq:transformer|positions:{kind}"

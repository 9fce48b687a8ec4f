"""Recorded runs (pe_tools/recipes/results.py): the training summary of a fairseq-train log, the training columns
of pe-evaluate's table, and pe-record / pe-report's checks. The end-to-end path (a real tiny run trained, resumed,
decoded, recorded and reported) is in tests/test_recipes.py::test_train_resume_and_generate."""
import json
import os
import shlex
import signal
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from pe_runs import BAD, COMMAND, GOOD, REF, stand_in_checkpoint, write_run
from pe_shell import NASTY, bash_argv
from pe_testing import REPO as REPO_ROOT
from pe_tools import locks, machine
from pe_tools.recipes import generate, launch, results, run_state, train
from pe_tools.scoring import cli as scoring_cli
from pe_tools.scoring import report

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
    ("still training", "is still training (checkpoint_last.pt holds update 6 of 6; trainer pid"),  # train.lock alone
    ("being written", "run.lock is held by pid"),  # pe-train: the run's writer lock too
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
    a 100-update run was recorded), and never while another process writes the run (RUN/run.lock). Seen failing
    with each guard removed in turn."""
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
    with train.trainer_lock(run) if case == "being written" else \
            locks.hold(run / train.TRAINER_LOCK) if case == "still training" else open(os.devnull):
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


# ------------------------------------------------------------------------------------------ a finished run
LOCK_HOLDER = ("import fcntl, json, os, sys, time\n"
               "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
               "fcntl.flock(fd, fcntl.LOCK_EX)\n"
               "os.write(fd, json.dumps({'pid': os.getpid(), 'host': 'h'}).encode())\n"
               "print('held', flush=True)\n"
               "time.sleep(120)\n")


def test_a_run_is_finished_only_once_its_trainer_has_exited(tmp_path):
    """``train.finished``, the one decider: checkpoint_last.pt at the --max-update is not enough while a trainer
    holds RUN/train.lock (issue 56: status said done while fairseq-train was still validating and writing its last
    update). The lock is taken here by a process of its own (flock, not pe-train's code), and a kill -9 of it,
    which runs no clean-up, frees the run. Seen failing with ``self.trainer is None`` dropped from
    TrainingState.done."""
    run = tmp_path / "run"
    run.mkdir()
    stand_in_checkpoint(run / "checkpoint_last.pt", 6)
    argv = ["d", "--max-update", "6"]
    assert train.finished(run, argv) and train.live_trainer(run) is None  # no lock file: no trainer
    holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(run / train.TRAINER_LOCK)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        assert not train.finished(run, argv)
        state = train.training_state(run, argv)
        assert (state.trained, state.done, state.trainer) == (True, False, {"pid": holder.pid, "host": "h"})
        assert f"is still training (checkpoint_last.pt holds update 6 of 6; trainer pid {holder.pid} on h" \
            in state.why_not()
    finally:
        holder.kill()
        holder.wait()
    assert train.finished(run, argv) and train.training_state(run, argv).why_not() == ""


def test_the_trainer_lock_lasts_as_long_as_the_trainer_beneath_pe_train(tmp_path):
    """pe-train passes its lock to fairseq-train (tee's pass_fds): a pe-train killed while fairseq-train goes on
    leaves the run held; the lock goes when the last holder exits. A second trainer is refused, naming the first."""
    run = tmp_path / "run"
    with train.trainer_lock(run) as fd:
        child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                                 pass_fds=(fd,))
        with pytest.raises(train.TrainerBusy, match=rf"{run} is being written by pid {os.getpid()} on .* since .* "
                                                    rf"\(pe-train\) \({run / 'run.lock'}\); wait for it"):
            with train.trainer_lock(run, tries=2):
                pass
    try:  # the run's writer lock is free now, the trainer's is the child's
        with pytest.raises(train.TrainerBusy, match=rf"{run} is being trained by pid {os.getpid()} on .* since .*"
                                                    rf"\({run / train.TRAINER_LOCK}\); wait for it"):
            with train.trainer_lock(run, tries=2):
                pass
        assert train.live_trainer(run) == json.loads((run / train.TRAINER_LOCK).read_text())  # the child holds it
    finally:
        child.communicate("")
    assert train.live_trainer(run) is None


def test_pe_train_refuses_a_run_another_trainer_holds_and_records_its_extra_flags(tmp_path, monkeypatch, capsys):
    """pe-train under a held lock starts nothing; free, it runs fairseq-train holding the lock, with the progress
    note on each line, and command.json keeps the flags after -- (what tells a changed run from the recipe's)."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "dict.en.txt").write_text("")
    runs = tmp_path / "runs"
    argv = ["train", "sape", "--recipe", "multi30k", "--data", str(data), "--runs-dir", str(runs), "--",
            "--max-update", "4", "--cpu"]
    calls = []
    monkeypatch.setattr(run_state, "LOCK_TRIES", 2)  # not 10 s of waiting for the lock this test holds
    monkeypatch.setattr(train, "tee", lambda cmd, log, **kw: calls.append((cmd, kw, train.live_trainer(log.parent))) or 0)
    run = runs / "sape.en-de.small.seed1"
    with train.trainer_lock(run):
        assert launch.main(argv) == 2
    assert "is being written by pid" in capsys.readouterr().err and not calls
    assert launch.main(argv) == 0
    (cmd, kw, holder), = calls
    assert holder["pid"] == os.getpid() and kw["pass_fds"] and kw["on_line"].__self__.top == 4
    assert json.loads((run / "command.json").read_text())["extra"] == ["--max-update", "4", "--cpu"]
    stand_in_checkpoint(run / "checkpoint_last.pt", 4)
    assert launch.main(argv) == 0 and len(calls) == 1  # finished: nothing to do
    assert "has finished training (update 4 of 4" in capsys.readouterr().out


def test_progress_notes_give_the_updates_done_and_an_estimated_finish():
    """The first note's pace counts from the launch (start-up included), the later ones from the first progress
    line; a clock that is not the machine's makes the figures exact."""
    now = [datetime(2026, 1, 1, 10).timestamp()]
    p = train.Progress(100, 20, clock=lambda: now[0])  # resumed at update 20
    line = "2026-01-01 10:00:{s:02d} | INFO | train_inner | epoch 001:  1 / 9 loss=5.0, num_updates={u}, wall=0"
    assert p.note("2026-01-01 10:00:00 | INFO | fairseq_cli.train | loaded") is None
    now[0] += 30
    assert p.note(line.format(s=30, u=30)) == ("[pe-train] update 30 of 100 (30%), 3.00 s/update, finish ~ "
                                               "2026-01-01 10:04 (in 4 min)")
    now[0] += 20
    assert p.note(line.format(s=50, u=50)) == ("[pe-train] update 50 of 100 (50%), 1.00 s/update, finish ~ "
                                               "2026-01-01 10:01 (in 50 s)")
    now[0] += 3 * 3600
    # from the first progress line (10:00:30, update 30) to 13:00:50, update 90: 10,820 s for 60 updates
    assert p.note(line.format(s=0, u=90)).endswith("(90%), 180.33 s/update, finish ~ 2026-01-01 13:30 (in 30 min)")
    assert train.Progress(None, 0).note(line.format(s=1, u=5)) == "[pe-train] update 5"


# ------------------------------------------------------------------------------------ identity and report
# the keys a run's identity must have, written out here (an independent list, not results.IDENTITY itself)
IDENTITY_KEYS = {"recipe": "wmt14", "pair": "en-fr", "size": "annealed", "updates": 8, "changes": "--dropout 0.1",
                 "decode": "1 checkpoint"}


def test_the_identity_is_every_key_a_report_keeps_apart():
    assert set(results.IDENTITY) == set(IDENTITY_KEYS) | {"method", "seed"}
    assert set(results.COMPARED) == {"method", "seed"}


def record_twin(tmp_path, into, key, value):
    """Record a rope seed-1 run equal to the others in every key but ``key`` (set to ``value``), as pe-record
    would have written it, in a folder of its own name."""
    run = write_run(tmp_path / "twin", "rope", 1, BAD, 60)
    rec = into / "rope.twin"
    assert launch.main(["record", str(run), "--into", str(tmp_path / "twin" / "rec")]) == 0
    (tmp_path / "twin" / "rec" / run.name).rename(rec)
    meta_file = rec / "hyp.detok.de.meta.json"
    meta, command = json.loads(meta_file.read_text()), json.loads((rec / "command.json").read_text())
    if key in ("recipe", "pair", "size"):
        command[key] = value
    elif key == "changes":
        command["extra"] = value.split()
    elif key == "updates":  # a run of another --max-update, decoded at its end (the same span of checkpoints)
        command["argv"][command["argv"].index("--max-update") + 1] = str(value)
        ends = [int(name[:-len(".pt")].rsplit("_", 1)[1]) for name in meta["checkpoints"]]
        meta["checkpoints"] = [f"checkpoint_1_{u + value - ends[-1]}.pt" for u in ends]
    elif key == "decode":  # the last checkpoint alone, not the average
        meta["checkpoints"] = meta["checkpoints"][-1:]
    meta["run"] = dict(meta["run"], **{key: value})
    assert results.run_identity(command, meta) == meta["run"]
    meta_file.write_text(json.dumps(meta))
    (rec / "command.json").write_text(json.dumps(command))
    return rec


@pytest.mark.parametrize("key", list(IDENTITY_KEYS))
def test_pe_report_never_mixes_runs_that_differ_in_a_key_of_their_identity(key, tmp_path, capsys):
    """Issue 57: with ``size`` dropped from the comparison a report mixed runs of other sizes and silently replaced
    a seed's hypotheses. A rope seed-1 run that differs from the report's runs in one key only is either left out
    (recipe, pair, size: another report's run) or stops the report naming the key; never scored in place of the
    other rope seed 1, nor beside it unmarked. Seen failing with each key dropped from results.IDENTITY."""
    into = tmp_path / "rec"
    for method, lines in (("sape", GOOD), ("rope", GOOD[1:] + BAD[:1])):
        assert launch.main(["record", str(write_run(tmp_path, method, 1, lines, 60)), "--into", str(into)]) == 0
    twin = record_twin(tmp_path, into, key, IDENTITY_KEYS[key])
    (tmp_path / "ref.de").write_text("".join(x + "\n" for x in REF))
    capsys.readouterr()
    rc = launch.main(["report", "--recipe", "multi30k", "--results", str(into), "--ref", str(tmp_path / "ref.de"),
                      "--out-dir", str(tmp_path / "out"), "--", "--n-samples", "10"])
    out, err = capsys.readouterr()
    assert str(twin) not in out  # neither listed nor scored
    if key in ("recipe", "pair", "size"):
        assert rc == 0 and f"--system rope={into / 'rope.en-de.small.seed1' / 'hyp.detok.de'}" in out, err
    else:
        assert rc == 2 and f"{twin} differs from the baseline's run (sape seed 1) in {key} " in err, err
        assert "-- --allow-mismatch" in err


def test_a_mismatched_run_is_compared_only_marked(tmp_path, capsys):
    """pe-report -- --allow-mismatch: the shortened run is scored, marked in the table with what differs."""
    into = tmp_path / "rec"
    assert launch.main(["record", str(write_run(tmp_path, "sape", 1, GOOD, 60)), "--into", str(into)]) == 0
    assert launch.main(["record", str(write_run(tmp_path, "rope", 1, BAD, 60, updates=4, max_update=4)),
                        "--into", str(into)]) == 0
    (tmp_path / "ref.de").write_text("".join(x + "\n" for x in REF))
    argv = ["report", "--recipe", "multi30k", "--results", str(into), "--ref", str(tmp_path / "ref.de"),
            "--out-dir", str(tmp_path / "out"), "--", "--n-samples", "10"]
    assert launch.main(argv) == 2
    assert "in updates 4 (baseline 6)" in capsys.readouterr().err
    assert launch.main(argv + ["--allow-mismatch"]) == 0
    out = capsys.readouterr().out
    assert "  sape seed 1: 6 updates (" in out and "  rope seed 1: 4 updates (" in out
    md = (tmp_path / "out" / "results.md").read_text()
    assert "| rope ‡ |" in md and "‡ rope is not a run like the baseline's, compared as asked (--allow-mismatch): " \
        f"run 1 ({into / 'rope.en-de.small.seed1' / 'hyp.detok.de'}): updates 4 (baseline 6)." in md
    assert "| sape (baseline) |" in md


def test_report_errors_name_the_real_cause(tmp_path, capsys):
    """A results folder that does not exist, and one holding runs of another pair only (the recorded En-Fr
    runs), are named as such, not as a missing baseline ("record one with pe-record")."""
    ref = tmp_path / "ref.de"
    ref.write_text("x\n")
    base = ["report", "--recipe", "multi30k", "--ref", str(ref), "--out-dir", str(tmp_path / "out")]
    assert launch.main(base + ["--results", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert f"results folder {tmp_path / 'nowhere'} does not exist" in err and "pe-record" in err
    en_fr = REPO_ROOT / "examples" / "multi30k" / "results_en_fr"
    assert launch.main(base + ["--pair", "en-de", "--results", str(en_fr)]) == 2
    err = capsys.readouterr().err
    assert f"{en_fr} holds no recorded run of en-de small multi30k (pair, size, recipe); it holds: " \
           "en-fr annealed multi30k (5 runs)" in err and "record one" not in err


def committed_reports():
    """(folder, pair, size, decode) of every report the committed recorded runs make."""
    found = set()
    for cmd in REPO_ROOT.glob("examples/*/results*/*/command.json"):
        c = json.loads(cmd.read_text())
        for decode in [None, *results.named_decodes(cmd.parent, c["pair"].split("-")[1])]:
            found.add((cmd.parent.parent.relative_to(REPO_ROOT).as_posix(), c["recipe"], c["pair"], c["size"], decode))
    return sorted(found, key=str)


@pytest.mark.parametrize("folder, recipe, pair, size, decode", committed_reports())
def test_the_committed_records_are_read_with_their_identity(folder, recipe, pair, size, decode):
    """The recorded runs (their meta files have no ``run``; their command.json no ``extra``) keep their reports:
    each one's identity comes from its command.json and meta checkpoints, equal to its baseline's."""
    from pe_tools.recipes import load_table

    runs = results.recorded_runs(REPO_ROOT / folder, list(load_table(recipe)["method"]), pair, size, decode,
                                 recipe=recipe)
    for method, seeds in runs.items():
        for seed, hyp in seeds.items():
            command = json.loads((hyp.parent / "command.json" if not decode else hyp.parent.parent / "command.json")
                                 .read_text())
            ident = results.run_identity(command, json.loads(Path(f"{hyp}.meta.json").read_text()))
            assert ident["changes"] == "" and ident["updates"] == results.max_update_of(command["argv"])
            assert (ident["method"], ident["seed"], ident["pair"], ident["size"]) == (method, seed, pair, size)


# ------------------------------------------------------------------------------------- record destination
def test_a_changed_run_never_lands_in_the_committed_results_unless_told(tmp_path, capsys, monkeypatch):
    """pe-record: a run of the recipe's own command goes to the recipe's results folder by default; one changed
    with flags after pe-train's -- goes to RUNS/recorded, and into examples/RECIPE/results* only with
    --allow-changed. An older command.json without ``extra`` is read from its argv (the flags after --save-dir)."""
    monkeypatch.chdir(tmp_path)
    committed = tmp_path / "examples" / "multi30k" / "results"
    own = write_run(tmp_path / "a", "sape", 1, GOOD, 60, extra=[])
    changed = write_run(tmp_path / "b", "sape", 1, GOOD, 60, extra=["--max-update", "6"])
    assert launch.main(["record", str(own)]) == 0
    assert (committed / own.name / "hyp.detok.de").is_file()
    assert launch.main(["record", str(changed)]) == 0
    assert (changed.parent / "recorded" / changed.name / "hyp.detok.de").is_file()
    capsys.readouterr()
    assert launch.main(["record", str(changed), "--into", str(committed)]) == 2
    err = capsys.readouterr().err
    assert "trained with fairseq flags after -- (--max-update 6)" in err and "--allow-changed" in err
    assert json.loads((committed / own.name / "command.json").read_text())["extra"] == []  # not replaced
    assert launch.main(["record", str(changed), "--into", "examples/multi30k/results_other", "--allow-changed"]) == 0
    # a command.json of pe-train before `extra`: pe-train's flags after --save-dir RUN (and --fp16) are the change
    legacy = dict(COMMAND, argv=["x", "--save-dir", "r", "--fp16", "--max-update", "6"])
    assert results.changes(legacy) == ["--max-update", "6"]
    assert results.changes(dict(legacy, argv=["x", "--max-update", "6", "--save-dir", "r", "--fp16"])) == []
    assert results.committed(Path("examples/wmt14/results")) and not results.committed(Path("runs/recorded"))


# ---- what pe-record and pe-queue run tell a user to paste (results.record, queue_cli) ------------------------
@pytest.mark.parametrize("decoded", [False, True])
def test_pe_records_decode_command_pastes_back_as_its_run_folder(decoded, tmp_path):
    """pe-record of a run not decoded yet (no hypotheses), and of one decoded before its training finished: the
    message ends with the pe-generate command to run, which for a run folder holding a space, both quotes, `;`,
    `$(...)` and backquotes reads back (shlex, and bash itself) as exactly pe-generate and that folder, and
    pasting it runs none of the payloads."""
    from pe_tools.recipes import results

    run = tmp_path / NASTY / "sape.en-de.annealed.seed1"
    run.mkdir(parents=True)
    (run / "command.json").write_text(json.dumps({"pair": "en-de", "argv": ["d", "--max-update", "6"],
                                                  "extra": []}))
    if decoded:
        (run / "gen").mkdir()
        (run / "gen" / "hyp.detok.de").write_text("x\n")
        (run / "gen" / "hyp.detok.de.meta.json").write_text("{}")
    with pytest.raises(results.RecordError) as e:
        results.record(run, tmp_path / "into")
    message = str(e.value)
    command = message[message.rindex("pe-generate "):]
    want = ["pe-generate", str(run)]
    assert shlex.split(command) == want, message
    assert bash_argv(command, tmp_path) == want
    assert ("decode it again" in message) == decoded
    assert not list(tmp_path.rglob("PWNED*"))


# ---- what pe-record takes (pe_tools/recipes/results.py, ``record``) -----------------------------------------
@pytest.mark.parametrize("missing", ["hyp.detok.de", "hyp.detok.de.meta.json"])
def test_record_refuses_a_decode_missing_either_of_its_two_files(missing, tmp_path):
    """pe-record needs both files of a decode, RUN/gen/hyp.detok.TGT and its meta file: a run missing either one
    is refused with the pe-generate command that makes them (not a traceback of the file it could not read), and
    nothing is recorded."""
    from pe_tools.recipes import results

    run = write_run(tmp_path, "sape", 1, GOOD, 60)
    (run / "gen" / missing).unlink()
    with pytest.raises(results.RecordError) as e:
        results.record(run, tmp_path / "recorded")
    assert str(e.value) == (f"{run}: no hyp.detok.de and hyp.detok.de.meta.json in {run / 'gen'}; decode it first "
                            f"with pe-generate {shlex.quote(str(run))}")
    assert not (tmp_path / "recorded").exists()


@pytest.mark.parametrize("name", [None, "last"])
@pytest.mark.parametrize("seconds,taken", [(0, True), (1, True), (-1, False)])
def test_record_takes_a_decode_as_new_as_its_last_checkpoint(name, seconds, taken, tmp_path):
    """pe-record refuses a decode older than the run's checkpoint_last.pt (it may not be of the last weights) and
    takes one written in the same instant as it or after: the decode's mtime set to the checkpoint's, one second
    after it and one second before it (nanoseconds exact), for the default decode and for a named one."""
    from pe_tools.recipes import results

    run = write_run(tmp_path, "sape", 1, GOOD, 60)
    gen = run / "gen"
    if name:
        (gen / name).mkdir()
        for f in ("hyp.detok.de", "hyp.detok.de.meta.json"):
            (gen / name / f).write_bytes((gen / f).read_bytes())
    t = 1_700_000_000 * 10**9
    os.utime(run / "checkpoint_last.pt", ns=(t, t))
    for d in {gen, results.decode_dir(run, name)}:
        os.utime(d / "hyp.detok.de", ns=(t, t))
    h = results.decode_dir(run, name) / "hyp.detok.de"
    os.utime(h, ns=(t + seconds * 10**9,) * 2)
    if taken:
        dest = results.record(run, tmp_path / "recorded")
        assert (dest / "hyp.detok.de").is_file() and (not name or (dest / name / "hyp.detok.de").is_file())
    else:
        with pytest.raises(results.RecordError, match="is older than checkpoint_last.pt"):
            results.record(run, tmp_path / "recorded")


def test_training_columns_are_the_mean_wall_time_in_minutes():
    runs = [{"meta": {"training": {"train_seconds": 120.0, "params": 1_500_000, "device": "cpu", "threads": 2}}},
            {"meta": {"training": {"train_seconds": 240.0, "device": "cpu", "threads": 2}}},
            {"meta": None}]
    t = report.training({"runs": runs})
    assert t["train_minutes"] == pytest.approx((120 + 240) / 2 / 60)  # 3 minutes
    assert t["params"] == 1_500_000 and t["where"] == ["cpu, 2 thread(s)"]
    assert report.training({"runs": [{"meta": {}}]}) == {"params": None, "train_minutes": None, "where": []}


# ---- pe-report's comparisons (pe_tools/recipes/results.py) --------------------------------------------------
@pytest.mark.parametrize("n_seeds", [1, 2])
def test_a_report_compares_over_seeds_only_when_the_baseline_has_several(n_seeds):
    """pe-report's tables: ``results`` (the baseline's first seed) always; ``results_seeds`` only when the
    baseline was recorded with more than one seed: with one, it would repeat ``results`` under another name."""
    from pe_tools.naming import BASELINE
    from pe_tools.recipes.results import tables

    seeds = range(1, n_seeds + 1)
    runs = {m: {s: Path(f"{m}{s}") for s in seeds} for m in (BASELINE, "rope", "alibi")}
    out = tables(runs)
    assert out["results"] == {m: [Path(f"{m}1")] for m in runs}
    if n_seeds == 1:
        assert set(out) == {"results"}
    else:
        assert set(out) == {"results", "results_seeds"}
        assert out["results_seeds"] == {m: [Path(f"{m}1"), Path(f"{m}2")] for m in runs}


@pytest.mark.parametrize("with_both", [(), ("rope",), ("rope", "alibi")])
def test_a_report_over_seeds_needs_a_method_recorded_with_every_seed_of_the_baseline(with_both):
    """Two baseline seeds: ``results_seeds`` holds the baseline and each method recorded with both of its seeds,
    and is left out when no method is (a table of the baseline alone compares nothing)."""
    from pe_tools.naming import BASELINE
    from pe_tools.recipes.results import tables

    runs = {BASELINE: {1: Path("b1"), 2: Path("b2")}, "rope": {1: Path("r1")}, "alibi": {2: Path("a2")}}
    for m in with_both:
        runs[m] = {1: Path(f"{m}1"), 2: Path(f"{m}2")}
    out = tables(runs)
    if not with_both:
        assert set(out) == {"results"}
    else:
        assert out["results_seeds"] == {m: [runs[m][1], runs[m][2]] for m in (BASELINE, *with_both)}


@pytest.mark.parametrize("seconds,shown", [
    (59, "59 s"), (60, "1 min"), (59 * 60, "59 min"), (59 * 60 + 29, "59 min"), (60 * 60 - 31, "59 min"),
    (60 * 60 - 29, "1 h 00 min"), (60 * 60, "1 h 00 min"), (61 * 60, "1 h 01 min"), (125 * 60, "2 h 05 min"),
])
def test_a_time_left_of_an_hour_or_more_is_shown_in_hours_and_minutes(seconds, shown):
    """pe-train's progress note gives the time left as seconds under a minute, whole minutes under an hour (59
    min), and hours with two-digit minutes from a rounded 60 minutes on (``1 h 00 min``, never ``60 min``); the
    rounding to the nearest minute decides on which side a time just under the hour falls."""
    from pe_tools.recipes import train

    assert train._duration(seconds) == shown


@pytest.mark.parametrize("update, paced", [(19, False), (20, False), (21, True)])
def test_a_progress_line_at_or_before_the_resumed_update_gives_no_pace(update, paced):
    """pe-train's progress note of a run resumed at update 20: a line at update 20 (or an earlier one) has no
    update since the mark to pace by, so the note gives the count alone and never divides by zero; at 21, the pace
    is the seconds since the launch, 10 s for one update."""
    from pe_tools.recipes import train

    now = [1_000_000.0]
    p = train.Progress(100, 20, clock=lambda: now[0])
    now[0] += 10
    line = f"2026-01-01 10:00:10 | INFO | train_inner | epoch 001:  1 / 9 loss=5.0, num_updates={update}, wall=0"
    done = f"[pe-train] update {update} of 100 ({update}%)"
    note = p.note(line)
    if paced:
        assert note.startswith(f"{done}, 10.00 s/update, finish ~ "), note
    else:
        assert note == done


# ---- pe-train's progress note from the launch on (pe_tools/recipes/train.py) --------------------------------
@pytest.mark.parametrize("checkpoint,pace", [
    (None, 10.0),  # a fresh run: no checkpoint_last.pt, the pace is measured from update 0
    (b"cut short", 10.0),  # a checkpoint that cannot be read counts as none
    (2, 30.0),  # resumed at update 2: one update since
])
def test_pe_trains_first_progress_note_paces_from_the_checkpoints_update_or_zero(checkpoint, pace, tmp_path,
                                                                                 monkeypatch, capsys):
    """pe-train's note after fairseq-train's first progress line (update 3 of 4, 30 s after the launch) paces
    from the update checkpoint_last.pt holds, or from update 0 when there is none or it cannot be read: 10 s an
    update for a fresh run, 30 s for one resumed at update 2."""
    from pe_tools.recipes import launch, run_state, train

    data = tmp_path / "data"
    data.mkdir()
    (data / "dict.en.txt").write_text("")
    run = tmp_path / "runs" / "sape.en-de.small.seed1"
    if checkpoint is not None:
        run.mkdir(parents=True)
        if isinstance(checkpoint, int):
            stand_in_checkpoint(run / "checkpoint_last.pt", checkpoint)
        else:
            (run / "checkpoint_last.pt").write_bytes(checkpoint)
    now = [1_000_000.0]
    real = train.Progress
    monkeypatch.setattr(train, "Progress", lambda top, start: real(top, start, clock=lambda: now[0]))

    def tee(cmd, log, on_line, **kw):  # fairseq-train: 30 s, then its first progress line
        now[0] += 30
        on_line("2026-01-01 10:00:30 | INFO | train_inner | epoch 001:  3 / 9 loss=5.0, num_updates=3, wall=0")
        return 0

    monkeypatch.setattr(run_state, "LOCK_TRIES", 1)
    monkeypatch.setattr(train, "tee", tee)
    rc = launch.main(["train", "sape", "--recipe", "multi30k", "--data", str(data), "--runs-dir",
                      str(tmp_path / "runs"), "--", "--max-update", "4", "--cpu"])
    assert rc == 0
    (note,) = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("[pe-train] ")]
    assert note.startswith(f"[pe-train] update 3 of 4 (75%), {pace:.2f} s/update, finish ~ "), note
    assert json.loads((run / "command.json").read_text())["method"] == "sape"


# ---- a record published whole or not at all, by one writer (pe_tools/runs/run_dir.py, ``publish``) ------------
RECORD_CHILD = """
import sys
from pe_tools.recipes import results
print("ready", flush=True)
sys.stdin.readline()
results.record(sys.argv[1], sys.argv[2])
"""


def test_a_sigterm_at_any_moment_of_pe_record_leaves_a_whole_record_or_none(tmp_path):
    """pe-record killed with SIGTERM 0, 5, 10, ... ms after it starts (until one run ends before its signal), over
    no record and over an earlier whole one: every folder a reader finds (the results folder's */command.json, as
    pathlib's glob finds them, hidden names included) holds exactly the files of an uninterrupted record, and the
    one that listing readers use (``records``) agrees; nothing of the killed one is left in .pe-record/."""
    from pe_tools.runs.run_dir import STAGING, records

    run = write_run(tmp_path, "sape", 1, GOOD, 60)
    seen_records, ended, delay = [], False, 0
    while not ended and delay <= 2000:
        for earlier in (False, True):
            into = tmp_path / f"into{delay}{earlier}"
            if earlier:
                results.record(run, into)
            child = subprocess.Popen([sys.executable, "-c", RECORD_CHILD, str(run), str(into)], cwd=REPO_ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            assert child.stdout.readline() == "ready\n"
            child.stdin.write("go\n")
            child.stdin.flush()
            try:
                child.wait(delay / 1000)
            except subprocess.TimeoutExpired:
                child.send_signal(signal.SIGTERM)
            rc = child.wait()
            ended = ended or rc == 0
            assert rc in (0, -signal.SIGTERM, 128 + signal.SIGTERM), rc
            seen = sorted(p.parent for p in into.glob("*/command.json"))
            assert seen == records(into) and len(seen) <= 1, (delay, seen)
            assert len(seen) == 1 or not earlier  # the earlier record stays until the new one replaces it
            seen_records += [{p.relative_to(f): p.read_bytes() for p in f.rglob("*") if p.is_file()} for f in seen]
            assert not list((into / STAGING).glob("*")), delay
        delay += 5
    assert ended
    whole = results.record(run, tmp_path / "reference")  # the reference: an uninterrupted record
    want = {p.relative_to(whole): p.read_bytes() for p in whole.rglob("*") if p.is_file()}
    assert seen_records and all(r == want for r in seen_records)


@pytest.mark.parametrize("earlier", [False, True])
def test_a_sigterm_while_a_record_is_written_ends_it_with_no_trace_and_the_earlier_record_whole(earlier, tmp_path,
                                                                                                monkeypatch):
    """SIGTERM delivered once publish has written every file of a record, before it renames the folder into place:
    readers then see the earlier whole record or none (not the one being written), and the process ends (exit 143)
    after removing its folder in .pe-record/, the earlier record left whole."""
    from pe_tools.runs import run_dir
    from pe_tools.runs.run_dir import STAGING, publish, records

    into = tmp_path / "into"
    if earlier:
        publish(into, "r", {"command.json": "{}", "a": "old"})
    seen, write_all_atomic = [], run_dir.write_all_atomic

    def written_then_terminated(outputs):
        write_all_atomic(outputs)
        seen.extend(sorted(p.parent for p in into.glob("*/command.json")))
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(run_dir, "write_all_atomic", written_then_terminated)
    with pytest.raises(SystemExit) as e:
        publish(into, "r", {"command.json": "{}", "a": "new"})
    monkeypatch.undo()
    assert e.value.code == 128 + signal.SIGTERM
    assert seen == records(into) == ([into / "r"] if earlier else []) and not (into / STAGING).exists()
    assert not earlier or (into / "r" / "a").read_text() == "old"
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the handler before it, back


def test_records_skip_a_hidden_folder_that_an_older_pe_record_left(tmp_path):
    """A killed pe-record of an older version left .NAME.tmpPID/ with a command.json beside the records: no
    reader of ``records`` takes it (pe-report scored it before)."""
    from pe_tools.runs.run_dir import records

    for name in ("r", ".r.tmp123"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "command.json").write_text("{}")
    assert records(tmp_path) == [tmp_path / "r"]


@pytest.mark.parametrize("same_run", [True, False])
def test_pe_record_removes_what_a_killed_pe_record_of_the_run_left(same_run, tmp_path):
    """What a pe-record killed outright (SIGKILL) left of a run (its folder in RESULTS/.pe-record/, or an older
    version's hidden .NAME.tmpPID beside the records) is removed by the next pe-record of that run, and only of
    that run: another run's is another pe-record's, perhaps still writing."""
    from pe_tools.runs.run_dir import STAGING

    run = write_run(tmp_path, "sape", 1, GOOD, 60)
    into = tmp_path / "into"
    name = run.name if same_run else run.name + "0"
    left = [into / STAGING / f"{name}.12345", into / f".{name}.tmp12345"]
    for folder in left:
        folder.mkdir(parents=True)
        (folder / "command.json").write_text("{}")
    results.record(run, into)
    assert [folder.exists() for folder in left] == [not same_run] * 2


def test_a_second_writer_of_a_run_is_refused_by_pe_record_naming_the_holder(tmp_path):
    """pe-record while another process writes the run (holds RUN/run.lock: a pe-generate here) is refused at once,
    naming the holder, and records nothing; once it ends, the run is recorded."""
    import fcntl

    run = write_run(tmp_path, "sape", 1, GOOD, 60)
    fd = os.open(run / "run.lock", os.O_RDWR | os.O_CREAT)
    os.write(fd, json.dumps({"pid": 4242, "host": "n1", "what": "pe-generate"}).encode())
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with pytest.raises(results.RecordError, match=rf"^{run / 'run.lock'} is held by pid 4242 on n1 \(pe-generate\); "
                                                      rf"it writes the run \(train, decode or record\)"):
            results.record(run, tmp_path / "into")
    finally:
        os.close(fd)
    assert not (tmp_path / "into").exists()
    assert (results.record(run, tmp_path / "into") / "command.json").is_file()


@pytest.mark.parametrize("name", [None, "partial"])
def test_a_refused_partial_decode_names_the_move_only_for_a_named_one(name, tmp_path):
    """pe-record of a finished run with an old --partial decode: for a named one (RUN/gen/partial), the message
    names the move that records the run without it, and after that move the run is recorded; the default decode
    has no such way out (the message asks for a decode alone)."""
    run = write_run(tmp_path, "sape", 1, GOOD, 60)
    gen = run / "gen"
    folder = gen / name if name else gen
    folder.mkdir(exist_ok=True)
    (folder / "hyp.detok.de").write_text("x\n")
    (folder / "hyp.detok.de.meta.json").write_text(json.dumps({"partial": {"why": "w"}}))
    with pytest.raises(results.RecordError, match="was made with --partial") as e:
        results.record(run, tmp_path / "into")
    message = str(e.value)
    assert ("mv " in message) == bool(name), message
    if name:
        move = shlex.split(message[message.index("mv "):])
        assert move[:2] == ["mv", str(folder)] and bash_argv(message[message.index("mv "):], tmp_path) == move
        subprocess.run(move, check=True)
        assert (results.record(run, tmp_path / "into") / "command.json").is_file()


def test_pe_record_of_a_folder_that_does_not_exist_makes_none(tmp_path):
    """pe-record of a mistyped run folder says it has no command.json and leaves no folder (nor lock file) behind."""
    missing = tmp_path / "runs" / "sape.en-de.small.seed9"
    with pytest.raises(results.RecordError, match="has no command.json"):
        results.record(missing, tmp_path / "into")
    assert not missing.exists() and not (tmp_path / "into").exists()


def test_pe_report_and_pe_queue_agree_on_what_is_recorded(tmp_path):
    """Beside two whole records (sape, rope), what killed pe-records leave (an older version's hidden
    .NAME.tmpPID/, a folder in .pe-record/) of rope and of alibi, each holding a command.json: pe-report selects
    sape and rope from their whole records alone, and pe-queue status says recorded for exactly those two."""
    from pe_tools.recipes import queue
    from pe_tools.runs.run_dir import STAGING

    into = tmp_path / "results"
    runs = {m: write_run(tmp_path, m, 1, GOOD, 60) for m in ("sape", "rope", "alibi")}
    for m in ("sape", "rope"):
        results.record(runs[m], into)
    for m in ("rope", "alibi"):
        for left in (into / f".{runs[m].name}.tmp123", into / STAGING / f"{runs[m].name}.123"):
            left.mkdir(parents=True)
            (left / "command.json").write_bytes((runs[m] / "command.json").read_bytes())
            (left / "hyp.detok.de").write_text("partial\n")
    reported = results.recorded_runs(into, ["sape", "rope", "alibi"], "en-de", "small")
    assert reported == {m: {1: into / runs[m].name / "hyp.detok.de"} for m in ("sape", "rope")}
    status = {m: queue.progress(queue.Run(1, "multi30k", m, "en-de", "small", 1,
                                          {"runs-dir": str(tmp_path / "runs"), "into": str(into)}))["recorded"]
              for m in runs}
    assert status == {"sape": True, "rope": True, "alibi": False}


@pytest.mark.parametrize("name, data", [
    ("cut", b'{"recipe": "multi30k", "pa'), ("latin1", '{"x": "\xe9"}'.encode("latin-1")), ("list", b"[1]"),
])
def test_a_run_record_written_half_or_garbled_is_refused_and_a_meta_file_read_as_empty(tmp_path, name, data):
    """A command.json cut short, not UTF-8 or not an object: read_command raises RunRecordError naming the file and
    the fix (command_of: None); a decode's meta file so damaged, or missing, reads as {}."""
    from pe_tools.runs import run_dir

    (tmp_path / "command.json").write_bytes(data)
    with pytest.raises(run_dir.RunRecordError, match="command.json .*re-run the run's pe-train command"):
        run_dir.read_command(tmp_path)
    assert run_dir.command_of(tmp_path) is None
    (tmp_path / "hyp.meta.json").write_bytes(data)
    assert run_dir.read_meta(tmp_path / "hyp.meta.json") == {} and run_dir.read_meta(tmp_path / "none.json") == {}


def test_a_run_record_that_cannot_be_read_is_refused_naming_it(tmp_path, monkeypatch):
    """command.json present but unreadable (an I/O error of a network file system, a file the user may not read):
    read_command raises RunRecordError naming the file and the fix, command_of gives None; a meta file so
    unreadable reads as {} (read_meta) or is refused naming it (load_meta)."""
    from pathlib import Path

    from pe_tools.runs import run_dir

    (tmp_path / "command.json").write_text('{"method": "sape"}')
    (tmp_path / "hyp.meta.json").write_text("{}")
    real = Path.read_text

    def failing(self, *args, **kwargs):
        if self.name in ("command.json", "hyp.meta.json"):
            raise OSError(5, "Input/output error", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", failing)
    with pytest.raises(run_dir.RunRecordError, match="command.json cannot be read .*Input/output error"):
        run_dir.read_command(tmp_path)
    assert run_dir.command_of(tmp_path) is None
    assert run_dir.read_meta(tmp_path / "hyp.meta.json") == {}
    with pytest.raises(run_dir.RunRecordError, match="hyp.meta.json: metadata file cannot be read .*Input/output"):
        run_dir.load_meta(tmp_path / "hyp.meta.json")


def test_a_hidden_folder_is_never_a_record_even_by_its_own_name(tmp_path):
    """``recorded(RESULTS, NAME)`` (pe-queue's test of a run already recorded) agrees with ``records``: RESULTS/NAME
    with a command.json is a record, a hidden one (.NAME.tmpPID an older pe-record left, or the staging folder
    .pe-record) is not, though it holds a command.json too."""
    from pe_tools.runs.run_dir import STAGING, recorded, records

    for name in ("r", ".r.tmp123", STAGING):
        (tmp_path / name).mkdir()
        (tmp_path / name / "command.json").write_text("{}")
    assert [recorded(tmp_path, name) for name in ("r", ".r.tmp123", STAGING, "other")] == [True, False, False, False]
    assert records(tmp_path) == [tmp_path / "r"]


def test_an_identity_key_missing_on_either_side_is_not_compared():
    """identity_differences names each key outside COMPARED whose values differ; a key one side lacks (``decode``
    of a meta file without ``checkpoints``, written by an older pe-generate) is not compared, whichever side lacks
    it, and raises nothing."""
    from pe_tools.runs.identity import identity_differences

    older = {"recipe": "wmt14", "pair": "en-de", "size": "base", "method": "sape", "seed": 1}
    newer = {**older, "method": "rope", "decode": "average of 5 checkpoints spanning 4000 updates"}
    assert identity_differences(newer, older) == [] and identity_differences(older, newer) == []
    assert identity_differences({**newer, "pair": "en-fr"}, older) == ["pair en-fr (baseline en-de)"]
    assert identity_differences(older, {**newer, "size": "big"}) == ["size base (baseline big)"]

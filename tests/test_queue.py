"""pe-queue (pe_tools/recipes/queue/): a queue file checked before anything starts, and a queue killed with
SIGKILL in the middle of a training and restarted with the same command that records exactly what an uninterrupted
queue records."""
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from pe_shell import NASTY, bash_argv
from pe_queue_runs import MAX_UPDATE, RUNS, queue_file, recorded, start
from pe_testing import REPO, SAFE_ENV

from pe_tools.recipes import queue, queue_cli, results, training_log


def updates(log: Path) -> int:
    return (training_log.last_update(log.read_text()) or 0) if log.is_file() else 0


@pytest.mark.slow
def test_killed_queue_records_what_an_uninterrupted_one_records(queue_reference, tmp_path):
    whole, table, code = queue_reference.queue, queue_reference.table, queue_reference.code
    reference = recorded(whole)
    assert sorted(reference) == sorted(f"{m}.en-de.mini.seed1/{d}hyp.detok.de" for m in RUNS for d in ("", "last/"))
    commit = (code / "COMMIT").read_text().strip()
    for m in RUNS:  # the code's commit, in the command of the run and of its record, and its plugin trained it
        command = json.loads((whole.parent / "rec" / f"{m}.en-de.mini.seed1" / "command.json").read_text())
        assert command["commit"] == commit
        assert command["argv"][command["argv"].index("--user-dir") + 1] == str(code / "pe_plugin")
        log = (whole.parent / "runs" / f"{m}.en-de.mini.seed1" / "train.log").read_text()
        assert f"'user_dir': '{code / 'pe_plugin'}'" in log

    # killed (SIGKILL, the queue alone: its trainings run on) while the first run is between two checkpoints; two
    # runs, as -j 2 trains them side by side (the third run of the reference would only start after the restart)
    cut_runs = RUNS[:2]
    cut = queue_file(tmp_path, table, "cut", cut_runs)
    first_log = cut.parent / "runs" / f"{RUNS[0]}.en-de.mini.seed1" / "train.log"
    proc = start(cut, code)
    deadline = time.monotonic() + 600
    while updates(first_log) < 5 and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    killed_at = updates(first_log)
    assert 5 <= killed_at < MAX_UPDATE, f"the kill came at update {killed_at}"
    assert not list((cut.parent / "rec").glob("*/hyp.detok.de")) if (cut.parent / "rec").exists() else True
    # a kill during fairseq's plain copy of checkpoint_last.pt leaves it cut short
    last = cut.parent / "runs" / f"{RUNS[0]}.en-de.mini.seed1" / "checkpoint_last.pt"
    time.sleep(0.5)
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])

    proc = start(cut, code)  # the same command
    out = proc.communicate(timeout=900)[0]
    assert proc.returncode == 0, out[-4000:]
    assert "left by an earlier queue" in out  # the orphaned trainings were ended, not trained beside
    assert recorded(cut) == recorded(whole, cut_runs) != {}
    assert not list(cut.parent.rglob("*.tmp*"))
    status = subprocess.run([sys.executable, "-m", "pe_tools.recipes.queue_cli", "status", str(cut)], env=SAFE_ENV,
                            capture_output=True, text=True, cwd=cut.parent)
    assert status.returncode == 0
    rows = status.stdout.splitlines()
    assert rows[0].split()[:3] == ["run", "updates", "valid"] and len(rows) == 1 + len(cut_runs), status.stdout
    assert all(f"{MAX_UPDATE}/{MAX_UPDATE}" in r and " yes " in r for r in rows[1:]), status.stdout


def test_pin_exports_the_commit_once_outside_the_working_tree(tmp_path, monkeypatch):
    """pe-queue run's default, --pin HEAD: the commit exported with git archive under PE_QUEUE_CODE_ROOT, once; the
    runs train from that copy (the queue tests run theirs from --code, a copy of the working tree under test). A
    repository of its own, with a later commit and an uncommitted edit that the pinned copy must not hold."""
    monkeypatch.setenv("PE_QUEUE_CODE_ROOT", str(tmp_path / "codes"))
    repo = tmp_path / "repo"
    (repo / "pe_plugin").mkdir(parents=True)

    def git(*args):
        return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                              capture_output=True, text=True, check=True).stdout.strip()

    git("init", "-q")
    (repo / "pe_plugin" / "__init__.py").write_text("first\n")
    git("add", "-A")
    git("commit", "-qm", "first")
    first = git("rev-parse", "HEAD")
    (repo / "pe_plugin" / "__init__.py").write_text("second\n")
    git("commit", "-qam", "second")
    head = git("rev-parse", "HEAD")
    (repo / "pe_plugin" / "__init__.py").write_text("uncommitted\n")
    pinned = queue.pin_code("HEAD", repo)
    assert pinned == tmp_path / "codes" / head and queue.code_commit(pinned) == head
    assert (pinned / "pe_plugin" / "__init__.py").read_text() == "second\n"
    assert (queue.pin_code(first, repo) / "pe_plugin" / "__init__.py").read_text() == "first\n"
    archives, real_popen = [], subprocess.Popen
    monkeypatch.setattr(queue.pin.subprocess, "Popen",
                        lambda argv, *a, **k: ("archive" in argv and archives.append(argv)) or real_popen(argv, *a, **k))
    assert queue.pin_code(head[:12], repo) == pinned and archives == []  # exported once: found, not archived again
    assert sorted(p.name for p in (tmp_path / "codes").iterdir()) == sorted([first, head])  # no temporary folder
    with pytest.raises(queue.QueueError, match=r"(?s)--pin no-such-rev: not a commit .*--code DIR"):
        queue.pin_code("no-such-rev", repo)


def test_repair_resumes_from_the_newest_whole_checkpoint(tmp_path):
    """checkpoint_last.pt cut short by a kill during fairseq's copy is replaced by the newest numbered checkpoint
    that reads whole (here a zip archive written by torch.save)."""
    import torch

    for u in (2, 4):
        torch.save({"u": torch.tensor(u)}, tmp_path / f"checkpoint_1_{u}.pt")
    newest = (tmp_path / "checkpoint_1_4.pt").read_bytes()
    (tmp_path / "checkpoint_1_6.pt").write_bytes(newest[:100])  # cut short too
    (tmp_path / "checkpoint_last.pt").write_bytes(newest[: len(newest) // 2])
    (tmp_path / "checkpoint_1_8.pt.tmp").write_bytes(b"half")
    said = []
    queue.repair(tmp_path, said.append)
    assert (tmp_path / "checkpoint_last.pt").read_bytes() == newest
    assert not (tmp_path / "checkpoint_1_8.pt.tmp").exists()
    assert "does not read whole" in said[0] and "checkpoint_1_4.pt" in said[0]
    # a whole checkpoint_last.pt newer than every numbered one is kept
    torch.save({"u": torch.tensor(9)}, tmp_path / "checkpoint_last.pt")
    kept = (tmp_path / "checkpoint_last.pt").read_bytes()
    queue.repair(tmp_path, said.append)
    assert (tmp_path / "checkpoint_last.pt").read_bytes() == kept


def test_repair_prefers_a_newer_numbered_checkpoint_to_a_whole_older_last(tmp_path):
    """A whole checkpoint_last.pt older than the newest numbered checkpoint (a kill between fairseq's save of
    checkpoint_E_U.pt and its copy to checkpoint_last.pt) is replaced by that checkpoint."""
    import torch

    torch.save({"u": torch.tensor(4)}, tmp_path / "checkpoint_last.pt")
    torch.save({"u": torch.tensor(6)}, tmp_path / "checkpoint_1_6.pt")
    os.utime(tmp_path / "checkpoint_last.pt", (1_000_000, 1_000_000))
    os.utime(tmp_path / "checkpoint_1_6.pt", (2_000_000, 2_000_000))
    assert queue.readable(tmp_path / "checkpoint_last.pt")  # whole, only older
    queue.repair(tmp_path, print)
    assert (tmp_path / "checkpoint_last.pt").read_bytes() == (tmp_path / "checkpoint_1_6.pt").read_bytes()
    assert torch.load(tmp_path / "checkpoint_last.pt", weights_only=True)["u"] == 6


def flip_a_byte_inside(path: Path, member_suffix: str) -> None:
    """Flip one byte in the middle of the stored data of the zip member whose name ends with ``member_suffix``;
    the archive's directory stays whole."""
    import struct
    import zipfile

    with zipfile.ZipFile(path) as z:
        (info,) = [i for i in z.infolist() if i.filename.endswith(member_suffix)]
    data = bytearray(path.read_bytes())
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26: info.header_offset + 30])
    at = info.header_offset + 30 + name_len + extra_len + info.compress_size // 2
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_byte_flipped_inside_a_member_fails_the_crc_check(tmp_path):
    """A checkpoint whose archive opens but whose tensor data has one byte changed does not read whole, and
    repair replaces such a checkpoint_last.pt by the newest whole numbered checkpoint."""
    import zipfile

    import torch

    for name in ("checkpoint_1_2.pt", "checkpoint_last.pt"):
        torch.save({"w": torch.arange(64, dtype=torch.float32)}, tmp_path / name)
    os.utime(tmp_path / "checkpoint_1_2.pt", (1_000_000, 1_000_000))  # older than the corrupt last
    last = tmp_path / "checkpoint_last.pt"
    flip_a_byte_inside(last, "/data/0")
    with zipfile.ZipFile(last) as z:  # the control: the directory reads, only the member's CRC is wrong
        assert len(z.infolist()) > 1 and z.testzip() is not None
    assert not queue.readable(last) and queue.readable(tmp_path / "checkpoint_1_2.pt")
    said = []
    queue.repair(tmp_path, said.append)
    assert last.read_bytes() == (tmp_path / "checkpoint_1_2.pt").read_bytes()
    assert "does not read whole" in said[0] and "checkpoint_1_2.pt" in said[0]


@pytest.mark.parametrize("line, words", [
    ("multi30k sape en-de annealed", ["4 fields", "RECIPE METHOD PAIR SIZE SEED"]),
    ("multi30k sapee en-de annealed 1", ["unknown method 'sapee'", "methods: ", "sape"]),
    ("multi30k sape en-de annealed 1 data={missing}", ["has no dict.en.txt", "pe-prepare en-de --recipe multi30k"]),
    ("multi30k sape en-xx annealed 1", ["unknown pair 'en-xx'", "en-de"]),
    ("multi30k sape en-de huge 1", ["no size 'huge'", "annealed"]),
    ("multi30k sape en-de annealed one", ["seed 'one'"]),
    ("multi30k sape en-de annealed 1 dta=x", ["unknown option dta", "data=DIR"]),
])
def test_bad_lines_are_refused_before_anything_starts(line, words, data_bin, tmp_path, capsys):
    q = tmp_path / "q.txt"
    good = f"multi30k sape en-de annealed 1 data={data_bin} runs-dir={tmp_path / 'runs'}"
    q.write_text(f"{good}\n\n# comment\n{line.format(missing=tmp_path / 'missing')}\n")
    assert queue_cli.main(["run", str(q), "--code", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {q}:4: ") and all(w in err for w in words), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q.txt"]  # nothing written, nothing started


def test_check_names_every_bad_line_and_both_sides_dictionaries(tmp_path, capsys):
    """A data folder prepared for en-de (dict.en.txt, dict.de.txt) is refused for an en-fr run (its source's
    dictionary is there, its target's is not), and `pe-queue check` names every bad line, not only the first."""
    data = tmp_path / "en_de"
    data.mkdir()
    for lang in ("en", "de"):
        (data / f"dict.{lang}.txt").write_text("a 1\n")
    q = tmp_path / "q.txt"
    q.write_text(f"multi30k sape en-de annealed 1 data={data}\n"      # good
                 f"multi30k rope en-fr annealed 1 data={data}\n"      # no dict.fr.txt
                 f"multi30k sape en-de annealed one data={data}\n"    # a bad seed
                 f"multi30k t5 en-fr annealed 1 data={data}\n")       # no dict.fr.txt again
    before = sorted(p.name for p in tmp_path.rglob("*"))
    assert queue_cli.main(["check", str(q)]) == 2
    err = capsys.readouterr().err
    lines = err.strip().split("\n")
    assert [line.removeprefix("error: ").split(": ")[0] for line in lines[:3]] == [f"{q}:{n}" for n in (2, 3, 4)], err
    assert "has no dict.fr.txt (pair en-fr)" in lines[0] and "pe-prepare en-fr --recipe multi30k" in lines[0]
    assert "seed 'one'" in lines[1] and "has no dict.fr.txt" in lines[2]
    assert lines[3] == f"3 bad lines in {q}"
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written


def test_counts_of_one_are_a_run_and_zero_is_refused(data_bin, tmp_path):
    """gpus=, cpus=, nodes=: whole numbers from 1 (one GPU is the usual run); 0 names the option and the rule."""
    q = tmp_path / "q.txt"
    q.write_text(f"multi30k sape en-de annealed 1 data={data_bin} gpus=1 cpus=1 nodes=1\n")
    assert queue.parse_queue(q)[0].options == {"data": str(data_bin), "gpus": "1", "cpus": "1", "nodes": "1"}
    q.write_text(f"multi30k sape en-de annealed 1 data={data_bin} gpus=0\n")
    with pytest.raises(queue.QueueError, match="gpus=0: give a whole number >= 1"):
        queue.parse_queue(q)


def test_a_restarted_queue_ends_the_launches_an_earlier_one_left(tmp_path):
    """QUEUE.pids names the process groups of a killed queue's steps: a restart kills those still running a
    pe_tools.recipes.launch (here a stand-in that sleeps, in a group of its own), leaves a reused number alone
    (another program), and removes the file."""
    fake = tmp_path / "pe_tools" / "recipes"
    fake.mkdir(parents=True)
    for init in (tmp_path / "pe_tools" / "__init__.py", fake / "__init__.py"):
        init.write_text("")
    (fake / "launch.py").write_text("import time\ntime.sleep(60)\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    launch = subprocess.Popen([sys.executable, "-m", "pe_tools.recipes.launch"], env=env, start_new_session=True)
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        for _ in range(100):  # until the stand-in's command line is there to read
            if b"launch" in Path(f"/proc/{launch.pid}/cmdline").read_bytes():
                break
            time.sleep(0.05)
        q = queue.Queue(tmp_path / "q.txt", [], tmp_path, jobs=1, threads=1, log=lambda *a: None)
        q.pids_file.write_text(json.dumps({"sape.en-de.annealed.seed1": launch.pid, "other": other.pid}))
        q.end_orphans()
        assert launch.wait(timeout=10) == -signal.SIGKILL
        assert other.poll() is None and not q.pids_file.exists()
    finally:
        for p in (launch, other):
            p.kill()
            p.wait()


def test_status_puts_each_extra_column_on_its_own_run(tmp_path):
    """pe-queue status's extra columns (the SLURM job's, {heading: one value per run}) line up with their runs."""
    runs = [queue.Run(n, "multi30k", method, "en-de", "annealed", 1, {"runs-dir": str(tmp_path)})
            for n, method in ((1, "sape"), (2, "rope"))]
    table = queue.status_table(runs, {"job": ["11", "22"], "state": ["RUNNING", "PENDING"]}).splitlines()
    assert table[0].split()[-2:] == ["job", "state"]
    assert [(row.split()[0], row.split()[-2:]) for row in table[1:]] == [
        ("sape.en-de.annealed.seed1", ["11", "RUNNING"]), ("rope.en-de.annealed.seed1", ["22", "PENDING"])]


def test_progress_takes_the_checkpoints_count_where_the_log_lags(tmp_path):
    """A run killed after its last checkpoint and before the tee wrote fairseq's last lines has trained to the
    checkpoint's update (checkpoint_files.updates_of), which the queue's check after pe-train reads; a log ahead of
    its checkpoint (the updates since it) is read as it is."""
    from pe_runs import save_checkpoint

    run = queue.Run(1, "multi30k", "sape", "en-de", "annealed", 1, {"runs-dir": str(tmp_path)})
    run.run_dir.mkdir(parents=True)
    step = "2026-01-01 10:00:0{u} | INFO | train_inner | epoch 001: loss=5.0, num_updates={u}, wall=0\n"
    (run.run_dir / "train.log").write_text("".join(step.format(u=u) for u in (1, 2)))
    assert queue.progress(run)["updates"] == 2
    save_checkpoint(run.run_dir / "checkpoint_last.pt", 3)
    assert queue.progress(run)["updates"] == 3
    (run.run_dir / "train.log").write_text("".join(step.format(u=u) for u in (1, 2, 3, 4)))
    assert queue.progress(run)["updates"] == 4


def test_pin_without_git_on_the_path_is_refused_naming_the_way_around(tmp_path, monkeypatch):
    """--pin needs git: on a machine without it (git not found on PATH) pe-queue refuses with the --code way
    around instead of a traceback."""
    monkeypatch.setenv("PE_QUEUE_CODE_ROOT", str(tmp_path / "codes"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(queue.QueueError, match=r"(?s)--pin HEAD: not a commit of .*--code DIR"):
        queue.pin_code("HEAD", REPO)
    assert not (tmp_path / "codes").exists()


def test_pin_reads_the_checkout_that_holds_this_pe_tools():
    """pe-queue run's --pin (default HEAD) exports from the git checkout of the running pe_tools: this repository."""
    assert queue.CHECKOUT == REPO


def test_pe_queue_without_a_command_names_the_commands(capsys):
    with pytest.raises(SystemExit) as e:
        queue_cli.main([])
    assert e.value.code == 2 and "required: cmd" in capsys.readouterr().err


def test_check_without_data_passes_a_queue_written_before_its_data(tmp_path, capsys):
    """pe-queue check --no-data (on a login node, before pe-prepare): every check but the data's; without the
    option the missing data is named."""
    q = tmp_path / "q.txt"
    q.write_text(f"multi30k sape en-de annealed 1 data={tmp_path / 'not_yet'}\n")
    assert queue_cli.main(["check", str(q), "--no-data"]) == 0
    assert capsys.readouterr().out == f"{q}: 1 runs, all valid\n"
    assert queue_cli.main(["check", str(q)]) == 2 and "not_yet" in capsys.readouterr().err


def test_run_refuses_a_code_folder_without_the_project(data_bin, tmp_path, capsys):
    q = tmp_path / "q.txt"
    q.write_text(f"multi30k sape en-de annealed 1 data={data_bin} runs-dir={tmp_path / 'runs'}\n")
    assert queue_cli.main(["run", str(q), "--code", str(tmp_path / "empty")]) == 2
    assert "--code" in (err := capsys.readouterr().err) and "no pe_tools/recipes/launch.py there" in err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "q.txt.lock").exists()


def fake_chain_run(tmp_path: Path, reached: int, top: int = 6):
    """A run directory and a ``step`` for queue.run_chain that records each step and does what it stands for:
    training writes command.json (--max-update ``top``) and a checkpoint_last.pt at update ``reached`` unless
    there is one (pe-train does nothing for a finished run), a decode its hypothesis file."""
    from pe_runs import save_checkpoint

    run_dir, steps = tmp_path / "run", []

    def step(what, args):
        steps.append((what, args[0], args[args.index("--name") + 1] if "--name" in args else None))
        if args[0] == "train":
            run_dir.mkdir(exist_ok=True)
            (run_dir / "command.json").write_text(json.dumps({"argv": ["fairseq-train", "--max-update", str(top)]}))
            if not (run_dir / "checkpoint_last.pt").exists():
                save_checkpoint(run_dir / "checkpoint_last.pt", reached)
        elif args[0] == "generate":
            gen = results.decode_dir(run_dir, steps[-1][2])
            gen.mkdir(parents=True, exist_ok=True)
            time.sleep(0.01)  # newer than the checkpoint on any file system's clock
            (gen / "hyp.detok.de").write_text("x\n")
        return 0

    return run_dir, steps, step


def test_the_chain_trains_decodes_each_and_records_then_skips_what_is_done(tmp_path):
    """queue.run_chain (pe-queue's, pe-demo's and pe-length's): train, every decode, record, in that order; run
    again, a run whose decodes are newer than its last checkpoint is not trained or decoded again; a decode older
    than the checkpoint is redone (after pe-train, which finds the run finished), the newer one is not."""
    run_dir, steps, step = fake_chain_run(tmp_path, 6)
    assert queue.run_chain(run_dir, "de", ["train", "x"], step, queue.DECODES, tmp_path / "rec") == "recorded"
    assert [s[1:] for s in steps] == [("train", None), ("generate", None), ("generate", "last"), ("record", None)]
    steps.clear()
    assert queue.run_chain(run_dir, "de", ["train", "x"], step, queue.DECODES) == "decoded"
    assert steps == []
    os.utime(run_dir / "gen" / "hyp.detok.de", (1, 1))  # older than checkpoint_last.pt
    assert queue.run_chain(run_dir, "de", ["train", "x"], step, queue.DECODES) == "decoded"
    assert [s[1:] for s in steps] == [("train", None), ("generate", None)]


def test_the_chain_decodes_nothing_when_training_stopped_short_or_failed(tmp_path):
    """A training whose last checkpoint is short of its --max-update, or that exits non-zero, ends the chain with
    the update reached (or the exit status) and the train.log to look at; nothing is decoded."""
    run_dir, steps, step = fake_chain_run(tmp_path, 4, top=6)
    state = queue.run_chain(run_dir, "de", ["train", "x"], step, queue.DECODES, tmp_path / "rec")
    assert state == f"failed: training stopped at update 4 of 6 (see {run_dir / 'train.log'})"
    assert [s[1] for s in steps] == ["train"]
    state = queue.run_chain(run_dir, "de", ["train", "x"], lambda what, args: 3, queue.DECODES)
    assert state == f"failed: pe-train exited 3 (see {run_dir / 'train.log'})"


def test_an_option_value_may_hold_an_equals_sign(tmp_path):
    """Only a field's first `=` separates the option from its value: runs-dir=a=b is the folder a=b."""
    q = tmp_path / "queue.txt"
    q.write_text("multi30k sape en-de annealed 1 runs-dir=a=b into=rec\n")
    (run,) = queue.parse_queue(q, data=False)
    assert run.options == {"runs-dir": "a=b", "into": "rec"} and run.run_dir == Path("a=b") / run.name


def test_a_hash_starts_a_comment_only_outside_quotes(tmp_path):
    """A quoted value may hold `#` (runs-dir='runs #2' is that folder); a `#` outside quotes starts a comment, at
    the start of a line or after a run; a line of only a comment is no run."""
    q = tmp_path / "queue.txt"
    q.write_text("# Table 1, first seeds\n"
                 "multi30k sape en-de annealed 1 runs-dir='runs #2' into=\"rec#1\"  # the baseline\n"
                 "   # an indented comment\n"
                 "multi30k rope en-de annealed 1 runs-dir=r#not-a-folder\n")
    first, second = queue.parse_queue(q, data=False)
    assert first.options == {"runs-dir": "runs #2", "into": "rec#1"} and first.run_dir == Path("runs #2") / first.name
    assert second.options == {"runs-dir": "r"}


def test_a_runs_options_become_pe_trains_flags():
    """A queue line's data=, runs-dir= and gpus= become pe-train's --data, --runs-dir and --gpus (into= is
    pe-record's); without them, pe-train's own defaults apply."""
    run = queue.Run(3, "multi30k", "rope", "en-fr", "annealed", 2, {"data": "d", "runs-dir": "r", "gpus": "4", "into": "x"})
    base = ["train", "rope", "--recipe", "multi30k", "--pair", "en-fr", "--size", "annealed", "--seed", "2"]
    assert run.train_args() == base + ["--data", "d", "--runs-dir", "r", "--gpus", "4"]
    assert queue.Run(3, "multi30k", "rope", "en-fr", "annealed", 2).train_args() == base


def test_the_multi30k_queue_files_are_valid_and_every_run_recorded(capsys):
    """examples/multi30k's queue files (the En-Fr and KERPLE runs on a GPU, the En-Fr cross-check on CPU cores, the
    6,000-update runs) are valid without prepared data, and each run they list is recorded where its line says
    (into=), with the commit it trained from; only the 6,000-update runs may still be unrecorded."""
    files = sorted((REPO / "examples" / "multi30k").glob("queue*.txt"))
    assert [f.name for f in files] == ["queue_6k_en_de.txt", "queue_6k_en_fr.txt", "queue_en_fr.txt", "queue_gpu.txt"]
    # the 6,000-update runs wait for a GPU window (docs/results.md, 6,000 updates): a run of theirs may be missing,
    # but what is recorded is checked like the others
    pending = {"queue_6k_en_de.txt", "queue_6k_en_fr.txt"}
    for q in files:
        assert queue_cli.main(["check", str(q), "--no-data"]) == 0
        assert capsys.readouterr().out.strip().endswith("all valid")
        for run in queue.parse_queue(q, data=False):
            if q.name in pending and not (REPO / run.recorded).exists():
                continue
            command = json.loads((REPO / run.recorded / "command.json").read_text())
            assert (command["method"], command["pair"], command["size"]) == (run.method, run.pair, run.size)
            assert len(command["commit"]) == 40, (q.name, run.name)


def test_status_shows_where_a_run_no_job_works_on_resumes(tmp_path):
    """After a requeue the log has gone past the last checkpoint; for a run no job works on (``resuming``) status
    shows the update it resumes from: checkpoint_last.pt's, or a newer numbered checkpoint's (as repair makes it);
    a run being trained shows the log's. "done" only when train.finished says so. Seen failing with status_table
    reading p["updates"] for every run."""
    from pe_runs import save_checkpoint

    run = queue.Run(1, "multi30k", "sape", "en-de", "annealed", 1, {"runs-dir": str(tmp_path)})
    run.run_dir.mkdir(parents=True)
    step = "2026-01-01 10:00:0{u} | INFO | train_inner | epoch 001: loss=5.0, num_updates={u}, wall=0\n"
    (run.run_dir / "train.log").write_text("".join(step.format(u=u) for u in (1, 2, 3, 4, 5, 6, 7)))
    save_checkpoint(run.run_dir / "checkpoint_last.pt", 4)
    total = queue.max_update(run)

    def shown(resuming=()):
        return queue.status_table([run], resuming=resuming).splitlines()[1].split()[1]
    assert (shown(), shown({run.name})) == (f"7/{total}", f"4/{total}")
    save_checkpoint(run.run_dir / "checkpoint_1_6.pt", 6)
    assert queue.saved_update(run.run_dir) == 6 and shown({run.name}) == f"6/{total}"
    assert " done " not in queue.status_table([run])


def test_status_of_a_local_queue_names_a_failed_step_under_the_table(data_bin, tmp_path, capsys):
    """pe-queue status of a queue run here (no SLURM job): under the table, a line for each run whose last step
    failed, with the log to read; none for a run whose last step ended well or that has begun a step since."""
    runs_dir = tmp_path / "runs"
    qfile = tmp_path / "q.txt"
    qfile.write_text("".join(f"multi30k {m} en-de annealed 1 data={data_bin} runs-dir={runs_dir}\n"
                             for m in ("sape", "rope", "rpe")))
    runs = {r.method: r for r in queue.parse_queue(qfile, data=False)}
    failed = f"[queue] train failed (exit 1): see {runs['sape'].run_dir / 'train.log'}"
    logs = {"sape": ["[queue] python -m pe_tools.recipes.launch train sape", "fairseq said: no", failed],
            "rope": ["[queue] python -m pe_tools.recipes.launch train rope", failed.replace("sape", "rope"),
                     "[queue] python -m pe_tools.recipes.launch train rope"],  # trained again since
            "rpe": ["[queue] python -m pe_tools.recipes.launch train rpe", "[queue] train done"]}
    for method, lines in logs.items():
        runs[method].run_dir.mkdir(parents=True)
        (runs[method].run_dir / "queue.log").write_text("\n".join(lines) + "\n")
    assert queue_cli.main(["status", str(qfile)]) == 0
    notes = capsys.readouterr().out.splitlines()[4:]  # after the heading and the three rows
    assert notes == [f"{runs['sape'].name}: {failed[len('[queue] '):]}"]


def test_each_step_of_a_run_ends_its_log_with_how_it_ended(tmp_path):
    """The queue writes a last line per step into RUN/queue.log: which step, its exit status and the log to read
    (RUN/train.log for pe-train, RUN/queue.log for the others); the failure is also said in the queue's own log."""
    run = queue.Run(1, "multi30k", "sape", "en-de", "annealed", 1, {"runs-dir": str(tmp_path / "runs")})
    said = []
    q = queue.Queue(tmp_path / "q.txt", [run], REPO, 1, 1, log=said.append)
    log = run.run_dir / "queue.log"
    assert q.step(run, ["record", str(tmp_path / "nothing here")], log) != 0
    rc = q.step(run, ["train", "no-such-method"], log)
    lines = log.read_text().splitlines()
    assert lines[-1] == f"[queue] train failed (exit {rc}): see {run.run_dir / 'train.log'}", lines
    assert any(ln.startswith("[queue] record failed (exit ") and ln.endswith(f": see {log}") for ln in lines), lines
    assert said[-1] == f"[queue] {run.name}: train failed (exit {rc}): see {run.run_dir / 'train.log'}", said


# ---- pe-queue's step log (pe_tools/recipes/queue/local.py) --------------------------------------------------
HOSTILE = ["two words", "it's", 'say "hi"', "a;touch PWNED_SEMI", "$(touch PWNED_SUBST)", "`touch PWNED_BACK`",
           "tab\there", ""]


def test_the_logged_queue_command_pastes_back_as_the_same_argv(tmp_path, monkeypatch):
    """Each step's first line in RUN/queue.log, ``[queue] COMMAND``, is the step's argument vector as a shell line:
    pasted into a shell it gives back the same arguments, even ones holding a space, quotes, `;`, `$(...)`,
    backquotes, a tab or nothing, and runs none of them. The reference is the argv handed to the process and bash's
    own reading of the line (printf of each argument), not shlex alone."""
    from pe_tools.recipes import queue

    started = []

    class StandIn:  # the step's process: records its argv, ends at once
        pid = 424242

        def __init__(self, cmd, **kw):
            started.append(list(cmd))

        def wait(self):
            return 0

    run = queue.Run(1, "multi30k", "sape", "en-de", "annealed", 1, {"runs-dir": str(tmp_path / "runs")})
    q = queue.Queue(tmp_path / "q.txt", [run], REPO, 1, 1, log=lambda *_: None)
    log = tmp_path / "queue.log"
    with monkeypatch.context() as m:
        m.setattr(queue.local.subprocess, "Popen", StandIn)
        assert q.step(run, ["generate", *HOSTILE], log) == 0
    (argv,) = started
    assert argv[-len(HOSTILE):] == HOSTILE
    first = log.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("[queue] ")
    line = first[len("[queue] "):]
    assert shlex.split(line) == argv
    out = subprocess.run(["bash", "-c", "printf '%s\\0' " + line], cwd=tmp_path, capture_output=True, check=True)
    assert out.stdout.decode().split("\0")[:-1] == argv
    assert not list(tmp_path.glob("PWNED*"))


# ---- pe-queue run on a busy queue (pe_tools/recipes/queue_cli.py) ----------------------------------------
def test_a_busy_queues_status_command_pastes_back_as_its_queue_file(data_bin, tmp_path, capsys):
    """pe-queue run on a queue file another pe-queue runs (it holds QUEUE.lock): refused, naming the pe-queue
    status command to see it, which for a queue file whose folder holds a space, quotes, `;`, `$(...)` and
    backquotes reads back (shlex and bash) as pe-queue, status and that file."""
    import fcntl

    from pe_tools.recipes import queue_cli

    folder = tmp_path / NASTY
    folder.mkdir()
    q = folder / "q.txt"
    q.write_text(f"multi30k sape en-de annealed 1 data={data_bin} runs-dir={tmp_path / 'runs'}\n")
    code = tmp_path / "code"
    (code / "pe_tools" / "recipes").mkdir(parents=True)
    (code / "pe_tools" / "recipes" / "launch.py").write_text("")
    with open(folder / "q.txt.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert queue_cli.main(["run", str(q), "--code", str(code)]) == 2
    err = capsys.readouterr().err.strip()
    command = err[err.index("pe-queue status "):-len(" shows it")]
    want = ["pe-queue", "status", str(q)]
    assert shlex.split(command) == want, err
    assert bash_argv(command, tmp_path) == want
    assert not list(tmp_path.rglob("PWNED*")) and not (tmp_path / "runs").exists()


# ---- pe-queue's rehearsal queue file (pe_tools/recipes/queue/rehearse.py) -----------------------------------
def test_a_rehearsal_queue_file_in_a_hostile_folder_reads_back_as_its_folders(tmp_path, monkeypatch):
    """pe-queue run --rehearse writes FOLDER/NAME: each run of the queue at the rehearsal size with data=, runs-dir=
    and into= under FOLDER (and the line's cpus=). For a FOLDER holding a space, both quotes, `;`, `$(...)` and
    backquotes, the file reads back (pe-queue's own parser) as exactly those folders, one run a line. The
    synthetic corpus is a stand-in (its folder, not made)."""
    from pe_tools.recipes import queue

    made = []
    monkeypatch.setattr(queue.rehearse, "synthetic_data", lambda pair, dest, log: made.append(pair) or dest)
    q = tmp_path / "q.txt"
    q.write_text("wmt14 sape en-de base 1 cpus=3\nwmt14 rope en-fr base 2\n")
    folder = tmp_path / NASTY
    out = queue.rehearsal(q, folder)
    assert out == folder.resolve() / "q.txt" and made == ["en-de", "en-fr"]
    runs = queue.parse_queue(out, data=False)
    assert [(r.recipe, r.method, r.pair, r.size, r.seed) for r in runs] == [
        ("wmt14", "sape", "en-de", queue.REHEARSAL_SIZE, 1), ("wmt14", "rope", "en-fr", queue.REHEARSAL_SIZE, 2)]
    root = folder.resolve()
    for r, pair, cpus in zip(runs, ("en_de", "en_fr"), ({"cpus": "3"}, {})):
        assert r.options == {"data": str(root / "data" / f"synthetic_{pair}"), "runs-dir": str(root / "runs"),
                             "into": str(root / "results"), **cpus}
    assert not list(tmp_path.rglob("PWNED*"))


@pytest.mark.parametrize("steps,pace", [
    ([(0, 10)], None),  # one line: nothing to pace by
    ([(0, 10), (5, 20)], 0.5),  # exactly two: 5 s for 10 updates
    ([(0, 10), (5, 20), (9, 40)], 0.2),  # the last two: 4 s for 20 updates
    ([(0, 10), (5, 20), (9, 20)], None),  # a resumed log repeating update 20: no update between them
])
def test_pe_queue_status_paces_a_run_by_its_last_two_training_lines(steps, pace, tmp_path):
    """pe-queue status's seconds per update of a run: the time between the last two train_inner lines of its
    train.log over the updates between them, from two lines on (a log of exactly two is paced); none from one
    line, nor when the last line's update is not past the one before."""
    from pe_tools.recipes import queue

    run = queue.Run(1, "multi30k", "sape", "en-de", "annealed", 1, {"runs-dir": str(tmp_path)})
    run.run_dir.mkdir(parents=True)
    line = "2026-01-01 10:00:{s:02d} | INFO | train_inner | epoch 001: loss=5.0, num_updates={u}, wall=0\n"
    (run.run_dir / "train.log").write_text("".join(line.format(s=s, u=u) for s, u in steps))
    got = queue.progress(run)
    assert got["updates"] == steps[-1][1]
    if pace is None:
        assert "sec_per_update" not in got
    else:
        assert got["sec_per_update"] == pytest.approx(pace)


# ---- pe-queue status's notes (pe_tools/recipes/queue_cli.py) ------------------------------------------------
@pytest.mark.parametrize("submitted", [False, True])
def test_status_notes_a_failed_step_from_the_runs_log_only_for_a_local_queue(submitted, tmp_path, monkeypatch,
                                                                              capsys):
    """pe-queue status under its table: for a queue run here, a note per run whose last step failed, read from
    RUN/queue.log; for a queue submitted to SLURM, SLURM's notes alone (the job's own reason, which says more),
    never the run's queue.log line beside them. SLURM's columns and notes are a stand-in."""
    from pe_tools.recipes import queue_cli
    from pe_tools.recipes.slurm import status as slurm_status

    data = tmp_path / "data"
    data.mkdir()
    for lang in ("en", "de"):
        (data / f"dict.{lang}.txt").write_text("")
    qfile = tmp_path / "q.txt"
    qfile.write_text(f"multi30k sape en-de annealed 1 data={data} runs-dir={tmp_path / 'runs'}\n")
    (run,) = queue_cli.parse_queue(qfile)
    failed = f"train failed (exit 1): see {run.run_dir / 'train.log'}"
    run.run_dir.mkdir(parents=True)
    (run.run_dir / "queue.log").write_text(f"[queue] python -m pe_tools.recipes.launch train sape\n[queue] {failed}\n")
    slurm_note = f"{run.name}: FAILED: the job's own reason"

    def columns(queue_path, runs, notes, resuming):
        if not submitted:
            return None
        notes.append(slurm_note)
        return {"job": ["5_1"], "state": ["FAILED"], "requeues": ["0"]}

    monkeypatch.setattr(slurm_status, "status_columns", columns)
    assert queue_cli.main(["status", str(qfile)]) == 0
    notes = capsys.readouterr().out.splitlines()[2:]  # after the heading and the row
    assert notes == ([slurm_note] if submitted else [f"{run.name}: {failed}"])


@pytest.mark.parametrize("hyp_age", [-1, 0, 1])
def test_a_decode_counts_only_when_newer_than_the_last_checkpoint(tmp_path, hyp_age):
    """pe_tools/recipes/queue.decoded (survivor: ``hyp mtime > last mtime`` -> ``>=``): a decode written in the
    same instant as the last checkpoint is not known to be of it, so it is done again; older: again; newer: done."""
    import os

    from pe_tools.recipes.queue import decoded

    (tmp_path / "gen").mkdir()
    hyp, last = tmp_path / "gen" / "hyp.detok.de", tmp_path / "checkpoint_last.pt"
    hyp.write_text("x\n")
    last.write_bytes(b"")
    os.utime(last, ns=(10**18, 10**18))
    os.utime(hyp, ns=(10**18 + hyp_age * 10**9,) * 2)
    assert decoded(tmp_path, "de", None) is (hyp_age > 0)


# ---- one writer of a run's chain (RUN/run.lock: pe_tools/runs/run_dir.py, taken by the queue and each step) -----
def test_a_second_writer_of_any_step_is_refused_while_a_queue_works_on_the_run(data_bin, tmp_path, monkeypatch,
                                                                                capsys):
    """While a local queue works on a run (its chain holds RUN/run.lock), a second writer of each step is refused
    at once naming that queue: pe-train here, pe-record in another process, and a second queue
    naming the same run (its state "refused: ...", not a step of its own). RUN/queue.log holds the first queue's
    lines alone, so its status still says its own last step (no "failed" note)."""
    from pe_tools.recipes import generate, launch, run_state

    monkeypatch.setattr(run_state, "LOCK_TRIES", 1)
    monkeypatch.setattr(queue.local, "CHAIN_WAIT", 0)
    runs_dir = tmp_path / "runs"
    qfile, other = tmp_path / "q.txt", tmp_path / "other.txt"
    for f in (qfile, other):
        f.write_text(f"multi30k sape en-de annealed 1 data={data_bin} runs-dir={runs_dir}\n")
    (run,) = queue.parse_queue(qfile)
    first = queue.Queue(qfile, [run], REPO, 1, 1, log=lambda line: None)
    second = queue.Queue(other, queue.parse_queue(other), REPO, 1, 1, log=lambda line: None)
    refusals = {}

    def step(self, run, args, log_file):  # the first queue's pe-train: while it runs, the others try
        log_file.write_text("[queue] python -m pe_tools.recipes.launch train sape\n")
        (run.run_dir / "command.json").write_text(json.dumps({"recipe": "multi30k", "method": "sape", "pair": "en-de",
                                                              "argv": ["--max-update", "6"], "extra": []}))
        (run.run_dir / "checkpoint_1_2.pt").write_bytes(b"")  # an update checkpoint: something to decode
        refusals["train"] = launch.main(["train", "sape", "--recipe", "multi30k", "--data", str(data_bin),
                                         "--runs-dir", str(runs_dir), "--size", "annealed"])
        refusals["generate"] = generate.generate(SimpleNamespace(run_dir=str(run.run_dir), checkpoints=1))
        refusals["record"] = subprocess.run([sys.executable, "-m", "pe_tools.recipes.launch", "record",
                                             str(run.run_dir), "--into", str(tmp_path / "into")], cwd=REPO,
                                            capture_output=True, text=True)
        refusals["queue"] = second.process(run)
        with open(log_file, "a") as log:
            log.write("[queue] train done\n")
        return 0

    monkeypatch.setattr(queue.Queue, "step", step)
    assert first.process(run).startswith("failed: training stopped at update 0")  # the stand-in trained nothing
    err = capsys.readouterr().err
    assert refusals["train"] == 2 and f"{run.run_dir} is being written by pid {os.getpid()}" in err, err
    assert f"(pe-queue run {qfile})" in err and err.count("error: ") == 2, err
    # pe-generate without --partial: the run is still training (--partial would decode it beside the queue)
    assert refusals["generate"] == 2 and "has not finished training" in err and "pass --partial" in err, err
    assert refusals["record"].returncode == 2 and f"(pe-queue run {qfile})" in refusals["record"].stderr
    assert refusals["queue"].startswith(f"refused: {run.run_dir / 'run.lock'} is held by pid {os.getpid()} ")
    assert f"(pe-queue run {qfile})" in refusals["queue"]
    assert (run.run_dir / "queue.log").read_text() == ("[queue] python -m pe_tools.recipes.launch train sape\n"
                                                       "[queue] train done\n")
    assert queue.failed_step(run) is None and not (tmp_path / "into").exists()
    assert second.process(run).startswith("failed: training stopped")  # the first queue done: the run is free


@pytest.mark.parametrize("made_from", ["this run", "another run", None])
def test_status_says_recorded_only_for_a_record_of_this_run_directory(made_from, tmp_path):
    """pe-queue status's "recorded" column: yes for a record made from the queue's own run directory (its
    command.json is the run's), no for a record of the same name made from another one (a committed record of
    examples/ is not the user's queue's) and no without a record; a hidden record folder never counts."""
    into = tmp_path / "results"
    run = queue.Run(1, "multi30k", "sape", "en-de", "annealed", 1,
                    {"runs-dir": str(tmp_path / "runs"), "into": str(into)})
    run.run_dir.mkdir(parents=True)
    (run.run_dir / "command.json").write_text(json.dumps({"method": "sape", "commit": "a" * 40, "device": "mine"}))
    if made_from:
        run.recorded.mkdir(parents=True)
        theirs = {"method": "sape", "commit": "a" * 40, "device": "mine" if made_from == "this run" else "theirs"}
        (run.recorded / "command.json").write_text(json.dumps(theirs, indent=1))
    (into / f".{run.name}.tmp1").mkdir(parents=True)
    (into / f".{run.name}.tmp1" / "command.json").write_text((run.run_dir / "command.json").read_text())
    assert queue.progress(run)["recorded"] == (made_from == "this run")


def test_status_of_a_run_named_like_a_committed_example_is_not_recorded(tmp_path):
    """A user's queue line with no into= records into the recipe's results folder, examples/multi30k/results, which
    holds a committed record of the same name: not this run's (its run directory has its own command.json)."""
    run = queue.Run(1, "multi30k", "alibi", "en-de", "small", 1, {"runs-dir": str(tmp_path / "runs")})
    assert (REPO / run.recorded / "command.json").is_file() or (run.recorded / "command.json").is_file()
    run.run_dir.mkdir(parents=True)
    (run.run_dir / "command.json").write_text(json.dumps({"method": "alibi", "device": "a machine of the user"}))
    assert queue.progress(run)["recorded"] is False


@pytest.mark.parametrize("handed", [True, False])
def test_a_queue_step_works_under_the_run_lock_the_queue_holds(handed, tmp_path):
    """A queue's step (here pe-record, a process of its own) works under the run's writer lock the queue holds for
    the chain, handed on to it; the same step not handed the lock is refused by its own queue's lock (what handing
    it on prevents)."""
    from pe_runs import GOOD, write_run

    from pe_tools.runs.run_dir import RunDir

    run_dir = write_run(tmp_path, "sape", 1, GOOD, 60)
    run = queue.Run(1, "multi30k", "sape", "en-de", "small", 1, {"runs-dir": str(run_dir.parent)})
    q = queue.Queue(tmp_path / "q.txt", [run], REPO, 1, 1, log=lambda line: None)
    log = run_dir / "queue.log"
    with RunDir(run_dir).writer(f"pe-queue run {q.path}") as fd:
        if handed:
            q.held[run.name] = fd
        rc = q.step(run, ["record", str(run_dir), "--into", str(tmp_path / "into")], log)
    assert rc == (0 if handed else 2), log.read_text()
    assert (tmp_path / "into" / run.name / "command.json").is_file() == handed
    assert handed or f"is held by pid {os.getpid()}" in log.read_text()


@pytest.mark.parametrize("run_dir_left", ["none", "this run's", "another run's"])
def test_a_queue_skips_a_run_recorded_by_its_code_unless_its_run_directory_is_another_runs(run_dir_left, tmp_path,
                                                                                          monkeypatch):
    """A queue restarted after a run was recorded by its code skips it, also when the run directory was removed
    since (checkpoints are large); a run directory whose command.json is not the record's (the record is a
    committed one of the same name, say) is this queue's to train."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "COMMIT").write_text("c" * 40 + "\n")
    into = tmp_path / "results"
    run = queue.Run(1, "multi30k", "sape", "en-de", "annealed", 1,
                    {"runs-dir": str(tmp_path / "runs"), "into": str(into)})
    record = {"method": "sape", "commit": "c" * 40, "device": "here"}
    run.recorded.mkdir(parents=True)
    (run.recorded / "command.json").write_text(json.dumps(record))
    if run_dir_left != "none":
        run.run_dir.mkdir(parents=True)
        mine = record if run_dir_left == "this run's" else dict(record, device="elsewhere")
        (run.run_dir / "command.json").write_text(json.dumps(mine))
    q = queue.Queue(tmp_path / "q.txt", [run], code, 1, 1, log=lambda line: None)
    monkeypatch.setattr(queue.local, "run_chain", lambda *a, **k: "decoded")  # what a chain gives back
    assert q.process(run) == ("recorded" if run_dir_left != "another run's" else
                              f"decoded; the steps' output is in {run.run_dir / 'queue.log'}")
    assert run.run_dir.exists() == (run_dir_left != "none")  # a skipped run's folder is not made


def test_repair_removes_a_best_checkpoint_cut_short_and_keeps_a_whole_one(tmp_path):
    """checkpoint_best.pt cut short (a kill during fairseq's copy to it) is removed, so the resumed fairseq-train
    does not stop on it; a whole one is kept as it is."""
    import torch

    torch.save({"u": torch.tensor(4)}, tmp_path / "checkpoint_1_4.pt")
    whole = (tmp_path / "checkpoint_1_4.pt").read_bytes()
    (tmp_path / "checkpoint_last.pt").write_bytes(whole)
    (tmp_path / "checkpoint_best.pt").write_bytes(whole[: len(whole) // 2])
    queue.repair(tmp_path, print)
    assert not (tmp_path / "checkpoint_best.pt").exists()
    assert (tmp_path / "checkpoint_last.pt").read_bytes() == whole
    (tmp_path / "checkpoint_best.pt").write_bytes(whole)
    queue.repair(tmp_path, print)
    assert (tmp_path / "checkpoint_best.pt").read_bytes() == whole


def test_repair_passes_over_a_numbered_checkpoint_that_cannot_be_opened(tmp_path):
    """A numbered checkpoint that cannot be opened (an OSError: here a folder in its place) does not read whole:
    repair resumes from the newest one that does instead of stopping with a traceback."""
    import torch

    torch.save({"u": torch.tensor(4)}, tmp_path / "checkpoint_1_4.pt")
    (tmp_path / "checkpoint_1_6.pt").mkdir()
    assert not queue.readable(tmp_path / "checkpoint_1_6.pt")
    queue.repair(tmp_path, print)
    assert (tmp_path / "checkpoint_last.pt").read_bytes() == (tmp_path / "checkpoint_1_4.pt").read_bytes()


@pytest.mark.parametrize("stat, zombie", [
    ("123 (python3) S 1 123", False),  # alive
    ("123 (a) b) Z 1 123", True),  # a zombie whose name holds ") "
    ("", True),  # read while the process was reaped: empty, as gone
    (None, True),  # gone: the file cannot be read
])
def test_a_process_whose_stat_is_gone_or_empty_counts_as_ended(stat, zombie, monkeypatch):
    """A restarted queue waits for the launches an earlier one left until each is gone or a zombie, reading
    /proc/PID/stat while the process may be exiting: an empty or missing stat file counts as ended (no
    IndexError, no OSError out of the wait)."""
    from pe_tools.recipes.queue import local

    class Stat:
        def __init__(self, path):
            self.path = path

        def read_text(self):
            if stat is None:
                raise FileNotFoundError(self.path)
            return stat

    monkeypatch.setattr(local, "Path", Stat)
    assert local._zombie(123) is zombie

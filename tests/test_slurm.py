"""pe-queue on SLURM (pe_tools/recipes/slurm/), tested against a real single-node SLURM cluster that the tests
start in a temporary folder (tests/pe_slurm.py): the queue's runs as SLURM jobs record what the local queue records,
a requeued run resumes, a two-task srun training equals two hand-launched ranks, and bad input is refused before
anything is submitted. Without root or SLURM these tests skip with how to run them; PE_REQUIRE_SLURM=1 (.ci/run)
makes them fail instead."""
import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import pe_slurm
import pe_queue_runs
from pe_slurm import env_of, jobs_of, pe_queue, wait_for
from pe_testing import REPO, code_copy
from pe_tools.recipes import queue, queue_cli
from pe_tools.recipes.slurm import files as slurm_files, job as slurm_job, options as slurm_options
from pe_tools.recipes.slurm import query as slurm_query, state as slurm_state
from pe_tools.recipes.srun import SlurmError
from pe_tools.recipes.results import SEGMENT_START


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    cluster = pe_slurm.cluster_or_skip(tmp_path_factory.mktemp("slurm"))
    yield cluster
    cluster.stop()


def wait_gone(cluster, job: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not cluster.run("squeue", "-h", "-j", job, check=False).stdout.strip():
            return
        time.sleep(0.3)
    raise AssertionError(f"job {job} still queued after {timeout} s")


def test_the_cluster_runs_batch_jobs_and_array_tasks_side_by_side(slurm, tmp_path):
    out = slurm.run("sbatch", "--parsable", "--array=3,5", "-o", str(tmp_path / "%a.out"),
                    "--wrap", "echo $SLURM_ARRAY_TASK_ID $SLURM_JOB_NODELIST; sleep 1").stdout.strip()
    job = out.split(";")[0]
    wait_gone(slurm, job)
    assert {p.name: p.read_text().split() for p in tmp_path.glob("*.out")} == {
        "3.out": ["3", slurm.node], "5.out": ["5", slurm.node]}


# ------------------------------------------------------------------------------------- the queue on SLURM
def wait_queue(cluster, q: Path, timeout: float = 900) -> None:
    for j in jobs_of(q):
        wait_gone(cluster, j["job"], timeout)


def weird_queue(tmp: Path, table: Path) -> Path:
    """A queue whose runs-dir holds a space, quotes, `;` and a command substitution: it must train there and run
    nothing else."""
    q = tmp / "q" / "queue.txt"
    q.parent.mkdir(parents=True)
    runs = q.parent / f"runs a;b'c\"d$(touch {q.parent}/PWNED)"
    q.write_text("".join(f"{table} {m} en-de mini 1 {shlex.quote(f'runs-dir={runs}')} into={q.parent / 'rec'}\n"
                         for m in pe_queue_runs.RUNS))
    return q


# ------------------------------------------------------------------------------------------- preemption
def segments(log: Path) -> list:
    """The updates each segment of a train.log reached (a segment starts at fairseq-train's configuration line)."""
    text = log.read_text() if log.is_file() else ""
    parts = text.split(SEGMENT_START)[1:]
    return [max(map(int, re.findall(r"num_updates=(\d+)", part)), default=0) for part in parts]


def resumed_from(log: Path) -> list:
    """The update each segment of a train.log resumed from (fairseq's "Loaded checkpoint ... @ U updates"; None
    where it started afresh)."""
    parts = log.read_text().split(SEGMENT_START)[1:] if log.is_file() else []
    return [int(m[1]) if (m := re.search(r"Loaded checkpoint .+ \(epoch \d+ @ (\d+) updates\)", part)) else None
            for part in parts]


@pytest.mark.slow
@pytest.mark.mutation
def test_an_array_records_what_the_local_queue_records_and_its_requeued_task_alone_restarts(slurm, queue_reference,
                                                                                             tmp_path):
    """The local queue's three runs as one SLURM array, in a runs-dir whose name holds a space, quotes, `;` and a
    command substitution. The array task to which SLURM gave the array's own id (the last one it starts) is
    interrupted twice, as SLURM does it: its signal before a time limit (USR1: the job requeues itself), then an
    outside `scontrol requeue` of that task. That task alone starts again, each restart resuming from the last
    checkpoint and appending to its one train.log; the other two keep going (restarts 0, one start line each).
    Every run records what the uninterrupted local queue recorded, nothing runs but the chains, and status says
    RECORDED with each task's requeues. Requeued again once recorded, the task trains nothing. Seen failing with
    the handler's `scontrol requeue $SLURM_JOB_ID`, which requeues the whole array."""
    reference = pe_queue_runs.recorded(queue_reference.queue)
    q = weird_queue(tmp_path, queue_reference.table)
    started = time.monotonic()
    out = pe_queue(["run", q, "--slurm", "--code", code_copy(tmp_path)], tmp_path, env_of(slurm))
    assert out.returncode == 0, out.stdout + out.stderr
    (record,) = jobs_of(q)
    assert record["lines"] == [1, 2, 3] and "submitted job" in out.stdout  # one array of three tasks
    assert "warning: --slurm:" in out.stderr and "run directory" in out.stderr  # /tmp is not shared storage
    array, by_line = record["job"], {int(n): Path(d) for n, d in record["snapshot_lines"].items()}

    def holder():  # the array task whose own job id is the array's, once it runs its chain (its handler is set)
        rows = dict(ln.split("|", 1) for ln in slurm.run("squeue", "-h", "-r", "-j", array, "-o", "%i|%A|%T"
                                                          ).stdout.split())
        return next((task for task, row in rows.items() if row == f"{array}|RUNNING"), None)
    task = wait_for("the task holding the array's id to run", holder, 300)
    run_dir = by_line[int(task.split("_")[1])]
    log = run_dir / "train.log"
    wait_for(f"{task} at update 3, past its first checkpoint", lambda: segments(log)[-1:] >= [3]
             and (run_dir / "checkpoint_last.pt").is_file()
             and slurm_files.read_state(run_dir).get("state") == "RUNNING", 300)
    slurm.run("scancel", "--batch", "--signal=USR1", task)  # what SLURM sends --signal-seconds before the limit
    wait_for("a second segment at update 7", lambda: len(segments(log)) == 2 and segments(log)[-1] >= 7, 300)
    slurm.run("scontrol", "requeue", task)
    wait_queue(slurm, q)

    # one log, every segment; each restart resumed from a checkpoint the segment before had saved (not beyond what
    # it reached; under load a segment may end before saving a new one, so two may resume from the same), and the
    # last reached the run's --max-update
    seg, loaded = segments(log), resumed_from(log)
    assert len(seg) == 3 and seg[2] == pe_queue_runs.MAX_UPDATE, seg
    assert loaded[0] is None and 0 < loaded[1] <= seg[0] and loaded[1] <= loaded[2] <= max(seg[:2]), (seg, loaded)
    logs = q.parent / "queue.txt.slurm" / "logs"
    for line, rd in by_line.items():
        (task_log,) = logs.glob(f"*_{array}_{line}.out")
        text, want = task_log.read_text(), (2, 3) if rd == run_dir else (0, 1)
        state = slurm_files.read_state(rd)
        assert (state["state"], state["restarts"], state["job"], text.count(", start ")) == \
            ("RECORDED", want[0], f"{array}_{line}", want[1]), (line, state, text[-3000:])
        assert ("time limit near, requeueing" in text) == (rd == run_dir), text[-3000:]
    assert pe_queue_runs.recorded(q) == reference and len(reference) == 2 * len(pe_queue_runs.RUNS)  # both decodes
    runs = q.parent / f"runs a;b'c\"d$(touch {q.parent}/PWNED)"
    assert sorted(p.name for p in runs.iterdir()) == sorted(f"{m}.en-de.mini.seed1" for m in pe_queue_runs.RUNS)
    assert not (q.parent / "PWNED").exists() and not list(tmp_path.rglob("PWNED"))
    status = pe_queue(["status", q], tmp_path, env_of(slurm))
    assert status.returncode == 0, status.stderr
    rows = status.stdout.splitlines()
    assert rows[0].split()[-3:] == ["job", "state", "requeues"] and len(rows) == 1 + len(by_line), status.stdout
    assert [r.split()[-3:] for r in rows[1:]] == [
        [f"{array}_{n}", "RECORDED", "2" if f"{array}_{n}" == task else "0"] for n in sorted(by_line)], status.stdout
    print(f"three runs through SLURM, one requeued twice: {time.monotonic() - started:.0f} s")

    # requeued once more after it was recorded (an outside scontrol requeue of a finished task): nothing trains
    before = log.read_bytes()
    slurm.run("scontrol", "requeue", task)
    wait_for("the fourth start", lambda: slurm_files.read_state(run_dir).get("restarts") == 3)
    wait_queue(slurm, q)
    assert log.read_bytes() == before and slurm_files.read_state(run_dir)["state"] == "RECORDED"


STATS = ("loss", "nll_loss", "gnorm", "wpb", "bsz", "lr")


def per_update(log: Path) -> list:
    """Per segment of a train.log: {update: its logged loss, nll_loss, gradient norm, words, sentences, lr}."""
    out = []
    for part in log.read_text().split(SEGMENT_START)[1:]:
        lines = [dict(re.findall(r"(\w+)=([^,\s]+)", ln)) for ln in part.splitlines() if "| train_inner |" in ln]
        out.append({int(kv["num_updates"]): tuple(kv[k] for k in STATS) for kv in lines})
    return out


def trainers(run_dir: Path) -> list:
    """The pids of the fairseq-train processes training in run_dir."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0") if proc.name.isdigit() else []
        except OSError:
            continue
        if b"fairseq_cli.train" in argv and str(run_dir).encode() in argv:
            pids.append(int(proc.name))
    return pids


def hold(runs) -> None:
    """Stop (SIGSTOP) each run's training once a segment has logged update 3 of 12 (``runs``: (log, run_dir)
    pairs, watched together: a tiny training runs its last updates in about a second), so that SLURM's time limit,
    not the end of the training, ends the segment; SLURM's kill (SIGCONT, SIGTERM, SIGKILL) ends it."""
    waiting, deadline = list(runs), time.monotonic() + 300
    while waiting and time.monotonic() < deadline:
        for log, run_dir in list(waiting):
            if 3 <= (segments(log) or [0])[-1] < pe_queue_runs.MAX_UPDATE and (pids := trainers(run_dir)):
                for pid in pids:
                    os.kill(pid, signal.SIGSTOP)
                waiting.remove((log, run_dir))
        time.sleep(0.05)
    assert not waiting, f"no training at update 3-11 to stop in 300 s: {waiting}"


def resumed_as_uninterrupted(log: Path, reference: dict) -> list:
    """Every update each segment of ``log`` logged equals the uninterrupted run's, and the last segment, loaded
    from checkpoint_last.pt, reaches the last update; returns the updates each segment began from."""
    parts, text = per_update(log), log.read_text().split(SEGMENT_START)[1:]
    for n, part in enumerate(parts):
        assert {u: reference[u] for u in part} == part, (n, part, reference)
    assert max(parts[-1]) == pe_queue_runs.MAX_UPDATE and "done training" in text[-1], text[-1][-2000:]
    loaded = re.search(r"Loaded checkpoint \S*checkpoint_last\.pt \(epoch \d+ @ (\d+) updates\)", text[-1])
    assert loaded and min(parts[-1]) == int(loaded.group(1)) + 1 > 1, text[-1][:3000]  # not from scratch
    return [min(p, default=0) for p in parts]


def seconds_to_first_update(log: Path) -> float:
    """Seconds from a train.log's first line to its first update's (fairseq logs whole seconds: one added)."""
    stamps = [(time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")), m.group(0))
              for m in re.finditer(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) \|.*$", log.read_text(), flags=re.M)]
    first = next(t for t, line in stamps if "num_updates=1," in line)
    return first - stamps[0][0] + 1


@pytest.mark.slow
@pytest.mark.mutation
def test_runs_past_their_time_limit_resume_from_their_checkpoints(slurm, queue_reference, tmp_path):
    """Two runs meet a real SLURM time limit (sbatch --time, whole minutes), side by side. With SLURM's signal
    (--signal-seconds before the limit) the job requeues itself and resumes from its checkpoint. Where the requeue
    is refused (--no-requeue, as on clusters without requeue), the limit ends the job (TIMEOUT) and the run
    resumes from checkpoint_last.pt when the queue is submitted again. Both log, update for update, what the
    uninterrupted run logged."""
    table, code, started = queue_reference.table, code_copy(tmp_path), time.monotonic()
    queues = {case: tmp_path / case / "queue.txt" for case in ("signal", "limit")}
    for q in queues.values():
        q.parent.mkdir()
        q.write_text(f"{table} sape en-de mini 1 runs-dir={q.parent / 'runs'} into={q.parent / 'rec'}\n")
    # the reference, update for update: the same run in the uninterrupted local queue; the time its first update
    # took there (plus an interpreter's start) sets the time limits (whole minutes), so that a slow machine still
    # trains past update 3 before the limit
    ref_log = queue_reference.queue.parent / "runs" / "sape.en-de.mini.seed1" / "train.log"
    (reference,) = per_update(ref_log)
    assert sorted(reference) == list(range(1, pe_queue_runs.MAX_UPDATE + 1))
    first_update = seconds_to_first_update(ref_log) + 10

    # SLURM's 30 s time-limit pass signals once the job has less than --signal-seconds + 30 s left: with 60 s, at
    # 60 x limit - 90 s or in the 30 s after; the limit itself ends a job in the 30 s after 60 x limit
    limits = {"signal": max(2, -(-(2 * first_update + 90) // 60)), "limit": max(1, -(-(2 * first_update + 15) // 60))}
    runs = {}
    for case, args in (("signal", ["--signal-seconds", "60"]), ("limit", ["--sbatch=--no-requeue"])):
        q = queues[case]
        out = pe_queue(["run", q, "--slurm", "--code", code, "--time", str(int(limits[case])), *args], tmp_path,
                       env_of(slurm))
        assert out.returncode == 0, out.stdout + out.stderr
        run_dir = q.parent / "runs" / "sape.en-de.mini.seed1"
        runs[case] = (q, f"{jobs_of(q)[0]['job']}_1", run_dir, run_dir / "train.log")
    hold([(log, run_dir) for q, task, run_dir, log in runs.values()])

    # with the signal: the job requeued itself, and its next start trains to the end
    q, task, run_dir, log = runs["signal"]
    wait_for("the signalled run's training to end", lambda: "done training" in log.read_text(), 300)
    assert pe_queue(["cancel", q], tmp_path, env_of(slurm)).returncode == 0  # its decoding is tested elsewhere
    wait_gone(slurm, task)
    state = json.loads((run_dir / "slurm.json").read_text())
    assert state["restarts"] >= 1 and state["job"] == task, state
    slurm_log = next((q.parent / "queue.txt.slurm" / "logs").glob("*.out")).read_text()
    assert "time limit near, requeueing" in slurm_log, slurm_log[-3000:]
    assert "DUE TO TIME LIMIT" not in slurm_log and "could not requeue" not in slurm_log, slurm_log[-3000:]
    assert len(resumed_as_uninterrupted(log, reference)) >= 2

    # without requeue: TIMEOUT; the state says so, and the queue submitted again resumes the run
    q, task, run_dir, log = runs["limit"]
    wait_for("the time limit to end the job", lambda: slurm.run("squeue", "-h", "-t", "all", "-j", task, "-o", "%T"
                                                                  ).stdout.strip() == "TIMEOUT", 300)
    wait_gone(slurm, task)
    slurm_log = next((q.parent / "queue.txt.slurm" / "logs").glob("*.out")).read_text()
    assert "DUE TO TIME LIMIT" in slurm_log, slurm_log[-3000:]
    # SLURM's signal came (unless before the job could take it): the refused requeue is said
    assert ("could not requeue" in slurm_log) == ("time limit near" in slurm_log), slurm_log[-3000:]
    assert json.loads((run_dir / "slurm.json").read_text())["state"] == "ENDED"
    status = pe_queue(["status", q], tmp_path, env_of(slurm))
    assert status.stdout.splitlines()[1].split()[-3:] == [task, "TIMEOUT", "0"], status.stdout + status.stderr
    assert len(segments(log)) == 1 and segments(log)[0] < pe_queue_runs.MAX_UPDATE
    out = pe_queue(["run", q, "--slurm", "--code", code], tmp_path, env_of(slurm))
    assert out.returncode == 0 and "submitted job" in out.stdout, out.stdout + out.stderr
    wait_for("the resubmitted run's training to end", lambda: "done training" in log.read_text(), 300)
    assert len(resumed_as_uninterrupted(log, reference)) == 2
    assert pe_queue(["cancel", q], tmp_path, env_of(slurm)).returncode == 0
    print(f"two runs past their time limits ({limits} minutes; the reference's first update after "
          f"{first_update:.0f} s): {time.monotonic() - started:.0f} s")


# ------------------------------------------------------------------------------------ ranks under srun
def first_update(text: str) -> dict:
    line = next((ln for ln in text.splitlines() if "num_updates=1," in ln), None)
    assert line is not None, text[-3000:]
    return {k: v for k, v in re.findall(r"(\w+)=([^,\s]+)", line) if k in ("loss", "nll_loss", "wpb", "bsz", "gnorm")}


@pytest.mark.slow
@pytest.mark.mutation
def test_two_srun_tasks_train_as_two_hand_launched_ranks(slurm, data_bin, tmp_path):
    """pe-train --gpus 2 in a two-task SLURM job starts one srun task per rank (gloo on CPU): its first update
    equals that of the two ranks launched by hand (loss, gradient norm, words and sentences)."""
    table = pe_queue_runs.recipe(tmp_path, data_bin)
    extra = ["--", "--max-update", "1", "--dropout", "0", "--disable-validation", "--no-save"]
    train = [sys.executable, "-m", "pe_tools.recipes.launch", "train", "sape", "--recipe", str(table), "--pair",
             "en-de", "--size", "mini", "--gpus", "2", "--data", str(data_bin)]
    env = env_of(slurm)
    job = slurm.run("sbatch", "--parsable", "--ntasks=2", "--cpus-per-task=1", "-o", str(tmp_path / "job.out"),
                    "--chdir", str(tmp_path), "--wrap", shlex.join(train + ["--runs-dir", str(tmp_path / "srun")]
                                                                    + extra)).stdout.strip()
    # meanwhile the same command's fairseq argv, with the two ranks' flags added by hand
    dry = subprocess.run(train + ["--runs-dir", str(tmp_path / "hand"), "--dry-run"] + extra, env=env, cwd=REPO,
                         capture_output=True, text=True)
    assert dry.returncode == 0, dry.stderr
    argv = shlex.split(dry.stdout.strip().splitlines()[-1])
    assert argv[argv.index("--distributed-world-size") + 1] == "2"
    port = pe_slurm.free_port()
    dist = ["--distributed-no-spawn", "--distributed-backend", "gloo", "--ddp-backend", "legacy_ddp",
            "--distributed-init-method", f"tcp://127.0.0.1:{port}", "--device-id", "0"]
    hand = [subprocess.Popen(argv + dist + ["--distributed-rank", str(r)], env=env, cwd=tmp_path, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for r in (0, 1)]
    outs = [p.communicate(timeout=600)[0] for p in hand]
    assert [p.returncode for p in hand] == [0, 0], outs[0][-3000:] + outs[1][-3000:]
    wait_gone(slurm, job, 600)
    run_log = (tmp_path / "srun" / "sape.en-de.mini.seed1" / "train.log").read_text()
    assert "srun" in (tmp_path / "job.out").read_text(), (tmp_path / "job.out").read_text()[-3000:]
    assert "distributed init (rank 1)" in run_log, run_log[-3000:]
    ours, theirs = first_update(run_log), first_update(outs[0])
    assert set(ours) == {"loss", "nll_loss", "wpb", "bsz", "gnorm"} and ours == theirs, (ours, theirs)


def test_status_says_what_became_of_jobs_slurm_no_longer_knows(slurm, tiny_queue, tmp_path, capsys, monkeypatch):
    """pe-queue status of a queue whose job never started: PENDING while queued, CANCELLED while SLURM remembers
    the cancelled job, and once SLURM has forgotten it (MinJobAge, no sacct), NEVER-RAN, or DIED with its SLURM
    log's last line when it started and ended before writing RUN/slurm.json; each with a note saying what to do."""
    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    q = tiny_queue()
    assert queue_cli.main(["run", str(q), "--slurm", "--code", str(code_copy(tmp_path)), "--sbatch=--hold"]) == 0
    (record,) = jobs_of(q)

    commands, real_run = [], subprocess.run
    monkeypatch.setattr(slurm_query.subprocess, "run",
                        lambda argv, *a, **k: commands.append(argv[0]) or real_run(argv, *a, **k))

    def status() -> tuple:
        capsys.readouterr()
        commands.clear()
        assert queue_cli.main(["status", str(q)]) == 0
        assert commands.count("squeue") == 1, commands  # one `squeue -t all` answers for live and ended jobs
        rows = capsys.readouterr().out.splitlines()
        return rows[1].split()[-3:], rows[2:]

    assert status() == ([f"{record['job']}_1", "PENDING", "-"], [])
    assert queue_cli.main(["cancel", str(q)]) == 0
    assert status() == ([f"{record['job']}_1", "CANCELLED", "-"], [])
    # SLURM forgets an ended job after MinJobAge (300 s here) and has no sacct: a job id it never had stands in
    lost = str(int(record["job"]) + 100000)
    (q.parent / "q.txt.slurm" / "jobs.json").write_text(json.dumps([dict(record, job=lost)]))
    (row, (note,)) = status()
    assert row == [f"{lost}_1", "NEVER-RAN", "-"], row
    assert "never started" in note and f"pe-queue run {q} --slurm" in note, note
    (q.parent / "q.txt.slurm" / "logs" / f"pe-q-0_{lost}_1.out").write_text(
        "/usr/bin/python3: No module named pe_tools\n\n")
    (row, (note,)) = status()
    assert row == [f"{lost}_1", "DIED", "-"], row
    assert "No module named pe_tools" in note and "slurm.json" in note and "--slurm" in note, note


# ------------------------------------------------------------------------------------------- bad input
@pytest.fixture
def tiny_queue(data_bin, tmp_path):
    table = pe_queue_runs.recipe(tmp_path, data_bin)

    def write(options: str = "", table_=table) -> Path:
        q = tmp_path / "q.txt"
        q.write_text(f"{table_} sape en-de mini 1 runs-dir={tmp_path / 'runs'} into={tmp_path / 'rec'} {options}\n")
        return q
    return write


def refused(q: Path, args, capsys, *words) -> str:
    """pe-queue run Q --slurm ARGS fails with an error holding ``words``, and submits nothing."""
    assert queue_cli.main(["run", str(q), "--slurm", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and all(w in err for w in words), err
    assert not q.with_name(q.name + ".slurm").exists()
    return err


@pytest.mark.parametrize("case", ["no sbatch", "unknown partition", "controller down", "too many nodes",
                                  "too many gpus", "too many cpus", "gpus over nodes", "time too short"])
def test_bad_input_is_refused_before_anything_is_submitted(case, slurm, tiny_queue, tmp_path, capsys, monkeypatch,
                                                           data_bin):
    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    code = ["--code", str(code_copy(tmp_path))]
    jobs_before = slurm.run("squeue", "-h", "-o", "%i").stdout
    if case == "no sbatch":
        monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
        refused(tiny_queue(), code, capsys, "sbatch", "not found on PATH", "login node", "--dry-run")
    elif case == "unknown partition":
        refused(tiny_queue(), code + ["--partition", "gpu-a100"], capsys, "--partition gpu-a100",
                "no such partition", f"partitions: {slurm.partition}")
    elif case == "controller down":
        dead = tmp_path / "dead.conf"
        dead.write_text(re.sub(r"SlurmctldPort=\d+", f"SlurmctldPort={pe_slurm.free_port()}", slurm.conf.read_text()))
        monkeypatch.setenv("SLURM_CONF", str(dead))
        refused(tiny_queue(), code, capsys, "controller does not answer", "scontrol ping")
    elif case == "too many nodes":
        refused(tiny_queue("gpus=2 nodes=2"), code, capsys, "line 1", "2 nodes", f"partition {slurm.partition} has 1",
                "nodes=")
    elif case == "too many gpus":  # the shipped recipe trains on GPUs; this cluster's node has none
        q = tmp_path / "q.txt"
        q.write_text(f"wmt14 sape en-de base 1 data={data_bin} runs-dir={tmp_path / 'runs'} gpus=8 nodes=1\n")
        refused(q, code, capsys, "line 1", "8 GPUs per node", "at most 0", "gpus=")
    elif case == "too many cpus":
        refused(tiny_queue("cpus=3"), code, capsys, "line 1", "1 ranks x 3 CPUs", "at most 2", "cpus=")
    elif case == "gpus over nodes":
        refused(tiny_queue("gpus=3 nodes=2"), code, capsys, "line 1", "gpus= a multiple of nodes=")
    elif case == "time too short":  # 60 s, signalled 300 s (+ up to 30 s) before the limit: it would only requeue
        refused(tiny_queue(), code + ["--time", "1"], capsys, "--time 1 (60 s) leaves no training time",
                "--signal-seconds 300", "requeue forever", "at least 6 minutes")
    assert slurm.run("squeue", "-h", "-o", "%i").stdout == jobs_before


@pytest.mark.parametrize("given", ["--job-name=mine", "-Jmine", "--job-n=mine"])
def test_a_job_name_of_ones_own_is_refused(given, tiny_queue, tmp_path, capsys):
    """pe-queue names each job (the name holds the key by which status and cancel know this queue's jobs): a job
    name given with --sbatch is refused, before anything is written or submitted; --sbatch=--jobid... is not a
    name."""
    q = tiny_queue()
    err = refused(q, ["--dry-run", "--code", str(code_copy(tmp_path)), f"--sbatch={given}"], capsys,
                  f"--sbatch={given}", "names each job itself")
    assert "leave the job name out" in err
    assert queue_cli.main(["run", str(q), "--slurm", "--dry-run", "--code", str(code_copy(tmp_path / "c")),
                           "--sbatch=--qos=-J"]) == 0


def test_slurm_options_need_slurm_and_dry_run_prints_quoted_scripts(tiny_queue, tmp_path, capsys):
    q = tiny_queue()
    assert queue_cli.main(["run", str(q), "--partition", "x"]) == 2
    assert "--partition is an option of pe-queue run --slurm" in capsys.readouterr().err
    weird = tmp_path / "a b;c'd"
    weird.mkdir()
    q2 = weird / "queue.txt"
    q2.write_text(q.read_text().replace(f"runs-dir={tmp_path / 'runs'}", shlex.quote(f"runs-dir={weird / 'r'}")))
    code = code_copy(tmp_path)
    assert queue_cli.main(["run", str(q2), "--slurm", "--dry-run", "--code", str(code), "--time", "1:00:00",
                       "--sbatch=--qos=low prio"]) == 0
    out, err = capsys.readouterr()
    script = out.split("\n", 1)[1]
    assert "#SBATCH --requeue\n" in script and "#SBATCH --open-mode=append\n" in script
    assert "#SBATCH --signal=B:USR1@300\n" in script and "#SBATCH '--qos=low prio'\n" in script
    assert f"--output={weird}" not in script and shlex.quote(f"--chdir={Path.cwd()}") in script
    assert f"PYTHONPATH={shlex.quote(str(code))}" in script
    (exec_line,) = [ln for ln in script.splitlines() if ln.startswith("exec ")]
    words = shlex.split(exec_line)  # the shell reads the queue copy's path as one word, whole
    assert words[5].startswith(f"{weird}/queue.txt.slurm/queue-") and words[5].endswith(".txt"), words
    for line in script.splitlines():
        if line.startswith("#SBATCH"):
            assert len(shlex.split(line)) == 2, line
    assert "warning: --slurm:" in err and "/tmp" in err
    assert not q2.with_name("queue.txt.slurm").exists()  # a dry run writes nothing


def test_check_without_data_checks_the_paper_queue_files(tmp_path, capsys):
    """examples/wmt14's Table 1 and Table 2 queue files are valid without prepared data (pe-queue check
    --no-data); without --no-data the missing data is named."""
    for name, runs in (("queue_table1.txt", 14), ("queue_table2.txt", 6)):
        q = REPO / "examples" / "wmt14" / name
        assert queue_cli.main(["check", str(q), "--no-data"]) == 0
        assert capsys.readouterr().out.strip() == f"{q}: {runs} runs, all valid"
        parsed = queue.parse_queue(q, data=False)
        assert {r.size for r in parsed} == {"base" if "1" in name else "big"}
        assert {r.pair for r in parsed} == {"en-de", "en-fr"}


def test_sacct_states_read_accountings_parsable_lines(tmp_path, monkeypatch):
    """Where accounting is on (no test cluster here has a database), status asks sacct for the jobs SLURM has
    forgotten. A stand-in sacct on PATH prints what `sacct -n -P -X -o JobID,State` prints (one JOB|STATE line per
    job or array task; a cancelled job's state carries 'by UID'); a failing sacct (accounting off: "Slurm accounting
    storage is disabled", exit 1) gives no states."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sacct = bin_dir / "sacct"
    sacct.write_text("#!/bin/sh\nprintf '%s\\n' \"$@\" > \"$(dirname \"$0\")/args\"\n"
                     "printf '12_0|COMPLETED|pe-q\\n12_1|CANCELLED by 0|pe-q\\n13|TIMEOUT|x|y\\n14||z\\n\\n'\n")
    sacct.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert slurm_query.sacct_states(["12_0", "12_1", "13", "14"]) == {
        "12_0": "COMPLETED", "12_1": "CANCELLED", "13": "TIMEOUT"}
    assert (bin_dir / "args").read_text().split() == ["-n", "-P", "-X", "-j", "12_0,12_1,13,14", "-o",
                                                      "JobID,State,JobName"]
    # a job recorded under another name than the one it was submitted with is another job: left out
    assert slurm_query.sacct_states(["12_0", "13"], {"12": "pe-other", "13": "x|y"}) == {"13": "TIMEOUT"}
    sacct.write_text("#!/bin/sh\necho 'sacct: error: Slurm accounting storage is disabled' >&2\nexit 1\n")
    assert slurm_query.sacct_states(["12_0"]) == {} and slurm_query.sacct_states([]) == {}


def test_a_job_whose_chain_fails_exits_1_and_a_bad_line_2(job_env, capsys):
    """A job's exit status, which SLURM keeps as its exit code: 1 when its run's chain did not record (here the
    queue refuses a run directory begun by other code) with FAILED and the reason in RUN/slurm.json, 2 when its
    line of the queue copy is not a run."""
    job, run_dir = job_env
    assert job() == 1
    assert job(2) == 2
    state = json.loads((run_dir / slurm_files.STATE_FILE).read_text())
    assert state["state"] == "FAILED" and "was begun by code theirs" in state["message"]
    assert "error: line 2 of" in capsys.readouterr().out


def test_a_job_whose_queue_copy_the_queue_refuses_exits_2_naming_its_line(job_env, tmp_path, capsys):
    """A queue copy that the queue's parser refuses as a whole (here a method no recipe has): the job exits 2 with
    the parser's reason and its line, no traceback."""
    job, _ = job_env
    snapshot = tmp_path / "queue.txt"
    snapshot.write_text(snapshot.read_text().replace(" sape ", " no_such_method "))
    assert job() == 2
    out = capsys.readouterr().out
    assert "[queue] error: line 1 of" in out and "no_such_method" in out, out


def test_a_pin_that_is_no_commit_is_refused_before_anything_is_submitted(tiny_queue, tmp_path, capsys, monkeypatch):
    """pe-queue run --slurm --pin REV where REV names no commit: exit 2 naming --pin and the fix, nothing exported
    or written beside the queue file."""
    monkeypatch.setenv("PE_QUEUE_CODE_ROOT", str(tmp_path / "code-root"))
    q = tiny_queue()
    assert queue_cli.main(["run", str(q), "--slurm", "--dry-run", "--pin", "no-such-commit"]) == 2
    err = capsys.readouterr().err
    assert "--pin no-such-commit: not a commit of" in err and "--code DIR" in err and "Traceback" not in err, err
    assert not (tmp_path / "code-root").exists() and not q.with_name(q.name + ".slurm").exists()


# ----------------------------------------------------------------------------------- one submitter per run
def two_run_queue(tmp_path: Path, data_bin: Path, name: str = "q.txt", methods=("sape", "rope")) -> Path:
    table = pe_queue_runs.recipe(tmp_path, data_bin)
    q = tmp_path / name
    q.write_text("".join(f"{table} {m} en-de mini 1 runs-dir={tmp_path / 'runs'} into={tmp_path / 'rec'}\n"
                         for m in methods))
    return q


def listed(cluster) -> dict:
    """{array task: state} of every job the test cluster has queued or running."""
    out = cluster.run("squeue", "-h", "-r", "-o", "%i|%T").stdout.split()
    return dict(line.split("|") for line in out)


def submitted_at_once(cluster, queues, code: Path, cwd: Path, slow: int):
    """`pe-queue run Q --slurm --sbatch=--hold` of each of ``queues``, all started at once, through an sbatch that
    answers after ``slow`` seconds, as a busy controller may (so that the submitters' checks overlap for sure);
    returns (their outputs, their exit statuses)."""
    env = env_of(cluster)
    sbatch = cwd / "bin" / "sbatch"
    sbatch.parent.mkdir(exist_ok=True)
    sbatch.write_text(f"#!/bin/sh\nsleep {slow}\nexec {shutil.which('sbatch')} \"$@\"\n")
    sbatch.chmod(0o755)
    env["PATH"] = f"{sbatch.parent}{os.pathsep}{env['PATH']}"
    procs = [subprocess.Popen([sys.executable, "-m", "pe_tools.recipes.queue_cli", "run", str(q), "--slurm", "--code",
                               str(code), "--sbatch=--hold"], cwd=cwd, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for q in queues]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    return outs, [p.returncode for p in procs]


@pytest.mark.slow
def test_three_submitters_at_once_make_one_job_per_run(slurm, data_bin, tmp_path):
    """Three `pe-queue run Q --slurm` started at once (held jobs, so nothing trains; an sbatch slow to answer): one
    job per run, the other
    submitters name the job that has it; a second queue file naming one of the runs submits nothing for it; jobs.json
    keeps every id submitted, and `pe-queue cancel` ends them all. Seen failing without the submit lock (slurm/submit.py
    ``locked``): two or three jobs per run."""
    q = two_run_queue(tmp_path, data_bin)
    code, before = code_copy(tmp_path), set(listed(slurm))
    outs, codes = submitted_at_once(slurm, [q] * 3, code, tmp_path, 5)
    assert codes == [0, 0, 0], outs
    new = {task: state for task, state in listed(slurm).items() if task not in before}
    ids = [j["job"] for j in jobs_of(q)]
    assert sorted(t.split("_")[1] for t in new) == ["1", "2"] and set(new.values()) == {"PENDING"}, (new, outs)
    assert {t.split("_")[0] for t in new} == set(ids), (new, ids)  # jobs.json holds every id submitted
    assert sum("submitted job" in out for out in outs) == 1 and sum("has it already" in out for out in outs) == 2, outs
    # another queue file naming the first run (and a third run): only the third is submitted
    q2 = two_run_queue(tmp_path, data_bin, "other.txt", ("sape", "t5"))
    env = env_of(slurm)  # the real sbatch
    out = pe_queue(["run", q2, "--slurm", "--code", code, "--sbatch=--hold"], tmp_path, env)
    assert out.returncode == 0 and f"job {ids[0]}_1 has it already" in out.stdout, out.stdout + out.stderr
    assert jobs_of(q2)[0]["lines"] == [2], out.stdout
    for queue_file in (q, q2):
        assert pe_queue(["cancel", queue_file], tmp_path, env).returncode == 0
    assert set(listed(slurm)) <= before


def test_two_queue_files_naming_one_run_submitted_at_once_make_one_job_for_it(slurm, data_bin, tmp_path):
    """Two queue files naming the same run, submitted at the same moment (an sbatch slow to answer, so the two
    submissions overlap; held jobs, so nothing trains): the run gets one job, the other submitter names it. Each
    queue's own lock cannot see the other queue: the run directory's submit lock (RUN/slurm-submit.lock) decides.
    Seen failing with the run directories' locks dropped from ``submit`` (two jobs for the run)."""
    (tmp_path / "a").mkdir()
    qa = two_run_queue(tmp_path, data_bin, "a/q.txt", ("sape",))
    qb = two_run_queue(tmp_path, data_bin, "b.txt", ("sape",))
    code, before = code_copy(tmp_path), set(listed(slurm))
    outs, codes = submitted_at_once(slurm, [qa, qb], code, tmp_path, 3)
    assert codes == [0, 0], outs
    new = [task for task in listed(slurm) if task not in before]
    assert len(new) == 1, (new, outs)
    assert sum("submitted job" in out for out in outs) == 1 and sum("has it already" in out for out in outs) == 1, \
        outs
    slurm.run("scancel", new[0].split("_")[0])


def test_a_job_id_that_another_queue_holds_now_is_not_this_queues(slurm, data_bin, tmp_path):
    """SLURM's state lost (or its ids wrapped): QUEUE.slurm/jobs.json names an id that SLURM has since given to
    another queue's job. pe-queue status does not show that job as this queue's, run --slurm does not refuse on
    it (it submits the run), and cancel leaves it queued. Held jobs: nothing runs. Seen failing before the queue
    key in the job's name (status showed it PENDING, run said "has it already", cancel cancelled it)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    qa, qb = (two_run_queue(tmp_path / d, data_bin, methods=("sape",)) for d in ("a", "b"))
    code, env = code_copy(tmp_path), env_of(slurm)
    for q in (qa, qb):
        out = pe_queue(["run", q, "--slurm", "--code", code, "--sbatch=--hold"], tmp_path, env)
        assert out.returncode == 0, out.stdout + out.stderr
    (theirs,), (ours,) = jobs_of(qa), jobs_of(qb)
    jobs_b = qb.with_name(qb.name + ".slurm") / "jobs.json"
    jobs_b.write_text(json.dumps([dict(ours, job=theirs["job"])]))  # the id now another queue's
    slurm.run("scancel", ours["job"])
    (run_b,) = ours["snapshot_lines"].values()
    (Path(run_b) / "slurm.json").unlink()  # the state of b's first job, lost with SLURM's

    status = pe_queue(["status", qb], tmp_path, env)
    assert status.returncode == 0 and "PENDING" not in status.stdout, status.stdout + status.stderr
    out = pe_queue(["run", qb, "--slurm", "--code", code, "--sbatch=--hold"], tmp_path, env)
    assert out.returncode == 0 and "has it already" not in out.stdout and "submitted job" in out.stdout, \
        out.stdout + out.stderr
    out = pe_queue(["cancel", qb], tmp_path, env)
    assert out.returncode == 0 and theirs["job"] not in out.stdout, out.stdout + out.stderr
    assert listed(slurm).get(f"{theirs['job']}_1") == "PENDING"
    assert jobs_of(qb)[-1]["job"] not in {t.split("_")[0] for t in listed(slurm)}  # b's own job: cancelled
    slurm.run("scancel", theirs["job"])


@pytest.mark.slow
def test_a_job_on_a_run_a_local_queue_works_on_is_refused_and_the_local_status_stays_true(slurm, data_bin, tmp_path):
    """A local pe-queue trains a run (its training stopped for the moment, so that it surely holds the run) and a
    queue file for SLURM names the same run: the job's chain is refused by the run's writer lock, the job ends
    FAILED naming the holder and its own SLURM log (not train.log), writes nothing into the run's queue.log, and
    the local queue records the run with a status that names no failure."""
    table = pe_queue_runs.recipe(tmp_path, data_bin)
    local_q = pe_queue_runs.queue_file(tmp_path, table, "local", ("sape",))
    code = code_copy(tmp_path)
    proc = pe_queue_runs.start(local_q, code)
    run_dir = local_q.parent / "runs" / "sape.en-de.mini.seed1"
    stopped = wait_for("the local queue's training", lambda: trainers(run_dir), 300)
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    try:
        sq = tmp_path / "on-slurm" / "q.txt"
        sq.parent.mkdir()
        sq.write_text(f"{table} sape en-de mini 1 runs-dir={local_q.parent / 'runs'} into={tmp_path / 'rec'}\n")
        out = pe_queue(["run", sq, "--slurm", "--code", code], tmp_path, env_of(slurm))
        assert out.returncode == 0, out.stdout + out.stderr
        task = f"{jobs_of(sq)[0]['job']}_1"
        wait_gone(slurm, task, 300)
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
    local_out = proc.communicate(timeout=900)[0]
    assert proc.returncode == 0, local_out[-3000:]
    assert " failed (exit" not in (run_dir / "queue.log").read_text()
    state = slurm_files.read_state(run_dir)
    assert state["state"] == "FAILED" and state["message"].startswith("refused: "), state
    status = pe_queue(["status", sq], tmp_path, env_of(slurm))
    row, notes = status.stdout.splitlines()[1], status.stdout.splitlines()[2:]
    assert row.split()[-3:-1] == [task, "FAILED"], status.stdout
    (note,) = notes
    assert "run.lock" in note and f"pe-queue run {local_q}" in note and f"_{task}.out" in note, note
    assert "train.log" not in note, note
    local = pe_queue(["status", local_q], tmp_path, env_of(slurm)).stdout.splitlines()
    assert len(local) == 2 and " failed" not in local[1], local


# ------------------------------------------------------------------------------------ a status that is true
@pytest.mark.slow
def test_a_job_whose_state_write_fails_shows_failed_or_died_with_its_reason(slurm, data_bin, tmp_path, capsys,
                                                                          monkeypatch):
    """RUN/slurm.json cannot be written (here a folder stands in its place, which fails the write even for root,
    as a full or read-only disk would): the job goes on, its chain ends (refused: the run was begun by other code),
    and status shows FAILED with that reason from the job's log, never RUNNING. Once SLURM has forgotten the job,
    a state file left at RUNNING with a heartbeat older than STALE_SECONDS reads DIED with the log's last lines;
    and with the controller down, status says so in one line and answers from the run directories. Seen failing
    without the guard in files.write_state_file (the job dies at its first write: no reason) and without the heartbeat
    rule (RUNNING)."""
    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    q = two_run_queue(tmp_path, data_bin, methods=("sape",))
    run_dir = tmp_path / "runs" / "sape.en-de.mini.seed1"
    (run_dir / slurm_files.STATE_FILE).mkdir(parents=True)
    (run_dir / slurm_files.STATE_FILE / "x").write_text("")
    (run_dir / "command.json").write_text(json.dumps({"commit": "theirs"}))
    (run_dir / "checkpoint_last.pt").write_bytes(b"")
    assert queue_cli.main(["run", str(q), "--slurm", "--code", str(code_copy(tmp_path))]) == 0
    assert "could not write" in capsys.readouterr().err
    (record,) = jobs_of(q)
    task = f"{record['job']}_1"
    wait_gone(slurm, task)

    def status() -> tuple:
        capsys.readouterr()
        started = time.monotonic()
        assert queue_cli.main(["status", str(q)]) == 0
        rows = capsys.readouterr().out.splitlines()
        return rows[1].split()[-3:-1], rows[2:], time.monotonic() - started

    row, notes, _ = status()
    assert row == [task, "FAILED"], (row, notes)
    (note,) = notes
    assert note.startswith("sape.en-de.mini.seed1: FAILED") and "was begun by code theirs" in note, note
    log = next((q.parent / "q.txt.slurm" / "logs").glob("*.out")).read_text()
    assert "could not write" in log and "Traceback" not in log, log[-3000:]

    # forgotten by SLURM (a job id it never had stands in), its state file left at RUNNING, heartbeat stale
    lost = str(int(record["job"]) + 100000)
    (q.parent / "q.txt.slurm" / "jobs.json").write_text(json.dumps([dict(record, job=lost)]))
    for f in (q.parent / "q.txt.slurm" / "logs").glob("*.out"):
        f.rename(f.with_name(f.name.replace(f"_{record['job']}_", f"_{lost}_")))
    shutil.rmtree(run_dir / slurm_files.STATE_FILE)
    stale = time.time() - slurm_state.STALE_SECONDS - 1
    (run_dir / slurm_files.STATE_FILE).write_text(json.dumps(
        {"job": f"{lost}_1", "state": "RUNNING", "restarts": 0, "heartbeat": stale}))
    row, notes, _ = status()
    assert row == [f"{lost}_1", "DIED"], (row, notes)
    assert "heartbeat" in notes[0] and "was begun by code theirs" in notes[0], notes
    # a fresh heartbeat of a job SLURM answers for and does not list: DIED all the same, whatever MinJobAge (a
    # job that ends writes its last word before SLURM stops listing it)
    (run_dir / slurm_files.STATE_FILE).write_text(json.dumps(
        {"job": f"{lost}_1", "state": "RUNNING", "restarts": 0, "heartbeat": time.time() - 7}))
    row, notes, _ = status()
    assert row == [f"{lost}_1", "DIED"] and re.search(r"no heartbeat for \d+ s", notes[0]), (row, notes)

    # the controller down: one line says so, and the run directories answer, within QUERY_SECONDS and a margin
    dead = tmp_path / "dead.conf"
    dead.write_text(re.sub(r"SlurmctldPort=\d+", f"SlurmctldPort={pe_slurm.free_port()}", slurm.conf.read_text()))
    monkeypatch.setenv("SLURM_CONF", str(dead))
    row, notes, seconds = status()
    assert row == [f"{lost}_1", "RUNNING"] and notes[0].startswith("SLURM's controller does not answer"), notes
    assert seconds < slurm_query.QUERY_SECONDS + 5, seconds


@pytest.fixture
def forgetful_slurm(tmp_path_factory):
    """A second test cluster that forgets an ended job 10 s after its end (MinJobAge=10, as busy clusters do)."""
    cluster = pe_slurm.cluster_or_skip(tmp_path_factory.mktemp("forgetful"), min_job_age=10)
    yield cluster
    cluster.stop()


def processes_of(needle: bytes) -> list:
    """The pids whose command line holds ``needle``."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and needle in (proc / "cmdline").read_bytes():
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


@pytest.mark.slow
def test_a_dead_job_is_never_running_where_slurm_forgets_it_early(forgetful_slurm, data_bin, tmp_path, capsys,
                                                                   monkeypatch):
    """A job killed (SIGKILL: no last word, as a full disk or the OOM killer leave it) on a cluster that forgets
    ended jobs after 10 s: pe-queue status shows SLURM's word while SLURM lists the ended job, then DIED with how
    long its heartbeat is silent, never RUNNING. Seen failing before the state machine (RUNNING until the heartbeat
    is 300 s old)."""
    monkeypatch.setenv("SLURM_CONF", forgetful_slurm.env["SLURM_CONF"])
    q = two_run_queue(tmp_path, data_bin, methods=("sape",))
    assert queue_cli.main(["run", str(q), "--slurm", "--code", str(code_copy(tmp_path))]) == 0
    (record,) = jobs_of(q)
    task, run_dir = f"{record['job']}_1", tmp_path / "runs" / "sape.en-de.mini.seed1"
    wait_for("the job's RUNNING", lambda: slurm_files.read_state(run_dir).get("state") == "RUNNING", 300)
    snapshot = str(Path(record["snapshot"])).encode()
    for pid in processes_of(snapshot):
        os.kill(pid, signal.SIGKILL)

    seen = []

    def status() -> str:
        capsys.readouterr()
        assert queue_cli.main(["status", str(q)]) == 0
        out = capsys.readouterr().out.splitlines()
        seen.append(out[1].split()[-2])
        return out
    def listed() -> str:
        return forgetful_slurm.run("squeue", "-h", "-t", "all", "-j", record["job"], check=False).stdout.strip()
    while listed():
        status()
        assert seen[-1] != "RUNNING" or (slurm_files.read_state(run_dir).get("state") == "RUNNING"
                                         and forgetful_slurm.run("squeue", "-h", "-j", task, "-o", "%T", check=False
                                                                 ).stdout.strip() == "RUNNING"), seen
        time.sleep(1)
    out = status()
    assert seen[-1] == "DIED" and re.search(r"no heartbeat for \d+ s", "\n".join(out[2:])), out
    assert "RUNNING" not in seen[1:], seen


# ------------------------------------------------------------------------ the job's own guards (no SLURM)
@pytest.fixture
def job_env(data_bin, tmp_path, monkeypatch):
    """A queue copy of one run, a code folder, a run directory begun by other code (so that a job's chain ends at
    once, refused) and the SLURM variables of array task 7_1 at its fifth start; the job's signal handlers are
    restored afterwards."""
    for name in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_RESTART_COUNT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "7")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "1")
    monkeypatch.setenv("SLURM_JOB_ID", "8")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "4")
    snapshot, code = tmp_path / "queue.txt", tmp_path / "code"
    snapshot.write_text(f"multi30k sape en-de annealed 1 data={data_bin} runs-dir={tmp_path / 'runs'}\n")
    code.mkdir()
    (code / "COMMIT").write_text("mine\n")
    run_dir = tmp_path / "runs" / "sape.en-de.annealed.seed1"
    run_dir.mkdir(parents=True)
    (run_dir / "command.json").write_text(json.dumps({"commit": "theirs"}))
    (run_dir / "checkpoint_last.pt").write_bytes(b"")
    handlers = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGTERM)}
    yield lambda line=1: slurm_job.job_main([str(snapshot), "--line", str(line), "--code", str(code)]), run_dir
    for s, h in handlers.items():
        signal.signal(s, h)


def state_of(run_dir: Path) -> dict:
    return json.loads((run_dir / slurm_files.STATE_FILE).read_text())


@pytest.mark.parametrize("stalled", [slurm_state.MAX_STALLED_STARTS - 2, slurm_state.MAX_STALLED_STARTS - 1])
def test_a_job_started_too_often_without_a_new_checkpoint_stops_failed(job_env, stalled, capsys):
    """A job whose last start found the checkpoint it resumes from now (none here) and had already found it
    ``stalled`` times in a row: at MAX_STALLED_STARTS it ends FAILED, saying why and how to fix it, without running
    its chain; one start fewer runs it (here refused). Seen failing without the check in job_main."""
    job, run_dir = job_env
    (run_dir / slurm_files.STATE_FILE).write_text(json.dumps(
        {"job": "7_1", "state": "ENDED", "restarts": 3, "resumed_from": None, "stalled": stalled}))
    assert job() == 1
    state, out = state_of(run_dir), capsys.readouterr().out
    assert state["stalled"] == stalled + 1 and state["state"] == "FAILED", state
    if stalled + 1 >= slurm_state.MAX_STALLED_STARTS:
        assert "without a new checkpoint" in state["message"] and "--time" in state["message"], state
        assert "stops requeueing" in out and not (run_dir / "queue.log").exists()
    else:
        assert "was begun by code theirs" in state["message"], state


@pytest.mark.parametrize("holder", ["state", "lock"])
def test_a_job_finding_its_run_owned_by_another_live_job_leaves_it(job_env, holder, monkeypatch, capsys):
    """A job whose run directory is named by another job that SLURM has running (RUN/slurm.json), or locked by a
    job on this node (RUN/slurm.lock), exits 1 without touching the directory and names that job. Seen failing
    without ``claim``."""
    job, run_dir = job_env
    theirs = json.dumps({"job": "9_1", "state": "RUNNING", "restarts": 0}) + "\n"
    (run_dir / slurm_files.STATE_FILE).write_text(theirs)
    monkeypatch.setattr(slurm_job, "job_states", lambda ids, timeout=None, names=None: {"9_1": "RUNNING"} if
                        holder == "state" else {})
    with open(run_dir / slurm_files.JOB_LOCK, "a") as lock:
        if holder == "lock":
            import fcntl
            fcntl.flock(lock, fcntl.LOCK_EX)
        before = sorted(p.name for p in run_dir.iterdir())
        assert job() == 1
    assert (run_dir / slurm_files.STATE_FILE).read_text() == theirs
    assert sorted(p.name for p in run_dir.iterdir()) == before
    out = capsys.readouterr().out
    assert "in use by 9_1" in out and "leaves it untouched" in out, out
    # SLURM no longer runs job 9_1: this job takes the run
    if holder == "state":
        monkeypatch.setattr(slurm_job, "job_states", lambda ids, timeout=None, names=None: {"9_1": "CANCELLED"})
        assert job() == 1 and state_of(run_dir)["job"] == "7_1"


def test_a_state_write_that_fails_never_ends_the_job(job_env, capsys):
    """RUN/slurm.json cannot be written (a folder in its place, as a full or read-only disk): the job says so on
    stderr and goes on to the end of its chain (exit 1: refused), no traceback. Seen failing without the guard in
    files.write_state_file."""
    job, run_dir = job_env
    (run_dir / slurm_files.STATE_FILE).mkdir()
    assert job() == 1
    out, err = capsys.readouterr()
    assert "could not write" in err and "was begun by code theirs" in out, (out, err)


def time_args(*args) -> object:
    a = argparse.Namespace(time=None, signal_seconds=300, sbatch=[])
    for k, v in zip(args[::2], args[1::2]):
        setattr(a, k, v)
    return a


LIMITS = ("1", "90", "2:30", "0:30", "1:00:00", "1:00:01", "0:0:59", "48:00:00", "1-0", "2-3", "1-2:03",
          "1-2:03:04", "0", "UNLIMITED", "infinite")


def test_time_limits_read_as_slurm_gives_them():
    """What a job given sbatch --time LIMIT gets, in seconds: SLURM keeps whole minutes and rounds seconds up
    (scontrol show job's TimeLimit for each of these on the test cluster: test_time_limits_are_what_slurm_gives)."""
    assert [slurm_options.limit_seconds(t) for t in LIMITS] == [
        60, 5400, 180, 60, 3600, 3660, 60, 172800, 86400, 183600, 93780, 93840, None, None, None]
    assert slurm_options.limit_words("2:30") == "--time 2:30 (SLURM rounds it up to 3 min: 180 s)"
    assert slurm_options.limit_words("3") == "--time 3 (180 s)"
    for bad in ("1h", "1:2:3:4", "", "-5"):
        with pytest.raises(SlurmError, match="not a time limit sbatch takes"):
            slurm_options.limit_seconds(bad)


def test_time_limits_are_what_slurm_gives(slurm, tmp_path):
    """limit_seconds of each form against the TimeLimit SLURM itself gives a held job submitted with it."""
    for limit in LIMITS:
        job = slurm.run("sbatch", "--parsable", "--hold", f"--time={limit}", "-o", "/dev/null", "--wrap", "true"
                        ).stdout.strip()
        shown = re.search(r"TimeLimit=(\S+)", slurm.run("scontrol", "show", "job", job).stdout)[1]
        slurm.run("scancel", job)
        if shown == "UNLIMITED":
            seconds = None
        else:
            days, _, clock = shown.rpartition("-")
            h, m, sec = map(int, clock.split(":"))
            seconds = int(days or 0) * 86400 + h * 3600 + m * 60 + sec
        assert slurm_options.limit_seconds(limit) == seconds, (limit, shown)


def test_a_time_limit_must_leave_training_time_after_the_signal(data_bin, tmp_path, monkeypatch):
    """Requeueing jobs: refused when --time leaves no second after --signal-seconds + 30 s, accepted one second
    above; with --no-requeue only a warning. A run whose measured speed (its train.log) makes one checkpoint
    interval longer than what is left is warned about; runs without a speed are named in a note."""
    q = tmp_path / "q.txt"
    q.write_text(f"{pe_queue_runs.recipe(tmp_path, data_bin)} sape en-de mini 1 runs-dir={tmp_path / 'runs'}\n")
    runs = queue.parse_queue(q)
    edge = time_args("time", "5", "signal_seconds", 270)  # 300 s - 270 s - 30 s = 0 s of training
    with pytest.raises(SlurmError, match="leaves no training time"):
        slurm_options.check_time(edge, runs)
    notes = slurm_options.check_time(time_args("time", "5", "signal_seconds", 269), runs)
    assert len(notes) == 1 and "no measured speed for 1 run(s) (sape.en-de.mini.seed1)" in notes[0], notes
    notes = slurm_options.check_time(time_args("time", "5", "signal_seconds", 270, "sbatch", ["--no-requeue"]), runs)
    assert notes[0].startswith("warning: --time 5 (300 s) is shorter than --signal-seconds 270 + 30 s"), notes
    # the recipe saves every 2 updates: at 0.5 s per update an interval takes 1 s
    monkeypatch.setattr(queue, "progress", lambda run: {"sec_per_update": 0.5})
    assert slurm_options.check_time(time_args("time", "5", "signal_seconds", 269), runs) == []
    monkeypatch.setattr(queue, "progress", lambda run: {"sec_per_update": 0.75})  # 1.5 s > 1 s left
    (warning,) = slurm_options.check_time(time_args("time", "5", "signal_seconds", 269), runs)
    assert warning.startswith("warning: sape.en-de.mini.seed1 (line 1): one checkpoint interval") and \
        "--save-interval-updates 2" in warning and "longer than the 1 s" in warning, warning


# ------------------------------------------------------------------------------------------- the rehearsal
@pytest.mark.slow
def test_a_rehearsal_records_every_run_of_a_table_shaped_queue(slurm, tmp_path):
    """`pe-queue run Q --slurm --rehearse DIR` on a queue file shaped as the paper's tables (wmt14 base lines with
    gpus=1 nodes=1, both pairs), with no data prepared: a synthetic corpus per pair, every run at size tiny-cpu on
    the test cluster's CPU node (no GPU asked for), each job requeued once after its first checkpoint (as a time
    limit would) and resumed from it, every run recorded, and status says RECORDED and done for each."""
    q = tmp_path / "table.txt"
    q.write_text("# two lines of Table 1's shape\nwmt14 sape en-de base 1 gpus=1 nodes=1\n"
                 "wmt14 nope en-fr base 1 gpus=1 nodes=1\n")
    started, rehearsal = time.monotonic(), tmp_path / "rehearsal"
    out = pe_queue(["run", q, "--slurm", "--rehearse", rehearsal, "--code", code_copy(tmp_path)], tmp_path,
                   env_of(slurm))
    assert out.returncode == 0 and "submitted job" in out.stdout, out.stdout + out.stderr
    rq = rehearsal / "table.txt"
    assert [ln.split()[:5] for ln in rq.read_text().splitlines()[1:]] == [
        ["wmt14", "sape", "en-de", "tiny-cpu", "1"], ["wmt14", "nope", "en-fr", "tiny-cpu", "1"]]
    script = Path(jobs_of(rq)[0]["script"]).read_text()
    assert "--gres" not in script and "PE_QUEUE_REHEARSE=1" in script, script
    wait_queue(slurm, rq)
    names = ["nope.en-fr.tiny-cpu.seed1", "sape.en-de.tiny-cpu.seed1"]
    logs = "".join(p.read_text() for p in (rq.parent / "table.txt.slurm" / "logs").glob("*.out"))
    assert sorted(p.parent.name for p in (rehearsal / "results").glob("*/command.json")) == names, logs[-3000:]
    for name in names:
        state = json.loads((rehearsal / "runs" / name / "slurm.json").read_text())
        assert (state["state"], state["restarts"]) == ("RECORDED", 1), state
        assert 0 < resumed_from(rehearsal / "runs" / name / "train.log")[1], name
    rows = pe_queue(["status", rq], tmp_path, env_of(slurm)).stdout.splitlines()[1:]
    assert all(" done " in r and r.split()[-2:] == ["RECORDED", "1"] for r in rows) and len(rows) == 2, rows
    print(f"a rehearsal of two runs: {time.monotonic() - started:.0f} s")


def test_dry_run_prints_every_batch_script_of_table1_before_its_data_exists(tmp_path, capsys, monkeypatch):
    """`pe-queue run examples/wmt14/queue_table1.txt --slurm --dry-run` where no WMT14 data is prepared: exit 0,
    the batch script of all 14 lines (one GPU each), and a warning naming both data folders, their lines and the
    command that prepares each; the real submission still refuses the missing data. Seen failing (exit 2, 14 "has
    no dict.en.txt") with the dry run's data check back on."""
    monkeypatch.chdir(tmp_path)  # data-bin/wmt14_* is relative: not here
    q = REPO / "examples" / "wmt14" / "queue_table1.txt"
    code = str(code_copy(tmp_path))
    assert queue_cli.main(["run", str(q), "--slurm", "--dry-run", "--code", code]) == 0
    out, err = capsys.readouterr()
    assert out.count("#!/bin/bash\n") == 1 and "#SBATCH --gres=gpu:1\n" in out, out
    (array,) = [ln for ln in out.splitlines() if ln.startswith("#SBATCH --array=")]
    assert len(array.split("=")[1].split(",")) == 14, array
    assert err.startswith("warning: 14 run(s) need data that is not prepared yet"), err
    assert "data-bin/wmt14_en_de (no dict.en.txt and no dict.de.txt" in err and "pe-prepare en-fr --recipe wmt14" in err
    assert not q.with_name(q.name + ".slurm").exists()
    assert queue_cli.main(["run", str(q), "--slurm", "--code", code]) == 2
    assert "has no dict.en.txt" in capsys.readouterr().err

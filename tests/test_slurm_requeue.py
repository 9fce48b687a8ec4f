"""Runs that SLURM requeues, on a real single-node SLURM cluster that the tests start in a temporary folder
(tests/pe_slurm.py): a run requeued mid-training or past its time limit resumes from its checkpoint and records
what an uninterrupted run records, an array task that requeues itself requeues itself alone, and a rehearsal of a
table-shaped queue (each job requeued once) records every run. Without root or SLURM these tests skip with how to
run them; PE_REQUIRE_SLURM=1 (.ci/run) makes them fail instead."""
import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

import pe_queue_runs
from pe_slurm import env_of, jobs_of, pe_queue, trainers, wait_for, wait_gone, wait_queue
from pe_testing import code_copy
from pe_tools.recipes import slurm as slurm_recipes
from pe_tools.recipes.results import SEGMENT_START


# ------------------------------------------------------------------------------------- requeued runs
def segments(log: Path) -> list:
    """The updates each segment of a train.log reached (a segment starts at fairseq-train's configuration line)."""
    text = log.read_text() if log.is_file() else ""
    parts = text.split(SEGMENT_START)[1:]
    return [max(map(int, re.findall(r"num_updates=(\d+)", part)), default=0) for part in parts]


def resumed_from(log: Path) -> list:
    """The update each segment of a train.log resumed from (fairseq's "Loaded checkpoint ... @ U updates"; None
    where it started afresh)."""
    parts = log.read_text().split(SEGMENT_START)[1:] if log.is_file() else []
    return [int(m[1]) if (m := re.search(r"Loaded checkpoint \S+ \(epoch \d+ @ (\d+) updates\)", part)) else None
            for part in parts]


@pytest.mark.slow
@pytest.mark.mutation
def test_a_run_requeued_mid_training_resumes_and_records_the_same(slurm, queue_reference, tmp_path):
    """Interrupted twice, as SLURM does it: USR1 before the time limit (the job requeues itself), then an outside
    `scontrol requeue`; each restart resumes from the last checkpoint, appends to the one train.log, and records
    what the uninterrupted local queue recorded. Requeued again once recorded, it trains nothing."""
    table, reference = queue_reference.table, pe_queue_runs.recorded(queue_reference.queue, ["sape"])
    q = tmp_path / "q" / "queue.txt"
    q.parent.mkdir()
    q.write_text(f"{table} sape en-de mini 1 runs-dir={q.parent / 'runs'} into={q.parent / 'rec'}\n")
    out = pe_queue(["run", q, "--slurm", "--code", code_copy(tmp_path)], tmp_path, env_of(slurm))
    assert out.returncode == 0, out.stdout + out.stderr
    task = f"{jobs_of(q)[0]['job']}_1"
    run_dir = q.parent / "runs" / "sape.en-de.mini.seed1"
    log = run_dir / "train.log"
    wait_for("update 3 in the first segment", lambda: segments(log)[-1:] >= [3])
    slurm.run("scancel", "--batch", "--signal=USR1", task)  # what SLURM sends --signal-seconds before the limit
    wait_for("a second segment at update 7", lambda: len(segments(log)) == 2 and segments(log)[-1] >= 7)
    slurm.run("scontrol", "requeue", task)
    wait_queue(slurm, q)
    seg, loaded = segments(log), resumed_from(log)
    # one log, every segment; each restart resumed from a checkpoint the segment before had saved (not beyond what
    # it reached; under load a segment may end before saving a new one, so two may resume from the same), and the
    # last reached the run's --max-update
    assert len(seg) == 3 and seg[2] == pe_queue_runs.MAX_UPDATE, seg
    assert loaded[0] is None and 0 < loaded[1] <= seg[0] and loaded[1] <= loaded[2] <= max(seg[:2]), (seg, loaded)
    assert pe_queue_runs.recorded(q) == reference != {}
    state = json.loads((run_dir / "slurm.json").read_text())
    assert (state["state"], state["restarts"], state["job"]) == ("RECORDED", 2, task), state
    slurm_log = next((q.parent / "queue.txt.slurm" / "logs").glob("*.out")).read_text()
    assert "time limit near, requeueing" in slurm_log and slurm_log.count(": job ") == 3, slurm_log[-3000:]

    # requeued once more after it was recorded (an outside scontrol requeue of a finished job): nothing trains
    before = log.read_bytes()
    slurm.run("scontrol", "requeue", task)
    wait_for("the fourth start", lambda: json.loads((run_dir / "slurm.json").read_text())["restarts"] == 3)
    wait_queue(slurm, q)
    assert log.read_bytes() == before
    assert json.loads((run_dir / "slurm.json").read_text())["state"] == "RECORDED"


@pytest.mark.slow
def test_the_array_task_holding_the_arrays_id_requeues_itself_alone(slurm, data_bin, tmp_path):
    """An array of three runs; the task to which SLURM gave the array's own id (the last one it starts) gets SLURM's
    signal before a time limit and requeues itself: that task alone starts again (restarts 1, two start lines);
    the other two keep going (restarts 0, one start line each), and every run is recorded. Seen failing with the
    handler's `scontrol requeue $SLURM_JOB_ID`, which requeues the whole array."""
    q = tmp_path / "q" / "queue.txt"
    q.parent.mkdir()
    table = pe_queue_runs.recipe(tmp_path, data_bin)
    q.write_text("".join(f"{table} {m} en-de mini 1 runs-dir={q.parent / 'runs'} into={q.parent / 'rec'}\n"
                         for m in pe_queue_runs.RUNS))
    out = pe_queue(["run", q, "--slurm", "--code", code_copy(tmp_path)], tmp_path, env_of(slurm))
    assert out.returncode == 0, out.stdout + out.stderr
    (record,) = jobs_of(q)
    array, by_line = record["job"], {int(n): Path(d) for n, d in record["snapshot_lines"].items()}

    def holder():  # the array task whose own job id is the array's, once it runs its chain (its handler is set)
        rows = dict(ln.split("|", 1) for ln in slurm.run("squeue", "-h", "-r", "-j", array, "-o", "%i|%A|%T"
                                                          ).stdout.split())
        return next((task for task, row in rows.items() if row == f"{array}|RUNNING"), None)
    task = wait_for("the task holding the array's id to run", holder, 300)
    run_dir = by_line[int(task.split("_")[1])]
    wait_for(f"{task}'s first checkpoint", lambda: (run_dir / "checkpoint_last.pt").is_file()
             and slurm_recipes.read_state(run_dir).get("state") == "RUNNING", 300)
    slurm.run("scancel", "--batch", "--signal=USR1", task)  # SLURM's signal before a time limit
    wait_queue(slurm, q)
    logs = q.parent / "queue.txt.slurm" / "logs"
    for line, run_dir in by_line.items():
        state = json.loads((run_dir / "slurm.json").read_text())
        (log,) = logs.glob(f"*_{array}_{line}.out")
        starts = log.read_text().count(", start ")
        want = (1, 2) if f"{array}_{line}" == task else (0, 1)
        assert (state["state"], state["restarts"], starts) == ("RECORDED", *want), (line, state, log.read_text())
    assert len(pe_queue_runs.recorded(q)) == 2 * len(pe_queue_runs.RUNS)  # the default decode and the last, per run


STATS = ("loss", "nll_loss", "gnorm", "wpb", "bsz", "lr")


def per_update(log: Path) -> list:
    """Per segment of a train.log: {update: its logged loss, nll_loss, gradient norm, words, sentences, lr}."""
    out = []
    for part in log.read_text().split(SEGMENT_START)[1:]:
        lines = [dict(re.findall(r"(\w+)=([^,\s]+)", ln)) for ln in part.splitlines() if "| train_inner |" in ln]
        out.append({int(kv["num_updates"]): tuple(kv[k] for k in STATS) for kv in lines})
    return out


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

"""A SLURM job of pe-queue, on its node: ``python -m pe_tools.recipes.slurm job ...`` (what the batch scripts run)
takes its run directory (``claim``), writes its own state into RUN/slurm.json (``JobState``, with a heartbeat),
runs the local queue's chain for its run, requeues itself at SLURM's signal before its time limit, and stops
after MAX_STALLED_STARTS starts in a row without a new checkpoint."""
import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Optional

from ... import locks
from ...command_line import fail
from .. import queue as local
from .files import JOB_LOCK, STATE_FILE, now, read_state, write_state_file
from .query import NoAnswer, job_names, job_states
from .state import HEARTBEAT_SECONDS, MAX_STALLED_STARTS, OWN_ALIVE, TRANSITIONS, WORKING, Event, Own

def job_task(env=os.environ) -> str:
    """This job's id as jobs.json and status name it, and as every command the job runs on itself addresses it:
    ARRAY_TASK for an array task (SLURM gives the array's own id to one of its tasks, and a command given that id
    acts on every task of the array), else the job id. Both array variables make an array task: one alone (an
    environment exported in part from another job) leaves the job its own id."""
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        return f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    return env.get("SLURM_JOB_ID", "-")


class JobState:
    """RUN/slurm.json as a job writes it: its id, its own word (state.Own, changed only by the events of
    state.TRANSITIONS) and message, its restart count, the update it resumed from, how many starts in a row
    found no new checkpoint, and its heartbeat (rewritten every HEARTBEAT_SECONDS by ``beat``). A failed write
    never ends the job."""

    def __init__(self, run_dir: Path, **fields):
        env = os.environ
        self.run_dir, self.word, self.message = Path(run_dir), None, ""
        self.fields = {"job": job_task(), "job_id": env.get("SLURM_JOB_ID"),
                       "name": env.get("SLURM_JOB_NAME"), "restarts": int(env.get("SLURM_RESTART_COUNT") or 0),
                       "node": env.get("SLURMD_NODENAME"),
                       **fields}
        self.lock = threading.RLock()  # the heartbeat's thread and the signal handlers (main thread) write
        self.done = threading.Event()

    def write(self, event: Optional[Event] = None, message: str = "") -> bool:
        """The heartbeat (no ``event``), or the word ``event`` leads to with ``message``; an event the table does
        not allow from the present word (SLURM's signal after the chain's last word) changes nothing: False."""
        with self.lock:
            if event:
                word = TRANSITIONS.get((self.word, event))
                if word is None:
                    return False
                self.word, self.message = word, message
            return write_state_file(self.run_dir, dict(self.fields, state=self.word, message=self.message,
                                                        time=now(), heartbeat=time.time()))

    def beat(self, every: float = HEARTBEAT_SECONDS) -> None:
        def loop():
            while not self.done.wait(every):
                self.write()
        threading.Thread(target=loop, name="heartbeat", daemon=True).start()


def stalled_starts(previous: dict, job: str, restarts: int, saved: Optional[int]) -> int:
    """How many starts in a row of ``job`` found the checkpoint at update ``saved`` (None: none) that its previous
    start resumed from (RUN/slurm.json of that start, ``previous``): 0 at a first start or a new checkpoint."""
    if (previous.get("job") != job or previous.get("state") not in OWN_ALIVE + (Own.ENDED,)
            or restarts <= int(previous.get("restarts") or 0) or previous.get("resumed_from", -1) != saved):
        return 0
    return int(previous.get("stalled") or 0) + 1


def _say(message: str) -> None:
    """A line of the job's own log (its SLURM log)."""
    print(message, flush=True)


def claim(run, job: str) -> Optional[contextlib.ExitStack]:
    """Take the run directory for this job: the lock RUN/slurm.lock (pe_tools/locks.py) for the job's whole life,
    and no other working job named in RUN/slurm.json. A lock held by this same job (its own earlier processes,
    still at work after SLURM started it again, e.g. when slurmd was restarted) is waited for: those processes
    keep the run's state until they end. Returns what holds the lock (``close`` releases it), or None (said in the
    job's log) when another live job has the run: this job then leaves it untouched."""
    path = run.run_dir / JOB_LOCK
    stack = contextlib.ExitStack()
    try:
        stack.enter_context(locks.hold(path, holder={"what": f"SLURM job {job}", "job": job}))
    except locks.Busy as busy:
        holder = busy.holder.get("job") or read_state(run.run_dir).get("job")
        if holder != job:
            _say(f"[queue] {run.name}: {run.run_dir} is in use by {holder or 'another job'} "
                 f"({locks.describe(busy.holder)}, it holds {path}); this job ({job}) leaves it untouched and exits")
            return None
        _say(f"[queue] {run.name}: this job's earlier processes ({locks.describe(busy.holder)}) still work in "
             f"{run.run_dir}; waiting for them to end")
        stack.enter_context(locks.hold(path, wait=True, holder={"what": f"SLURM job {job}", "job": job}, say=_say))
    lock = stack
    owner = read_state(run.run_dir)
    other = owner.get("job")
    if other and other != job and owner.get("state") in OWN_ALIVE:
        try:
            theirs = job_states([other.split("_")[0]], names=job_names([owner])).get(other)
        except NoAnswer:
            theirs = None
        if theirs in WORKING:
            lock.close()
            print(f"[queue] {run.name}: {run.run_dir} is in use by {other} ({theirs}, {run.run_dir / STATE_FILE}); "
                  f"this job ({job}) leaves it untouched and exits", flush=True)
            return None
    return lock


def rehearse_requeue(run_dir: Path, saved: Optional[int], done: threading.Event, every: float = 1.0) -> None:
    """A rehearsal's job (pe-queue run --rehearse --slurm) requeues itself once, as SLURM's signal before a time
    limit makes it: USR1 to itself as soon as the run has a checkpoint newer than ``saved``."""
    def watch():
        while not done.wait(every):
            if (local.saved_update(run_dir) or 0) > (saved or 0):
                print(f"[queue] rehearsal: a first checkpoint in {run_dir}; requeueing as a time limit would",
                      flush=True)
                os.kill(os.getpid(), signal.SIGUSR1)
                return
    threading.Thread(target=watch, name="rehearsal", daemon=True).start()


# -------------------------------------------------------------------------------------------------- in the job
def job_main(argv=None) -> int:
    """One array task: the run on line --line of the queue copy, through the local queue's chain."""
    p = argparse.ArgumentParser(prog="python -m pe_tools.recipes.slurm job")
    p.add_argument("snapshot", type=Path)
    p.add_argument("--line", type=int, required=True)
    p.add_argument("--code", type=Path, required=True)
    p.add_argument("--gpus", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    try:
        (run,) = [r for r in local.parse_queue(a.snapshot) if r.line == a.line]
    except ValueError as e:  # the copy refused (QueueError is a ValueError), or no run on that line
        print(f"[queue] error: line {a.line} of {a.snapshot}: {e}", flush=True)
        return 2
    if a.gpus > 1:
        run.options["gpus"] = str(a.gpus)
    queue = JobQueue(a.snapshot, [run], a.code, 1, a.threads)
    run.run_dir.mkdir(parents=True, exist_ok=True)
    job, restarts = job_task(), int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    lock = claim(run, job)
    if lock is None:
        return 1
    previous, saved = read_state(run.run_dir), local.saved_update(run.run_dir)
    stalled = stalled_starts(previous, job, restarts, saved)
    state = JobState(run.run_dir, resumed_from=saved, stalled=stalled)
    print(f"[queue] {run.name}: job {os.environ.get('SLURM_JOB_ID')}, start {restarts + 1}, code {queue.commit}",
          flush=True)
    if stalled >= MAX_STALLED_STARTS:
        why = (f"started {stalled + 1} times in a row without a new checkpoint (at update {saved or 0}): its time "
               f"limit (or preemptions) leave it no time to reach the next one; it stops requeueing. Submit the "
               f"queue again with a longer --time, or use a recipe with a smaller --save-interval-updates "
               f"(docs/cluster.md, section 6)")
        state.write(Event.STALLED, f"failed: {why}")
        print(f"[queue] {run.name}: failed: {why}", flush=True)
        return 1

    def requeue(*_):  # SLURM's signal before the time limit: requeue this job, SLURM then ends it
        job_id = job  # this array task alone: the array's own id would requeue every task of the array
        if not state.write(Event.SIGNAL, "time limit near: requeued itself"):
            return  # the chain has ended: nothing to requeue
        print(f"[queue] {run.name}: time limit near, requeueing job {job_id}", flush=True)
        out = subprocess.run(["scontrol", "requeue", job_id], capture_output=True, text=True, check=False)
        if out.returncode:  # e.g. --no-requeue, or a cluster without JobRequeue: the limit will end the run
            why = (out.stderr or out.stdout).strip()
            state.write(Event.REQUEUE_REFUSED, f"time limit near, but `scontrol requeue {job_id}` failed: {why}; at "
                                               f"its limit SLURM ends the run; it resumes from its last checkpoint "
                                               f"when the queue is submitted again")
            print(f"[queue] {run.name}: could not requeue job {job_id} ({why}); the time limit will end it: submit "
                  f"the queue again (pe-queue run QUEUE --slurm) to resume from its last checkpoint", flush=True)

    def ended(*_):  # SLURM ends the job (preemption, requeue, cancel): its trainings get SIGTERM too
        state.write(Event.TERMINATED, "ended by SLURM (its time limit, a preemption, a requeue or a cancel); unless "
                                      "SLURM requeues it, pe-queue run QUEUE --slurm resumes it")
        queue.stop()

    signal.signal(signal.SIGUSR1, requeue)
    signal.signal(signal.SIGTERM, ended)
    state.write(Event.START)
    state.beat()
    if os.environ.get(local.REHEARSE_ENV) and restarts == 0:
        rehearse_requeue(run.run_dir, saved, state.done)
    try:
        result = queue.process(run)
    except local.QueueError as e:
        result = f"refused: {e}"
    except Exception as e:  # noqa: BLE001 - said in the log and in the state, not a bare traceback
        traceback.print_exc()
        result = f"failed: {type(e).__name__}: {e} (the traceback above, in this job's SLURM log)"
    finally:
        state.done.set()
    state.write(Event.CHAIN_RECORDED if result == "recorded" else Event.CHAIN_FAILED, result)
    print(f"[queue] {run.name}: {result}", flush=True)
    lock.close()
    return 0 if result == "recorded" else 1


class JobQueue(local.Queue):
    """The local queue's chain for one run in a SLURM job: no QUEUE.pids file (SLURM owns the processes)."""

    def _save_pids(self) -> None:
        pass


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["job"]:
        return job_main(argv[1:])
    return fail("python -m pe_tools.recipes.slurm job ...: the part pe-queue --slurm runs on a node; "
                "submit with pe-queue run QUEUE --slurm")

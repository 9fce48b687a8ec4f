"""pe-queue status's SLURM columns (job, state, requeues) of a submitted queue: each run's newest job, its word
from SLURM, from its own RUN/slurm.json, its heartbeat and its SLURM log, made one status word by
state.status_word (``status_columns``)."""
import os
import shlex
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from .files import STATE_FILE, load_jobs, read_state, state_problem, submit_dir
from .query import NoAnswer, active, job_names, job_states, sacct_states
from .state import OWN_FINAL, UNREADABLE, Evidence, Own, Slurm, status_word

def status_columns(queue_path: Path, runs, notes: Optional[List[str]] = None,
                   resuming: Optional[set] = None) -> Optional[Dict[str, List[str]]]:
    """The status table's SLURM columns (job, state, requeues), or None when the queue was not submitted. A run's
    state is the newest word on its job (state.py, ``status_word``), from SLURM's answer
    (one squeue; sacct for the jobs it no longer lists), RUN/slurm.json (read again after SLURM answered), the
    heartbeat's age and the SLURM log's tail. ``notes`` gets a line per FAILED or DIED run (its reason: the job's
    own message or its log's last lines), per forgotten run, and, first, one when SLURM's controller does not
    answer (the states are then the run directories' alone, within QUERY_SECONDS). ``resuming`` gets the names of
    the runs no job is working on: their updates are those they resume from (their checkpoints), not the log's
    last."""
    jobs = load_jobs(queue_path)
    if not jobs:
        return None
    notes = notes if notes is not None else []
    ids = [j["job"] for j in jobs]
    states = {run.name: read_state(run.run_dir) for run in runs}
    asked = sorted(set(ids) | {st["job"].split("_")[0] for st in states.values() if st.get("job")})
    names = {**job_names(list(states.values())), **job_names(jobs)}
    try:
        known, answered = job_states(asked, names=names), True
    except NoAnswer as e:
        known, answered = {}, False
        notes.insert(0, f"SLURM's controller does not answer ({e}): the states below are the jobs' own last words "
                        f"in their run directories")
    running = active(known)
    latest: Dict[str, str] = {}  # run directory -> its newest array task id
    for j in jobs:
        for line, run_dir in j["snapshot_lines"].items():
            latest[run_dir] = f"{j['job']}_{line}"
    cols: Dict[str, List[str]] = {"job": [], "state": [], "requeues": []}
    accounted: Optional[Dict[str, str]] = None
    for run in runs:
        mine = states[run.name].get("job")
        job = mine if mine in running else latest.get(str(run.run_dir.resolve())) or mine or "-"
        if job not in running:  # what the job wrote while SLURM answered (a job may end in between)
            states[run.name] = read_state(run.run_dir)
        state = states[run.name]
        problem = "" if state else state_problem(run.run_dir)
        own = UNREADABLE if problem else state.get("state") if state.get("job") == job else None
        slurm_word = known.get(job)
        if slurm_word is None and answered and job != "-" and own not in OWN_FINAL:
            if accounted is None:
                accounted = sacct_states(ids, names)
            slurm_word = accounted.get(job)
        log, tail = log_tail(queue_path, job) if job != "-" else (None, [])
        heartbeat = state.get("heartbeat") if own not in (None, UNREADABLE) else None
        word, note = status_word(Evidence(
            job=job, slurm=slurm_word, answered=answered, own=own, message=state.get("message") or "",
            heartbeat_age=None if heartbeat is None else time.time() - float(heartbeat),
            log=str(log) if log else None, tail=tuple(tail), state_file=str(run.run_dir / STATE_FILE),
            problem=problem, logs_dir=str(submit_dir(queue_path) / "logs"), again=resubmit(queue_path)))
        if note:
            notes.append(f"{run.name}: {note}")
        if resuming is not None and word not in (Slurm.RUNNING, Slurm.COMPLETING):
            resuming.add(run.name)
        cols["job"].append(job)
        cols["state"].append(word or "-")
        cols["requeues"].append(str(state.get("restarts", 0)) if own not in (None, UNREADABLE, Own.SUBMITTED)
                                else "-")
    return cols


def resubmit(queue_path: Path) -> str:
    return f"pe-queue run {shlex.quote(str(queue_path))} --slurm submits it again"


def log_tail(queue_path: Path, job: str, lines: int = 40) -> Tuple[Optional[Path], List[str]]:
    """The SLURM log of array task ``job`` (QUEUE.slurm/logs/NAME_JOB_TASK.out) and its last non-empty lines
    (from its last 64 kB)."""
    logs = sorted(submit_dir(queue_path).joinpath("logs").glob(f"*_{job}.out"))
    if not logs:
        return None, []
    try:
        with open(logs[-1], "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 65536))
            text = f.read().decode(errors="replace")
    except OSError:
        return logs[-1], []
    return logs[-1], [ln for ln in text.splitlines() if ln.strip()][-lines:]

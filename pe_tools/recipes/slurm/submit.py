"""Submission: pe-queue run QUEUE --slurm (``submit``: every check first, then one batch script and one sbatch per
shape of run, under the locks of the queue and of its run directories) and pe-queue cancel QUEUE (``cancel``: the
jobs this queue submitted, and nothing else)."""
import contextlib
import hashlib
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from ... import locks
from ...command_line import fail
from ...file_io import write_atomic
from .. import queue as local
from ..srun import SlurmError
from .files import SUBMIT_LOCK, load_jobs, now, read_state, save_jobs, submit_dir, write_state_file
from .options import Shape, check_time, shape_of
from .query import (INSTALL_HINT, WAIT_SECONDS, NoAnswer, check_cluster, check_fits, job_names, live_states,
                    not_shared, queue_key)
from .state import Event, step

# what `python -m pe_tools.recipes.slurm job` runs in a copy of the code (--code): this package's __main__.py, or the
# module slurm.py of a copy pinned before the package was split (its job takes the same command line)
JOB_ENTRY = ("pe_tools/recipes/slurm/__main__.py", "pe_tools/recipes/slurm.py")


def batch_script(name: str, shape: Shape, lines: Sequence[int], snapshot: Path, code: Path, commit: str, a,
                 part: Optional[str], cwd: Path, logs: Path) -> str:
    """A batch script for the runs on ``lines`` (its array tasks are the line numbers); every value quoted."""
    q = shlex.quote
    opts = [f"--job-name={name}", *shape.sbatch_options(), f"--array={','.join(map(str, lines))}",
            "--requeue", "--open-mode=append", f"--signal=B:USR1@{a.signal_seconds}",
            f"--output={logs / '%x_%A_%a.out'}", f"--chdir={cwd}"]
    opts += [f"--partition={part}"] * bool(part) + [f"--account={a.account}"] * bool(a.account)
    opts += [f"--time={a.time}"] * bool(a.time)
    head = "".join(f"#SBATCH {q(o)}\n" for o in opts + list(a.sbatch))
    job = [sys.executable, "-m", "pe_tools.recipes.slurm", "job", str(snapshot), "--code", str(code),
           "--gpus", str(shape.gpus), "--threads", str(shape.cpus)]
    return (f"#!/bin/bash\n# pe-queue --slurm: the runs on lines {','.join(map(str, lines))} of {q(str(snapshot))},"
            f" one array task each ({shape.describe()})\n{head}set -eu\ncd {q(str(cwd))}\n"
            f"export PYTHONPATH={q(str(code))} PYTHONSAFEPATH=1 PE_QUEUE_COMMIT={q(commit)} "
            f"OMP_NUM_THREADS={shape.cpus} PYTHONUNBUFFERED=1\n"
            "trap '' USR1  # until the job installs its handler: SLURM's USR1 would otherwise end it as FAILED\n"
            f"exec {shlex.join(job)} --line \"$SLURM_ARRAY_TASK_ID\"\n")


@contextlib.contextmanager
def locked(paths: Sequence[Path]):
    """Hold the lock (pe_tools/locks.py) of each of ``paths``, taken in sorted order so that two submitters never
    wait on each other; says so on stderr when it has to wait for another submitter."""
    with contextlib.ExitStack() as stack:
        for path in sorted({Path(p).resolve() for p in paths}):
            stack.enter_context(locks.hold(path, wait=True, holder={"what": "pe-queue run --slurm"},
                                           say=lambda message: print(f"[queue] {message} (another pe-queue "
                                                                     f"submitting)", file=sys.stderr, flush=True)))
        yield


def submit(a, runs, queue_path: Path) -> int:
    """pe-queue run QUEUE --slurm: check everything, then one sbatch per shape; returns the exit status. Submitting
    holds a lock on the queue (QUEUE.slurm/slurm-submit.lock) and on each run directory (RUN/slurm-submit.lock: two
    queue files may name one run) around "look for a live job, submit, record the id", so that two submitters at
    once make one job per run."""
    queue_path = Path(queue_path)
    if named := [x for x in a.sbatch if re.match(r"-J|--job-n", x.strip())]:
        return fail(f"--sbatch={named[0]}: pe-queue names each job itself (the name holds the key by which status and "
                    f"cancel know this queue's jobs); leave the job name out")
    try:
        shapes = {run.line: shape_of(run, a) for run in runs}
        notes = check_time(a, runs)
        part = None if a.dry_run else check_cluster(a.partition)
        if part:
            for run in runs:
                check_fits(run, shapes[run.line], part)
        code = Path(a.code if a.code else local.pin_code(a.pin, local.CHECKOUT)).resolve()
    except (SlurmError, local.QueueError) as e:
        return fail(str(e))
    if not any((code / entry).is_file() for entry in JOB_ENTRY):
        return fail(f"--code {code}: no {JOB_ENTRY[0]} there (nor {JOB_ENTRY[1]}, as in a copy pinned before it); "
                    f"give a copy of the project made with --pin")
    subdir = submit_dir(queue_path).resolve()
    paths = {"the code": code, "the submission folder": subdir, "the working folder": Path.cwd()}
    for run in runs:
        paths.update({f"{run.name}'s run directory": run.run_dir, f"{run.name}'s data": run.data,
                      f"{run.name}'s results folder": run.into})
    if warning := not_shared(paths):
        notes.append(warning)
    for note in notes:
        print(note, file=sys.stderr, flush=True)
    if a.dry_run:
        return _submit(a, runs, queue_path, shapes, part, code, subdir)
    with locked([subdir / SUBMIT_LOCK] + [run.run_dir / SUBMIT_LOCK for run in runs]):
        try:
            return _submit(a, runs, queue_path, shapes, part, code, subdir)
        except NoAnswer as e:
            return fail(f"{e}; nothing submitted, since a job of {queue_path} may still be queued or running; try "
                        f"again once `scontrol ping` answers")


def _submit(a, runs, queue_path: Path, shapes, part, code: Path, subdir: Path) -> int:
    """submit's part under its locks: the runs that no live job has, submitted, and their ids recorded."""
    commit = local.code_commit(code)
    # the runs still to do: not recorded by this code, and not already queued or running (under a job of this
    # queue, or of another queue file naming the same run directory: its RUN/slurm.json names the job)
    earlier = load_jobs(queue_path)
    tasks: Dict[str, List[str]] = {}
    for j in earlier:
        for line, run_dir in j["snapshot_lines"].items():
            tasks.setdefault(run_dir, []).append(f"{j['job']}_{line}")
    owners = [read_state(run.run_dir) for run in runs]
    for run, owner in zip(runs, owners):
        if owner.get("job"):
            tasks.setdefault(str(run.run_dir.resolve()), []).append(owner["job"])
    names = {**job_names(owners), **job_names(earlier)}
    live = {} if a.dry_run else live_states(sorted({t.split("_")[0] for ts in tasks.values() for t in ts}), names)
    todo = []
    for run in runs:
        busy = [t for t in tasks.get(str(run.run_dir.resolve()), []) if t in live]
        if local.recorded_commit(run) == commit and run.recorded.is_dir():
            print(f"[queue] {run.name}: recorded already, not submitted")
        elif busy:
            print(f"[queue] {run.name}: job {busy[-1]} has it already ({live[busy[-1]]}), not submitted")
        else:
            todo.append(run)
    if not todo:
        print(f"[queue] nothing to submit: every run of {queue_path} is recorded or queued")
        return 0

    text = queue_path.read_text(encoding="utf-8")
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    snapshot, logs = subdir / f"queue-{digest}.txt", subdir / "logs"
    groups: Dict[Shape, List[int]] = {}
    for run in todo:
        groups.setdefault(shapes[run.line], []).append(run.line)
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", queue_path.stem)[:40] or "queue"
    key = queue_key(queue_path)
    scripts = []
    for k, (shape, lines) in enumerate(groups.items()):
        name = f"pe-{stem}-{key}-{k}"
        script = batch_script(name, shape, lines, snapshot, code, commit, a, part and part["partition"] or
                              a.partition, Path.cwd().resolve(), logs)
        scripts.append((subdir / f"{name}-{digest}.sh", script, shape, lines))
    if a.dry_run:
        for path, script, shape, lines in scripts:
            print(f"# {path} ({len(lines)} run(s), each {shape.describe()}), not written by a dry run; without "
                  f"--dry-run it is written there and submitted with: sbatch --parsable {shlex.quote(str(path))}\n"
                  f"{script}")
        return 0

    logs.mkdir(parents=True, exist_ok=True)
    if not snapshot.is_file():
        write_atomic(snapshot, text)
    by_line = {run.line: run for run in runs}
    records = list(earlier)  # every id ever submitted for a line stays: pe-queue cancel reaches them all
    for path, script, shape, lines in scripts:
        write_atomic(path, script)
        out = subprocess.run(["sbatch", "--parsable", str(path)], capture_output=True, text=True,
                             timeout=WAIT_SECONDS)
        if out.returncode:
            save_jobs(subdir, records)
            return fail(f"sbatch {path} failed: {(out.stderr or out.stdout).strip()}; nothing more submitted")
        job = out.stdout.strip().split(";")[0]
        records.append({"job": job, "name": _name_of(path), "script": str(path), "snapshot": str(snapshot),
                        "lines": lines,
                        "snapshot_lines": {str(n): str(by_line[n].run_dir.resolve()) for n in lines},
                        "submitted": now()})
        save_jobs(subdir, records)
        for n in lines:  # the run's owner, for a submitter of another queue file naming the same run directory
            write_state_file(by_line[n].run_dir, {"job": f"{job}_{n}", "name": _name_of(path),
                                                   "state": step(None, Event.SUBMIT).value,
                                                   "time": now(), "heartbeat": time.time(),
                                                   "queue": str(queue_path.resolve())})
        print(f"[queue] submitted job {job}: {len(lines)} run(s) (lines {','.join(map(str, lines))}), each "
              f"{shape.describe()}; logs in {logs}")
    print(f"[queue] code {commit} ({code}); watch with: pe-queue status {shlex.quote(str(queue_path))}")
    return 0


def _name_of(script: Path) -> str:
    """The job name a batch script of ``_submit`` gives (its file is NAME-DIGEST.sh)."""
    return script.stem.rsplit("-", 1)[0]


def cancel(queue_path: Path) -> int:
    """pe-queue cancel QUEUE: scancel the jobs this queue submitted (their ids in QUEUE.slurm/jobs.json) that SLURM
    lists, just before, under the name they were submitted with (it holds the queue's key): a job that got one of
    the ids since is left alone. A record without that name (written by a pe-queue before jobs were named) cannot
    show its job is still this queue's: it is named, not cancelled."""
    records = load_jobs(queue_path)
    jobs, names = [j["job"] for j in records], job_names(records)
    if not jobs:
        return fail(f"{queue_path}: no SLURM jobs were submitted for it ({submit_dir(queue_path) / 'jobs.json'} "
                    f"is missing); nothing to cancel")
    if not shutil.which("scancel"):
        return fail(f"scancel not found on PATH; {INSTALL_HINT}")
    unnamed = [str(j) for j in jobs if str(j).split("_")[0] not in names]
    if unnamed:
        print(f"[queue] job(s) {', '.join(unnamed)} of {submit_dir(queue_path) / 'jobs.json'} were recorded without "
              f"the name they were submitted under, so nothing shows they are still this queue's (SLURM reuses "
              f"ids): not cancelled; see `squeue -j {','.join(unnamed)} -o %i,%j` and scancel those that are yours")
        jobs = [j for j in jobs if str(j) not in unnamed]
    try:
        live = live_states(jobs, names)
    except NoAnswer as e:
        return fail(f"{e}; nothing cancelled: try again once `scontrol ping` answers")
    asked = {str(j).split("_")[0] for j in jobs}
    live = {task: state for task, state in live.items() if task.split("_")[0] in asked}
    ids = sorted({task.split("_")[0] for task in live})
    if not ids:
        print(f"[queue] no job of {queue_path} is queued or running")
        return 0
    out = subprocess.run(["scancel", *ids], capture_output=True, text=True, timeout=WAIT_SECONDS)
    if out.returncode:
        return fail(f"scancel {' '.join(ids)} failed: {(out.stderr or out.stdout).strip()}")
    print(f"[queue] cancelled job(s) {', '.join(ids)} ({len(live)} array task(s))")
    return 0

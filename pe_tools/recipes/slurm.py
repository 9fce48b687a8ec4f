"""pe-queue on a SLURM cluster: each run of a queue file as one SLURM job (a job array per resource shape), running
the local queue's own chain (train -> decode twice -> record, ``queue.Queue.process``) from the pinned copy of the
code; several ranks of one run started with srun; the jobs' state kept in their run directories. docs/cluster.md
is the user's guide.

    pe-queue run QUEUE --slurm [--partition P] [--account A] [--time T] [--gpus N] [--cpus N] [--nodes N]
                               [--sbatch ARG ...] [--signal-seconds S] [--dry-run]
    pe-queue status QUEUE          (SLURM columns: job id, state, requeues)
    pe-queue cancel QUEUE          (scancel of this queue's jobs, nothing else)

Submission writes QUEUE.slurm/ beside the queue file: a copy of the queue file named by its content (the jobs read
that copy, so an edit to QUEUE does not reach submitted jobs), one batch script per job array, logs/ (SLURM's
output of each job, appended across restarts) and jobs.json (every id ever submitted and the name it was submitted
under, which status and cancel read). A job's name holds a key of its submission (``queue_key``): an id counts as
this queue's only while SLURM lists it under that name, so an id SLURM gives again to another job is not ours.
One submitter per run: submitting locks the queue and each run directory around "look for a live job, submit,
record the id" (pe_tools/locks.py), and a job that finds its run directory in use by another live job leaves it
(``claim``), or waits when the holder is its own array task's earlier processes.

Batch scripts are written here, not through submitit: a batch script is a file the user can read, resubmit and
adapt, and the traps of submitit on clusters without accounting (states read UNKNOWN, waits on jobs cancelled
from outside, SIGTERM ignored) do not arise: each job writes its own state into RUN/slurm.json.

Preemption and time limits: every job asks for ``--requeue --open-mode=append --signal=B:USR1@S``. On USR1 (S
seconds before its time limit) the job requeues itself (``scontrol requeue`` of its own array task, ``job_task``:
the array's id would requeue every task of the array); SLURM then ends its processes and
starts it again, as it does after a preemption or an outside ``scontrol requeue``. A restarted job runs the same
chain: the queue's repair makes checkpoint_last.pt the newest checkpoint that reads whole, pe-train resumes from it
(train.log appended), a finished run is not trained again, and decoding and recording happen only at the last
update. A run loses at most the updates since its last checkpoint. A --time that leaves no training time after the
signal is refused (``check_time``, in SLURM's whole minutes), and a job started MAX_STALLED_STARTS times in a row on
the same checkpoint ends FAILED. The job's states, their transitions and the status word (``status_columns``) are
pe_tools/recipes/slurm_state.py's.
"""
import argparse
import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from .. import locks
from ..command_line import fail, int_at_least
from ..file_io import read_json_object, write_atomic
from . import load_table
from . import queue as local
from .slurm_state import (ACTIVE, HEARTBEAT_SECONDS, OWN_ALIVE, OWN_FINAL, TRANSITIONS, UNREADABLE, WORKING, Event,
                          Evidence, Own, Slurm, status_word, step)
from .srun import SlurmError
from .train import merge_flags, size_entry

STATE_FILE = "slurm.json"  # in each run directory: the job's id, state and restart count
JOB_LOCK = "slurm.lock"  # in each run directory: held (flock) by the job that works in it, for its whole life
SUBMIT_LOCK = "slurm-submit.lock"  # in each run directory and QUEUE.slurm/: held while a submitter submits
QUERY_SECONDS = 5  # pe-queue status waits this long for squeue or sacct, then answers from the run directories
WAIT_SECONDS = 120  # what submits or cancels waits this long for SLURM's commands (sbatch, squeue, scancel)
SIGNAL_SLACK = 30  # SLURM checks time limits every 30 s: its signal may come this much before --signal-seconds
MAX_STALLED_STARTS = 3  # a job started this many times in a row on the same checkpoint stops requeueing: FAILED
NOT_SHARED = ("/tmp", "/var/tmp", "/dev/shm", "/run")  # node-local on most clusters
SLURM_TOOLS = ("sbatch", "scontrol", "squeue", "sinfo", "scancel")
INSTALL_HINT = ("run pe-queue on a login node of your cluster (where sbatch works), or load SLURM's module "
                "(e.g. `module load slurm`); on Debian/Ubuntu the client is `apt-get install slurm-client`; "
                "--dry-run prints the batch scripts without SLURM")


# ------------------------------------------------------------------------------------------ command line
def add_run_arguments(r: argparse.ArgumentParser) -> None:
    """pe-queue run's SLURM options."""
    g = r.add_argument_group("SLURM (--slurm: one job per run, docs/cluster.md)")
    g.add_argument("--slurm", action="store_true", help="submit each run as a SLURM job instead of running it here")
    g.add_argument("--partition", help="SLURM partition (default: the cluster's default partition)")
    g.add_argument("--account", help="SLURM account to charge")
    g.add_argument("--time", metavar="LIMIT", help="time limit per job, as sbatch --time takes it (e.g. 24:00:00); "
                                                    "a run past it requeues itself and resumes")
    g.add_argument("--gpus", type=int_at_least(1), default=1, metavar="N",
                   help="GPUs (ranks) per run unless its line says gpus=N (default: 1); a recipe with --cpu gets "
                        "N CPU ranks and no GPU")
    g.add_argument("--cpus", type=int_at_least(1), default=1, metavar="N",
                   help="CPUs per rank unless the line says cpus=N (default: 1); also the torch threads of a run")
    g.add_argument("--nodes", type=int_at_least(1), default=1, metavar="N",
                   help="nodes per run unless the line says nodes=N (default: 1); must divide its GPUs")
    g.add_argument("--sbatch", action="append", default=[], metavar="ARG",
                   help="one more sbatch argument for every job, e.g. --sbatch=--qos=high (repeatable)")
    g.add_argument("--signal-seconds", type=int_at_least(60), default=300, metavar="S",
                   help="SLURM signals a job S seconds before its time limit, and the job requeues itself "
                        "(default: 300; SLURM checks time limits every 30 s, so it may signal up to 30 s earlier)")
    g.add_argument("--dry-run", action="store_true", help="with --slurm: print the batch scripts, submit nothing")


def slurm_only(a) -> Optional[str]:
    """The first SLURM option given to pe-queue run without --slurm (None if none)."""
    for flag in ("partition", "account", "time", "sbatch", "dry_run"):
        if getattr(a, flag):
            return "--" + flag.replace("_", "-")
    for flag, default in (("gpus", 1), ("cpus", 1), ("nodes", 1), ("signal_seconds", 300)):
        if getattr(a, flag) != default:
            return "--" + flag.replace("_", "-")
    return None


def add_commands(sub) -> None:
    c = sub.add_parser("cancel", help="cancel the SLURM jobs this queue submitted (scancel), and nothing else")
    c.add_argument("queue", type=Path)


# ------------------------------------------------------------------------------------------------ shapes
@dataclass(frozen=True)
class Shape:
    """What one run asks of the cluster."""
    gpus: int  # ranks of the run (world size)
    cpus: int  # CPUs per rank
    nodes: int
    cpu_only: bool  # the recipe trains with --cpu: ranks without GPUs

    @property
    def per_node(self) -> int:
        return self.gpus // self.nodes

    def sbatch_options(self) -> List[str]:
        opts = [f"--nodes={self.nodes}", f"--ntasks={self.gpus}", f"--ntasks-per-node={self.per_node}",
                f"--cpus-per-task={self.cpus}"]
        return opts + ([] if self.cpu_only else [f"--gres=gpu:{self.per_node}"])

    def describe(self) -> str:
        ranks = f"{self.gpus} {'CPU rank' if self.cpu_only else 'GPU'}{'s' if self.gpus > 1 else ''}"
        return f"{ranks} on {self.nodes} node{'s' if self.nodes > 1 else ''}, {self.cpus} CPU(s) per rank"


def run_flags(run) -> List[str]:
    table = load_table(run.recipe)
    return merge_flags(table["common"]["flags"], size_entry(table, run.size)["flags"],
                       table["method"][run.method]["flags"])


def shape_of(run, a) -> Shape:
    """The run's shape: its line's gpus=/cpus=/nodes=, else the command line's."""
    def count(name: str, default: int) -> int:
        value = run.options.get(name)
        if value is None:
            return default
        if not value.isdigit() or int(value) < 1:
            raise SlurmError(f"{run.name} (line {run.line}): {name}={value} is not a whole number >= 1")
        return int(value)

    shape = Shape(count("gpus", a.gpus), count("cpus", a.cpus), count("nodes", a.nodes), "--cpu" in run_flags(run))
    if shape.gpus % shape.nodes:
        raise SlurmError(f"{run.name} (line {run.line}): {shape.gpus} GPUs cannot be spread evenly over "
                         f"{shape.nodes} nodes; give gpus= a multiple of nodes= (e.g. gpus=8 nodes=2)")
    return shape


# -------------------------------------------------------------------------------------- the cluster's size
def _slurm(*cmd: str, what: str) -> str:
    try:
        out = subprocess.run(list(cmd), capture_output=True, text=True, timeout=WAIT_SECONDS)
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{what}: `{shlex.join(cmd)}` got no answer in {WAIT_SECONDS} s; is the controller up? "
                         f"(`scontrol ping`)") from None
    if out.returncode:
        raise SlurmError(f"{what}: `{shlex.join(cmd)}` failed: {(out.stderr or out.stdout).strip()}")
    return out.stdout


def check_cluster(partition: Optional[str]) -> dict:
    """The partition's nodes, CPUs and GPUs per node; raises SlurmError naming the fix when SLURM's tools are
    missing, the controller does not answer or the partition does not exist."""
    if lacking := [t for t in SLURM_TOOLS if not shutil.which(t)]:
        raise SlurmError(f"--slurm: {', '.join(lacking)} not found on PATH; {INSTALL_HINT}")
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=WAIT_SECONDS)
    if ping.returncode or "DOWN" in ping.stdout:
        raise SlurmError(f"--slurm: the SLURM controller does not answer (`scontrol ping`: "
                         f"{(ping.stdout + ping.stderr).strip()}); wait until it is up, or ask the cluster's admins")
    parts = [p for p in _slurm("sinfo", "-h", "-o", "%P", what="--partition").split()]
    names = [p.rstrip("*") for p in parts]
    if partition is None:
        default = [p.rstrip("*") for p in parts if p.endswith("*")]
        if not default:
            raise SlurmError(f"--partition: the cluster has no default partition; pass one of {', '.join(names)}")
        partition = default[0]
    elif partition not in names:
        raise SlurmError(f"--partition {partition}: no such partition on this cluster; its partitions: "
                         f"{', '.join(names)} (sinfo)")
    rows = _slurm("sinfo", "-h", "-N", "-p", partition, "-o", "%N|%c|%G", what=f"--partition {partition}").split()
    nodes: Dict[str, Tuple[int, int]] = {}
    for row in rows:
        name, cpus, gres = row.split("|")
        gpus = sum(int(m.group(1)) for m in re.finditer(r"gpu(?::[^:,(]+)?:(\d+)", gres))
        nodes[name] = (int(cpus), gpus)
    return {"partition": partition, "nodes": len(nodes),
            "cpus": max((c for c, _ in nodes.values()), default=0),
            "gpus": max((g for _, g in nodes.values()), default=0)}


def check_fits(run, shape: Shape, part: dict) -> None:
    p, where = part["partition"], f"{run.name} (line {run.line})"
    if shape.nodes > part["nodes"]:
        raise SlurmError(f"{where}: asks for {shape.nodes} nodes, partition {p} has {part['nodes']}; give nodes= "
                         f"at most {part['nodes']} (or --partition with more nodes)")
    if not shape.cpu_only and shape.per_node > part["gpus"]:
        raise SlurmError(f"{where}: asks for {shape.per_node} GPUs per node, partition {p}'s nodes have at most "
                         f"{part['gpus']}; give gpus= at most {part['gpus'] * part['nodes']} with enough nodes=, or "
                         f"--partition with GPUs (a recipe with --cpu runs on CPUs alone)")
    if shape.per_node * shape.cpus > part["cpus"]:
        raise SlurmError(f"{where}: asks for {shape.per_node} ranks x {shape.cpus} CPUs per node, partition {p}'s "
                         f"nodes have at most {part['cpus']} CPUs; lower cpus= or gpus=, or raise nodes=")


def not_shared(paths: Dict[str, Path]) -> Optional[str]:
    """A warning naming the paths the jobs need that lie where the nodes of a cluster usually do not share
    (/tmp and the like), or None."""
    local_paths = {}
    for what, path in paths.items():
        resolved = str(Path(path).resolve())
        if any(resolved == top or resolved.startswith(top + "/") for top in NOT_SHARED):
            local_paths.setdefault(resolved, what)
    if not local_paths:
        return None
    return (f"warning: --slurm: {len(local_paths)} path(s) the jobs need lie under {', '.join(NOT_SHARED)}, which "
            f"the nodes of a cluster usually do not share: "
            + "; ".join(f"{what} {path}" for path, what in local_paths.items())
            + ". Put them on storage every node mounts (a home or project folder): runs-dir=, into=, data= on the "
              "queue line, $PE_QUEUE_CODE_ROOT for the code")


# -------------------------------------------------------------------------------------------- submission
def submit_dir(queue_path: Path) -> Path:
    return queue_path.with_name(queue_path.name + ".slurm")


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


def load_jobs(queue_path: Path) -> List[dict]:
    f = submit_dir(queue_path) / "jobs.json"
    return json.loads(f.read_text()) if f.is_file() else []


class NoAnswer(SlurmError):
    """SLURM's controller did not answer a query (squeue failed or timed out); the message says which."""


def job_states(job_ids: Sequence[str], timeout: float = QUERY_SECONDS,
               names: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """{array task id "JOB_TASK" or job id: SLURM state} of the jobs SLURM knows: queued, running, or ended less
    than MinJobAge ago (one ``squeue -t all``); {} without squeue or when SLURM knows none of them. ``names``:
    {job id: the job name pe-queue gave it at submission (it holds the queue's key)}; a job SLURM lists under
    another name is another job that got the id since (SLURM's state lost, or its ids wrapped), and is left out.
    Raises NoAnswer when the controller does not answer within ``timeout`` seconds: nobody can then tell whether a
    job lives."""
    job_ids = sorted({j for j in job_ids if j.isdigit()})  # a state file written outside SLURM names job "-"
    if not job_ids or not shutil.which("squeue"):
        return {}
    cmd = ["squeue", "-h", "-r", "-t", "all", "-j", ",".join(job_ids), "-o", "%i|%T|%j"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise NoAnswer(f"`squeue` got no answer from SLURM's controller in {timeout:.0f} s") from None
    if out.returncode:
        if "Invalid job id" in out.stderr:  # squeue -j of a single job SLURM has forgotten
            return {}
        raise NoAnswer(f"`squeue` failed: {(out.stderr or out.stdout).strip()[:300]}")
    names = names or {}
    states = {}
    for line in out.stdout.splitlines():
        task, state, name = (line.split("|", 2) + ["", ""])[:3]  # a name is last: it may hold "|" or spaces
        if task.strip() and names.get(task.split("_")[0], name) == name:
            states[task.strip()] = state
    return states


def active(states: Dict[str, str]) -> Dict[str, str]:
    """Those of ``states`` (``job_states``) still queued or running."""
    return {job: state for job, state in states.items() if state in ACTIVE}


def live_states(job_ids: Sequence[str], names: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """``job_states`` of the jobs still queued or running, for a command that submits or cancels (it waits
    WAIT_SECONDS for the controller)."""
    return active(job_states(job_ids, WAIT_SECONDS, names))


def job_names(jobs: Sequence[dict]) -> Dict[str, str]:
    """{job id: the name pe-queue gave it} of jobs.json's records or RUN/slurm.json's (those that say it)."""
    return {str(j["job"]).split("_")[0]: j["name"] for j in jobs if j.get("job") and j.get("name")}


def queue_key(queue_path: Path) -> str:
    """The key of one submission of a queue file, in its jobs' names: a hash of the file's resolved path and the
    moment, so that a job id SLURM gives again to another job is not taken for this queue's."""
    seed = f"{Path(queue_path).resolve()}\n{time.time_ns()}\n{os.getpid()}"
    return hashlib.sha256(seed.encode()).hexdigest()[:10]


def limit_seconds(limit: str) -> Optional[int]:
    """The time limit in seconds that a job given sbatch --time LIMIT gets (MINUTES, MINUTES:SECONDS,
    HOURS:MINUTES:SECONDS, DAYS-HOURS, DAYS-HOURS:MINUTES, DAYS-HOURS:MINUTES:SECONDS): SLURM keeps time limits in
    whole minutes and rounds seconds up (2:30 gives 3 minutes); None for no limit (0, UNLIMITED, INFINITE). Raises
    SlurmError naming the forms."""
    given = given_seconds(limit)
    return None if given is None else -(-given // 60) * 60


def limit_words(limit: str) -> str:
    """``--time LIMIT (N s)``, or, where SLURM rounds it up, ``--time LIMIT (SLURM rounds it up to M min: N s)``."""
    given, gets = given_seconds(limit), limit_seconds(limit)
    if gets is None:
        return f"--time {limit} (no limit)"
    return f"--time {limit} ({gets} s)" if given == gets else \
        f"--time {limit} (SLURM rounds it up to {gets // 60} min: {gets} s)"


def given_seconds(limit: str) -> Optional[int]:
    """sbatch --time's LIMIT in seconds as written (``limit_seconds``: as SLURM gives it)."""
    text = str(limit).strip()
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text)
    if text.lower() in ("unlimited", "infinite"):
        return None
    if not m:
        raise SlurmError(f"--time {limit}: not a time limit sbatch takes; give MINUTES, HOURS:MINUTES:SECONDS or "
                         f"DAYS-HOURS:MINUTES:SECONDS (e.g. --time 48:00:00)")
    days, a, b, c = m[1], int(m[2]), int(m[3] or 0), int(m[4] or 0)
    if days is not None:
        seconds = int(days) * 86400 + a * 3600 + b * 60 + c
    elif m[4] is not None:
        seconds = a * 3600 + b * 60 + c
    else:
        seconds = a * 60 + b
    return seconds or None


def flag_value(flags: Sequence[str], flag: str) -> Optional[str]:
    return flags[flags.index(flag) + 1] if flag in flags[:-1] else None


def requeues(a) -> bool:
    """Whether the jobs requeue themselves at SLURM's signal (not with --sbatch=--no-requeue)."""
    return "--no-requeue" not in [x.strip() for x in a.sbatch]


def check_time(a, runs) -> List[str]:
    """Warnings on --time (none without it); raises SlurmError when jobs that requeue themselves would get no
    training time after SLURM's signal (--signal-seconds, up to SIGNAL_SLACK s early): they would requeue
    forever. Warns when what is left is shorter than one checkpoint interval at a run's measured speed (its
    train.log), and says which runs have no measured speed."""
    limit = limit_seconds(a.time) if a.time else None
    if limit is None:
        return []
    signal_at = a.signal_seconds + SIGNAL_SLACK
    left = limit - signal_at if requeues(a) else limit
    if left <= 0:
        raise SlurmError(f"{limit_words(a.time)} leaves no training time: each job requeues itself when SLURM "
                         f"signals it, --signal-seconds {a.signal_seconds} s before its limit and up to "
                         f"{SIGNAL_SLACK} s earlier, so it would requeue forever without training; give a --time "
                         f"of at least {signal_at // 60 + 1} minutes (SLURM's unit; e.g. --time "
                         f"{-(-(signal_at + 3600) // 60)}) or a smaller --signal-seconds (at least 60)")
    notes = []
    if limit <= signal_at:
        notes.append(f"warning: {limit_words(a.time)} is shorter than --signal-seconds {a.signal_seconds} + "
                     f"{SIGNAL_SLACK} s: SLURM's signal comes at the start, the job cannot requeue "
                     f"(--no-requeue) and trains until its limit ends it")
    unknown = []
    for run in runs:
        interval = flag_value(run_flags(run), "--save-interval-updates")
        if not interval or not interval.isdigit() or not int(interval):
            continue
        speed = local.progress(run).get("sec_per_update")
        if speed is None:
            unknown.append(run.name)
        elif int(interval) * speed > left:
            notes.append(f"warning: {run.name} (line {run.line}): one checkpoint interval (--save-interval-updates "
                         f"{interval}) takes about {int(interval) * speed:.0f} s at its measured {speed:.2f} s per "
                         f"update ({run.run_dir / 'train.log'}), longer than the {left} s of training "
                         f"{limit_words(a.time)} leaves each job: every segment would end before its next checkpoint "
                         f"and the run would not progress; give a longer --time, or a recipe with a smaller "
                         f"--save-interval-updates (docs/cluster.md, section 6)")
    if unknown:
        notes.append(f"note: {limit_words(a.time)} leaves each job {left} s of training; no measured speed for "
                     f"{len(unknown)} run(s) ({', '.join(unknown[:3])}{', ...' if len(unknown) > 3 else ''}), so "
                     f"whether that holds one checkpoint interval is not known; `pe-queue status` shows the s/update "
                     f"of a run once it trains, and a job started {MAX_STALLED_STARTS} times in a row without a new "
                     f"checkpoint stops with FAILED")
    return notes


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


def read_state(run_dir: Path) -> dict:
    """RUN/slurm.json, or {} when missing or unreadable."""
    return read_json_object(Path(run_dir) / STATE_FILE)


def state_problem(run_dir: Path) -> str:
    """Why RUN/slurm.json, which exists, does not read as a JSON object ("" when it reads, or is missing)."""
    path = Path(run_dir) / STATE_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""
    except (OSError, ValueError) as e:
        return f"{type(e).__name__}: {e}"
    try:
        obj = json.loads(text)
    except ValueError as e:
        return f"{len(text.encode())} bytes, not JSON ({e})" if text.strip() else "empty"
    return "" if isinstance(obj, dict) else "not a JSON object"


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
    if not (code / "pe_tools" / "recipes" / "slurm.py").is_file():
        return fail(f"--code {code}: no pe_tools/recipes/slurm.py there; give a copy of the project made with --pin")
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
            _save_jobs(subdir, records)
            return fail(f"sbatch {path} failed: {(out.stderr or out.stdout).strip()}; nothing more submitted")
        job = out.stdout.strip().split(";")[0]
        records.append({"job": job, "name": _name_of(path), "script": str(path), "snapshot": str(snapshot),
                        "lines": lines,
                        "snapshot_lines": {str(n): str(by_line[n].run_dir.resolve()) for n in lines},
                        "submitted": _now()})
        _save_jobs(subdir, records)
        for n in lines:  # the run's owner, for a submitter of another queue file naming the same run directory
            _write_state_file(by_line[n].run_dir, {"job": f"{job}_{n}", "name": _name_of(path),
                                                   "state": step(None, Event.SUBMIT).value,
                                                   "time": _now(), "heartbeat": time.time(),
                                                   "queue": str(queue_path.resolve())})
        print(f"[queue] submitted job {job}: {len(lines)} run(s) (lines {','.join(map(str, lines))}), each "
              f"{shape.describe()}; logs in {logs}")
    print(f"[queue] code {commit} ({code}); watch with: pe-queue status {shlex.quote(str(queue_path))}")
    return 0


def _name_of(script: Path) -> str:
    """The job name a batch script of ``_submit`` gives (its file is NAME-DIGEST.sh)."""
    return script.stem.rsplit("-", 1)[0]


def _save_jobs(subdir: Path, records: List[dict]) -> None:
    write_atomic(subdir / "jobs.json", json.dumps(records, indent=1) + "\n")


def _now() -> str:
    return datetime.now().strftime("%Y-%m-%d %H:%M:%S")


def cancel(queue_path: Path) -> int:
    """pe-queue cancel QUEUE: scancel the jobs this queue submitted (their ids in QUEUE.slurm/jobs.json) that SLURM
    lists, just before, under the name they were submitted with (it holds the queue's key): a job that got one of
    the ids since is left alone."""
    records = load_jobs(queue_path)
    jobs, names = [j["job"] for j in records], job_names(records)
    if not jobs:
        return fail(f"{queue_path}: no SLURM jobs were submitted for it ({submit_dir(queue_path) / 'jobs.json'} "
                    f"is missing); nothing to cancel")
    if not shutil.which("scancel"):
        return fail(f"scancel not found on PATH; {INSTALL_HINT}")
    try:
        live = live_states(jobs, names)
    except NoAnswer as e:
        return fail(f"{e}; nothing cancelled: try again once `scontrol ping` answers")
    ids = sorted({k.split("_")[0] for k in live})
    if not ids:
        print(f"[queue] no job of {queue_path} is queued or running")
        return 0
    out = subprocess.run(["scancel", *ids], capture_output=True, text=True, timeout=WAIT_SECONDS)
    if out.returncode:
        return fail(f"scancel {' '.join(ids)} failed: {(out.stderr or out.stdout).strip()}")
    print(f"[queue] cancelled job(s) {', '.join(ids)} ({len(live)} array task(s))")
    return 0


# ------------------------------------------------------------------------------------------------ status
def status_columns(queue_path: Path, runs, notes: Optional[List[str]] = None,
                   resuming: Optional[set] = None) -> Optional[Dict[str, List[str]]]:
    """The status table's SLURM columns (job, state, requeues), or None when the queue was not submitted. A run's
    state is the newest word on its job (pe_tools/recipes/slurm_state.py, ``status_word``), from SLURM's answer
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


def sacct_states(job_ids: Sequence[str], names: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """{JOB_TASK: state} from SLURM's accounting (sacct), {} where it is off or missing; a job recorded under
    another name than ``names`` gives its id ({job id: name}, as ``job_states``) is another job, left out."""
    if not job_ids or not shutil.which("sacct"):
        return {}
    try:
        out = subprocess.run(["sacct", "-n", "-P", "-X", "-j", ",".join(job_ids), "-o", "JobID,State,JobName"],
                             capture_output=True, text=True, timeout=QUERY_SECONDS)
    except subprocess.TimeoutExpired:
        return {}
    if out.returncode:
        return {}
    names, states = names or {}, {}
    for line in out.stdout.split("\n"):
        job, state, name = (line.split("|", 2) + ["", ""])[:3]
        if state.strip() and names.get(job.split("_")[0], name) == name:
            states[job] = state.split()[0]
    return states


def _write_state_file(run_dir: Path, data: dict) -> bool:
    """Write RUN/slurm.json; on a failure (a full or read-only disk) say so on stderr and return False: a state
    write never ends a job."""
    try:
        write_atomic(Path(run_dir) / STATE_FILE, json.dumps(data, indent=1) + "\n")
        return True
    except Exception as e:  # noqa: BLE001 - whatever it is, the job goes on
        print(f"[queue] warning: could not write {Path(run_dir) / STATE_FILE} ({type(e).__name__}: {e}); going on "
              f"without it", file=sys.stderr, flush=True)
        return False


def job_task(env=os.environ) -> str:
    """This job's id as jobs.json and status name it, and as every command the job runs on itself addresses it:
    ARRAY_TASK for an array task (SLURM gives the array's own id to one of its tasks, and a command given that id
    acts on every task of the array), else the job id."""
    return (f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}" if env.get("SLURM_ARRAY_TASK_ID")
            else env.get("SLURM_JOB_ID", "-"))


class JobState:
    """RUN/slurm.json as a job writes it: its id, its own word (slurm_state.Own, changed only by the events of
    slurm_state.TRANSITIONS) and message, its restart count, the update it resumed from, how many starts in a row
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
            return _write_state_file(self.run_dir, dict(self.fields, state=self.word, message=self.message,
                                                        time=_now(), heartbeat=time.time()))

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


# -------------------------------------------------------------------------------------------- in the job
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
    except (local.QueueError, ValueError) as e:
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


if __name__ == "__main__":
    sys.exit(main())

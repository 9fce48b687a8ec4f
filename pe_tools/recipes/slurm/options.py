"""pe-queue's SLURM command line and what it asks of the cluster: the options of pe-queue run --slurm and the cancel
command, each run's shape (ranks, CPUs, nodes: ``shape_of``), and the checks of --time against SLURM's signal
before the time limit (``check_time``)."""
import argparse
import re
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence

from ...command_line import int_at_least
from .. import load_table
from .. import queue as local
from ..srun import SlurmError
from ..train import merge_flags, size_entry
from .state import MAX_STALLED_STARTS

SIGNAL_SLACK = 30  # SLURM checks time limits every 30 s: its signal may come this much before --signal-seconds


# ------------------------------------------------------------------------------------------------ command line
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


# ------------------------------------------------------------------------------------------------------ shapes
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


# ------------------------------------------------------------------------------------------------- time limits
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

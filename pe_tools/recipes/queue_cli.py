"""pe-queue, the command: a queue file run here (pe_tools/recipes/queue/) or on SLURM (pe_tools/recipes/slurm/),
its status, its check and, on SLURM, its cancellation. ``pe-queue --help`` prints the queue's documentation."""
import argparse
import contextlib
import os
import shlex
import signal
import sys
from pathlib import Path

from ..command_line import fail, int_at_least
from ..locks import Busy, describe, hold
from . import queue as local
from .slurm import options as slurm_options, status as slurm_status, submit as slurm_submit
from .queue import CHECKOUT, Queue, QueueError, failed_step, parse_queue, pin_code, status_table


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="pe-queue", description=local.__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="train, decode and record every run of the queue (resumes)")
    r.add_argument("queue", type=Path)
    r.add_argument("-j", "--jobs", type=int_at_least(1), default=os.cpu_count() or 1,
                   help="runs at a time (default: one per CPU core; on a GPU, as many as fit)")
    r.add_argument("--threads", type=int_at_least(1), default=1, help="torch threads per run (default: 1)")
    code = r.add_mutually_exclusive_group()
    code.add_argument("--pin", default="HEAD", metavar="REV", help="train from this commit of the checkout pe-queue "
                                                                  f"runs from ({CHECKOUT}; default: HEAD)")
    code.add_argument("--code", type=Path, metavar="DIR", help="train from this copy of the code (its COMMIT file "
                                                               "names the commit)")
    r.add_argument("--rehearse", type=Path, metavar="DIR",
                   help=f"a dress rehearsal of the queue file: every run at size {local.REHEARSAL_SIZE} on a "
                        f"synthetic corpus of its pair, made in DIR/data, trained in DIR/runs and recorded in "
                        f"DIR/results, through the queue DIR/QUEUE_NAME; with --slurm each job also requeues itself "
                        f"once after its first checkpoint, as a time limit would (docs/cluster.md)")
    slurm_options.add_run_arguments(r)
    slurm_options.add_commands(sub)
    for name in ("status", "check"):
        s = sub.add_parser(name, help={"status": "one row per run: updates, validation loss, time per update, "
                                                 "estimated finish, recorded",
                                       "check": "check the queue file and stop"}[name])
        s.add_argument("queue", type=Path)
        if name == "check":
            s.add_argument("--no-data", action="store_true", help="check everything but the prepared data (a queue "
                                                                  "file written before the data, e.g. on a login node)")
    a = p.parse_args(argv)
    if a.cmd == "cancel":
        return slurm_submit.cancel(a.queue)
    if a.cmd == "run" and not a.slurm and (bad := slurm_options.slurm_only(a)):
        return fail(f"{bad} is an option of pe-queue run --slurm; add --slurm, or leave it out to run here")
    dry = a.cmd == "run" and a.slurm and a.dry_run  # a look at the batch scripts, before the data exists
    try:
        if a.cmd == "run" and a.rehearse:
            a.queue = local.rehearsal(a.queue, a.rehearse)
            print(f"[queue] rehearsal: {a.queue}", flush=True)
            if a.slurm:
                a.sbatch = [*a.sbatch, f"--export=ALL,{local.REHEARSE_ENV}=1"]
        runs = parse_queue(a.queue, data=not (getattr(a, "no_data", False) or dry))
    except QueueError as e:
        return fail(str(e))
    if dry and (warning := local.data_needed(runs)):
        print(warning, file=sys.stderr, flush=True)
    if a.cmd == "check":
        print(f"{a.queue}: {len(runs)} runs, all valid")
        return 0
    if a.cmd == "status":
        notes: list = []
        resuming: set = set()
        columns = slurm_status.status_columns(a.queue, runs, notes, resuming)
        if columns is None:  # a local queue: a failed run's note is its last step's line (SLURM's notes say more)
            notes += [f"{run.name}: {line}" for run in runs if (line := failed_step(run))]
        print(status_table(runs, columns, resuming))
        for note in notes:
            print(note)
        return 0
    if a.slurm:
        return slurm_submit.submit(a, runs, a.queue)
    try:
        code = a.code if a.code else pin_code(a.pin, CHECKOUT)
    except QueueError as e:
        return fail(str(e))
    if not (Path(code) / "pe_tools" / "recipes" / "launch.py").is_file():
        return fail(f"--code {code}: no pe_tools/recipes/launch.py there; give a copy of the project")
    lock = a.queue.with_name(a.queue.name + ".lock")
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(hold(lock, holder={"what": f"pe-queue run {a.queue}"}))
        except Busy as e:
            return fail(f"another pe-queue runs {a.queue}: {describe(e.holder)} holds {lock}; "
                        f"pe-queue status {shlex.quote(str(a.queue))} shows it")
        queue = Queue(a.queue, runs, Path(code).resolve(), a.jobs, a.threads)
        print(f"[queue] {len(runs)} runs, {a.jobs} at a time, code {queue.commit} ({queue.code})", flush=True)
        signal.signal(signal.SIGTERM, queue.stop)
        return queue.run()


if __name__ == "__main__":
    sys.exit(main())

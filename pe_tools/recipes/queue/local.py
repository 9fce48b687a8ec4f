"""The local scheduler: a queue's runs here, ``-j`` at a time, each chain under its run's writer lock."""
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List

from ...file_io import write_atomic
from ...locks import EXIT_WAIT, Busy, handed_on
from ...runs.run_dir import RunDir, command_of
from .chain import DECODES, recorded_commit, repair, run_chain
from .file import QueueError, Run
from .pin import code_commit

COMMIT_ENV = "PE_QUEUE_COMMIT"  # pe-train copies it into command.json (results.machine)
CHAIN_WAIT = EXIT_WAIT  # seconds a run's chain waits for its writer lock: a killed predecessor's steps to exit


class Queue:
    def __init__(self, path: Path, runs: List[Run], code: Path, jobs: int, threads: int, log=print):
        self.path, self.runs, self.code, self.jobs, self.threads = Path(path), runs, Path(code), jobs, threads
        self.commit, self.log = code_commit(code), log
        self.pids_file = self.path.with_name(self.path.name + ".pids")
        self.groups: Dict[str, int] = {}
        self.held: Dict[str, int] = {}  # run name -> its writer lock's descriptor, while the queue works on it
        self.lock = threading.Lock()
        self.stopping = False

    def env(self) -> dict:
        path = os.pathsep.join(p for p in (str(self.code), os.environ.get("PYTHONPATH")) if p)
        env = dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS=str(self.threads),
                   MKL_NUM_THREADS=str(self.threads), PYTHONUNBUFFERED="1")
        env[COMMIT_ENV] = self.commit
        # no current folder first on sys.path (Python >= 3.11): run from a checkout, `python -m` would import the
        # working tree's pe_tools and pe_plugin instead of the pinned copy, and so would fairseq-train beneath it
        env["PYTHONSAFEPATH"] = "1"
        env.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)
        return env

    def _save_pids(self) -> None:
        write_atomic(self.pids_file, json.dumps(self.groups, indent=1) + "\n")

    def end_orphans(self) -> None:
        """End the process groups a killed queue left running (QUEUE.pids), and wait until they are gone."""
        if not self.pids_file.is_file():
            return
        for name, pgid in json.loads(self.pids_file.read_text() or "{}").items():
            try:
                cmdline = Path(f"/proc/{pgid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "pe_tools.recipes.launch" not in cmdline:
                continue  # the number was reused by another program
            self.log(f"[queue] ending {name}'s processes left by an earlier queue (group {pgid})")
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            while Path(f"/proc/{pgid}").exists() and not _zombie(pgid):
                time.sleep(0.1)
        self.pids_file.unlink()

    def step(self, run: Run, args: List[str], log_file: Path) -> int:
        """One pe-* command of a run, from the pinned code, in a process group of its own."""
        cmd = [sys.executable, "-m", "pe_tools.recipes.launch", *args]
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(log_file, "a", encoding="utf-8") as out:
            out.write(f"[queue] {shlex.join(cmd)}\n")
            out.flush()
            held = self.held.get(run.name)  # the run's writer lock, handed on: the step works under it
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                    env=handed_on(self.env(), held) if held is not None else self.env(),
                                    pass_fds=(held,) if held is not None else ())
            with self.lock:
                self.groups[run.name] = proc.pid
                self._save_pids()
            try:
                rc = proc.wait()
            finally:
                with self.lock:
                    self.groups.pop(run.name, None)
                    self._save_pids()
            # the step's last line, whatever it printed: which step, how it ended, and where its output is
            if rc:
                where = run.run_dir / "train.log" if args[0] == "train" else log_file
                line = f"[queue] {args[0]} failed (exit {rc}): see {where}"
                self.log(f"[queue] {run.name}: {line[len('[queue] '):]}")
            else:
                line = f"[queue] {args[0]} done"
            out.write(line + "\n")
            return rc

    def process(self, run: Run) -> str:
        """Train, decode and record one run (``run_chain``) holding its writer lock (RUN/run.lock) for the whole
        chain, handed on to each step; returns its final state, "refused: ..." naming the holder (RUN/queue.log
        untouched) when another process writes the run."""
        if self.stopping:
            return "stopped"
        if recorded_commit(run) == self.commit and (run.is_recorded() or command_of(run.run_dir) is None):
            return "recorded"  # by this code, from this run directory or from one since removed
        with contextlib.ExitStack() as lock:
            try:
                held = lock.enter_context(RunDir(run.run_dir).writer(f"pe-queue run {self.path}", wait=CHAIN_WAIT))
            except Busy as e:
                return f"refused: {e}"
            with self.lock:
                self.held[run.name] = held
            try:
                return self._process(run)
            finally:
                with self.lock:
                    self.held.pop(run.name, None)

    def _process(self, run: Run) -> str:
        run_dir, queue_log = run.run_dir, run.run_dir / "queue.log"
        command = command_of(run_dir)
        if command is not None and RunDir(run_dir).last.exists():
            begun = command.commit
            if begun != self.commit:
                raise QueueError(f"{run.name} (line {run.line}): {run_dir} was begun by code {begun or 'unknown'}, "
                                 f"this queue runs {self.commit}; restart the queue with --pin {begun} to finish it "
                                 f"with its own code, or delete {run_dir} to train it again")
        if run_dir.is_dir():
            repair(run_dir, self.log)

        def step(what: str, args: List[str]) -> int:
            self.log(f"[queue] {run.name}: {what}" + (f" (log {run_dir / 'train.log'})" if args[0] == "train" else ""))
            return self.step(run, args, queue_log)

        state = run_chain(run_dir, run.pair.split("-")[1], run.train_args(), step, DECODES, run.into)
        if state != "recorded":
            return f"{state}; the steps' output is in {queue_log}"
        self.log(f"[queue] {run.name}: recorded in {run.recorded}")
        return state

    def run(self) -> int:
        self.end_orphans()
        states: Dict[str, str] = {}

        def one(run):
            try:
                states[run.name] = self.process(run)
            except QueueError as e:
                states[run.name] = f"refused: {e}"
            except Exception as e:  # noqa: BLE001 - one run's failure must not stop the others
                states[run.name] = f"failed: {type(e).__name__}: {e}"
            if not states[run.name].startswith("recorded"):
                self.log(f"[queue] {run.name}: {states[run.name]}")

        with ThreadPoolExecutor(self.jobs) as pool:
            list(pool.map(one, self.runs))
        bad = [n for n, s in states.items() if s != "recorded"]
        self.log(f"[queue] {len(states) - len(bad)} of {len(states)} runs recorded"
                 + (f"; not: {', '.join(bad)}" if bad else ""))
        return 1 if bad else 0

    def stop(self, *_):
        """SIGTERM/SIGINT: end every running step's process group, then exit."""
        self.stopping = True
        with self.lock:
            for pgid in self.groups.values():
                try:
                    os.killpg(pgid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        raise SystemExit(130)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].startswith("Z")  # the name may hold ") "
    except (OSError, IndexError):
        return True

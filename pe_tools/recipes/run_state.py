"""Where a run of pe-train stands: the trainer's lock and the one decider of a finished run (``finished``: no live
trainer holds the run, and its checkpoint_last.pt holds its --max-update), for pe-train, pe-generate, pe-record and
pe-queue's status (they import it from pe_tools.recipes.train). Standard library only.

While it trains, pe-train holds RUN/train.lock, an flock it passes to fairseq-train beneath it: the kernel releases
it when the last of them exits, however they end (kill -9 included), so no stale lock outlives a trainer. The file
names the holder (pid, host, start) for the messages; on a file system without locks (ENOLCK) a holder on this
host is known by its pid."""
import contextlib
import json
import os
import socket
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Optional

from ..checkpoint_files import updates_of
from ..file_io import read_json_object
from ..runs.identity import max_update_of  # noqa: F401  (re-exported: the command's --max-update)

try:
    import fcntl
except ImportError:  # not on Windows, where fairseq-train does not run either: no lock, no live trainer
    fcntl = None

TRAINER_LOCK = "train.lock"  # RUN/train.lock: held while a trainer runs; it names the holder (pid, host, start)
LOCK_TRIES = 200  # pe-train's attempts at the lock, 50 ms apart: 10 s for a killed predecessor to finish exiting


class TrainerBusy(RuntimeError):
    """Another live trainer holds the run; the message names it and the lock file."""


def describe_trainer(run_dir: Path, holder: dict) -> str:
    """``pid 123 on host n1 since 2026-11-28 10:00:00 (RUN/train.lock)``, with what the lock file says."""
    who = " ".join(x for x in (f"pid {holder['pid']}" if "pid" in holder else "",
                               f"on {holder['host']}" if "host" in holder else "",
                               f"since {holder['started']}" if "started" in holder else "") if x)
    return f"{who or 'a process'} ({Path(run_dir) / TRAINER_LOCK})"


def live_trainer(run_dir: Path) -> Optional[dict]:
    """The trainer holding RUN/train.lock now (what its lock file says of it, {} when unreadable), or None when no
    process holds it (none ever did, or every one has exited: the kernel releases an flock when the last process
    holding it ends, killed or not). A shared lock is tried and dropped at once; pe-train retries its exclusive one."""
    path = Path(run_dir) / TRAINER_LOCK
    if fcntl is None or not path.is_file():
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return read_json_object(path)
    except OSError:  # a file system without locks (ENOLCK): the pid, when the holder ran on this host
        holder = read_json_object(path)
        return holder if holder.get("host") == socket.gethostname() and _alive(holder.get("pid")) else None
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except (TypeError, ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def trainer_lock(run_dir: Path, tries: Optional[int] = None):
    """Hold RUN/train.lock (exclusive) while the block runs; yields its file descriptor, to pass to fairseq-train so
    that the lock lasts as long as either process. Raises TrainerBusy naming the holder when another process has it
    (``tries`` attempts 50 ms apart, default LOCK_TRIES: a ``live_trainer`` probe holds it for microseconds, and a
    trainer killed by a requeue may take a few seconds to exit)."""
    tries = tries or LOCK_TRIES
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / TRAINER_LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        for attempt in range(tries):
            try:
                if fcntl is not None:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt == tries - 1:
                    raise TrainerBusy(f"{run_dir} is being trained by {describe_trainer(run_dir, read_json_object(path))}; "
                                      f"wait for it to end (or end it), then run this again") from None
                time.sleep(0.05)
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "started": datetime.now().strftime("%Y-%m-%d %H:%M:%S")}).encode())
        yield fd
    finally:
        os.close(fd)


@dataclass
class TrainingState:
    """Where a run stands: its --max-update (``top``), the update its checkpoint_last.pt holds (``reached``: None
    when missing or cut short) and the live trainer holding it (``trainer``: None when none)."""
    run_dir: Path
    top: Optional[int]
    reached: Optional[int]
    trainer: Optional[dict]

    @property
    def trained(self) -> bool:
        """checkpoint_last.pt holds the --max-update (a trainer may still be validating or saving)."""
        return self.top is not None and (self.reached or 0) >= self.top

    @property
    def done(self) -> bool:
        return self.trained and self.trainer is None

    def why_not(self) -> str:
        """Why the run has not finished, in words ("" when it has)."""
        if self.done:
            return ""
        if self.top is None:
            return f"{self.run_dir}: its command names no --max-update"
        at = f"checkpoint_last.pt holds update {self.reached} of {self.top}" if self.reached is not None else \
            f"it has no whole checkpoint_last.pt (of {self.top} updates)"
        if self.trainer is not None:
            return f"{self.run_dir} is still training ({at}; trainer {describe_trainer(self.run_dir, self.trainer)})"
        return f"{self.run_dir} has not finished training: {at}"


def training_state(run_dir: Path, argv) -> TrainingState:
    """The state of the run in ``run_dir`` trained by ``argv`` (its fairseq-train command: the --max-update)."""
    run_dir = Path(run_dir)
    trainer = live_trainer(run_dir)  # first: a trainer that ends between the two reads leaves its last checkpoint
    return TrainingState(run_dir, max_update_of(argv), updates_of(run_dir / "checkpoint_last.pt"), trainer)


def finished(run_dir: Path, argv) -> bool:
    """Whether the run in ``run_dir`` has finished training to this argv's --max-update: no live trainer holds it
    (RUN/train.lock) and the checkpoint fairseq would resume from, checkpoint_last.pt, reads whole and holds that
    update. Not the log: a run killed after its last checkpoint and before fairseq's "done training" line (or
    before the tee wrote it) has finished, and fairseq resumed there would train one update more and overwrite the
    checkpoints; a trainer still validating or saving after its last update has not."""
    return training_state(run_dir, argv).done

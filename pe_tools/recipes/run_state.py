"""Where a run of pe-train stands: the trainer's lock and the one decider of a finished run (``finished``: no live
trainer holds the run, and its checkpoint_last.pt holds its --max-update), for pe-train, pe-generate, pe-record and
pe-queue's status (they import it from pe_tools.recipes.train). Standard library only.

While it trains, pe-train holds RUN/train.lock, a lock (pe_tools/locks.py) it passes to fairseq-train beneath it,
so it lasts as long as either process and no stale lock outlives a trainer. The file names the holder (pid, host,
start) for the messages; where the file system has no locks, that record decides (pe_tools/locks.py)."""
import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..checkpoint_files import updates_of
from ..locks import EXIT_WAIT, PAUSE, Busy, describe, hold, holder_of
from ..runs.identity import max_update_of  # noqa: F401  (re-exported: the command's --max-update)
from ..runs.run_dir import RunDir

TRAINER_LOCK = "train.lock"  # RUN/train.lock: held while a trainer runs; it names the holder (pid, host, start)
LOCK_TRIES = round(EXIT_WAIT / PAUSE)  # pe-train's attempts at its locks, PAUSE apart


class TrainerBusy(Busy):
    """Another live trainer holds the run; the message names it and the lock file."""

    def __init__(self, run_dir: Path, holder: dict, message: Optional[str] = None):
        self.path, self.holder = Path(run_dir) / TRAINER_LOCK, holder
        RuntimeError.__init__(self, message or f"{run_dir} is being trained by {describe_trainer(run_dir, holder)}; "
                                               f"wait for it to end (or end it), then run this again")


def describe_trainer(run_dir: Path, holder: dict) -> str:
    """``pid 123 on host n1 since 2026-11-28 10:00:00 (RUN/train.lock)``, with what the lock file says."""
    return f"{describe({k: v for k, v in holder.items() if k != 'what'})} ({Path(run_dir) / TRAINER_LOCK})"


def live_trainer(run_dir: Path) -> Optional[dict]:
    """The trainer holding RUN/train.lock now (what its lock file says of it, {} when unreadable), or None when no
    process holds it (none ever did, or every one has exited)."""
    return holder_of(Path(run_dir) / TRAINER_LOCK)


@contextlib.contextmanager
def trainer_lock(run_dir: Path, tries: Optional[int] = None):
    """Hold the run's writer lock (RUN/run.lock, unless a pe-queue handed it on) and RUN/train.lock while the block
    runs; yields train.lock's file descriptor, to pass to fairseq-train so that the lock lasts as long as either
    process. Raises TrainerBusy naming the holder when another process has either after ``tries`` attempts PAUSE
    apart (default LOCK_TRIES: a ``live_trainer`` probe holds it for microseconds, and a trainer killed by a requeue
    may take a few seconds to exit)."""
    run_dir = Path(run_dir)
    wait = ((tries or LOCK_TRIES) - 1) * PAUSE
    say = lambda line: print(f"[pe-train] {line}", flush=True)  # noqa: E731
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(RunDir(run_dir).writer("pe-train", wait=wait, say=say))
        except Busy as e:
            raise TrainerBusy(run_dir, e.holder, f"{run_dir} is being written by {describe(e.holder)} ({e.path}); "
                                                 f"wait for it to end (or end it), then run this again") from None
        try:
            fd = held.enter_context(hold(run_dir / TRAINER_LOCK, wait=wait, holder={"what": "pe-train"}, say=say))
        except Busy as e:
            raise TrainerBusy(run_dir, e.holder) from None
        yield fd


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

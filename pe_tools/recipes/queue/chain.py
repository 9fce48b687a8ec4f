"""A run's chain, train, decode and record, and its run directory repaired before it resumes."""
import os
import shutil
import zipfile
from pathlib import Path
from typing import Callable, List, Optional

from ...checkpoint_files import PATTERNS, numbered_checkpoints
from ...runs.run_dir import RunDir, command_of, recorded
from .. import results
from ..train import finished, size_entry
from .file import Run

# the decodes of a finished run: (pe-generate --name, --checkpoints); None is the default decode (RUN/gen/)
DECODES = ((None, 5), ("last", 1))


# -------------------------------------------------------------------------------------- run directories
def readable(path: Path) -> bool:
    """A checkpoint that reads whole: torch.save writes a zip archive, and a truncated one has no central
    directory or fails its CRC check."""
    try:
        with zipfile.ZipFile(path) as z:
            return z.testzip() is None
    except (zipfile.BadZipFile, OSError, EOFError):
        return False


def repair(run_dir: Path, log=print) -> None:
    """Make checkpoint_last.pt the newest checkpoint that reads whole (fairseq resumes from it)."""
    last = RunDir(run_dir).last
    for tmp in run_dir.glob("*.pt.tmp"):  # fairseq's own half-written numbered checkpoints
        tmp.unlink()
    good = [p for p in reversed(numbered_checkpoints(run_dir, "update")) if readable(p)]
    newest = good[0] if good else None
    last_ok = last.exists() and readable(last)
    if last.exists() and not last_ok:
        log(f"[queue] {run_dir}: {last.name} does not read whole (a kill during fairseq's copy); "
            + (f"resuming from {newest.name}" if newest else "no whole checkpoint left: training starts again"))
        last.unlink()
    best = run_dir / "checkpoint_best.pt"
    if best.exists() and not readable(best):
        best.unlink()
    if newest and (not last_ok or newest.stat().st_mtime > last.stat().st_mtime):
        tmp = last.with_name(".checkpoint_last.pt.queue")
        shutil.copyfile(newest, tmp)
        os.replace(tmp, last)


def saved_update(run_dir: Path) -> Optional[int]:
    """The update a run resumes from (None: no checkpoint): checkpoint_last.pt's, or a newer numbered checkpoint's
    (by its name), as ``repair`` would make it; not the log's last update, which may lie past the checkpoint."""
    run_dir = Path(run_dir)
    numbered = numbered_checkpoints(run_dir, "update") if run_dir.is_dir() else []
    counts = [RunDir(run_dir).reached(),
              int(PATTERNS["update"].fullmatch(numbered[-1].name)[1]) if numbered else None]
    return max((c for c in counts if c is not None), default=None)


def finished_run(run: Run) -> bool:
    """Whether ``run`` has finished training, as train.finished (the one decider) says from its command.json."""
    command = command_of(run.run_dir)
    return command is not None and bool(command.argv) and finished(run.run_dir, command.argv)


def max_update(run: Run) -> int:
    return results.max_update_of(size_entry(run.table, run.size)["flags"]) or 0


def recorded_commit(run: Run) -> Optional[str]:
    command = command_of(run.recorded) if recorded(run.into, run.name) else None
    return command.commit if command else None


# ---------------------------------------------------------------------------------------------- running
def decoded(run_dir: Path, tgt: str, name: Optional[str]) -> bool:
    """Whether the decode ``name`` (pe-generate --name; None: RUN/gen/) is newer than the run's last checkpoint."""
    hyp, last = RunDir(run_dir).decode_dir(name) / f"hyp.detok.{tgt}", RunDir(run_dir).last
    return hyp.is_file() and last.is_file() and hyp.stat().st_mtime > last.stat().st_mtime


def run_chain(run_dir: Path, tgt: str, train: List[str], step: Callable[[str, List[str]], int],
              decodes=DECODES, into: Optional[Path] = None) -> str:
    """One run's chain, as pe-queue, pe-demo and pe-length run it; each step is a pe-* command (pe-train,
    pe-generate, pe-record), run by ``step(what, args)``, which returns its exit status.

    1. train: pe-train ``train`` (it resumes from checkpoint_last.pt, and does nothing for a finished run), then
       the last checkpoint must hold the --max-update of the run's command.json;
    2. decode: pe-generate, each of ``decodes`` ((--name, --checkpoints) pairs) not newer than that checkpoint;
    3. record: pe-record into ``into``, when given.

    A run whose decodes are all newer than its last checkpoint is not trained again (a chain killed after its
    decodes). Returns "recorded" (``into`` given) or "decoded", else "failed: ..." naming the step."""
    if not all(decoded(run_dir, tgt, name) for name, _ in decodes):
        if rc := step("training", train):
            return f"failed: pe-train exited {rc} (see {run_dir / 'train.log'})"
        command = command_of(run_dir)
        argv = command.argv if command else []
        if not finished(run_dir, argv):  # the one decider (pe_tools/recipes/train.py)
            top, reached = results.max_update_of(argv), RunDir(run_dir).reached()
            return f"failed: training stopped at update {reached or 0} of {top} (see {run_dir / 'train.log'})"
        for name, n in decodes:
            if decoded(run_dir, tgt, name):
                continue  # decoded after the last update (a chain killed after this decode)
            what = "decoding " + (name or f"the average of the last {n} checkpoints")
            if rc := step(what, ["generate", str(run_dir), "--checkpoints", str(n)] + (["--name", name] if name else [])):
                return f"failed: pe-generate exited {rc}"
    if into is None:
        return "decoded"
    if rc := step("recording", ["record", str(run_dir), "--into", str(into)]):
        return f"failed: pe-record exited {rc}"
    return "recorded"

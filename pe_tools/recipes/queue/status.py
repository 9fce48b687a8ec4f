"""pe-queue status: one row per run, read from its files."""
import time
from typing import Dict, List, Optional

from ...runs.run_dir import RunDir
from .. import results, training_log
from .chain import finished_run, max_update, saved_update
from .file import Run

def progress(run: Run) -> dict:
    """What the status view shows of a run, read from its files."""
    run_dir = run.run_dir
    log = results._read(str(run_dir / "train.log"))
    command = RunDir(run_dir).command_or_none()
    s = results.training_summary(log, command.record if command else {}) if log else {}
    total = s.get("max_update") or max_update(run)
    # the checkpoint's count where the log lags behind it (a kill before the tee wrote fairseq's last lines)
    updates = max(s.get("updates", 0), RunDir(run_dir).reached() or 0)
    out = {"run": run.name, "updates": updates, "total": total, "valid_loss": s.get("valid_loss"),
           "commit": command.commit if command else None, "recorded": run.is_recorded()}
    out["saved"] = saved_update(run_dir) or 0
    times = [(r.time, r.updates) for r in training_log.records(log, "train_inner") if r.updates is not None]
    if len(times) >= 2 and times[-1][1] > times[-2][1]:
        (t0, u0), (t1, u1) = times[-2], times[-1]
        out["sec_per_update"] = (t1 - t0).total_seconds() / (u1 - u0)
    return out


# ------------------------------------------------------------------------------------------------ status
def failed_step(run: Run) -> Optional[str]:
    """What RUN/queue.log says of the run's last step when that step failed (``train failed (exit 1): see
    RUN/train.log``, as ``Queue.step`` writes it), else None: nothing ran, the last step ended well, or a step has
    begun since the failure (its command line is the log's last word of the queue's)."""
    try:
        lines = (run.run_dir / "queue.log").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    said = [line[len("[queue] "):] for line in lines if line.startswith("[queue] ")]
    return said[-1] if said and " failed (exit " in said[-1] else None


def status_table(runs: List[Run], extra: Optional[Dict[str, List[str]]] = None, resuming=()) -> str:
    """One row per run; ``extra``: more columns, {heading: one value per run} (the SLURM job's, slurm/status.py).
    The runs named in ``resuming`` (no job works on them) show the update they resume from (``saved_update``);
    "done" is train.finished's word alone."""
    extra = extra or {}
    rows = [("run", "updates", "valid loss", "s/update", "finish (est.)", "recorded", "commit", *extra)]
    for run in runs:
        p = progress(run)
        updates = p["saved"] if run.name in resuming else p["updates"]
        left = max(0, p["total"] - updates) * p["sec_per_update"] if "sec_per_update" in p else None
        eta = "done" if finished_run(run) else (
            time.strftime("%H:%M", time.localtime(time.time() + left)) if left is not None else "-")
        rows.append((run.name, f"{updates}/{p['total']}",
                     f"{p['valid_loss']:.3f}" if p["valid_loss"] is not None else "-",
                     f"{p['sec_per_update']:.2f}" if "sec_per_update" in p else "-", eta,
                     "yes" if p["recorded"] else "no", (p["commit"] or "-")[:10],
                     *(values[len(rows) - 1] for values in extra.values())))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)

"""The files of a SLURM submission and of its jobs, and their one reader and writer each: RUN/slurm.json (a job's
own word on itself: ``read_state``, ``write_state_file``), the run directory's lock files, and QUEUE.slurm/ beside
the queue file (jobs.json: every id submitted and its name; the batch scripts; logs/)."""
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import List

from ...file_io import read_json_object, write_atomic

STATE_FILE = "slurm.json"  # in each run directory: the job's id, state and restart count
JOB_LOCK = "slurm.lock"  # in each run directory: held (flock) by the job that works in it, for its whole life
SUBMIT_LOCK = "slurm-submit.lock"  # in each run directory and QUEUE.slurm/: held while a submitter submits


# ---------------------------------------------------------------------------------------------- RUN/slurm.json
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


def write_state_file(run_dir: Path, data: dict) -> bool:
    """Write RUN/slurm.json; on a failure (a full or read-only disk) say so on stderr and return False: a state
    write never ends a job."""
    try:
        write_atomic(Path(run_dir) / STATE_FILE, json.dumps(data, indent=1) + "\n")
        return True
    except Exception as e:  # noqa: BLE001 - whatever it is, the job goes on
        print(f"[queue] warning: could not write {Path(run_dir) / STATE_FILE} ({type(e).__name__}: {e}); going on "
              f"without it", file=sys.stderr, flush=True)
        return False


# ------------------------------------------------------------------------------------------------ QUEUE.slurm/
def submit_dir(queue_path: Path) -> Path:
    return queue_path.with_name(queue_path.name + ".slurm")


def load_jobs(queue_path: Path) -> List[dict]:
    f = submit_dir(queue_path) / "jobs.json"
    return json.loads(f.read_text()) if f.is_file() else []


def save_jobs(subdir: Path, records: List[dict]) -> None:
    write_atomic(subdir / "jobs.json", json.dumps(records, indent=1) + "\n")


def now() -> str:
    return datetime.now().strftime("%Y-%m-%d %H:%M:%S")

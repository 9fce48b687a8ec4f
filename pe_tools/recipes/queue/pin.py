"""Pinned code: the runs of a queue train from an exported copy of one commit (pe-queue run --pin)."""
import os
import shutil
import subprocess
from pathlib import Path

from .file import QueueError

CHECKOUT = Path(__file__).resolve().parents[3]  # the git checkout --pin reads (this pe_tools' own)


# ---------------------------------------------------------------------------------------- pinned code
def code_root() -> Path:
    return Path(os.environ.get("PE_QUEUE_CODE_ROOT") or Path.home() / ".cache" / "pe_plugin" / "code")


def pin_code(rev: str, repo: Path) -> Path:
    """Export commit ``rev`` of ``repo`` (git archive) to CODE_ROOT/COMMIT, once; returns the folder."""
    try:
        commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", f"{rev}^{{commit}}"],
                                capture_output=True, text=True, check=True).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        raise QueueError(f"--pin {rev}: not a commit of {repo} ({getattr(e, 'stderr', e)!s}); pass a commit, "
                         f"or --code DIR for a copy of the code made beforehand") from None
    dest = code_root() / commit
    if (dest / "COMMIT").is_file():
        return dest
    tmp = dest.with_name(f".{commit}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    archive = subprocess.Popen(["git", "-C", str(repo), "archive", commit], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(tmp)], stdin=archive.stdout, check=True)
    if archive.wait():
        raise QueueError(f"git archive {commit} failed in {repo}")
    (tmp / "COMMIT").write_text(commit + "\n")
    try:
        tmp.rename(dest)
    except OSError:  # another queue exported it first
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def code_commit(code: Path) -> str:
    f = Path(code) / "COMMIT"
    return f.read_text().strip() if f.is_file() else "unknown"

"""Command lines a user pastes: a folder name that runs a payload if a command line quotes it wrongly, and bash's own
reading of a line."""
import subprocess
from pathlib import Path

NASTY = "a b'c\"d;touch PWNED1;e$(touch PWNED2)f`touch PWNED3`g"  # each payload leaves a PWNED* file if run


def bash_argv(line: str, cwd: Path) -> list:
    """The argument vector bash reads from ``line`` (printf of each word, nothing run but printf)."""
    out = subprocess.run(["bash", "-c", "printf '%s\\0' " + line], cwd=cwd, capture_output=True, check=True)
    return out.stdout.decode().split("\0")[:-1]

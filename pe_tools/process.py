"""Running the fairseq command-line tools (and our own) as child processes: their output copied to a log as it
comes, without fairseq's import-time tensorboardX notice (``log_noise.PRINTED_NOTICE``). Standard library only."""
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence

from .log_noise import PRINTED_NOTICE


def tee(cmd: Sequence, log: Path, echo: bool = True, on_line: Optional[Callable[[str], None]] = None,
        env: Optional[Dict[str, str]] = None) -> int:
    """Run ``cmd`` (stderr into stdout); every line is appended to ``log`` as it comes (a resumed run appends),
    and with ``echo`` written to our stdout; ``on_line(line)`` sees each line too (e.g. to print progress).
    Returns the exit status."""
    log = Path(log)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as f, subprocess.Popen(
            [str(x) for x in cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
            env=env) as proc:
        for line in proc.stdout:
            if PRINTED_NOTICE.search(line):
                continue
            if echo:
                sys.stdout.write(line)
            f.write(line)
            f.flush()
            if on_line:
                on_line(line)
    return proc.returncode

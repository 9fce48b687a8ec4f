"""Running the fairseq command-line tools (and our own) as child processes: their output copied to a log as it
comes, without fairseq's import-time tensorboardX notice (``log_noise.PRINTED_NOTICE``); several of our tools in
one child (``mains_argv``), which imports torch and fairseq once for all of them. Standard library only."""
import importlib
import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence

from .log_noise import PRINTED_NOTICE


def tee(cmd: Sequence, log: Path, echo: bool = True, on_line: Optional[Callable[[str], None]] = None,
        env: Optional[Dict[str, str]] = None, pass_fds: Sequence[int] = ()) -> int:
    """Run ``cmd`` (stderr into stdout); every line is appended to ``log`` as it comes (a resumed run appends),
    and with ``echo`` written to our stdout; ``on_line(line)`` sees each line too (e.g. to print progress).
    ``pass_fds``: our file descriptors the child keeps open (pe-train's lock of its run). Returns the exit status."""
    log = Path(log)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as f, subprocess.Popen(
            [str(x) for x in cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
            env=env, pass_fds=tuple(pass_fds)) as proc:
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


def mains_argv(calls: Sequence) -> list:
    """The command that runs each ``(module, argv)`` of ``calls`` in order in one new interpreter, as
    ``python -m MODULE ARGV...`` would (``module.main(argv)``, ``sys.argv[0]`` the module), and ends with the
    exit status of the first that fails (the later ones do not run), else 0. Each tool's output is headed by the
    command it stands for."""
    return [sys.executable, "-m", __name__, json.dumps([[module, *map(str, argv)] for module, argv in calls])]


def exit_status(main: Callable[[list], Optional[int]], argv: list) -> int:
    """``main(argv)`` called as its console script calls it: the exit status the process would end with (what it
    returned, or SystemExit's code, as after an argument error; ``sys.exit("message")`` prints the message on
    stderr and gives 1, as the interpreter does)."""
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
        if rc is not None and not isinstance(rc, int):
            print(rc, file=sys.stderr)
            rc = 1
    return rc or 0


def run_mains(spec: str) -> int:
    """``mains_argv``'s child: ``spec`` its JSON list of [module, *argv]."""
    for module, *argv in json.loads(spec):
        print(f"== python -m {module} {shlex.join(argv)}", flush=True)
        sys.argv = [module, *argv]
        rc = exit_status(importlib.import_module(module).main, argv)
        if rc:
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(run_mains(sys.argv[1]))

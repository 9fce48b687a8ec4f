"""Results written as a benchmark goes, ``--resume`` and ``--time-budget`` (docs/benchmarks.md §Partial runs).

A benchmark names each measurement by a key (a tuple of strings and integers, e.g. (size, length, pe, round)), asks
``Progress.has(key)`` before measuring it and hands the result to ``Progress.add(key, record)``, which keeps it and
calls the benchmark's ``write(complete)`` at once: every output file is rewritten from the measurements so far,
under temporary names renamed when whole (file_io.write_all_atomic), so a run killed at any point leaves the last
measurement's files, valid and marked ``complete: false``. ``--resume`` loads the measurements of the output JSON
(refused when one of its settings differs from this command's, naming it) and skips them; ``--time-budget S`` stops
after the measurement that brings the run's time to S seconds or more, writes the partial result, and prints what
is missing with the command that completes it.
"""
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence

from ..file_io import csv_text, dumps_json, to_jsonable, write_all_atomic

PROGRAM = "pe-bench"


class ResumeError(ValueError):
    """``--resume`` cannot continue this output: the message says why (a differing setting, an unreadable file)."""


def add_args(parser) -> None:
    """The flags every long-running benchmark takes: --resume and --time-budget."""
    parser.add_argument("--resume", action="store_true",
                        help="continue the run whose output JSON is already there: the measurements it holds are "
                             "kept and skipped (refused when a setting differs)")
    parser.add_argument("--time-budget", type=float, metavar="SECONDS",
                        help="stop after the measurement that brings this run to SECONDS, write the partial result "
                             "(complete: false) and print the --resume command that completes it; exit status 0")


def resolve_device(requested: str) -> str:
    """``--device auto|cpu|cuda`` as a torch device name: auto is cuda where torch sees one. Raises ValueError when
    cuda is asked for and torch has none."""
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: CUDA is not available to torch here")
    return requested


def key_of(parts: Iterable) -> tuple:
    """A measurement's key as JSON gives it back: a tuple of plain values."""
    return tuple(json.loads(json.dumps(to_jsonable(list(parts)))))


class Progress:
    """The measurements of one run, old (``--resume``) and new, in the order of ``keys``.

    ``settings``: the settings a resumed run must share with the stored one (compared as JSON values); ``path``:
    the output JSON that ``--resume`` reads (None: nothing written, and --resume refused); ``write(complete)``: the
    benchmark's writer, called after every new measurement and by ``finish``."""

    @classmethod
    def for_args(cls, command: str, keys: Sequence, settings: Dict, path: Optional[Path], args,
                 what: str = "measurements") -> "Progress":
        """A Progress from a benchmark's parsed arguments: their --resume and --time-budget, and the argv and start
        time that pe-bench's dispatcher adds. Raises ResumeError."""
        return cls(command, keys, settings, path, resume=args.resume, time_budget=args.time_budget,
                   argv=getattr(args, "argv", None), started=getattr(args, "started", None), what=what)

    def __init__(self, command: str, keys: Sequence, settings: Dict, path: Optional[Path], resume: bool = False,
                 time_budget: Optional[float] = None, argv: Optional[List[str]] = None, what: str = "measurements",
                 started: Optional[float] = None):
        self.started = time.monotonic() if started is None else started  # time.monotonic() of the run's start
        self.command, self.what = command, what
        self.keys = [key_of(k) for k in keys]
        self.settings = to_jsonable(settings)
        self.path = Path(path) if path else None
        self.time_budget = time_budget
        self.argv = list(argv) if argv is not None else list(sys.argv[1:])
        self.records: Dict[tuple, dict] = {}
        self.stored: dict = {}  # the resumed JSON
        self.write: Callable[[bool], None] = lambda complete: None
        if time_budget is not None and time_budget < 0:
            raise ResumeError(f"--time-budget must be 0 or more seconds (got {time_budget:g})")
        if resume:
            self._load()

    # --------------------------------------------------------------------------------------------- resume
    def _load(self) -> None:
        if self.path is None:
            raise ResumeError("--resume needs the output to resume: give the same --out-dir or --json as the run "
                              "it continues")
        if not self.path.is_file():  # nothing written yet: a resumed run starts from the beginning
            print(f"{self.command}: --resume: {self.path} does not exist yet; starting from the beginning",
                  file=sys.stderr)
            return
        try:
            data = json.loads(self.path.read_text())
            stored, measurements = data["settings"], data["measurements"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ResumeError(f"--resume: {self.path} is not the JSON of a {self.command} run ({e})") from None
        for name, value in self.settings.items():
            old = stored.get(name, "(not recorded)")
            if old != value:
                raise ResumeError(
                    f"--resume: {self.path} was measured with {name} = {json.dumps(old)}, this command gives "
                    f"{name} = {json.dumps(value)}; rerun with the stored setting, or without --resume into "
                    "another output")
        wanted = set(self.keys)
        for m in measurements:
            key = key_of(m["key"])
            if key in wanted:
                self.records[key] = m
        self.stored = data
        print(f"{self.command}: --resume: {len(self.records)} of {len(self.keys)} {self.what} kept from {self.path}",
              file=sys.stderr)

    # ------------------------------------------------------------------------------------------ measuring
    def has(self, key) -> bool:
        return key_of(key) in self.records

    def get(self, key) -> Optional[dict]:
        return self.records.get(key_of(key))

    def add(self, key, record: dict) -> None:
        """Keep ``record`` (its ``key`` field set) and rewrite the outputs, partial unless every key is done."""
        key = key_of(key)
        self.records[key] = dict(to_jsonable(record), key=list(key))
        self.write(self.complete)

    @property
    def complete(self) -> bool:
        return all(k in self.records for k in self.keys)

    def measurements(self) -> List[dict]:
        """The records, in the order of the keys."""
        return [self.records[k] for k in self.keys if k in self.records]

    def missing(self) -> List[tuple]:
        return [k for k in self.keys if k not in self.records]

    def over_budget(self) -> bool:
        """True once the time budget is spent (never without one)."""
        return self.time_budget is not None and time.monotonic() - self.started >= self.time_budget

    def stop_now(self) -> bool:
        """After a measurement: stop here (budget spent and keys left)? Says so on stderr."""
        if self.complete or not self.over_budget():
            return False
        print(f"{self.command}: --time-budget {self.time_budget:g} s spent after "
              f"{time.monotonic() - self.started:.0f} s; stopping", file=sys.stderr, flush=True)
        return True

    def json_fields(self) -> dict:
        """What every output JSON carries beside its settings and results."""
        return {"complete": self.complete, "measured": len(self.records), "total": len(self.keys),
                "missing": [list(k) for k in self.missing()], "measurements": self.measurements()}

    def partial_note(self) -> str:
        """A line for the top of a partial table ("" when complete)."""
        if self.complete:
            return ""
        return (f"PARTIAL RESULT: {len(self.records)} of {len(self.keys)} {self.what} done "
                f"({len(self.keys) - len(self.records)} missing); complete it with: {self.resume_command()}")

    def resume_command(self) -> str:
        argv, skip = [], False  # this command less its --time-budget (the hint completes the run), plus --resume
        for word in self.argv:
            if skip or word.startswith("--time-budget="):
                skip = False
            elif word == "--time-budget":
                skip = True
            else:
                argv.append(word)
        if "--resume" not in argv:  # right after the benchmark's name: a trailing REMAINDER flag (--extra) would eat it
            argv.insert(1 if argv and not argv[0].startswith("-") else 0, "--resume")
        return shlex.join([PROGRAM, *argv])

    def writer(self, args, settings: Dict, started: float, report: Callable, stem: str, title: str,
               csv_skip: Iterable[str] = ()) -> Callable[[bool], None]:
        """The ``write(complete)`` of a benchmark whose ``report()`` returns (result rows, markdown): STEM.json (its
        settings with the seconds so far, the rows and this progress), STEM.csv and STEM.md under ``--out-dir``, and
        the JSON alone at ``--json``, all replaced together."""
        def write(complete: bool) -> None:
            results, text = report()
            payload = dumps_json({"settings": dict(settings, seconds=round(time.time() - started, 1)),
                                  "complete": complete, "results": results, **self.json_fields()})
            files = {}
            if args.out_dir:
                out = Path(args.out_dir)
                files.update({out / f"{stem}.json": payload,
                              out / f"{stem}.csv": csv_text(results, skip=set(csv_skip)) if results else "",
                              out / f"{stem}.md": f"# {title}" + ("" if complete else " (PARTIAL)") + "\n\n" + text})
            if args.json:
                files[Path(args.json)] = payload
            if files:
                write_all_atomic(files)

        return write

    def finish(self) -> None:
        """Write the outputs once more (settings may have changed) and, when keys are left, say which and how to
        complete them."""
        self.write(self.complete)
        if self.complete:
            return
        missing = self.missing()
        shown = ", ".join("/".join(map(str, k)) for k in missing[:6]) + (", ..." if len(missing) > 6 else "")
        then = (f"; the partial result is in {self.path}. Complete it with: {self.resume_command()}" if self.path
                else ". No output file was given, so nothing can be resumed: rerun with --out-dir or --json")
        print(f"{self.command}: incomplete: {len(self.records)} of {len(self.keys)} {self.what} done, "
              f"{len(missing)} missing ({shown}){then}", flush=True)

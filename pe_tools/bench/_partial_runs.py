"""The one writer of a benchmark's files (``write_outputs``), results written as a benchmark goes (``Progress``),
``--resume`` and ``--time-budget`` (docs/benchmarks.md §Partial runs). A benchmark names each measurement by a key
(e.g. (size, length, pe, round)), measures those ``Progress.missing``, and hands each result to ``Progress.add``, which
rewrites every output file at once, so a run killed at any point leaves valid files marked ``complete: false``.
"""
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence

from ..file_io import csv_text, dumps_json, to_jsonable, write_all_atomic
from ._common import UsageError

PROGRAM = "pe-bench"


class ResumeError(UsageError):
    """``--resume`` cannot continue this output: the message says why (a differing setting, an unreadable file)."""


def add_args(parser, stem: str, resume: bool = True) -> None:
    """The output options every benchmark shares (``--out-dir``, ``--stem``, ``--json``, ``--csv``: what
    ``write_outputs`` writes) and, with ``resume`` (a benchmark that writes as it goes), --resume and --time-budget."""
    parser.add_argument("--out-dir", help="write STEM.json (settings and results), STEM.csv, STEM.md (and a "
                        "benchmark's chart, STEM.png) here")
    parser.add_argument("--stem", default=stem, help=f"their file name stem (default: {stem})")
    parser.add_argument("--json", help="also write the JSON here (what --resume reads when given)")
    parser.add_argument("--csv", help="also write the CSV here")
    if not resume:
        return
    parser.add_argument("--resume", action="store_true",
                        help="continue the run whose output JSON is already there: the measurements it holds are "
                             "kept and skipped (refused when a setting differs)")
    parser.add_argument("--time-budget", type=float, metavar="SECONDS",
                        help="stop after the measurement that brings this run to SECONDS, write the partial result "
                             "(complete: false) and print the --resume command that completes it; exit status 0")


def output_json(args) -> Optional[Path]:
    """The JSON a run writes and ``--resume`` reads: ``--json`` when given, else STEM.json in ``--out-dir``."""
    return Path(args.json) if args.json else Path(args.out_dir) / f"{args.stem}.json" if args.out_dir else None


def write_outputs(args, data: dict, markdown: str, rows: str = "results", csv_skip: Iterable[str] = (),
                  chart: Optional[bytes] = None, charted: bool = False) -> List[Path]:
    """The one JSON writer: ``data`` as STEM.json, its ``rows`` as STEM.csv and ``markdown`` as STEM.md under
    ``--out-dir``, and one more JSON or CSV at ``--json``, ``--csv``, all replaced together
    (file_io.write_all_atomic); with ``charted``, ``chart`` as STEM.png (None: an older chart, which would not
    match, is removed). Returns the paths written."""
    payload = dumps_json(data)
    table = csv_text(data[rows], skip=set(csv_skip)) if data.get(rows) else ""
    files = {}
    if args.out_dir:
        path = {ext: Path(args.out_dir) / f"{args.stem}.{ext}" for ext in ("json", "csv", "md", "png")}
        files.update({path["json"]: payload, path["csv"]: table, path["md"]: markdown})
        if chart is not None:
            files[path["png"]] = chart
        elif charted:
            path["png"].unlink(missing_ok=True)
    files.update({Path(p): body for p, body in ((args.json, payload), (args.csv, table)) if p})
    if files:
        write_all_atomic(files)
    return list(files)


def key_of(parts: Iterable) -> tuple:
    """A measurement's key as JSON gives it back: a tuple of plain values."""
    return tuple(json.loads(json.dumps(to_jsonable(list(parts)))))


class Progress:
    """The measurements of one run, old (``--resume``) and new, in the order of ``keys``.

    ``settings``: the settings a resumed run must share with the stored one (compared as JSON values); ``path``:
    the output JSON that ``--resume`` reads (None: nothing written, and --resume refused); ``write(complete)``: the
    benchmark's writer (``writer``), called after every new measurement and by ``finish``."""

    def __init__(self, args, command: str, keys: Sequence, settings: Dict, what: str = "measurements"):
        """From a benchmark's parsed arguments: their outputs (``output_json``), --resume and --time-budget, and the
        argv and start time that pe-bench's dispatcher adds. Raises ResumeError."""
        started = getattr(args, "started", None)
        self.started = time.monotonic() if started is None else started  # time.monotonic() of the run's start
        self.command, self.what = command, what
        self.keys = [key_of(k) for k in keys]
        self.settings = to_jsonable(settings)
        self.path = output_json(args)
        self.time_budget = args.time_budget
        self.argv = [str(a) for a in getattr(args, "argv", sys.argv[1:])]
        self.records: Dict[tuple, dict] = {}
        self.stored: dict = {}  # the resumed JSON
        self.write: Callable[[bool], list] = lambda complete: []
        if self.time_budget is not None and self.time_budget < 0:
            raise ResumeError(f"--time-budget must be 0 or more seconds (got {self.time_budget:g})")
        if args.resume:
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
            if not isinstance(stored, dict) or not isinstance(measurements, list):
                raise TypeError("its settings are not an object or its measurements not a list")
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

    def stop_now(self) -> bool:
        """After a measurement: stop here (budget spent and keys left)? Says so on stderr."""
        if self.complete or self.time_budget is None or time.monotonic() - self.started < self.time_budget:
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

    def writer(self, args, report: Callable, title: str, rows: str = "results", csv_skip: Iterable[str] = (),
               chart: Optional[Callable] = None) -> Callable[[bool], List[Path]]:
        """The ``write(complete)`` of a benchmark whose ``report()`` returns (settings, result rows, markdown):
        ``write_outputs`` of the settings, the rows, this progress and the markdown under ``# title`` (and the
        ``partial_note``); ``chart(settings, rows)``, if given, draws STEM.png once the run is complete."""
        def write(complete: bool) -> List[Path]:
            settings, results, text = report()
            data = {"settings": settings, "complete": complete, rows: results, **self.json_fields()}
            markdown = f"# {title}" + ("" if complete else f" (PARTIAL)\n\n**{self.partial_note()}**") + "\n\n" + text
            return write_outputs(args, data, markdown, rows, csv_skip,
                                 chart(settings, results) if chart and complete else None, chart is not None)

        return write

    def finish(self) -> None:
        """Write the outputs once more (settings may have changed), say where, and when keys are left, which and how
        to complete them."""
        for path in self.write(self.complete):
            print(f"wrote {path}", file=sys.stderr)
        if self.complete:
            return
        missing = self.missing()
        shown = ", ".join("/".join(map(str, k)) for k in missing[:6]) + (", ..." if len(missing) > 6 else "")
        then = (f"; the partial result is in {self.path}. Complete it with: {self.resume_command()}" if self.path
                else ". No output file was given, so nothing can be resumed: rerun with --out-dir or --json")
        print(f"{self.command}: incomplete: {len(self.records)} of {len(self.keys)} {self.what} done, "
              f"{len(missing)} missing ({shown}){then}", flush=True)

"""The inputs of a report: the reference, the baseline and the systems (one or several runs each, with their
PE settings from HYP.meta.json or --meta), read and validated before anything is computed or written."""
import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from . import generate_output
from .errors import InputError


@dataclass
class System:
    name: str
    files: List[str]
    runs: List[List[str]] = field(default_factory=list)  # runs[r][i]: line i of run r
    meta: Dict[str, Any] = field(default_factory=dict)  # PE settings for the whole system
    run_meta: List[Optional[dict]] = field(default_factory=list)  # HYP.meta.json of each run, if any


@dataclass
class Inputs:
    ref_file: str
    ref: List[str]
    baseline: System
    systems: List[System]  # without the baseline
    source_file: Optional[str] = None  # --source: line-aligned with the reference, for the length buckets
    source: Optional[List[str]] = None

    def paired_baseline_run(self, run: int) -> int:
        return run if len(self.baseline.runs) > 1 else 0


def read_text(path: str) -> str:
    """The UTF-8 text of ``path``; InputError for a missing, unreadable or non-UTF-8 file."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: file not found") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise InputError(
            f"{path}: not valid UTF-8 (byte 0x{data[e.start]:02x} on line {line}, offset {e.start})"
        ) from None
    return text


def read_lines(path: str) -> List[str]:
    """Lines as sacrebleu's CLI reads them: split on '\\n' only, trailing whitespace stripped."""
    return split_lines(read_text(path), path)


def split_lines(text: str, path: str) -> List[str]:
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    if not lines:
        raise InputError(f"{path}: file is empty (0 lines)")
    return [line.rstrip() for line in lines]


def parse_named(value: str, option: str) -> Tuple[str, List[str]]:
    """``NAME=FILE[,FILE...]`` -> (NAME, [FILE, ...])."""
    name, sep, files = value.partition("=")
    paths = [f for f in files.split(",") if f]
    if not sep or not name or not paths:
        raise InputError(f"{option} {value!r}: expected NAME=FILE (several runs: NAME=FILE1,FILE2)")
    return name, paths


def read_meta(path: str) -> Dict[str, Any]:
    try:
        meta = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: metadata file not found") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{path}: not a valid UTF-8 JSON file ({e})") from None
    if not isinstance(meta, dict):
        raise InputError(f"{path}: metadata must be a JSON object, got {type(meta).__name__}")
    return meta


def load_system(value: str, option: str, n_ref: int, ref_file: str) -> System:
    name, files = parse_named(value, option)
    system = System(name, files)
    for path in files:
        text = read_text(path)
        if generate_output.is_generate_output(text):  # fairseq-generate's raw output: its hypotheses by id
            lines = generate_output.hypotheses(path, text, n_ref, ref_file)
        else:
            lines = split_lines(text, path)
        if len(lines) != n_ref:
            raise InputError(f"line counts differ: {path} has {len(lines)} lines, reference {ref_file} has {n_ref} "
                             f"lines. {line_count_hint(len(lines), n_ref)}")
        system.runs.append(lines)
        sidecar = Path(path + ".meta.json")
        system.run_meta.append(read_meta(str(sidecar)) if sidecar.is_file() else None)
    system.meta = next((m for m in system.run_meta if m is not None), {})
    return system


def line_count_hint(n: int, n_ref: int) -> str:
    """Why a system file may not have one line per reference line, and what to do."""
    if n < n_ref:
        return ("A translation of fairseq-generate that lost sentences? Without --required-batch-size-multiple 1 it "
                "drops a last batch, and --skip-invalid-size-inputs-valid-test skips long sentences: decode again "
                "without them, or pass its raw output (the H-/D- lines) as the system and pe-evaluate names the "
                "missing ids; else the file is of another test set")
    return ("Raw output of a tool with log lines in it (pass fairseq-generate's raw output as it is: pe-evaluate reads "
            "its H-/D- lines), or a file of another test set")


def load_inputs(args: argparse.Namespace) -> Inputs:
    """Read and validate every input file (after ``cli.check_options``); raise InputError before anything is
    computed or written."""
    ref = read_lines(args.ref)
    baseline = load_system(args.baseline, "--baseline", len(ref), args.ref)
    systems = [load_system(v, "--system", len(ref), args.ref) for v in args.system]
    names = [baseline.name] + [s.name for s in systems]
    for name in set(names):
        if names.count(name) > 1:
            raise InputError(f"system name {name!r} is used {names.count(name)} times")
    n_base = len(baseline.runs)
    for s in systems:
        if n_base > 1 and len(s.runs) != n_base:
            raise InputError(
                f"{s.name} has {len(s.runs)} runs but the baseline {baseline.name} has {n_base}: give the "
                "baseline one run or as many runs as each system"
            )
    by_name = {s.name: s for s in [baseline] + systems}
    for value in args.meta:
        name, _, path = value.partition("=")
        if name not in by_name or not path:
            raise InputError(f"--meta {value!r}: expected NAME=FILE.json with NAME one of {', '.join(names)}")
        by_name[name].meta = read_meta(path)
    source = read_lines(args.source) if args.source else None
    if source is not None and len(source) != len(ref):
        raise InputError(f"line counts differ: source {args.source} has {len(source)} lines, reference {args.ref} "
                         f"has {len(ref)} lines (--source must be line-aligned with --ref)")
    return Inputs(args.ref, ref, baseline, systems, args.source, source)

"""The inputs of a report: the reference, the baseline and the systems (one or several runs each, with their
PE settings from HYP.meta.json or --meta), read and validated before anything is computed or written.

Two checks make sure a table compares what it says it compares, on every input, the baseline's runs included.
Every hypothesis file must read as the reference's language (``language``: French scored against German is
refused). And each run has an identity (pe_tools.runs.identity.IDENTITY: recipe, language pair, size, updates,
changed flags, the decode's checkpoints; method and seed aside), from its meta file HYP.meta.json: its ``run`` (and
its ``checkpoints``), else, for a meta file written before it held one, what the command.json of the run's (or
recorded run's) folder says. A run whose identity differs from its baseline run's (a baseline run: from the
baseline's first), or whose label names another method than the run's (``--baseline sape=FILE`` of a rope run), is
refused, or with --allow-mismatch marked in the table. A file without a meta file (copied away from it, or
fairseq-generate's raw output) has no identity to check: it is refused, or with --allow-unchecked scored and marked
unchecked in the table."""
import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ..recipes import load_table, recipe_names
from ..runs.identity import decode_of, identity_differences, run_identity
from ..runs.run_dir import RunRecordError, command_of, load_meta
from . import generate_output
from .errors import InputError


@dataclass
class System:
    name: str
    files: List[str]
    runs: List[List[str]] = field(default_factory=list)  # runs[r][i]: line i of run r
    meta: Dict[str, Any] = field(default_factory=dict)  # PE settings for the whole system
    run_meta: List[Optional[dict]] = field(default_factory=list)  # HYP.meta.json of each run, if any
    identities: List[Optional[dict]] = field(default_factory=list)  # each run's identity (run_identity), if known
    mismatch: List[str] = field(default_factory=list)  # how its runs differ from their baseline runs (--allow-mismatch)
    unchecked: List[str] = field(default_factory=list)  # its runs without an identity (--allow-unchecked)


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
    """A meta file (pe_tools/runs/run_dir.load_meta, its one reader); InputError naming the file."""
    try:
        return load_meta(path)
    except RunRecordError as e:
        raise InputError(str(e)) from None


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
        system.identities.append(identity(path, system.run_meta[-1]))
    system.meta = next((m for m in system.run_meta if m is not None), {})
    return system


def identity(path: str, meta: Optional[dict]) -> Optional[dict]:
    """The identity of the run a hypothesis file is a decode of (module docstring), or None for a file without a
    meta file, or one whose run cannot be told (no ``run`` in it and no command.json in its folder, or in the one or
    two above it: RUN/gen/, RUN/gen/NAME/, REC/NAME/). Its ``decode`` is always the meta file's ``checkpoints``."""
    if meta is None:
        return None
    if isinstance(meta.get("run"), dict):
        decode = decode_of(meta)
        return {**meta["run"], **({"decode": decode} if decode is not None else {})}
    folder = Path(path).parent
    for where in (folder, folder.parent, folder.parent.parent):
        if (command := command_of(where)) is not None:
            try:
                return run_identity(command.record, meta)
            except (ValueError, TypeError, AttributeError):
                return None
    return None


def unknown_identity(path: str, meta: Optional[dict]) -> str:
    """Why the run of ``path`` has no identity (``identity`` gave None), in words."""
    if meta is None:
        return f"{path} has no meta file ({path}.meta.json)"
    return (f"{path}'s meta file names no run (no \"run\" in {path}.meta.json, and no command.json in its folder or "
            f"the two above it)")


def method_names() -> set:
    """Every method of the shipped recipes' tables and every encoding (``pe``) they name: a label that is one of
    these names a method."""
    names = set()
    for recipe in recipe_names():
        for method, row in load_table(recipe).get("method", {}).items():
            names |= {method, row.get("pe", method)}
    return names


def encoding_of(meta: Optional[dict]) -> Optional[str]:
    """The encoding of a pe_plugin model's signature (``pe:NAME|...`` -> NAME), or None."""
    sig = (meta or {}).get("pe_signature")
    return sig.split("|", 1)[0][len("pe:"):] if isinstance(sig, str) and sig.startswith("pe:") else None


def label_problem(label: str, run: dict, meta: Optional[dict], known: set) -> Optional[str]:
    """The run's method where ``label`` names another method (one of ``known``) than the run's method or its
    encoding; None where the label is the run's method or encoding, names no method, or the run's method is not
    known."""
    method = run.get("method")
    if not method or label not in known or label in (method, encoding_of(meta)):
        return None
    return method


# what to do about a difference in each key of a run's identity
FIX = {"decode": "decode both alike (pe-generate --checkpoints N averages the last N update checkpoints; the meta "
                 "files' \"checkpoints\" name them)"}
FIX_OTHERWISE = "compare runs of one recipe, language pair, size, update count and flags"


def check_comparable(inputs: "Inputs", allow_mismatch: bool, allow_unchecked: bool = False) -> None:
    """Every run of every system, the baseline included: one without an identity raises InputError naming it, or
    with ``allow_unchecked`` goes into the system's ``unchecked``; a label that names another method than its run's,
    and an identity that differs outside the compared keys from its baseline run's (a baseline run: from the
    baseline's first run), raise InputError naming them and the fix, or with ``allow_mismatch`` go into the
    system's ``mismatch``."""
    baseline = inputs.baseline
    everyone = [baseline] + inputs.systems
    known = method_names() | {i["method"] for s in everyone for i in s.identities if i and i.get("method")}
    for s in everyone:
        option = "--baseline" if s is baseline else "--system"
        for r, (mine, f) in enumerate(zip(s.identities, s.files)):
            if mine is None:
                why = unknown_identity(f, s.run_meta[r])
                if not allow_unchecked:
                    raise InputError(f"{s.name}: {why}: nothing tells which run it is a decode of, so it cannot be "
                                     f"checked against the other inputs (method, language pair, size, updates, flags, "
                                     f"checkpoints). Score the file pe-generate wrote, its meta file beside it, or "
                                     f"pass --allow-unchecked to score it marked unchecked in the table")
                s.unchecked.append(f"run {r + 1}: {why}")
                continue
            found = []
            if method := label_problem(s.name, mine, s.run_meta[r], known):
                if not allow_mismatch:
                    raise InputError(f"{option} {s.name}={f}: the label {s.name} names another method than its "
                                     f"run's: {f} is a decode of a {method} run (its meta file). Label each file "
                                     f"with its run's method ({option} {method}={f}), or pass --allow-mismatch to "
                                     f"score it marked in the table")
                found.append(f"labelled {s.name}, a decode of a {method} run")
            b = 0 if s is baseline else inputs.paired_baseline_run(r)
            theirs = baseline.identities[b]
            differs = [] if theirs is None or (s is baseline and r == 0) else identity_differences(mine, theirs)
            if differs and not allow_mismatch:
                keys = {d.split(" ", 1)[0] for d in differs}
                fix = "; ".join([FIX[k] for k in FIX if k in keys] + ([FIX_OTHERWISE] if keys - set(FIX) else []))
                what = (f"the baseline {s.name}'s run {r + 1} ({f}) is not comparable with its run 1"
                        if s is baseline else f"{s.name} is not comparable with the baseline {baseline.name}'s run "
                                              f"{b + 1}")
                raise InputError(f"{what} ({baseline.files[b]}): its {'; '.join(differs)}. "
                                 f"{fix[0].upper() + fix[1:]}, or pass --allow-mismatch to score it marked in the "
                                 f"table")
            found += differs
            if found:
                s.mismatch.append(f"run {r + 1} ({f}): " + "; ".join(found))


def check_languages(ref: List[str], ref_file: str, trg_lang: str, systems: List[System]) -> None:
    """Every run's hypotheses in the reference's language (``language.language_problem``), else InputError."""
    from .language import language_problem

    for s in systems:
        for f, lines in zip(s.files, s.runs):
            if problem := language_problem(lines, ref, trg_lang, f, ref_file):
                raise InputError(f"{s.name}: {problem}; score it against a reference of its own language (or "
                                 f"pass --no-language-check if the check is wrong)")


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
    if not getattr(args, "no_language_check", False):
        check_languages(ref, args.ref, args.trg_lang, [baseline] + systems)
    source = read_lines(args.source) if args.source else None
    if source is not None and len(source) != len(ref):
        raise InputError(f"line counts differ: source {args.source} has {len(source)} lines, reference {args.ref} "
                         f"has {len(ref)} lines (--source must be line-aligned with --ref)")
    inputs = Inputs(args.ref, ref, baseline, systems, args.source, source)
    check_comparable(inputs, getattr(args, "allow_mismatch", False), getattr(args, "allow_unchecked", False))
    return inputs

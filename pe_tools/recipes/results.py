"""Finished runs as small files that travel with the repository, and a recipe's results table made from them.

A run directory (RUNS/METHOD.PAIR.SIZE.seedN) holds checkpoints of about 90 MB each at Multi30k's small size:
it is not committed, and a machine that trains it may not be the one that reports it. What a comparison needs is
small, so a finished and decoded run is *recorded* (docs/evaluation.md §Recorded runs):

    pe-record RUN_DIR [--into DIR]        (scripts/launch.py record)

copies into DIR/RUN_NAME/ (default DIR: the recipe's ``results_dir``, e.g. examples/multi30k/results):
  hyp.detok.TGT             the detokenised test translations of `pe-generate`, in corpus order
  hyp.detok.TGT.meta.json   its meta file: the encoding signature and the training summary (``training_summary``)
  command.json, command.txt the resolved fairseq-train command
  train.log                 the training log's logger lines (fairseq's warnings about deprecated torch calls left out)
It refuses a run that has not finished (``train.finished``: its trainer has exited and checkpoint_last.pt holds
its --max-update), a decode whose checkpoints do not end at that last update (or made with pe-generate --partial),
and translations older than the last checkpoint. A run changed with fairseq flags after pe-train's ``--`` is not the
recipe's own: its default DIR is RUNS/recorded beside its run directory, and a committed results folder
(examples/RECIPE/results*) takes it only with --allow-changed. The folder is written in DIR/.pe-record/, where no
reader looks, and renamed into place when whole (pe_tools/runs/run_dir.py, ``publish``); pe-record holds the run's
writer lock (RUN/run.lock) meanwhile, so no other step writes the run.

    pe-report [--recipe multi30k] [--pair en-de] [--size small] --ref REF --out-dir DIR [pe-evaluate flags]

scores the recorded runs of the recipe, pair and size with pe-evaluate against the baseline encoding, in the recipe table's
method order, with the training columns (parameters, training time) from the meta files: DIR/results.md compares
every method's run of the baseline's first seed; DIR/results_seeds.md, when the baseline has several seeds, the
methods recorded with all of them (run i against the baseline's run of the same seed; mean and deviation).
A run's identity (``IDENTITY``) decides what is compared: the runs of one report are equal in every key but the
method and seed; a recorded run of the recipe, pair and size that differs from the baseline's in another key (its
updates, its changed flags) stops the report (with -- --allow-mismatch, pe-evaluate marks it in the table).
"""
import contextlib
import json
import os
import re
import shlex
from datetime import datetime
from pathlib import Path
from typing import Dict, List, Optional

from ..locks import Busy
from ..machine import cpu_name
from ..naming import BASELINE
from ..runs.run_dir import COMMAND, RunDir, RunRecordError, publish, read_command, read_meta, records
from . import training_log
from .run_state import max_update_of, training_state

SEGMENT_START = "| fairseq_cli.train | {'_name'"  # fairseq-train's first log line: its whole configuration
# pe_plugin's model summary line (pe_plugin/models/validation.py): architecture, parameters, encoding signature
PE_SUMMARY = re.compile(r"\| pe_plugin \| arch (\S+) \| params total ([\d,]+) \| pe-only ([\d,]+) \| (pe:.*)$", re.M)
INFO_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| [A-Z]+ \| ")
# fairseq-train's CUDA environment line, one per GPU rank: the GPU a run trained on
CUDA_DEVICE = re.compile(r"\| rank\s+\d+: capabilities = .*; name = (.+?)\s*$", re.M)
STOCK_POSITIONS = re.compile(r"\b(encoder_learned_pos|decoder_learned_pos|no_token_positional_embeddings)=(True|False)")


def stock_signature(log: str, arch: str) -> str:
    """The signature of a stock fairseq model: ``fairseq:ARCH|positions:KIND``, KIND from the model config that
    fairseq-train logs (the last one of a resumed run): sinusoidal (fairseq's default), learned
    (--encoder/decoder-learned-pos), none (--no-token-positional-embeddings), or ENCODER/DECODER when they differ."""
    flags = dict(STOCK_POSITIONS.findall(log))
    if flags.get("no_token_positional_embeddings") == "True":
        kind = "none"
    else:
        enc, dec = ("learned" if flags.get(f"{side}_learned_pos") == "True" else "sinusoidal"
                    for side in ("encoder", "decoder"))
        kind = enc if enc == dec else f"{enc}/{dec}"
    return f"fairseq:{arch}|positions:{kind}"


class RecordError(ValueError):
    """A run that cannot be recorded or reported; the message names the run and the fix."""


# ------------------------------------------------------------------------------------------ named decodes
# A run's default decode (pe-generate: the average of the last checkpoints) is RUN/gen/hyp.detok.TGT; a named one
# (pe-generate --name NAME, e.g. `last`: the last checkpoint alone) is RUN/gen/NAME/hyp.detok.TGT. Recorded, they
# are REC/hyp.detok.TGT and REC/NAME/hyp.detok.TGT; pe-report --decode NAME scores the named one.
DECODE_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")


def decode_name(name: str) -> str:
    """A decode's name as a command-line type: lowercase letters, digits and _, starting with a letter."""
    import argparse

    if not DECODE_NAME.fullmatch(name):
        raise argparse.ArgumentTypeError(f"{name!r}: a decode name is lowercase letters, digits and _, starting "
                                         f"with a letter (e.g. last)")
    return name


def decode_dir(run_dir: Path, name: Optional[str] = None) -> Path:
    """Where pe-generate writes decode ``name`` of a run (the default decode when None)."""
    return RunDir(run_dir).decode_dir(name)


def named_decodes(gen: Path, tgt: str) -> List[str]:
    """The named decodes under a run's gen/ (or a recorded run's folder): subfolders holding hyp.detok.TGT."""
    return sorted(p.parent.name for p in Path(gen).glob(f"*/hyp.detok.{tgt}") if DECODE_NAME.fullmatch(p.parent.name))


# ------------------------------------------------------------------------------------ training summary
def training_summary(log_text: str, command: Optional[dict] = None) -> Dict:
    """What a results table says about training, read from a fairseq-train log (all segments of a resumed run).

    params / pe_params: the model's parameters (pe_plugin's summary line; fairseq's count for a stock model);
    updates: the last update logged; train_loss: the last logged training loss (label-smoothed, base 2);
    valid_loss / best_valid_loss: the last and the best validation loss; train_seconds: the time training ran,
    summed over the log's segments (a segment runs from the configuration fairseq-train logs when it starts to
    the segment's last timestamped line), so the time between a stop and its resumption is not counted. fairseq's own ``wall`` meter
    cannot serve: a resumed run restores it stopped, and it logs 0 from then on. From ``command`` (command.json):
    arch, max_update and where it trained (threads, device); device: the GPU fairseq-train logged (its CUDA
    environment line, the last segment's), else command.json's processor."""
    s: Dict = {}
    if m := _last(PE_SUMMARY, log_text):
        s.update(arch=m[1], params=_int(m[2]), pe_params=_int(m[3]))
    elif m := _last(r"num\. shared model params: ([\d,]+)", log_text):
        s["params"] = _int(m[1])
    if (updates := training_log.last_update(log_text)) is not None:
        s["updates"] = updates
    seconds = segment_seconds(log_text)
    if seconds:
        s["train_seconds"], s["segments"] = sum(seconds), len(seconds)
    if inner := [r for r in training_log.records(log_text, "train_inner") if r.get("loss") is not None]:
        s["train_loss"] = inner[-1].get("loss")
    if valid := [r for r in training_log.records(log_text, "valid") if r.subset == "valid"]:
        s["valid_loss"] = valid[-1].get("loss")
        if valid[-1].get("best_loss") is not None:
            s["best_valid_loss"] = valid[-1].get("best_loss")
    if command:
        argv = command.get("argv", [])
        if "--arch" in argv:
            s.setdefault("arch", argv[argv.index("--arch") + 1])
        if (top := max_update_of(argv)) is not None:
            s["max_update"] = top
        s.update({k: command[k] for k in ("threads", "device") if k in command})
    if m := _last(CUDA_DEVICE, log_text):  # command.json names the processor; fairseq names the GPU it used
        s["device"] = m[1]
    return s


def segment_seconds(log_text: str) -> List[int]:
    """Seconds from each start of fairseq-train (its first line, the configuration) to the last timestamped line
    before the next start."""
    out, start, last = [], None, None
    for line in log_text.splitlines():
        if not INFO_LINE.match(line):
            continue
        t = datetime.strptime(line[:19], "%Y-%m-%d %H:%M:%S")
        if SEGMENT_START in line:
            if start is not None:
                out.append(int((last - start).total_seconds()))
            start = t
        last = t
    if start is not None:
        out.append(int((last - start).total_seconds()))
    return out


def _last(pattern, text: str):
    """The last match of ``pattern`` (a compiled pattern, or a string compiled with re.M) in ``text``, or None."""
    rx = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern, re.M)
    found = list(rx.finditer(text))
    return found[-1] if found else None


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def machine() -> Dict:
    """command.json's record of where a run trains: torch threads (OMP_NUM_THREADS) and the processor (the GPU,
    if any, is read from the training log: ``training_summary``); under pe-queue, the commit of the code it runs."""
    where = {"threads": os.environ.get("OMP_NUM_THREADS", "torch default"), "device": cpu_name()}
    if os.environ.get("PE_QUEUE_COMMIT"):
        where["commit"] = os.environ["PE_QUEUE_COMMIT"]
    return where


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


# A run's identity (IDENTITY, COMPARED, run_identity, identity_differences) lives in pe_tools.runs.identity.
from ..runs.identity import (COMPARED, IDENTITY, changes, decode_updates,  # noqa: F401,E402  (re-exported)
                             identity_differences, run_identity)


# ------------------------------------------------------------------------------------------------ record
COMMITTED = re.compile(r"results.*")  # examples/RECIPE/results*: the recorded runs a checkout commits


def committed(folder: Path) -> bool:
    """Whether ``folder`` is a committed results folder: examples/RECIPE/results* (of any checkout)."""
    p = Path(os.path.abspath(folder))
    return bool(COMMITTED.fullmatch(p.name)) and p.parent.parent.name == "examples"


def default_into(run_dir: Path, command: dict, results_dir: str) -> Path:
    """pe-record's folder without --into: the recipe's results folder for a run of the recipe's own command, else
    RUNS/recorded beside the run directory (a changed run never lands in the committed results by default)."""
    return Path(results_dir) if not changes(command) else Path(run_dir).parent / "recorded"


def record(run_dir: Path, into: Path, allow_changed: bool = False) -> Path:
    """Copy the small files of a finished, decoded run into ``into/RUN_NAME`` (module docstring), holding the run's
    writer lock (RUN/run.lock): refused (RecordError naming the holder) while another process writes the run."""
    with contextlib.ExitStack() as held:
        try:
            if Path(run_dir).is_dir():  # a missing one is not made: _record says what is missing
                held.enter_context(RunDir(run_dir).writer("pe-record"))
        except Busy as e:
            raise RecordError(str(e)) from None
        return _record(Path(run_dir), into, allow_changed)


def _record(run_dir: Path, into: Path, allow_changed: bool) -> Path:
    command = run_command(run_dir)
    if (changed := changes(command)) and committed(into) and not allow_changed:
        raise RecordError(f"{run_dir} was trained with fairseq flags after -- ({' '.join(changed)}): not the "
                          f"recipe's own run, so not for the committed results {into}; record it elsewhere "
                          f"(--into DIR; default {default_into(run_dir, command, str(into))}), or pass "
                          f"--allow-changed to record it there all the same")
    tgt = command["pair"].split("-")[1]
    gen = decode_dir(run_dir)
    hyp, meta_file = gen / f"hyp.detok.{tgt}", gen / f"hyp.detok.{tgt}.meta.json"
    decode = f"pe-generate {shlex.quote(str(run_dir))}"  # a command to paste, whatever the folder's name holds
    if not (hyp.is_file() and meta_file.is_file()):
        raise RecordError(f"{run_dir}: no {hyp.name} and {meta_file.name} in {gen}; decode it first with {decode}")
    meta = read_meta(meta_file)
    state = training_state(run_dir, command.get("argv", []))
    if not state.done:
        raise RecordError(f"{state.why_not()}; finish it (re-run its pe-train command, it resumes; or wait for its "
                          f"trainer) and decode it again with {decode}")
    log = _read(str(run_dir / "train.log"))
    training = training_summary(log, command)  # the log and command as they are now
    if training.get("updates") is None or training.get("updates") != training.get("max_update"):
        raise RecordError(f"{run_dir}: its train.log stopped at update {training.get('updates')} of "
                          f"{training.get('max_update')}, though checkpoint_last.pt holds update {state.reached}; "
                          f"the meta file's training summary would be wrong: re-run its pe-train command (it ends "
                          f"at once) or restore the log")
    last = run_dir / "checkpoint_last.pt"
    named = named_decodes(gen, tgt)
    for name in [None, *named]:
        d = decode_dir(run_dir, name)
        h = d / hyp.name
        again = decode + (f" --name {shlex.quote(name)}" if name else "")
        decoded = meta if name is None else read_meta(d / meta_file.name)
        ends = decode_updates({"checkpoints": decoded.get("checkpoints")}) if decoded.get("checkpoints") else None
        if decoded.get("partial") or ends != state.reached:
            what = ("was made with --partial" if decoded.get("partial") else
                    f"averages checkpoints ending at update {ends}" if ends is not None else
                    "names no update checkpoints in its meta file")
            raise RecordError(f"{run_dir}: the decode {h} {what}, not the run's last update {state.reached} "
                              f"(checkpoint_last.pt); decode it again with {again}{set_aside(run_dir, name)}")
        if last.exists() and last.stat().st_mtime > h.stat().st_mtime:
            raise RecordError(f"{run_dir}: {h} is older than {last.name}; decode it again with {again}"
                              f"{set_aside(run_dir, name)}")
    meta["training"] = training
    meta["run"] = run_identity(command, meta)
    files = {hyp.name: hyp.read_bytes(), meta_file.name: json.dumps(meta, indent=1) + "\n",
             COMMAND: (run_dir / COMMAND).read_bytes(),
             "train.log": "".join(ln for ln in log.splitlines(keepends=True) if INFO_LINE.match(ln))}
    for name in named:  # REC/NAME/hyp.detok.TGT and its meta file, the training summary as above
        d = decode_dir(run_dir, name)
        named_meta = read_meta(d / meta_file.name)
        named_meta["training"] = training
        named_meta["run"] = run_identity(command, named_meta)
        files[f"{name}/{hyp.name}"] = (d / hyp.name).read_bytes()
        files[f"{name}/{meta_file.name}"] = json.dumps(named_meta, indent=1) + "\n"
    if (run_dir / "command.txt").is_file():
        files["command.txt"] = (run_dir / "command.txt").read_bytes()
    return publish(into, run_dir.name, files)


def set_aside(run_dir: Path, name: Optional[str]) -> str:
    """For a named decode pe-record refuses: the move that records the run without it (pe-record records every
    decode under RUN/gen/; a folder moved out of it is neither recorded nor refused)."""
    if name is None:
        return ""
    aside = Path(run_dir) / f"{name}.not-recorded"
    return (f", or record the run without it: mv {shlex.quote(str(decode_dir(run_dir, name)))} "
            f"{shlex.quote(str(aside))}")


def run_command(run_dir: Path) -> dict:
    """RUN/command.json's record; RecordError naming the file when it is missing or unreadable."""
    try:
        return read_command(run_dir).record
    except RunRecordError as e:
        raise RecordError(str(e)) from None


# ------------------------------------------------------------------------------------------------ report
def recorded_runs(results_dir: Path, methods: List[str], pair: str, size: str, decode: Optional[str] = None,
                  recipe: Optional[str] = None, mismatch_ok: bool = False) -> Dict[str, Dict[int, Path]]:
    """{method: {seed: hypothesis file}} of the runs recorded under ``results_dir`` of one recipe, pair and size
    (their decode ``decode``, the default one when None), in the order of ``methods`` (the recipe table's), the
    baseline first. A run is selected by its ``run_identity``: the keys given here (recipe, pair, size) pick the
    runs of the report; every other key but COMPARED must be the baseline's (its first seed's), unless
    ``mismatch_ok`` (pe-evaluate --allow-mismatch marks them). Raises RecordError naming the cause: a folder that
    does not exist or holds runs of other pairs or sizes only, no baseline run, a method the table does not have,
    a missing named decode, a run that differs from the baseline's, two runs of one method and seed."""
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise RecordError(f"results folder {results_dir} does not exist; pass --results DIR, the folder pe-record "
                          f"wrote the runs into (pe-record RUN --into DIR)")
    tgt = pair.split("-")[1]
    hyp_name = f"{decode}/hyp.detok.{tgt}" if decode else f"hyp.detok.{tgt}"
    wanted = {"pair": pair, "size": size, **({"recipe": recipe} if recipe else {})}
    chosen, others = [], {}
    for folder in records(results_dir):
        c = run_command(folder)
        hyp = folder / hyp_name
        meta_file = Path(f"{hyp}.meta.json")
        meta = read_meta(meta_file if meta_file.is_file() else folder / f"hyp.detok.{tgt}.meta.json")
        ident = run_identity(c, meta)
        if any(ident.get(k) != v for k, v in wanted.items()):  # another report's run
            key = " ".join(str(ident.get(k)) for k in wanted)
            others[key] = others.get(key, 0) + 1
            continue
        if c["method"] not in methods:
            raise RecordError(f"{folder}: method {c['method']!r} is not in the recipe table "
                              f"(methods: {', '.join(methods)}); remove the folder or restore the entry")
        if not hyp.is_file():
            raise RecordError(f"{folder}: no decode {decode!r} ({hyp_name}); decode the run with "
                              f"pe-generate RUN --name {decode} and record it again, or report without --decode")
        chosen.append((ident, hyp))
    what = " ".join(str(v) for v in wanted.values())
    if not chosen:
        held = "; ".join(f"{k} ({n} runs)" for k, n in sorted(others.items())) or "no recorded run"
        raise RecordError(f"{results_dir} holds no recorded run of {what} ({', '.join(wanted)}); it holds: {held}. "
                          f"Pass the --pair and --size (and --recipe) of its runs, or the --results folder of "
                          f"{what}")
    base = [ident for ident, _ in chosen if ident["method"] == BASELINE]
    if not base:
        raise RecordError(f"{results_dir}: no recorded {BASELINE} run for {pair} {size} (the baseline of the "
                          f"table); record one with pe-record RUN_DIR")
    base = min(base, key=lambda ident: ident["seed"])
    found: Dict[str, Dict[int, Path]] = {}
    for ident, hyp in chosen:
        if (differs := identity_differences(ident, base)) and not mismatch_ok:
            raise RecordError(f"{hyp.parent} differs from the baseline's run ({BASELINE} seed {base['seed']}) in "
                              f"{'; '.join(differs)}: not comparable; remove it from {results_dir}, or pass "
                              f"-- --allow-mismatch to compare it marked in the table")
        if (seed := ident["seed"]) in found.get(ident["method"], {}):
            raise RecordError(f"{hyp.parent} and {found[ident['method']][seed].parent} are both {ident['method']} "
                              f"seed {seed} of {what}; keep one")
        found.setdefault(ident["method"], {})[seed] = hyp
    order = [BASELINE] + [m for m in methods if m != BASELINE]
    return {m: dict(sorted(found[m].items())) for m in order if m in found}


def describe_runs(runs: Dict[str, Dict[int, Path]]) -> List[str]:
    """One line per run of ``recorded_runs``: method, seed, the updates its decode stands for, and its folder."""
    lines = []
    for method, seeds in runs.items():
        for seed, hyp in seeds.items():
            meta = read_meta(f"{hyp}.meta.json")
            updates = decode_updates(meta)
            lines.append(f"  {method} seed {seed}: {updates if updates is not None else '?'} updates ({hyp})")
    return lines


def tables(runs: Dict[str, Dict[int, Path]]) -> Dict[str, Dict[str, List[Path]]]:
    """The comparisons a report makes, {prefix: {system: [hypothesis files]}}, the baseline first in each:
    ``results``: every method's run of the baseline's first seed, each tested against that baseline run;
    ``results_seeds`` (when the baseline has several seeds): the methods recorded with every seed of the
    baseline, run i tested against the baseline's run of the same seed."""
    base = runs[BASELINE]
    first = min(base)
    out = {"results": {m: [r[first]] for m, r in runs.items() if first in r}}
    seeds = {m: [r[seed] for seed in base] for m, r in runs.items() if set(base) <= set(r)}
    if len(base) > 1 and len(seeds) > 1:
        out["results_seeds"] = seeds
    return out


def evaluate_argv(systems: Dict[str, List[Path]], ref: Path, tgt: str, out_dir: Path, prefix: str,
                  extra=()) -> List[str]:
    """pe-evaluate's arguments for one of ``tables``: the first system is the baseline."""
    names = list(systems)
    argv = ["--ref", str(ref), "--trg-lang", tgt, "--out-dir", str(out_dir), "--prefix", prefix,
            "--baseline", f"{names[0]}={','.join(map(str, systems[names[0]]))}"]
    for name in names[1:]:
        argv += ["--system", f"{name}={','.join(map(str, systems[name]))}"]
    return argv + list(extra)

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
It refuses a run that has not reached its --max-update or whose translations are older than its last checkpoint.
The folder is written under a temporary name and renamed when whole.

    pe-report [--recipe multi30k] [--pair en-de] [--size small] --ref REF --out-dir DIR [pe-evaluate flags]

scores the recorded runs of the pair and size with pe-evaluate against the baseline encoding, in the recipe table's
method order, with the training columns (parameters, training time) from the meta files: DIR/results.md compares
every method's run of the baseline's first seed; DIR/results_seeds.md, when the baseline has several seeds, the
methods recorded with all of them (run i against the baseline's run of the same seed; mean and deviation).
"""
import json
import os
import re
import shutil
from datetime import datetime
from pathlib import Path
from typing import Dict, List, Optional

from ..file_io import write_atomic
from ..machine import cpu_name
from ..naming import BASELINE
from . import training_log

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
    return Path(run_dir) / "gen" / name if name else Path(run_dir) / "gen"


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


def max_update_of(argv) -> Optional[int]:
    """The --max-update of a fairseq-train argv (the last one wins), or None."""
    flags = [i for i, x in enumerate(argv) if x == "--max-update"]
    return int(argv[flags[-1] + 1]) if flags else None


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


# ------------------------------------------------------------------------------------------------ record
def record(run_dir: Path, into: Path) -> Path:
    """Copy the small files of a finished, decoded run into ``into/RUN_NAME`` (module docstring)."""
    run_dir, command = Path(run_dir), run_command(Path(run_dir))
    tgt = command["pair"].split("-")[1]
    gen = run_dir / "gen"
    hyp, meta_file = gen / f"hyp.detok.{tgt}", gen / f"hyp.detok.{tgt}.meta.json"
    if not (hyp.is_file() and meta_file.is_file()):
        raise RecordError(f"{run_dir}: no {hyp.name} and {meta_file.name} in {gen}; decode it first with "
                          f"pe-generate {run_dir}")
    meta = json.loads(meta_file.read_text(encoding="utf-8"))
    log = _read(str(run_dir / "train.log"))
    training = training_summary(log, command)  # the log and command as they are now
    if training.get("updates") is None or training.get("updates") != training.get("max_update"):
        raise RecordError(f"{run_dir}: training stopped at update {training.get('updates')} of "
                          f"{training.get('max_update')}; finish it (re-run its pe-train command, it resumes) "
                          f"and decode it again with pe-generate {run_dir}")
    last = run_dir / "checkpoint_last.pt"
    named = named_decodes(gen, tgt)
    for name in [None, *named]:
        h = decode_dir(run_dir, name) / hyp.name
        if last.exists() and last.stat().st_mtime > h.stat().st_mtime:
            again = f"pe-generate {run_dir}" + (f" --name {name}" if name else "")
            raise RecordError(f"{run_dir}: {h} is older than {last.name}; decode it again with {again}")
    meta["training"] = training
    files = {hyp.name: hyp.read_bytes(), meta_file.name: json.dumps(meta, indent=1) + "\n",
             "command.json": (run_dir / "command.json").read_bytes(),
             "train.log": "".join(ln for ln in log.splitlines(keepends=True) if INFO_LINE.match(ln))}
    for name in named:  # REC/NAME/hyp.detok.TGT and its meta file, the training summary as above
        d = decode_dir(run_dir, name)
        named_meta = json.loads((d / meta_file.name).read_text(encoding="utf-8"))
        named_meta["training"] = training
        files[f"{name}/{hyp.name}"] = (d / hyp.name).read_bytes()
        files[f"{name}/{meta_file.name}"] = json.dumps(named_meta, indent=1) + "\n"
    if (run_dir / "command.txt").is_file():
        files["command.txt"] = (run_dir / "command.txt").read_bytes()
    dest = Path(into) / run_dir.name
    tmp, old = dest.with_name(f".{dest.name}.tmp{os.getpid()}"), dest.with_name(f".{dest.name}.old{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        for name, data in files.items():
            write_atomic(tmp / name, data)
        if dest.exists():
            dest.rename(old)
        tmp.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return dest


def run_command(run_dir: Path) -> dict:
    path = run_dir / "command.json"
    if not path.is_file():
        raise RecordError(f"{run_dir} has no command.json; is it a run directory of pe-train?")
    return json.loads(path.read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------------------------ report
def recorded_runs(results_dir: Path, methods: List[str], pair: str, size: str,
                  decode: Optional[str] = None) -> Dict[str, Dict[int, Path]]:
    """{method: {seed: hypothesis file}} of the runs recorded under ``results_dir`` for one pair and size (their
    decode ``decode``, the default one when None), in the order of ``methods`` (the recipe table's), the baseline
    first. Raises RecordError when the baseline has no run, a recorded run names a method the table does not have,
    or lacks the named decode."""
    tgt, found = pair.split("-")[1], {}
    hyp_name = f"{decode}/hyp.detok.{tgt}" if decode else f"hyp.detok.{tgt}"
    for cmd_file in sorted(Path(results_dir).glob("*/command.json")):
        c = json.loads(cmd_file.read_text(encoding="utf-8"))
        if (c.get("pair"), c.get("size")) != (pair, size):
            continue
        if c["method"] not in methods:
            raise RecordError(f"{cmd_file.parent}: method {c['method']!r} is not in the recipe table "
                              f"(methods: {', '.join(methods)}); remove the folder or restore the entry")
        hyp = cmd_file.parent / hyp_name
        if not hyp.is_file():
            raise RecordError(f"{cmd_file.parent}: no decode {decode!r} ({hyp_name}); decode the run with "
                              f"pe-generate RUN --name {decode} and record it again, or report without --decode")
        found.setdefault(c["method"], {})[int(c["seed"])] = hyp
    if BASELINE not in found:
        raise RecordError(f"{results_dir}: no recorded {BASELINE} run for {pair} {size} (the baseline of the "
                          f"table); record one with pe-record RUN_DIR")
    order = [BASELINE] + [m for m in methods if m != BASELINE]
    return {m: dict(sorted(found[m].items())) for m in order if m in found}


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

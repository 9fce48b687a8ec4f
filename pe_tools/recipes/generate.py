"""pe-generate: decode one run of pe-train as the paper does. It averages the last ``--checkpoints`` update
checkpoints (pe_tools.average), decodes with beam 4, lenpen 0.6 and max length 1 x source + 50, and writes
RUN/gen/hyp.detok.TGT and ref.detok.TGT in the corpus order, with hyp.detok.TGT.meta.json (the encoding signature,
the training summary, the run's identity and the sentences beyond the model's positions) for pe-evaluate.
It decodes a finished run only (``train.finished``: its trainer has exited and checkpoint_last.pt holds its
--max-update); ``--partial`` decodes any other, and its meta file says so (``partial``), which pe-record refuses.
A finished run whose newest update checkpoint is not its last update (a --max-update that is not a multiple of
--save-interval-updates) is decoded with a warning: pe-record refuses that decode too."""
import contextlib
import io
import json
import logging
import re
import shlex
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Callable, Optional, Tuple

from ..checkpoint_files import PATTERNS, last_checkpoints
from ..command_line import fail
from ..fairseq_plugin import plugin_dir
from ..file_io import write_atomic
from ..naming import is_pe_arch
from ..runs.run_dir import RunRecordError, read_command, writes_run
from . import results, training_log
from .train import cuda, training_state

# the paper's decoding settings
DECODE_FLAGS = ["--beam", "4", "--lenpen", "0.6", "--max-len-a", "1", "--max-len-b", "50"]
# its batches: fairseq 0.12's batch_by_size drops a last batch whose size is not a multiple of
# --required-batch-size-multiple (default 8): 3 of newstest2014's 3003 sentences would be lost
DECODE_BATCH = ["--batch-size", "128", "--required-batch-size-multiple", "1"]
# pe-generate's progress line: with the first batch written this many seconds of decoding after the last line
PROGRESS_SECONDS = 30


def generate(a) -> int:
    """``pe-generate`` with the parsed arguments ``a``; returns the exit status. A run with no update checkpoint yet,
    or an unfinished one without --partial, is told where its training stands before any lock is asked for (its
    live trainer holds the run's writer lock); a --partial decode of an unfinished run runs beside that trainer."""
    run_dir = Path(a.run_dir)
    try:
        meta = read_command(run_dir).record
    except RunRecordError as e:
        return fail(str(e))
    try:  # the parser refuses --checkpoints < 1 already
        last_checkpoints(run_dir, a.checkpoints, "update")
    except ValueError as e:
        return fail(f"--checkpoints: {e}")
    if not last_checkpoints(run_dir, 1, "update"):
        return fail(no_checkpoint_yet(run_dir, meta))
    partial = unfinished(run_dir, meta)
    if partial and not getattr(a, "partial", False):
        return fail(f"{partial['why']}. A decode now would not be the run's result; finish it (re-run its pe-train "
                    f"command, it resumes; or wait for its trainer), or pass --partial to decode it all the same "
                    f"(pe-record refuses such a decode)")
    # a finished run stays finished under its writer lock (pe-train takes it too); an unfinished one's live
    # trainer holds that lock
    return decode_beside_the_trainer(a) if partial else decode(a)


@writes_run("pe-generate --partial", beside_the_trainer=True)
def decode_beside_the_trainer(a) -> int:
    """A --partial decode of an unfinished run: without the run's writer lock, which a live trainer holds (the decode
    writes no result that pe-record takes), under the run's decode lock alone."""
    return _decode(a)


@writes_run("pe-generate", decodes=True)
def decode(a) -> int:
    """pe-generate's decode of the run ``a.run_dir``, holding the run's writer lock and its decode lock."""
    return _decode(a)


def _decode(a) -> int:
    """The decode of the run ``a.run_dir``, its locks held."""
    run_dir = Path(a.run_dir)
    meta = read_command(run_dir).record  # read again under the lock
    data, (src, tgt) = Path(a.data or meta["data"]), meta["pair"].split("-")
    paths = [str(p) for p in last_checkpoints(run_dir, a.checkpoints, "update")]  # a count >= 1 (generate)
    if not paths:
        return fail(no_checkpoint_yet(run_dir, meta))
    if len(paths) < a.checkpoints:
        print(f"warning: averaging {len(paths)} checkpoints, fewer than the {a.checkpoints} asked for", file=sys.stderr)
    partial = unfinished(run_dir, meta)
    if not partial and (short := short_of_the_end(run_dir, meta, paths)):
        print(f"warning: {short}; pe-record will refuse this decode", file=sys.stderr)
    if partial:
        print(f"warning: --partial: {partial['why']}; decoding checkpoints up to {Path(paths[-1]).name}",
              file=sys.stderr)
    out = results.decode_dir(run_dir, getattr(a, "name", None))
    out.mkdir(parents=True, exist_ok=True)
    avg = out / f"checkpoint.avg{len(paths)}.pt"
    if rc := average_into(paths, avg):
        return rc
    limits = check_positions(avg, data, a.subset, src, tgt, a.pe_beyond_max)
    if limits is None:
        return 2
    cmd = [sys.executable, "-m", "fairseq_cli.generate", str(data), "--user-dir", plugin_dir(),
           "--path", str(avg), "--gen-subset", a.subset, "--source-lang", src, "--target-lang", tgt,
           *DECODE_FLAGS, *DECODE_BATCH, "--remove-bpe"] + (["--fp16"] if cuda() else ["--cpu"])
    from pe_plugin.decode_limits import STOCK

    if a.pe_beyond_max == "clamp" and limits["pe"] != STOCK:  # every sentence is translated, whatever its length
        cmd += ["--model-overrides", "{'pe_beyond_max': 'clamp'}"]
    print(shlex.join(cmd), flush=True)
    rc, text = fairseq_generate(cmd[3:], total=limits.get("sentences"))
    write_atomic(out / f"generate.{a.subset}.out", text)
    if rc:
        return rc
    count_long_hypotheses(text, limits)
    extra = {"positions_beyond_max": limits, "checkpoints": [Path(p).name for p in paths]}
    return write_outputs(text, out, tgt, run_dir / "train.log", a.no_detok,
                         {**extra, **({"partial": partial} if partial else {})}, meta)


def no_checkpoint_yet(run_dir: Path, command: dict) -> str:
    """Why a run has no update checkpoint to decode: its command saves none (no --save-interval-updates), or it
    has not reached its first one yet: still training (at the update its train.log last names), or not training
    (never started, or stopped before it)."""
    argv = [str(x) for x in command.get("argv", [])]
    flags = [i for i, x in enumerate(argv[:-1]) if x == "--save-interval-updates"]
    interval = int(argv[flags[-1] + 1]) if flags else 0
    if interval <= 0:
        return f"{run_dir} has no update checkpoints checkpoint_E_U.pt (train with --save-interval-updates)"
    log = run_dir / "train.log"
    at = training_log.last_update(log.read_text(encoding="utf-8", errors="replace")) if log.is_file() else None
    state = training_state(run_dir, argv)
    first = f"its first update checkpoint (update {interval}, --save-interval-updates {interval})"
    if state.trainer is not None:
        where = (f"training is at update {at}" + (f" of {state.top}" if state.top else "") if at is not None else
                 "training has started and logged no update yet")
        return (f"{run_dir} has no checkpoint yet: {where} ({log}), before {first}; decode it once that is saved "
                f"(pe-generate --partial decodes a run before its end)")
    if at is None:
        return (f"{run_dir} has no checkpoint yet: its training has not started ({log} names no update), and "
                f"{first} comes after it starts. Start it with its pe-train command (command.txt)")
    return (f"{run_dir} has no checkpoint yet: its training stopped at update {at}, before {first}. Run its "
            f"pe-train command again (command.txt)")


def unfinished(run_dir: Path, command: dict) -> dict:
    """{} for a finished run (``train.finished``); else {"why": in words, "updates": checkpoint_last.pt's update,
    "max_update": the run's}, what the meta file of a --partial decode records."""
    state = training_state(run_dir, command.get("argv", []))
    return {} if state.done else {"why": state.why_not(), "updates": state.reached, "max_update": state.top}


def short_of_the_end(run_dir: Path, command: dict, paths) -> str:
    """Why the newest of the averaged checkpoints ``paths`` is not the run's last update, or ""."""
    reached = training_state(run_dir, command.get("argv", [])).reached
    m = PATTERNS["update"].fullmatch(Path(paths[-1]).name)
    if m and int(m[1]) == reached:
        return ""
    return (f"{run_dir}: its newest update checkpoint, {Path(paths[-1]).name}, is not its last update {reached} "
            f"(checkpoint_last.pt): its --max-update is not a multiple of --save-interval-updates")


class DecodeProgress(io.StringIO):
    """fairseq-generate's stdout, kept whole, that counts the sentences decoded (its ``H-`` lines, written a batch at a
    time) and prints ``[pe-generate] decoded 640 of 1014 sentences (63%) in 32 s`` on stderr ``every`` seconds
    (default PROGRESS_SECONDS) of decoding: when a batch comes that long or more after the last line (or the start),
    and, inside ``ticking``, from a thread while one batch takes longer. ``clock``: seconds (time.monotonic; a fake
    one in tests)."""

    def __init__(self, total: int, every: Optional[float] = None, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.total, self.clock, self.done = total, clock, 0
        self.every = PROGRESS_SECONDS if every is None else every
        self.start = self.last = clock()
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            self.done += sum(1 for line in text.split("\n") if line.startswith("H-"))
        self.tick()
        return super().write(text)

    def tick(self) -> None:
        """The progress line, when ``every`` seconds or more have passed since the last one (or the start)."""
        with self._lock:
            if (now := self.clock()) - self.last >= self.every:
                self.last = now
                print(f"[pe-generate] decoded {self.done} of {self.total} sentences "
                      f"({100 * self.done / self.total:.0f}%) in {now - self.start:.0f} s", file=sys.stderr, flush=True)

    @contextlib.contextmanager
    def ticking(self):
        """While the block runs, a thread ticks whenever the next line is due, so that a batch that takes longer than
        ``every`` seconds (a large model, long sentences) does not leave the user without a line."""
        stop = threading.Event()

        def run():
            while not stop.wait(max(0.0, self.every - (self.clock() - self.last))):
                self.tick()

        thread = threading.Thread(target=run, name="pe-generate progress", daemon=True)
        if self.every > 0:
            thread.start()
        try:
            yield self
        finally:
            stop.set()
            if thread.is_alive():
                thread.join()


def fairseq_generate(args, total: Optional[int] = None) -> Tuple[int, str]:
    """``python -m fairseq_cli.generate ARGS`` in this process: its parser and main, untouched. torch, fairseq and the
    plugin are imported already (the average and the position check above need them), where a child process
    imported them again (seconds per decode). Returns its exit status and what it prints on stdout (the hypotheses
    and its scores); with ``total``, the sentences of the split, a progress line every PROGRESS_SECONDS of decoding
    (``DecodeProgress``). Its log lines go where this process logs, to stderr as in a process of its own (importing
    fairseq configures the root logger, so fairseq-generate's ``logging.basicConfig`` adds nothing); a handler its
    basicConfig adds to a bare root logger is removed after it, with the root logger's level."""
    from fairseq_cli import generate as fairseq_cli_generate

    root, out, argv = logging.getLogger(), io.StringIO() if total is None else DecodeProgress(total), sys.argv
    handlers, level = root.handlers[:], root.level
    sys.argv = ["fairseq-generate", *map(str, args)]
    try:
        with contextlib.redirect_stdout(out), out.ticking() if total is not None else contextlib.nullcontext():
            fairseq_cli_generate.cli_main()
        rc = 0
    except SystemExit as e:  # argparse's errors (already printed on stderr), or an exit inside fairseq
        rc = e.code if isinstance(e.code, int) else int(e.code is not None)
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
    except Exception:  # noqa: BLE001 - a failing decode ends pe-generate as the child process's traceback did
        traceback.print_exc()
        rc = 1
    finally:
        sys.argv = argv
        root.handlers[:] = handlers
        root.setLevel(level)
    return rc, out.getvalue()


def average_into(paths, avg: Path) -> int:
    """pe-average of ``paths`` into ``avg``, in this process: it imports torch and fairseq, which the decode's checks
    below import anyway, where a process of its own imported them a second time. Its errors end pe-generate."""
    from ..average import main as average_main

    try:
        return average_main(["--inputs", *paths, "--output", str(avg)])
    except SystemExit as e:  # the message names the checkpoint and the fix, as pe-average prints it
        print(e, file=sys.stderr)
        return e.code if isinstance(e.code, int) else 1


def check_positions(checkpoint: Path, data: Path, subset: str, src: str, tgt: str, mode: str):
    """Before decoding: the sentences of ``subset`` the checkpoint has no positions for (LAPE, PosNet's L_max;
    pe_plugin/encoding_parts/limits.py). ``error``: print an error naming them and return None (nothing is decoded);
    ``clamp``: warn naming them (they are translated with positions beyond the limit reusing the last row).
    Returns what the meta file records."""
    from pe_plugin.decode_limits import beyond, checkpoint_limits, describe, split_sizes

    lim = checkpoint_limits(str(checkpoint), str(data))
    try:
        src_sizes, tgt_sizes = split_sizes(str(data), subset, src, tgt)
    except FileNotFoundError as e:
        fail(str(e))
        return None
    n = len(src_sizes)
    if mode == "error":  # what fairseq-generate checks, sources and references, before it decodes
        ids = sorted(set(beyond(src_sizes, lim.fairseq[0])) | set(beyond(tgt_sizes, lim.fairseq[1])))
        if ids:
            label = {i: f"{src_sizes[i]} source" + ("" if tgt_sizes is None else f", {tgt_sizes[i]} reference")
                        + " tokens" for i in ids}
            fail(f"{len(ids)} of {n} {subset} sentences are longer than the model's positions "
                   f"(source {lim.fairseq[0]}, target {lim.fairseq[1]}: --max-source/target-positions and pe "
                   f"{lim.pe}'s limits), sentence ids {describe(ids, label)}. Nothing was decoded (fairseq-generate "
                   f"would stop at the first; its --skip-invalid-size-inputs-valid-test would drop them). Translate "
                   f"them with --pe-beyond-max clamp (positions beyond the limit reuse the last row), or retrain "
                   f"with larger --max-source-positions / --max-target-positions (PosNet: --posnet-max-positions)")
            return None
        return {"mode": mode, "pe": lim.pe, "encoder_limit": lim.encoder, "decoder_limit": lim.decoder, "sources": [],
                "sentences": n}
    ids = beyond(src_sizes, lim.encoder)
    if ids:
        print(f"warning: {len(ids)} of {n} {subset} sentences are longer than the {lim.encoder} source positions of "
              f"pe {lim.pe}, sentence ids {describe(ids, {i: f'{src_sizes[i]} tokens' for i in ids})}; they are "
              f"translated with positions >= {lim.encoder} reusing the last row (--pe-beyond-max clamp; "
              f"--pe-beyond-max error stops instead)", file=sys.stderr)
    return {"mode": mode, "pe": lim.pe, "encoder_limit": lim.encoder, "decoder_limit": lim.decoder, "sources": ids,
            "sentences": n}


def count_long_hypotheses(text: str, limits: dict) -> None:
    """After decoding under clamp: warn naming the hypotheses that ran past the decoder's positions."""
    from pe_plugin.decode_limits import describe, hypothesis_lengths

    lengths, top = hypothesis_lengths(text), limits["decoder_limit"]
    ids = sorted(i for i, m in lengths.items() if top is not None and m > top)
    limits["hypotheses"] = ids
    if ids:
        print(f"warning: {len(ids)} of {len(lengths)} hypotheses are longer than the {top} target positions, "
              f"sentence ids {describe(ids, {i: f'{lengths[i]} tokens' for i in ids})}; their tokens beyond "
              f"position {top - 1} were decoded reusing the last row (--pe-beyond-max clamp)", file=sys.stderr)


def write_outputs(text: str, out: Path, tgt: str, train_log: Path, no_detok: bool, extra_meta=None,
                  command=None) -> int:
    """H-/T- lines of fairseq-generate, sorted by sentence id, detokenised, written atomically; the meta file
    holds the encoding signature (``fairseq:ARCH|positions:KIND`` for a stock fairseq model), ``extra_meta``
    and the training summary of ``train_log`` (pe_tools.recipes.results.training_summary)."""
    hyps = {int(m[1]): m[2] for m in re.finditer(r"^H-(\d+)\t[^\t]*\t(.*)$", text, re.M)}
    refs = {int(m[1]): m[2] for m in re.finditer(r"^T-(\d+)\t(.*)$", text, re.M)}
    if not hyps or sorted(hyps) != list(range(len(hyps))) or sorted(refs) != sorted(hyps):
        return fail(f"fairseq-generate output has {len(hyps)} hypotheses, ids not 0..N-1; see {out}")
    detok = (lambda s: s) if no_detok else _detokenizer(tgt)
    for name, lines in (("hyp", hyps), ("ref", refs)):
        write_atomic(out / f"{name}.detok.{tgt}", "".join(detok(lines[i]) + "\n" for i in range(len(lines))))
    log = train_log.read_text(encoding="utf-8") if train_log.exists() else ""
    training = results.training_summary(log, command)
    sig = [m[4] for m in results.PE_SUMMARY.finditer(log)]
    if not sig and training.get("arch") and not is_pe_arch(training["arch"]):
        sig = [results.stock_signature(log, training["arch"])]  # a stock fairseq model (fairseq_transformer)
    if not sig:
        print(f"warning: no encoding signature in {train_log}; meta file left without pe_signature", file=sys.stderr)
    meta = {"pe_signature": sig[-1]} if sig else {}
    meta.update(extra_meta or {})
    meta["training"] = training
    if command and "pair" in command:
        meta["run"] = results.run_identity(command, meta)
    write_atomic(out / f"hyp.detok.{tgt}.meta.json", json.dumps(meta, indent=1) + "\n")
    print(f"wrote {len(hyps)} sentences: {out / f'hyp.detok.{tgt}'}, {out / f'ref.detok.{tgt}'}")
    return 0


def _detokenizer(lang: str):
    from sacremoses import MosesDetokenizer

    md = MosesDetokenizer(lang=lang)
    return lambda s: md.detokenize(s.split())

"""Flag errors in the format of fairseq's own: ``usage: ...``, then ``PROG: error: MESSAGE``, exit status 2.

fairseq judges most flags while parsing, but pe_plugin can judge some combinations only where fairseq hands it
the parsed arguments: the architecture function (end of parsing) and the model build, which fairseq-train runs
in its ``main`` and fairseq-generate / fairseq-interactive run while loading a checkpoint, long after their
parser is gone. An error there (``PEConfigError``) would end in a Python traceback. ``report`` ends it the way
argparse ends a bad flag instead: it rebuilds the running tool's parser and calls ``parser.error``. In any other
program (the tests, a notebook, our own scripts) ``report`` does nothing and the exception propagates.

fairseq-generate and fairseq-interactive stop on a test sentence longer than the model's positions with fairseq's
own exception, ``Size of sample #ID is invalid ... skip this example with --skip-invalid-size-inputs-valid-test``,
raised by the task's size filter, which pe_plugin does not run. Inside those two tools ``install_length_hint``
(called on import) adds one line after the traceback: the sentence, the model's limit and where it comes from,
and the fix, ``--model-overrides "{'pe_beyond_max': 'clamp'}"`` for LAPE and PosNet or larger
``--max-source/target-positions`` for the other encodings, never the flag fairseq suggests, which drops test
sentences (docs/design.md §Inputs longer than L_max). The model is read from the ``models`` list of the tool's
frames in the traceback; without one the line names the fixes for every kind of model.

Known limit: with several GPUs fairseq-train builds the model in spawned worker processes; a worker then prints
the usage error and exits with status 2, and torch's launcher reports that exit with its own traceback.
See docs/fairseq.md §Flag errors.
"""
import os
import re
import sys
from typing import Optional, Sequence

# fairseq's command-line tools that build models, and the ``fairseq.options`` function building each parser
PARSERS = {
    "train": "get_training_parser",
    "generate": "get_generation_parser",
    "interactive": "get_interactive_generation_parser",
    "validate": "get_validation_parser",
    "eval_lm": "get_eval_lm_parser",
}


def fairseq_tool() -> Optional[str]:
    """The fairseq tool this process runs (a key of ``PARSERS``), or None."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = getattr(spec, "name", None) or ""
    if name.startswith("fairseq_cli."):  # python -m fairseq_cli.train ...
        tool = name[len("fairseq_cli."):]
    else:  # the console scripts: fairseq-train, fairseq-generate, ...
        prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
        tool = prog[len("fairseq-"):].replace("-", "_") if prog.startswith("fairseq-") else ""
    return tool if tool in PARSERS else None


def report(error: Exception) -> None:
    """Inside a fairseq tool: print ``error`` on one line as that tool's parser would, and exit with status 2.
    Elsewhere: return, so that the caller re-raises."""
    tool = fairseq_tool()
    if tool is None:
        return
    from fairseq import options

    parser = getattr(options, PARSERS[tool])()  # prog = basename(sys.argv[0]), as in the tool itself
    parser.error(" ".join(str(error).split()))  # usage to stderr, then "PROG: error: ...", SystemExit(2)


# fairseq's size filter (tasks/fairseq_task.py, data/data_utils.py): the sample id, its (source, target) size (numpy
# 2 prints them as np.int32(7)) and the (source, target) limit
_SIZE = r"(?:np\.\w+\()?(\d+)\)?"
SIZE_ERROR = re.compile(rf"Size of sample #(\d+) is invalid \(=\({_SIZE}, {_SIZE}\)\) since max_positions=\((\d+), (\d+)\)")
DECODING_TOOLS = ("generate", "interactive")
CLAMP = "--model-overrides \"{'pe_beyond_max': 'clamp'}\""


def length_hint(error: BaseException, models: Optional[Sequence] = None) -> Optional[str]:
    """One line on fairseq's ``Size of sample #ID is invalid`` error: which side of the sentence is too long for
    what, and the fix; None for any other error."""
    m = SIZE_ERROR.search(str(error))
    if m is None:
        return None
    sample, src, tgt, max_src, max_tgt = (int(x) for x in m.groups())
    side, n, limit = ("source", src, max_src) if src > max_src else ("target", tgt, max_tgt)
    head = (f"pe_plugin: test sentence #{sample} has {n} {side} tokens (end of sentence included), more than the "
            f"{limit} {side} positions fairseq-{fairseq_tool() or 'generate'} allows")
    dont = ("do not pass --skip-invalid-size-inputs-valid-test, which fairseq suggests: it leaves the sentence out "
            "of the output, and a test set must be translated whole (docs/design.md §Inputs longer than L_max)")
    model = models[0] if models else None
    if model is None or getattr(model, "encoder", None) is None:
        return (f"{head}. Fix: {CLAMP} for a model of pe_plugin's LAPE or PosNet (positions beyond L_max reuse the "
                f"last one); for other encodings pass larger --max-source-positions and --max-target-positions; "
                f"{dont}.")
    from .decode_limits import STOCK, model_limits

    limits = model_limits(model)
    own = limits.encoder if side == "source" else limits.decoder
    if own is not None and own <= limit:
        pe = getattr(model.encoder if side == "source" else model.decoder, "pe", None)
        flag = pe.limit_flag() if pe is not None else f"--max-{side}-positions"
        return (f"{head}: pe '{limits.pe}' has L_max = {own} {side} positions, set by {flag} at training. Fix: "
                f"{CLAMP} (positions beyond L_max then reuse the last one, an approximate position signal; "
                f"pe-generate does this and names such sentences); {dont}.")
    trained = limits.fairseq[0 if side == "source" else 1]
    if limits.pe == STOCK and "Learned" in type(getattr(model.encoder, "embed_positions", None)).__name__:
        return (f"{head}: fairseq's learned positions have one row per position. Fix: shorten or split the "
                f"sentence; {dont}.")
    if trained <= limit:  # the checkpoint's --max-*-positions of training
        return (f"{head} (--max-{side}-positions {trained} at training). Fix: this model's encoding "
                f"({limits.pe}) has no per-position table, so pass --model-overrides "
                f"\"{{'max_{side}_positions': {2 * n}}}\" and --max-{side}-positions {2 * n}; {dont}.")
    return (f"{head} (its --max-{side}-positions, 1024 unless given). Fix: pass --max-{side}-positions {2 * n}; "
            f"{dont}.")


def models_in(tb) -> Optional[Sequence]:
    """The ``models`` list of the innermost frame of traceback ``tb`` that has one (fairseq-generate's ``_main``,
    fairseq-interactive's ``main``)."""
    found = None
    while tb is not None:
        candidate = tb.tb_frame.f_locals.get("models")
        if isinstance(candidate, (list, tuple)) and candidate:
            found = candidate
        tb = tb.tb_next
    return found


def install_length_hint() -> None:
    """In fairseq-generate and fairseq-interactive: print ``length_hint``'s line after the traceback of fairseq's
    size error (once; other exceptions are printed as before)."""
    if fairseq_tool() not in DECODING_TOOLS or getattr(sys.excepthook, "pe_length_hint", False):
        return
    previous = sys.excepthook

    def hook(kind, error, tb):
        previous(kind, error, tb)
        try:
            hint = length_hint(error, models_in(tb))
        except Exception:  # the hint must never hide the original error
            hint = None
        if hint:
            print(hint, file=sys.stderr)

    hook.pe_length_hint = True
    sys.excepthook = hook


# --model-overrides keys that change no parameter's size: never the cause of a size mismatch (--max-source/target-
# positions can be: they set LAPE's and PosNet's L_max)
DECODE_TIME_SETTINGS = {"pe_beyond_max", "pe_attention_impl", "data", "user_dir", "source_lang", "target_lang",
                        "tokenizer", "dropout", "attention_dropout", "activation_dropout", "batch_size", "beam"}
DECODE_TIME_PREFIXES = ("bpe", "moses_", "sentencepiece", "generation")
SIZE_MISMATCH = re.compile(r"size mismatch for ([\w.]+): copying a param with shape torch\.Size\(\[([\d, ]*)\]\) from "
                           r"checkpoint, the shape in current model is torch\.Size\(\[([\d, ]*)\]\)")


class CheckpointSizeError(RuntimeError):
    """A checkpoint whose parameters do not fit the model built from its settings and the overrides."""


def overrides_in_stack() -> Optional[dict]:
    """The ``arg_overrides`` fairseq's checkpoint loading was called with (--model-overrides, or the hub's keyword
    arguments), read from the caller frames; None when there is no such frame."""
    frame = sys._getframe(1)
    while frame is not None:
        found = frame.f_locals.get("arg_overrides")
        if isinstance(found, dict):
            return found
        frame = frame.f_back
    return None


def size_mismatch_message(error: BaseException, overrides: Optional[dict]) -> Optional[str]:
    """One line for torch's ``size mismatch for NAME`` error on loading a checkpoint: the parameters, both shapes,
    the overrides that can change a size and the fix; None for any other error."""
    found = SIZE_MISMATCH.findall(str(error))
    if not found:
        return None
    name, saved, built = found[0]
    more = f" and {len(found) - 1} more parameter{'s' if len(found) > 2 else ''}" if len(found) > 1 else ""
    head = (f"the checkpoint does not fit the model built from its settings: {name} is [{saved}] in the checkpoint "
            f"and [{built}] in the model{more}")
    sizing = {k: v for k, v in (overrides or {}).items()
              if k not in DECODE_TIME_SETTINGS and not k.startswith(DECODE_TIME_PREFIXES)}
    if sizing:
        given = ", ".join(f"'{k}': {v!r}" for k, v in sizing.items())
        return (f"{head}. The overrides ({given}) change a setting that sizes learned parameters, which a trained "
                f"model cannot change: leave {', '.join(sizing)} out of --model-overrides (or the hub's keyword "
                f"arguments). To decode sentences longer than L_max pass --model-overrides \"{{'pe_beyond_max': "
                f"'clamp'}}\" instead")
    return (f"{head}: the checkpoint was trained with other model settings (another architecture, or a copy of "
            f"pe_plugin whose encoding differs); load it with the settings and code it was trained with")


def size_mismatch(error: BaseException) -> None:
    """Called where a pe_plugin model fails to load a checkpoint: a size mismatch ends a fairseq tool with
    argparse's one-line error (exit 2) and raises ``CheckpointSizeError`` elsewhere; other errors return, so
    that the caller re-raises them."""
    message = size_mismatch_message(error, overrides_in_stack())
    if message is None:
        return
    explained = CheckpointSizeError(message)
    report(explained)
    raise explained from error


install_length_hint()

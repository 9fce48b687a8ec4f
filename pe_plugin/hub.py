"""Translate raw text with a trained checkpoint through fairseq's hub interface (docs/hub.md).

    from pe_plugin.hub import from_pretrained
    hub = from_pretrained("runs/multi30k/posnet_embed.en-de.small.seed1", data_name_or_path="data-bin/multi30k_en_de")
    hub.translate("A man rides a bike.", beam=4, lenpen=0.6)

``from_pretrained`` is fairseq's ``hub_utils.from_pretrained`` with this plugin's defaults filled in: ``user_dir``
(this folder, so that fairseq imports the plugin, and with it the checkpoint allow-list of ``checkpoints.py``,
before it reads the checkpoint), Moses tokenisation and subword-nmt BPE with the codes of the data
(pe-prepare writes them to DATA/text/bpe.codes), and the source and target languages, read from the checkpoint
when not given. fairseq 0.12's Moses tokenizer takes its languages from the ``source_lang`` / ``target_lang``
overrides, the same names as the translation task's; without them it tokenises and detokenises as English.

Before anything is built it checks what fairseq would report late or obscurely, and names the argument to
fix: the run directory and checkpoint files, the dictionaries of the data folder, the BPE codes, and an
architecture registered neither by fairseq nor by pe_plugin. A checkpoint of fairseq's own architectures
(``--arch transformer``, the recipes' ``fairseq_transformer``) is translated as well: the plugin only adds
architectures, so loading it with ``user_dir`` changes nothing for such a model.

The object returned is fairseq's ``GeneratorHubInterface`` (a subclass, ``PEHubInterface``); its ``generate``
(which ``translate`` and ``sample`` call) first checks every sentence's length in tokens against the model's source positions and raises
a ValueError naming the sentence, its length, the limit and the fixes, where fairseq would raise "Size of
sample #0 is invalid ... skip this example with --skip-invalid-size-inputs-valid-test" (a command-line flag),
or, with ``skip_invalid_size_inputs=True``, leave the sentence out and return fewer translations than
sentences. Loaded with ``pe_beyond_max='clamp'``, LAPE and PosNet decode such sentences (``encoding_parts.limits``).
"""
import logging
import os
import pickle
import re
from typing import List, Optional

import torch
from fairseq import hub_utils, utils
from fairseq.hub_utils import GeneratorHubInterface

from . import decode_limits
from .safe_load import load_checkpoint
from .encoding_parts.limits import UNLIMITED

logger = logging.getLogger("pe_plugin")

PLUGIN_DIR = os.path.dirname(os.path.abspath(__file__))  # what fairseq's --user-dir / user_dir= takes

# the BPE models fairseq's hub interface builds, the argument naming each one's file, and where to look for it
# when the argument is not given: fairseq's own names in the run directory (hub_utils.from_pretrained picks
# those up by itself), then pe-prepare's DATA/text/
BPE_FILES = {
    "subword_nmt": ("bpe_codes", ["{run}/code", "{run}/bpecodes", "{data}/text/bpe.codes"]),
    "sentencepiece": ("sentencepiece_model", ["{run}/sentencepiece.bpe.model", "{data}/text/spm.model"]),
}


class PEHubInterface(GeneratorHubInterface):
    """fairseq's hub interface, with sentences longer than the model's source positions named before decoding."""

    def __init__(self, cfg, task, models, checkpoint_paths=()):
        super().__init__(cfg, task, models)
        # the checkpoint file(s) the models were read from (absolute paths), so that translations can be traced
        self.checkpoint_paths = list(checkpoint_paths)
        if all(m.max_positions() == (UNLIMITED, UNLIMITED) for m in models):
            # --pe-beyond-max clamp: the model lifts its limits, but the task read from the checkpoint keeps the
            # training's --max-source/target-positions; fairseq-generate's task takes the command line's instead
            # and decodes such sentences, and so does the hub
            self.max_positions = utils.resolve_max_positions(*[m.max_positions() for m in models])

    def generate(self, tokenized_sentences, beam: int = 5, verbose: bool = False,
                 skip_invalid_size_inputs: bool = False, **kwargs):
        if not skip_invalid_size_inputs:
            self.check_lengths(tokenized_sentences)
        return super().generate(tokenized_sentences, beam, verbose,
                                skip_invalid_size_inputs=skip_invalid_size_inputs, **kwargs)

    def source_limit(self) -> int:
        limit = self.max_positions
        return int(limit[0] if isinstance(limit, (tuple, list)) else limit)

    def check_lengths(self, tokenized_sentences) -> None:
        """Raise a ValueError for the first sentence of more tokens (end of sentence included) than the model's
        source positions; fairseq would stop there too, with a message about a command-line flag."""
        if torch.is_tensor(tokenized_sentences) and tokenized_sentences.dim() == 1:
            tokenized_sentences = [tokenized_sentences]
        limit = self.source_limit()
        for i, tokens in enumerate(tokenized_sentences):
            n = int(tokens.numel())
            if n > limit:
                raise ValueError(f"sentence {i} is {n} tokens long after tokenisation and BPE (end of sentence "
                                 f"included), more than the {limit} source positions this model accepts"
                                 f"{self._limit_reason(limit)}")

    def _limit_reason(self, limit: int) -> str:
        model = self.models[0]
        limits = decode_limits.model_limits(model)
        pe = getattr(model.encoder, "pe", None)
        if limits.encoder is not None and limits.encoder <= limit:
            return (f" (pe '{limits.pe}' has L_max = {limits.encoder} positions, set by {pe.limit_flag()} at "
                    f"training). Shorten or split the sentence, or load the model with pe_beyond_max='clamp': "
                    f"positions beyond L_max then reuse the last one, an approximate position signal")
        positions = type(getattr(model.encoder, "embed_positions", None)).__name__
        if limits.pe == decode_limits.STOCK and positions.startswith("Learned"):
            return (f" (--max-source-positions {limit} at training; fairseq's learned positions have one row per "
                    f"position). Shorten or split the sentence")
        return (f" (--max-source-positions {limit} at training). Shorten or split the sentence, or raise the limit "
                f"when loading, e.g. max_source_positions={2 * limit}: this model's encoding ({limits.pe}) has no "
                f"per-position table, so a larger limit loads")


def from_pretrained(run_dir: str, checkpoint_file: Optional[str] = None, data_name_or_path: Optional[str] = None,
                    bpe_codes: Optional[str] = None, source_lang: Optional[str] = None,
                    target_lang: Optional[str] = None, tokenizer: Optional[str] = "moses",
                    bpe: Optional[str] = "subword_nmt", **kwargs) -> GeneratorHubInterface:
    """fairseq's hub interface (``.translate``, ``.sample``, ``.generate``) for a checkpoint of this plugin or of
    fairseq's own translation architectures.

    run_dir: the folder of the checkpoints (``--save-dir``), or one checkpoint file (then its folder is the run
    directory). checkpoint_file: a file name in it, or several separated by ``os.pathsep`` (an ensemble); default
    the file given as run_dir, else checkpoint_best.pt. The files loaded are logged and kept as
    ``hub.checkpoint_paths``. data_name_or_path: the fairseq-preprocess output (its dict.*.txt
    files; default: run_dir). bpe_codes: the subword-nmt codes the data was made with (default: run_dir/code,
    run_dir/bpecodes or DATA/text/bpe.codes, whichever exists). source_lang / target_lang: default the
    checkpoint's, else the language pair of the data files; they also set the Moses tokenizer's languages.
    tokenizer / bpe: fairseq's names (None: the text is already tokenised / split). Relative paths are taken
    from the current directory. Other keyword arguments go to fairseq as overrides of the checkpoint's
    configuration (e.g. ``pe_beyond_max='clamp'``, ``batch_size=16``).
    """
    for old in ("moses_source_lang", "moses_target_lang"):
        if old in kwargs:
            raise TypeError(f"{old}= is not read by fairseq 0.12's Moses tokenizer; pass "
                            f"{old.replace('moses_', '')}= (the task's language codes, which the tokenizer uses)")
    if "user_dir" in kwargs:  # fairseq would import that folder instead of this plugin
        given = kwargs.pop("user_dir")
        if os.path.realpath(str(given)) != os.path.realpath(PLUGIN_DIR):
            raise ValueError(f"user_dir={str(given)!r} is not this pe_plugin ({PLUGIN_DIR}): from_pretrained passes "
                             f"user_dir={PLUGIN_DIR!r} to fairseq itself; leave user_dir= out (for another plugin's "
                             f"checkpoint, use fairseq's TransformerModel.from_pretrained(..., user_dir=THAT_PLUGIN))")
    run_dir, checkpoint_file = split_checkpoint_path(os.path.abspath(run_dir), checkpoint_file)
    paths = checkpoint_paths(run_dir, checkpoint_file)
    try:
        state = load_checkpoint(paths[0], mmap=True)  # its settings only: the tensors stay on disk
    except (pickle.UnpicklingError, RuntimeError, EOFError) as e:
        raise ValueError(f"{paths[0]} cannot be read as a checkpoint (torch.load, weights_only=True): {e}") from e
    task_cfg, model_cfg = training_config(state, paths[0])
    check_architecture(model_cfg, paths[0])
    data = os.path.abspath(data_name_or_path) if data_name_or_path is not None else run_dir
    check_data(data, data_name_or_path is not None)
    source_lang, target_lang = languages(task_cfg, data, source_lang, target_lang)
    check_dictionaries(data, source_lang, target_lang)
    del state

    if bpe in BPE_FILES:
        name = BPE_FILES[bpe][0]
        given = bpe_codes if name == "bpe_codes" else kwargs.pop(name, None)
        kwargs[name] = bpe_file(bpe, given, run_dir, data)
    elif bpe_codes is not None:
        kwargs["bpe_codes"] = os.path.abspath(bpe_codes)
    loaded = hub_utils.from_pretrained(
        run_dir, checkpoint_file, data, tokenizer=tokenizer, bpe=bpe, source_lang=source_lang,
        target_lang=target_lang, user_dir=PLUGIN_DIR, **kwargs)
    logger.info("pe_plugin.hub: loaded %s", ", ".join(paths))
    return PEHubInterface(loaded["args"], loaded["task"], loaded["models"], paths)


DEFAULT_CHECKPOINT = "checkpoint_best.pt"  # what checkpoint_file= means when neither it nor a file is given


def split_checkpoint_path(run_dir: str, checkpoint_file: Optional[str]):
    """(run directory, checkpoint file name): a checkpoint file given as the first argument is taken as its folder
    and its name; checkpoint_file= may then only repeat that name."""
    if not os.path.isfile(run_dir):
        return run_dir, checkpoint_file or DEFAULT_CHECKPOINT
    folder, name = os.path.split(run_dir)
    if checkpoint_file not in (None, name):
        raise ValueError(f"{run_dir} is a checkpoint file, and checkpoint_file={checkpoint_file!r} names another: "
                         f"pass the folder as the first argument and the file as checkpoint_file= "
                         f"(from_pretrained({folder!r}, checkpoint_file={checkpoint_file!r})), or the file alone")
    return folder, name


def checkpoint_paths(run_dir: str, checkpoint_file: str) -> List[str]:
    if not os.path.isdir(run_dir):
        raise FileNotFoundError(f"run directory {run_dir} does not exist (the first argument: the folder "
                                f"fairseq-train saved the checkpoints to, its --save-dir, or a checkpoint file in it)")
    paths = [os.path.join(run_dir, name) for name in checkpoint_file.split(os.pathsep)]
    for path in paths:
        if not os.path.isfile(path):
            there = ", ".join(checkpoints_in(run_dir)) or "no .pt files"
            raise FileNotFoundError(f"checkpoint {path} does not exist (checkpoint_file="
                                    f"{os.path.relpath(path, run_dir)!r}); {run_dir} holds {there}. Pass one of "
                                    f"those as checkpoint_file=")
    return paths


def natural_key(name: str):
    """Sort key putting numbers in numeric order: checkpoint2.pt before checkpoint10.pt, checkpoint_1_900.pt
    before checkpoint_1_1000.pt."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name)]


def checkpoints_in(run_dir: str) -> List[str]:
    """The .pt files of ``run_dir`` and of its subfolders (pe-generate's gen/checkpoint.avgN.pt), relative to it,
    numbers in numeric order."""
    found = []
    for folder, _, files in os.walk(run_dir):
        if os.path.relpath(folder, run_dir).count(os.sep) < 1:
            found += [os.path.relpath(os.path.join(folder, f), run_dir) for f in files if f.endswith(".pt")]
    return sorted(found, key=natural_key)


def training_config(state, path: str):
    """(task, model) settings of a fairseq checkpoint: the task a dict (or Namespace), the model a Namespace
    (fairseq's legacy architectures, this plugin's included) or a dict."""
    cfg = state.get("cfg") if isinstance(state, dict) else None
    if cfg is not None:
        return cfg.get("task") or {}, cfg.get("model") or {}
    args = state.get("args") if isinstance(state, dict) else None  # fairseq < 0.10
    if args is not None:
        return args, args
    raise ValueError(f"{path} is not a fairseq checkpoint: it holds no training configuration ('cfg' or 'args'); "
                     f"pass a checkpoint that fairseq-train wrote")


def _get(cfg, key):
    return cfg.get(key) if isinstance(cfg, dict) else getattr(cfg, key, None)


def check_architecture(model_cfg, path: str) -> None:
    """An architecture that fairseq cannot build even with this plugin loaded is named here, not as a KeyError."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    arch = _get(model_cfg, "arch") or _get(model_cfg, "_name")
    if arch is None:
        return
    if arch not in ARCH_MODEL_REGISTRY:
        from .__main__ import closest_architectures

        close = closest_architectures(arch)
        near = f" (the closest pe_plugin names: {', '.join(close)}; another version of pe_plugin?)" if close else ""
        raise ValueError(f"{path} was trained with --arch {arch}, which neither fairseq nor pe_plugin registers{near}: "
                         f"load it with fairseq's TransformerModel.from_pretrained(..., user_dir=...) naming the "
                         f"plugin that defines it")
    if not ARCH_MODEL_REGISTRY[arch].__module__.startswith(__package__ + "."):
        logger.info("%s: --arch %s is fairseq's own, not a pe_plugin architecture; it loads as in fairseq", path, arch)


def languages(task_cfg, data: str, source_lang: Optional[str], target_lang: Optional[str]):
    """The given languages, else the checkpoint's (--source-lang / --target-lang at training), else the pair
    of the binarised files in ``data`` (fairseq infers it the same way)."""
    from fairseq.data.data_utils import infer_language_pair

    source_lang = source_lang or _get(task_cfg, "source_lang")
    target_lang = target_lang or _get(task_cfg, "target_lang")
    if source_lang is None or target_lang is None:
        inferred = infer_language_pair(data)
        source_lang, target_lang = source_lang or inferred[0], target_lang or inferred[1]
    if source_lang is None or target_lang is None:
        raise ValueError(f"the checkpoint does not name its languages and {data} has no binarised files to infer "
                         f"them from: pass source_lang= and target_lang= (the LANG of its dict.LANG.txt files)")
    return source_lang, target_lang


def check_data(data: str, given: bool) -> None:
    """``data`` holds fairseq dictionaries."""
    if not (os.path.isdir(data) and any(f.startswith("dict.") and f.endswith(".txt") for f in os.listdir(data))):
        what = "data_name_or_path=" if given else "data_name_or_path= was not given, so the run directory was searched"
        raise FileNotFoundError(f"no fairseq dictionaries (dict.LANG.txt) in {data} ({what}): pass data_name_or_path= "
                                f"the folder fairseq-preprocess wrote (its --destdir; pe-prepare's --out, e.g. "
                                f"data-bin/multi30k_en_de)")


def check_dictionaries(data: str, source_lang: str, target_lang: str) -> None:
    for lang in (source_lang, target_lang):
        path = os.path.join(data, f"dict.{lang}.txt")
        if not os.path.isfile(path):
            there = sorted(f for f in os.listdir(data) if f.startswith("dict.") and f.endswith(".txt"))
            raise FileNotFoundError(f"fairseq dictionary {path} not found ({data} holds {', '.join(there)}): pass "
                                    f"data_name_or_path= the data of {source_lang}-{target_lang}, or source_lang= / "
                                    f"target_lang= the languages of this data")


def bpe_file(bpe: str, given: Optional[str], run_dir: str, data: str) -> str:
    name, candidates = BPE_FILES[bpe]
    if given is not None:
        path = os.path.abspath(given)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"BPE file {path} not found ({name}=): pass the {bpe} file the data was "
                                    f"prepared with (pe-prepare writes DATA/text/"
                                    f"{'bpe.codes' if bpe == 'subword_nmt' else 'spm.model'})")
        return path
    tried = [c.format(run=run_dir, data=data) for c in candidates]
    for path in tried:
        if os.path.isfile(path):
            return path
    raise FileNotFoundError(f"no {bpe} file: {name}= was not given and none of {', '.join(tried)} exists; pass "
                            f"{name}=PATH (the file the data was prepared with), or bpe=None if the input is "
                            f"already split into the data's subwords")


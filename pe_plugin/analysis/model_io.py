"""What the analysis tools share: their checkpoint arguments, loading a checkpoint with its task, per-language
token counts of a binarised data directory. Their atomic JSON output is pe_tools.file_io.dump_json."""
import argparse
import os
import warnings
from pathlib import Path
from typing import Optional, Tuple

import numpy as np


def add_checkpoint_args(parser: argparse.ArgumentParser, data_help: str) -> None:
    """The checkpoint to analyse and its binarised data directory."""
    parser.add_argument("checkpoint", help="fairseq checkpoint of a pe_transformer model")
    parser.add_argument("--data", required=True, help=data_help)


def add_output_args(parser: argparse.ArgumentParser, default_out: str) -> None:
    """--cpu and --out (default: ``default_out`` beside the checkpoint)."""
    parser.add_argument("--cpu", action="store_true", help="stay on the CPU even if a GPU is available")
    parser.add_argument("--out", help=f"output folder (default: {default_out}/ beside the checkpoint)")


def open_checkpoint(args: argparse.Namespace, default_out: str):
    """(model, task, output folder) for parsed ``add_checkpoint_args`` / ``add_output_args`` arguments; a missing
    checkpoint stops with an error that names it."""
    # raised inside fairseq's fused attention for every batch; not actionable here
    warnings.filterwarnings("ignore", message="Support for mismatched key_padding_mask")
    if not Path(args.checkpoint).is_file():
        raise SystemExit(f"error: checkpoint {args.checkpoint} does not exist")
    out = Path(args.out) if args.out else Path(args.checkpoint).parent / default_out
    model, task = load_model(args.checkpoint, args.data, cpu=args.cpu)
    return model, task, out


def load_model(checkpoint: str, data: str, cpu: bool = True):
    """(model, task) of a fairseq checkpoint of this project, with the dictionaries of ``data``; eval mode, fp32."""
    import pe_plugin  # noqa: F401  (registers the model and the checkpoint allow-list)
    from fairseq import checkpoint_utils

    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(checkpoint)], arg_overrides={"data": str(data)}
    )
    model = models[0].float().eval()
    if not cpu and __import__("torch").cuda.is_available():
        model = model.cuda()
    return model, task


def token_counts(data: str, split: str, src: str, tgt: str, lang: str, dict_size: int) -> Optional[np.ndarray]:
    """Occurrences of each dictionary id on the ``lang`` side of ``split`` (None if the split is missing)."""
    from fairseq.data import indexed_dataset

    for pair in (f"{src}-{tgt}", f"{tgt}-{src}"):
        prefix = os.path.join(data, f"{split}.{pair}.{lang}")
        if indexed_dataset.dataset_exists(prefix, impl="mmap"):
            ds = indexed_dataset.MMapIndexedDataset(prefix)
            tokens = np.frombuffer(ds._bin_buffer, dtype=ds._index.dtype)  # every sentence, concatenated
            return np.bincount(tokens.astype(np.int64), minlength=dict_size)[:dict_size]
    return None


def language_masks(task, data: str, split: str = "train") -> Tuple[Optional[np.ndarray], Optional[np.ndarray]]:
    """For a joined dictionary: (source-side, target-side) masks of the ids seen more often on that side of
    ``split``; (None, None) for separate dictionaries (each already holds one language) or a missing split."""
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    if src_dict is not tgt_dict and src_dict.symbols != tgt_dict.symbols:
        return None, None
    src, tgt = task.cfg.source_lang, task.cfg.target_lang
    counts = [token_counts(data, split, src, tgt, lang, len(src_dict)) for lang in (src, tgt)]
    if counts[0] is None or counts[1] is None:
        return None, None
    return counts[0] > counts[1], counts[1] > counts[0]

"""Which test sentences a trained model has no positions for, checked before decoding (``scripts/launch.py
generate``), and which hypotheses ran past the decoder's positions, counted after it.

A model whose encoding has a position limit (LAPE, PosNet; ``encoding_parts.limits``) supports L_max positions per
side. A source of n tokens (end-of-sentence included, as fairseq binarises it) uses positions 0..n-1, so it
fits when n <= L_max. A hypothesis of m tokens (its end-of-sentence included, m = the number of scores on
fairseq-generate's P- line) is produced from decoder inputs of positions 0..m-1, so it ran past L_max when
m > L_max. Without ``--pe-beyond-max clamp`` fairseq-generate checks sources and references against
``model.max_positions()`` (--max-source/target-positions and the encodings' limits) and stops before decoding
at the first that does not fit; ``fairseq_limits`` is that check.
"""
import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .encoding_parts.limits import UNLIMITED

STOCK = "fairseq"  # Limits.pe of a stock fairseq model, which has no pe_plugin encoding


@dataclass
class Limits:
    pe: str  # the encoding (encoder side, or "ENC ; DEC" when the sides differ)
    encoder: Optional[int]  # positions the encoder's encoding supports (None: no limit)
    decoder: Optional[int]  # positions the decoder's encoding supports (None: no limit)
    fairseq: Tuple[int, int]  # model.max_positions() under --pe-beyond-max error: what fairseq-generate checks


def model_limits(model) -> Limits:
    """The position limits of a built pe_transformer model (read from its encodings, not its flags); a stock
    fairseq model (no ``pe``, e.g. the recipes' fairseq_transformer) has only fairseq's own limits."""
    enc, dec = getattr(model.encoder, "pe", None), getattr(model.decoder, "pe", None)
    if enc is None or dec is None:
        return Limits(STOCK, None, None, tuple(int(x) for x in model.max_positions()))
    saved = enc.beyond_max, dec.beyond_max
    try:
        enc.beyond_max = dec.beyond_max = "error"
        fairseq = tuple(int(x) for x in model.max_positions())
    finally:
        enc.beyond_max, dec.beyond_max = saved
    side = lambda pe: pe.max_positions if pe.max_positions < UNLIMITED else None  # noqa: E731
    name = enc.name if enc.name == dec.name else f"{enc.name} ; {dec.name}"
    return Limits(name, side(enc), side(dec), fairseq)


def checkpoint_limits(checkpoint: str, data: str) -> Limits:
    """``model_limits`` of a checkpoint, built on the CPU with the dictionaries of ``data``."""
    from .analysis.model_io import load_model

    model, _ = load_model(checkpoint, data, cpu=True)
    return model_limits(model)


def split_sizes(data: str, split: str, src: str, tgt: str) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """(source, target) token counts per sentence id of a binarised split, end-of-sentence included (the
    target None when the split has no target side). Raises FileNotFoundError naming the files looked for."""
    from fairseq.data import indexed_dataset

    tried = []
    for pair in (f"{src}-{tgt}", f"{tgt}-{src}"):
        sizes = []
        for lang in (src, tgt):
            prefix = os.path.join(data, f"{split}.{pair}.{lang}")
            tried.append(prefix + ".idx")
            if not indexed_dataset.dataset_exists(prefix, impl="mmap"):
                sizes.append(None)
                continue
            ds = indexed_dataset.MMapIndexedDataset(prefix)  # sizes is a view of its memory map: copy it first
            sizes.append(np.array(ds.sizes, dtype=np.int64))
            del ds
        if sizes[0] is not None:
            return sizes[0], sizes[1]
    raise FileNotFoundError(f"no binarised {split} split of {src}-{tgt}: looked for {', '.join(tried)}")


def beyond(sizes: Optional[np.ndarray], limit: Optional[int]) -> List[int]:
    """Sentence ids whose size exceeds ``limit`` (none when there is no limit or no sizes)."""
    if sizes is None or limit is None:
        return []
    return [int(i) for i in np.nonzero(sizes > limit)[0]]


def describe(ids: Sequence[int], label: Dict[int, str], shown: int = 20) -> str:
    """'4 (9 tokens), 5 (10 tokens)' for the first ``shown`` ids (``label``: id -> what goes in brackets), then how
    many more."""
    text = ", ".join(f"{i} ({label[i]})" for i in ids[:shown])
    return text + (f" and {len(ids) - shown} more" if len(ids) > shown else "")


def hypothesis_lengths(generate_output: str) -> Dict[int, int]:
    """Sentence id -> tokens of its best hypothesis (end-of-sentence included), from fairseq-generate's P- lines."""
    lengths = {}
    for line in generate_output.splitlines():
        if line.startswith("P-"):
            head, _, scores = line.partition("\t")
            lengths.setdefault(int(head[2:]), len(scores.split()))  # the first P- line of an id is its best
    return lengths

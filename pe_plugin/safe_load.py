"""Loading this project's checkpoints on torch >= 2.6, where ``torch.load`` defaults to ``weights_only=True``.

fairseq 0.12 pickles its training arguments (an ``argparse.Namespace``) and, with ``--eval-bleu``, numpy
arrays of BLEU counts into every checkpoint; the safe unpickler rejects both. Rather than switching the
safety off for every load (``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1``), we allow exactly those types, which
only rebuild data and run no code. Importing ``pe_plugin`` (which ``--user-dir pe_plugin`` does before any
checkpoint is read) registers them for fairseq-train resume, fairseq-generate, fairseq-interactive and
``scripts/average_checkpoints.py``.
"""
import argparse

import numpy as np
import torch


def checkpoint_safe_globals():
    allowed = [argparse.Namespace, np.ndarray, np.dtype]
    core = getattr(np, "_core", None) or np.core  # numpy 2 renamed numpy.core to numpy._core
    allowed.append(core.multiarray._reconstruct)
    allowed.append(core.multiarray.scalar)
    dtypes = getattr(np, "dtypes", None)  # numpy >= 1.25: one class per dtype
    if dtypes is not None:
        allowed += [getattr(dtypes, n) for n in dir(dtypes) if n.endswith("DType")]
    return allowed


def register_safe_globals() -> None:
    add = getattr(torch.serialization, "add_safe_globals", None)
    if add is not None:  # torch < 2.4 has no allow-list and loads with weights_only=False anyway
        add(checkpoint_safe_globals())


def load_checkpoint(path: str, mmap: bool = False):
    """torch.load with weights_only=True and this project's allow-list. ``mmap``: map the tensors' storage
    instead of reading it (cheap when only the training configuration is wanted; zip-format files, which
    every torch >= 1.6 writes; older files are read whole)."""
    register_safe_globals()
    if mmap:
        try:
            return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as e:  # a legacy (pre-zip) file cannot be memory-mapped
            if "mmap" not in str(e):
                raise
    return torch.load(path, map_location="cpu", weights_only=True)

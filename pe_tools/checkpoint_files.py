"""fairseq-train's numbered checkpoint files in a run directory: ``checkpoint_E_U.pt`` (saved every
--save-interval-updates; kind "update", numbered by update U) and ``checkpointE.pt`` (at the end of epoch E; kind
"epoch"). Standard library only."""
import collections
import pickle
import re
import zipfile
from pathlib import Path
from typing import List, Optional

PATTERNS = {"update": re.compile(r"checkpoint_\d+_(\d+)\.pt"), "epoch": re.compile(r"checkpoint(\d+)\.pt")}


def numbered_checkpoints(directory: Path, kind: str = "update") -> List[Path]:
    """The checkpoint files of ``kind`` in ``directory``, oldest (lowest number) first."""
    found = ((int(m[1]), p) for p in Path(directory).iterdir() if (m := PATTERNS[kind].fullmatch(p.name)))
    return [p for _, p in sorted(found)]


def last_checkpoints(directory: Path, n: int, kind: str = "update") -> List[Path]:
    """The ``n`` newest checkpoint files of ``kind``, oldest first (fewer when fewer exist); ``n`` >= 1."""
    if n < 1:
        raise ValueError(f"the number of checkpoints must be at least 1 (got {n})")
    return numbered_checkpoints(directory, kind)[-n:]


class _Inert:
    """Whatever a checkpoint's pickle would build that the update count does not need: tensors, numpy values,
    fairseq's config objects. Built from any arguments and any state, running no code of theirs."""

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        pass


class _Skeleton(pickle.Unpickler):
    """Unpickles the containers of a torch checkpoint (dicts, lists, OrderedDicts, numbers, strings) and nothing
    else: every other class becomes _Inert and every tensor storage None, so no code of the file runs."""

    def find_class(self, module, name):
        return collections.OrderedDict if (module, name) == ("collections", "OrderedDict") else _Inert

    def persistent_load(self, pid):
        return None


def updates_of(path: Path) -> Optional[int]:
    """The update count fairseq-train had reached when it saved the checkpoint ``path`` (the ``num_updates`` of its
    last ``optimizer_history`` entry), read from the pickle in torch's zip archive without loading a tensor: a
    checkpoint of gigabytes reads in milliseconds. None when the file is missing, cut short (a kill during
    fairseq's plain copy), or not a fairseq checkpoint."""
    try:
        with zipfile.ZipFile(path) as z:
            name = next(n for n in z.namelist() if n.endswith("/data.pkl") or n == "data.pkl")
            with z.open(name) as f:
                state = _Skeleton(f).load()
        return int(state["optimizer_history"][-1]["num_updates"])
    except (OSError, zipfile.BadZipFile, StopIteration, pickle.UnpicklingError, EOFError, KeyError, IndexError,
            TypeError, ValueError, AttributeError):
        return None

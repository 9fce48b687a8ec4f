"""fairseq-train's numbered checkpoint files in a run directory: ``checkpoint_E_U.pt`` (saved every
--save-interval-updates; kind "update", numbered by update U) and ``checkpointE.pt`` (at the end of epoch E; kind
"epoch"). Standard library only."""
import re
from pathlib import Path
from typing import List

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

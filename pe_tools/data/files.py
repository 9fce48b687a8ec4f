"""What every preparation step shares: the errors, progress output and UTF-8 text files with '\n' line ends."""
import os
from pathlib import Path
from typing import Optional

from tqdm import tqdm

SPLITS = ("train", "valid", "test")


class PrepareError(Exception):
    """A failure the user can fix; the message names the file or flag and the fix."""


class CorruptFile(Exception):
    """A file failed verification; the message says which check."""


def shown(path: Path) -> str:
    """A path as the user would type it: relative to the working folder when inside it."""
    rel = os.path.relpath(path)
    return str(path) if rel.startswith("..") else rel


def log(msg: str) -> None:
    print(f"[prepare] {msg}", flush=True)


def progress(total: Optional[int], desc: str, unit: str = " lines"):
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, mininterval=1, leave=False)


def open_text(path: Path, mode: str = "r"):
    """UTF-8, '\\n' as the only line end (a stray \\r or \\x85 inside a line must not split it)."""
    return open(path, mode, encoding="utf-8", errors="replace" if "r" in mode else "strict", newline="\n")


def read_lines(path: Path):
    with open_text(path) as f:
        for line in f:
            yield line[:-1] if line.endswith("\n") else line


def count_lines(path: Path) -> int:
    n, last = 0, b"\n"
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            n += block.count(b"\n")
            last = block[-1:]
    return n + (last != b"\n")

"""The one home of helpers every tool needs: atomic writes, JSON with one rule for NaN and infinity, CSV text,
TOML loading with clear errors, command-line errors and counts, and the processor's name. Standard library only
(no torch, no fairseq, no numpy import)."""
import argparse
import contextlib
import csv
import io
import json
import math
import os
import platform
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Union


# ------------------------------------------------------------------------------------------ atomic writes
@contextlib.contextmanager
def atomic(path: Union[str, Path]) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` that becomes ``path`` only if the block finishes; on an error
    the temporary file is removed and ``path`` is left as it was. The temporary name ends in ``.tmpPID``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if tmp.is_dir():
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)


def write_atomic(path: Union[str, Path], data: Union[bytes, str]) -> None:
    """Write ``data`` (str as UTF-8) to ``path`` through a temporary name: readers never see a partial file."""
    write_all_atomic({Path(path): data})


def write_all_atomic(outputs: Dict[Path, Union[bytes, str]]) -> None:
    """Write every file under a temporary name in its folder first, then rename them all: either every file
    is replaced or, on an error while writing, none is. New files get the usual permissions (0666 & ~umask)."""
    umask = os.umask(0)
    os.umask(umask)
    staged = []
    try:
        for path, data in outputs.items():
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            staged.append((tmp, path))
            with os.fdopen(fd, "wb") as fh:
                fh.write(data.encode("utf-8") if isinstance(data, str) else data)
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600
        for tmp, path in staged:
            os.replace(tmp, path)
    finally:
        for tmp, _ in staged:
            if os.path.exists(tmp):
                os.unlink(tmp)


# ------------------------------------------------------------------------------------------- pe_plugin
def plugin_dir() -> str:
    """The folder of the installed pe_plugin package, for ``--user-dir``; found without importing it (importing
    pe_plugin imports fairseq and torch)."""
    import importlib.util

    spec = importlib.util.find_spec("pe_plugin")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("pe_plugin is not installed: pip install . (or make setup)")
    return str(list(spec.submodule_search_locations)[0])


def foreign_user_dir(argv, tool: str) -> Optional[str]:
    """The error for a ``--user-dir`` in a fairseq argv that ``tool`` starts, where it is not this pe_plugin's
    folder: fairseq imports the last one given, so the run would lose the plugin (a folder without it ends in
    fairseq's "Weights only load failed" or "invalid choice" for --arch). None when every --user-dir is ours."""
    ours = os.path.realpath(plugin_dir())
    for i, word in enumerate(argv):
        given = word.split("=", 1)[1] if word.startswith("--user-dir=") else (
            argv[i + 1] if word == "--user-dir" and i + 1 < len(argv) else None)
        if given is not None and os.path.realpath(str(given)) != ours:
            state = "does not exist" if not os.path.exists(str(given)) else "is not this pe_plugin"
            return (f"--user-dir {given} {state} ({ours} is): {tool} passes --user-dir {ours} to fairseq itself; "
                    f"leave --user-dir out")
    return None


# fp16 on a CPU (docs/fairseq.md §fp16 and bf16 on CPU): fairseq's flattened fp16 optimizer needs CUDA, and its
# trainer, on a gradient overflow, calls .cuda() and ends the run; the default loss scale (128) overflows within the
# first updates of the quick start's tiny models, a scale of 4 did not in their 300 updates
CPU_FP16_FLAGS = ["--fp16", "--fp16-no-flatten-grads", "--fp16-init-scale", "4"]


def cpu_fp16_problem(argv) -> Optional[str]:
    """The error for a fairseq-train argv that trains in fp16 on a CPU without the flags that keep it running
    (CPU_FP16_FLAGS); None when it does not train in fp16 or has them."""
    flags = {w.split("=", 1)[0] for w in map(str, argv)}
    if not flags & {"--fp16", "--memory-efficient-fp16"}:
        return None
    missing = [] if "--memory-efficient-fp16" in flags or "--fp16-no-flatten-grads" in flags else [
        "--fp16-no-flatten-grads"]
    missing += [] if "--fp16-init-scale" in flags else ["--fp16-init-scale 4"]
    if not missing:
        return None
    return (f"fp16 on a CPU needs {' '.join(missing)}: without them fairseq-train stops with \"Torch not compiled "
            f"with CUDA enabled\" (at the first gradient overflow, which the default --fp16-init-scale 128 meets "
            f"within a few updates; docs/fairseq.md §fp16 and bf16 on CPU). Add them, or leave --fp16 out (fp32)")


# ------------------------------------------------------------------------------------------------- JSON
def to_jsonable(obj: Any) -> Any:
    """Plain JSON values, by one rule: NaN becomes null, +-infinity the strings "inf" / "-inf" (strict JSON has
    neither, and infinity is a meaningful value, e.g. a causal map's direction balance); numpy scalars (float32
    under numpy 2) and arrays become floats, ints and lists; dict keys become strings; tuples become lists."""
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if hasattr(obj, "tolist") and type(obj).__module__ == "numpy":  # np.generic and np.ndarray
        return to_jsonable(obj.tolist())
    if isinstance(obj, float):
        if math.isnan(obj):
            return None
        if math.isinf(obj):
            return "inf" if obj > 0 else "-inf"
        return float(obj)
    return obj


def dumps_json(obj: Any, indent: int = 1) -> str:
    """``obj`` as strict JSON text (see ``to_jsonable``), UTF-8 characters kept, ending in a newline."""
    return json.dumps(to_jsonable(obj), indent=indent, allow_nan=False, ensure_ascii=False) + "\n"


def dump_json(path: Union[str, Path], obj: Any, indent: int = 1) -> None:
    """Write ``obj`` as JSON to ``path`` atomically."""
    write_atomic(path, dumps_json(obj, indent))


# -------------------------------------------------------------------------------------------------- CSV
def csv_text(rows: List[Dict[str, Any]], skip: Iterable[str] = ()) -> str:
    """``rows`` as CSV text: a header of the first row's keys (less ``skip``), then one line per row; a key a
    row lacks and a None value are empty cells, keys beyond the header are left out."""
    fields = [k for k in rows[0] if k not in set(skip)]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, restval="", extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: "" if v is None else v for k, v in row.items()} for row in rows)
    return buf.getvalue()


# ------------------------------------------------------------------------------------------------- TOML
class TomlError(ValueError):
    """A TOML file is missing or invalid; the message names the file."""


def load_toml(path: Union[str, Path], what: str = "TOML file") -> dict:
    """The table of ``path``; raise TomlError("WHAT PATH not found" / "PATH is not valid TOML: ...")."""
    path = Path(path)
    if not path.is_file():
        raise TomlError(f"{what} {path} not found")
    with open(path, "rb") as f:
        try:
            return tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise TomlError(f"{path} is not valid TOML: {e}") from None


# -------------------------------------------------------------------------------------------- command line
def fail(msg: str) -> int:
    """Print ``error: MSG`` to stderr; return 2, a command's exit status for input it refuses."""
    print(f"error: {msg}", file=sys.stderr)
    return 2


def int_at_least(low: int):
    """An argparse ``type``: an integer >= ``low``, else an error naming the valid range."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low} (got {value})")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


# ------------------------------------------------------------------------------------------------ machine
CPUINFO = "/proc/cpuinfo"


def cpu_model(cpuinfo: str) -> str:
    """The processor's name in the text of /proc/cpuinfo (its first ``model name`` line), or "" if none."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value.strip():
            return value.strip()
    return ""


def cpu_name(cpuinfo: Union[str, Path, None] = None) -> str:
    """This machine's processor, as runs and benchmarks record it: ``cpu_model`` of ``cpuinfo`` (default
    CPUINFO, Linux's), else what the platform module says, else "cpu"."""
    try:
        text = Path(cpuinfo or CPUINFO).read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    return cpu_model(text) or platform.processor() or platform.machine() or "cpu"


# ------------------------------------------------------------------------------------------------ figures
def pyplot():
    """matplotlib.pyplot on the Agg backend (files only, no display), with matplotlib's logger at WARNING (fairseq
    may leave the root logger at DEBUG). Imported on first use: matplotlib is an optional dependency."""
    import logging

    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def png_bytes(fig, **savefig: Any) -> bytes:
    """``fig`` as PNG bytes (``savefig``: matplotlib's savefig keywords, e.g. dpi); the figure is closed."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", **savefig)
    pyplot().close(fig)
    return buf.getvalue()


def plugin_digest() -> str:
    """sha256 (first 16 hex digits) of pe_plugin's Python sources, paths and contents: which attention code a
    recording counted (the plugin is being changed while its counts are recorded)."""
    import hashlib

    h = hashlib.sha256()
    root = Path(plugin_dir())
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]

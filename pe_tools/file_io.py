"""Files a tool writes and reads: atomic writes (a reader never sees a partial file, several files replaced
together), JSON with one rule for NaN and infinity, CSV text, and TOML loading with clear errors. Standard
library only (no torch, no fairseq, no numpy import)."""
import contextlib
import csv
import io
import json
import math
import os
import tempfile
import tomllib
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Union


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


def read_json_object(path: Union[str, Path]) -> dict:
    """The JSON object in ``path``, or {} when the file is missing, unreadable, not JSON or not an object: for state
    files another process may be writing or may never have written."""
    try:
        obj = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return obj if isinstance(obj, dict) else {}


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

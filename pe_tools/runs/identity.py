"""A run's identity: every key that tells two decodes apart (recipe, language pair, size, updates, changed flags, the
decode's checkpoints, method, seed), read from the run's command.json (pe-train writes it) and its decode's meta
file (pe-generate writes it).

Every comparison is derived from ``IDENTITY``: the runs one report (or one pe-evaluate table) compares are equal in
every key but ``COMPARED``, the keys it sets side by side. Standard library and base modules only: pe-evaluate,
pe-record and pe-report import it alike."""
from typing import Dict, List, Optional

from ..checkpoint_files import PATTERNS

# A run's identity: every key that tells two runs apart. The runs one report (or one pe-evaluate table) compares are
# equal in every key but COMPARED, the keys it sets side by side; a run differing from the baseline's in any other
# key is refused, or marked when asked (pe-evaluate --allow-mismatch). Every comparison is derived from this tuple.
IDENTITY = ("recipe", "pair", "size", "updates", "changes", "decode", "method", "seed")
COMPARED = ("method", "seed")


def changes(command: dict) -> List[str]:
    """The fairseq flags a run added to its recipe's command (pe-train's flags after ``--``): command.json's
    ``extra``; in a command.json of an older pe-train, which did not write it, the argv after ``--save-dir RUN``
    (where pe-train puts them, after the ``--fp16`` it adds on a GPU)."""
    if "extra" in command:
        return [str(x) for x in command["extra"]]
    argv = [str(x) for x in command.get("argv", [])]
    if "--save-dir" not in argv:
        return []
    tail = argv[len(argv) - argv[::-1].index("--save-dir") + 1:]
    return tail[1:] if tail[:1] == ["--fp16"] else tail


def decode_updates(meta: dict, command: Optional[dict] = None) -> Optional[int]:
    """The update a decode stands for: its newest averaged checkpoint's (meta ``checkpoints``, checkpoint_E_U.pt),
    else the training summary's last update, else the command's --max-update; None when none is known."""
    names = meta.get("checkpoints") or []
    if names and (m := PATTERNS["update"].fullmatch(str(names[-1]))):
        return int(m[1])
    if (meta.get("training") or {}).get("updates") is not None:
        return int(meta["training"]["updates"])
    return max_update_of((command or {}).get("argv", []))


def decode_of(meta: dict) -> Optional[str]:
    """What a decode's meta file says it decoded (``checkpoints``, the files pe-generate averaged), beside the update
    it ends at (``updates``): ``1 checkpoint`` or ``average of N checkpoints spanning S updates`` (the average of the
    last 4 and the last checkpoint alone are not alike, nor are averages over other spans), the file names where
    they are not update checkpoints; None for a meta file without ``checkpoints``."""
    names = [str(n) for n in meta.get("checkpoints") or []]
    if not names:
        return None
    updates = [int(m[1]) for n in names if (m := PATTERNS["update"].fullmatch(n))]
    if len(updates) < len(names):
        return f"{len(names)} checkpoint(s) " + ", ".join(names)
    if len(updates) == 1:
        return "1 checkpoint"
    return f"average of {len(updates)} checkpoints spanning {max(updates) - min(updates)} updates"


def max_update_of(argv) -> Optional[int]:
    """The --max-update of a fairseq-train argv (the last one wins), or None."""
    flags = [i for i, x in enumerate(argv) if x == "--max-update"]
    return int(argv[flags[-1] + 1]) if flags else None


# how each key of IDENTITY is read from a run's command.json and its decode's meta file
_IDENTITY_OF = {
    "recipe": lambda command, meta: command.get("recipe"),
    "pair": lambda command, meta: command.get("pair"),
    "size": lambda command, meta: command.get("size"),
    "updates": lambda command, meta: decode_updates(meta, command),
    "changes": lambda command, meta: " ".join(changes(command)),
    "decode": lambda command, meta: decode_of(meta),
    "method": lambda command, meta: command.get("method"),
    "seed": lambda command, meta: None if command.get("seed") is None else int(command["seed"]),
}


def run_identity(command: dict, meta: Optional[dict] = None) -> Dict:
    """The ``IDENTITY`` of a decoded run, key by key: its command.json and the decode's meta file (the updates and the
    checkpoints; ``decode`` is left out where the meta file names no checkpoints, and is then not compared)."""
    ident = {key: _IDENTITY_OF[key](command, meta or {}) for key in IDENTITY}
    return {key: value for key, value in ident.items() if key != "decode" or value is not None}


def identity_differences(run: dict, baseline: dict) -> List[str]:
    """``key VALUE (baseline VALUE)`` for each identity key, outside COMPARED, in which ``run`` differs from
    ``baseline``; a key missing on either side is not compared."""
    return [f"{k} {_shown(run[k])} (baseline {_shown(baseline[k])})" for k in IDENTITY
            if k not in COMPARED and k in run and k in baseline and run[k] != baseline[k]]


def _shown(value) -> str:
    return repr(value) if value in ("", None) else str(value)

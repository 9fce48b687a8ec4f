"""The one reader of fairseq-train's progress lines, in both formats it logs them.

fairseq 0.12 logs three kinds of progress line, each under a logger named after it (``--log-format simple``,
this project's recorded runs, and ``json``, its recipes' format since):

    train_inner   every --log-interval updates
        simple: ``... | INFO | train_inner | epoch 002:      5 / 5 loss=5.396, nll_loss=5.237, ..., num_updates=10, ...``
        json:   ``... | INFO | train_inner | {"epoch": 2, "update": 2.0, "loss": "5.396", ..., "num_updates": "10", ...}``
    train         at the end of an epoch
        simple: ``... | INFO | train | epoch 001 | loss 5.737 | ... | num_updates 5 | lr 0.003 | ...``
        json:   ``... | INFO | train | {"epoch": 1, "train_loss": "5.737", ..., "train_num_updates": "5", ...}``
    valid         after each validation of subset S (the logger is named S)
        simple: ``... | INFO | valid | epoch 001 | valid on 'valid' subset | loss 5.068 | ... | num_updates 5 | best_loss 5``
        json:   ``... | INFO | valid | {"epoch": 1, "valid_loss": "5.068", ..., "valid_num_updates": "5", "valid_best_loss": ...}``

Before fairseq's first ``train_inner`` line, pe_plugin logs one after each of a process's first updates
(pe_plugin/first_updates.py), kind ``first``:
        ``... | INFO | pe_plugin.progress | num_updates 5``

``records`` turns a log (all segments of a resumed run, mixed formats included) into ``Record``s with the same
keys whatever the format (``loss``, ``nll_loss``, ``num_updates``, ``best_loss``, ...: the json print's
``S_`` prefix removed). Every other line is skipped. Standard library and pe_tools.naming only.
"""
import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Dict, Iterable, List, Optional

from ..naming import PROGRESS_LOGGER

LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) \| INFO \| ([\w.-]+) \| (.*)$")
SIMPLE_VALID = re.compile(r"^epoch \d+ \| valid on '([^']+)' subset \| (.*)$")
SIMPLE_INNER = re.compile(r"^epoch \d+:(?:\s+\d+ / \d+)? (.*)$")
SIMPLE_EPOCH = re.compile(r"^epoch (\d+) \| (.*)$")
FIRST = re.compile(r"^num_updates (\d+)$")  # pe_plugin's line after one of a run's first updates


@dataclass
class Record:
    kind: str  # "train_inner", "train" (an epoch's end), "valid" or "first" (pe_plugin's, after a first update)
    time: datetime
    stats: Dict[str, object] = field(default_factory=dict)  # numbers as float (int where whole), else str
    subset: Optional[str] = None  # the validated subset (valid only)

    @property
    def updates(self) -> Optional[int]:
        n = self.stats.get("num_updates")
        return int(n) if n is not None else None

    def get(self, key: str) -> Optional[float]:
        value = self.stats.get(key)
        return float(value) if isinstance(value, (int, float)) else None


def _number(text: str):
    try:
        value = float(text)
    except ValueError:
        return text.strip()
    return int(value) if value.is_integer() and re.fullmatch(r"-?\d+", text.strip()) else value


def _pairs(parts: Iterable[str], sep: str) -> Dict[str, object]:
    out = {}
    for part in parts:
        key, _, value = part.strip().partition(sep)
        if key and value:
            out[key.strip()] = _number(value)
    return out


def parse_line(line: str) -> Optional[Record]:
    """The progress record of one log line, or None for any other line."""
    m = LINE.match(line.rstrip("\n"))
    if not m:
        return None
    time, tag, payload = datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S"), m[2], m[3]
    if tag == PROGRESS_LOGGER:
        return Record("first", time, {"num_updates": int(first[1])}) if (first := FIRST.match(payload)) else None
    if payload.startswith("{"):
        try:
            stats = json.loads(payload)
        except json.JSONDecodeError:
            return None
        if not isinstance(stats, dict):
            return None
        if tag == "train_inner":
            return Record("train_inner", time, {k: _number(str(v)) for k, v in stats.items()})
        prefix = tag + "_"
        if f"{prefix}num_updates" not in stats and f"{prefix}loss" not in stats:
            return None
        own = {k[len(prefix):]: _number(str(v)) for k, v in stats.items() if k.startswith(prefix)}
        own.setdefault("epoch", stats.get("epoch"))
        return Record("train", time, own) if tag == "train" else Record("valid", time, own, subset=tag)
    if tag == "train_inner" and (inner := SIMPLE_INNER.match(payload)):
        return Record("train_inner", time, _pairs(inner[1].split(","), "="))
    if valid := SIMPLE_VALID.match(payload):
        return Record("valid", time, _pairs(valid[2].split(" | "), " "), subset=valid[1])
    if tag == "train" and (epoch := SIMPLE_EPOCH.match(payload)):
        return Record("train", time, {"epoch": int(epoch[1]), **_pairs(epoch[2].split(" | "), " ")})
    return None


def records(log_text: str, kind: Optional[str] = None) -> List[Record]:
    """Every progress record of ``log_text`` in order (only those of ``kind`` when given)."""
    out = (parse_line(line) for line in log_text.splitlines())
    return [r for r in out if r is not None and (kind is None or r.kind == kind)]


def last_update(log_text: str) -> Optional[int]:
    """The highest update any progress line reports, or None."""
    updates = [r.updates for r in records(log_text) if r.updates is not None]
    return max(updates) if updates else None


def validations(log_text: str, subset: str = "valid") -> List[Record]:
    """The validations of ``subset``, one per update (a resumed run's repeated validation keeps the last), by update."""
    by_update = {r.updates: r for r in records(log_text, "valid") if r.subset == subset and r.updates is not None}
    return [by_update[u] for u in sorted(by_update)]

"""Readers of the recorded files that the documents' figures are checked against: a recorded CSV's rows, the
recorded GPU runs of pe-bench models, and a document's text with its whitespace runs made single spaces (so that a
figure or phrase wrapped across lines is found)."""
import csv
import json
import re
from pathlib import Path

from pe_testing import REPO


def read_csv(path: Path) -> list:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def gpu_models():
    """{(pe, length): result} of the recorded H100 runs of pe-bench models (fp16, base, one process): every row of
    models.json, the encodings re-measured after a change (models_after.json, each against its own run's SAPE)
    in their place."""
    rows = {}
    for name in ("models", "models_after"):
        data = json.loads((REPO / "examples" / "benchmarks" / "gpu" / f"{name}.json").read_text())
        assert data["complete"] and data["settings"]["fp16"] and data["settings"]["device"] == "cuda"
        rows.update({(r["pe"], r["length"]): r for r in data["results"]
                     if r["size"] == "base" and (name == "models" or r["pe"] not in ("sape", "stock"))})
    return rows


def flat(doc: str) -> str:
    return re.sub(r"\s+", " ", (REPO / doc).read_text(encoding="utf-8"))

"""The length experiment (`make length`) end to end at toy scale: train-short corpus with a long split ->
prepare.sh raw -> train.sh -> generate.sh -> evaluate.py by source length, and the untrained-positions note; a
second run resumes without retraining."""
import csv
import json
import subprocess
import sys

import pytest
from pe_testing import REPO, call_main

pytestmark = pytest.mark.slow

RUN = [sys.executable, str(REPO / "scripts" / "length_experiment.py")]
SMALL = ["--train", "200", "--heldout", "12", "--long", "12", "--max-train-words", "12", "--updates", "6",
         "--methods", "lape", "--jobs", "2"]


def bpe_positions(path, rows=slice(None)):
    """Positions the longest line of a BPE file needs: its tokens plus the end-of-sentence token."""
    return max(len(line.split()) for line in path.read_text(encoding="utf-8").splitlines()[rows]) + 1


def test_length_experiment_runs_and_resumes(tmp_path):
    out = tmp_path / "len"
    first = subprocess.run([*RUN, "--out", out, *SMALL], capture_output=True, text=True, cwd=tmp_path)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    for step in ("sape: train transformer_sape_tiny", "lape: train transformer_lape_tiny", "on the long split",
                 "per source-length bucket"):
        assert step in first.stdout, first.stdout[-3000:]

    raw = out / "raw"
    for split in ("train", "valid", "test"):
        assert max(len(s.split()) for s in (raw / f"{split}.en").read_text().splitlines()) <= 12
    assert min(len(s.split()) for s in (raw / "long.en").read_text().splitlines()) > 12
    for method in ("sape", "lape"):
        run = out / "runs" / f"{method}.en-de.tiny.seed1"
        argv = json.loads((run / "command.json").read_text())["argv"]
        assert argv[argv.index("--max-source-positions") + 1] == argv[argv.index("--max-target-positions") + 1] \
            == "1024"
        assert len((run / "gen" / "hyp.long.de").read_text().splitlines()) == 12  # every long sentence translated
        assert (run / "gen" / "ref.long.de").read_text() == (raw / "long.de").read_text()

    results = out / "results"
    for split in ("test", "long"):
        report = json.loads((results / f"{split}.json").read_text())
        assert report["segments"] == 12 and [s["name"] for s in report["systems"]] == ["sape", "lape"]
    rows = list(csv.DictReader((results / "all_length.csv").open(encoding="utf-8")))
    filled = {r["bucket"] for r in rows if r["segments"] != "0"}
    assert filled and all({r["system"] for r in rows if r["bucket"] == b} == {"sape", "lape"} for b in filled)
    assert sum(int(r["segments"]) for r in rows if r["system"] == "sape") == 24
    assert (results / "all_length.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (results / "all_length.md").read_text(encoding="utf-8")
    assert "| sape (baseline) |" in md and "| lape |" in md and "nrefs:1|bs:1000" in md

    # LAPE's table has a 64-dim row per position (tiny size), on each side: the rows past the longest training
    # pair, up to the longest long-split pair, are the ones used untrained; SAPE has no position parameters
    text = out / "data" / "text"
    grow = sum(bpe_positions(text / f"test.{lang}", slice(12, None)) - bpe_positions(text / f"train.{lang}")
               for lang in ("en", "de"))
    positions = json.loads((results / "positions.json").read_text())["encodings"]
    assert grow > 0 and positions["lape"]["untrained_used"] == 64 * grow
    assert positions["sape"]["position_parameters"] == positions["sape"]["untrained_used"] == 0
    assert "| lape |" in (results / "positions.md").read_text()

    again = subprocess.run([*RUN, "--out", out, *SMALL], capture_output=True, text=True, cwd=tmp_path)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert again.stdout.count("decoded already") == 2 and "train transformer_" not in again.stdout


def test_bad_flags_name_the_flag(tmp_path):
    from pe_tools.length_experiment import main

    for argv, words in ((["--methods", "sape,bogus"], ["--methods", "bogus", "lape"]),
                        (["--max-train-words", "3"], ["--max-train-words 3"]),
                        (["--long-clauses", "2", "--max-train-words", "33"], ["--long-clauses 2"]),
                        (["--updates", "2"], ["--updates"])):
        out = call_main(main, ["--out", tmp_path, *argv], prog="length_experiment.py")  # RUN's, in this interpreter
        assert out.returncode == 2 and all(w in out.stderr for w in words), out.stderr

"""The length experiment (`make length`) end to end at toy scale: train-short corpus with a long split ->
prepare.sh raw -> train.sh -> generate.sh -> evaluate.py by source length, and the untrained-positions note; a
second run resumes without retraining."""
import csv
import json
import subprocess
import sys

import pytest
from pe_testing import REPO, call_main

RUN = [sys.executable, str(REPO / "scripts" / "length_experiment.py")]
SMALL = ["--train", "200", "--heldout", "12", "--long", "12", "--max-train-words", "12", "--updates", "6",
         "--methods", "lape", "--jobs", "2"]


def bpe_positions(path, rows=slice(None)):
    """Positions the longest line of a BPE file needs: its tokens plus the end-of-sentence token."""
    return max(len(line.split()) for line in path.read_text(encoding="utf-8").splitlines()[rows]) + 1


@pytest.mark.slow
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


@pytest.mark.slow
def test_bad_flags_name_the_flag(tmp_path):
    from pe_tools.length_experiment import main

    for argv, words in ((["--methods", "sape,bogus"], ["--methods", "bogus", "lape"]),
                        (["--max-train-words", "3"], ["--max-train-words 3"]),
                        (["--long-clauses", "2", "--max-train-words", "33"], ["--long-clauses 2"]),
                        (["--updates", "2"], ["--updates"])):
        out = call_main(main, ["--out", tmp_path, *argv], prog="length_experiment.py")  # RUN's, in this interpreter
        assert out.returncode == 2 and all(w in out.stderr for w in words), out.stderr


def test_every_system_s_hypotheses_and_references_are_cut_into_test_and_long(tmp_path):
    """split_outputs: each system's decode of raw/eval (the test split, then the long split) is cut at the test
    split's length into RUN/gen/{hyp,ref}.{test,long}.de, the first system's as every other's, references as
    hypotheses; each hypothesis file gets the decode's meta file. A hypothesis or a reference file of another
    length than raw/eval is refused naming it."""
    import argparse

    from pe_tools.length_experiment import LengthExperiment

    out = tmp_path / "len"
    (out / "raw").mkdir(parents=True)
    (out / "raw" / "test.en").write_text("a\nb\n", encoding="utf-8")
    (out / "raw" / "long.en").write_text("c c c\n", encoding="utf-8")
    exp = LengthExperiment(argparse.Namespace(out=out, jobs=1, updates=8, max_positions=1024))
    systems = {}
    for method in ("sape", "lape", "rope"):
        gen = out / "runs" / method / "gen"
        gen.mkdir(parents=True)
        for name in ("hyp", "ref"):
            (gen / f"{name}.detok.de").write_text("".join(f"{name} {method} {i}\n" for i in range(3)),
                                                  encoding="utf-8")
        (gen / "hyp.detok.de.meta.json").write_text(json.dumps({"method": method}), encoding="utf-8")
        systems[method] = gen / "hyp.detok.de"
    split = exp.split_outputs(systems)
    assert split["all"] == systems
    for method, hyp in systems.items():
        gen = hyp.parent
        for name in ("hyp", "ref"):
            assert (gen / f"{name}.test.de").read_text(encoding="utf-8") == f"{name} {method} 0\n{name} {method} 1\n"
            assert (gen / f"{name}.long.de").read_text(encoding="utf-8") == f"{name} {method} 2\n"
        for part in ("test", "long"):
            assert split[part][method] == gen / f"hyp.{part}.de"
            assert json.loads((gen / f"hyp.{part}.de.meta.json").read_text()) == {"method": method}
    for method in systems:
        for name in ("hyp", "ref"):
            cut = systems[method].parent / f"{name}.detok.de"
            whole = cut.read_text(encoding="utf-8")
            cut.write_text("x\n", encoding="utf-8")
            with pytest.raises(SystemExit, match=f"{cut} has 1 lines, not the 3 of raw/eval.de"):
                exp.split_outputs(systems)
            cut.write_text(whole, encoding="utf-8")

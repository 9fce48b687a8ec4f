"""The demo (`make demo`) end to end at toy scale: grammar corpus -> prepare.sh raw -> train.sh -> generate.sh ->
evaluate.py and probe.py, for no-PE, SAPE and PosNet-Embed; a second run resumes without retraining."""
import json
import subprocess
import sys

import pytest
from pe_testing import REPO, call_main

pytestmark = pytest.mark.slow

DEMO = [sys.executable, str(REPO / "scripts" / "demo.py")]
SMALL = ["--train", "200", "--heldout", "12", "--updates", "6", "--no-extra", "--jobs", "2"]


def test_demo_runs_the_recipe_and_resumes(tmp_path):
    out = tmp_path / "demo"
    first = subprocess.run([*DEMO, "--out", out, *SMALL], capture_output=True, text=True, cwd=tmp_path)
    # after 6 updates no model translates, so the demo's own check (no-PE 10 BLEU or more below every encoding)
    # may fail: its verdict and exit status must be the ones the recorded scores call for
    report = json.loads((out / "results" / "results.json").read_text())
    bleu = {s["name"]: s["summary"]["bleu"]["mean"] for s in report["systems"]}
    gap = min(b for m, b in bleu.items() if m != "nope") - bleu["nope"]
    assert first.returncode == (0 if gap >= 10 else 1), first.stdout[-3000:] + first.stderr[-3000:]
    assert f"no-PE BLEU {bleu['nope']:.1f}; " in first.stdout and f": {gap:+.1f} (" in first.stdout
    assert ("(as expected)" if gap >= 10 else "(UNEXPECTED: ") in first.stdout
    for step in ("prepare: pe-prepare raw", "nope: train transformer_nope_tiny",
                 "sape: train transformer_sape_tiny", "posnet_embed: train transformer_posnet_embed_tiny",
                 "evaluate: BLEU, chrF++, paired bootstrap"):
        assert step in first.stdout, first.stdout[-3000:]

    assert report["baseline"] == "sape" and report["segments"] == 12
    assert [s["name"] for s in report["systems"]] == ["sape", "nope", "posnet_embed"]
    for s in report["systems"]:
        assert s["pe_signature"].startswith(f"pe:{s['name']}|")
        assert "version:" in s["summary"]["bleu"]["signature"]
    for method in ("nope", "sape", "posnet_embed"):
        gen = out / "runs" / f"{method}.en-de.tiny.seed1" / "gen"
        assert len((gen / "hyp.detok.de").read_text().splitlines()) == 12
        assert (gen / "ref.detok.de").read_text() == (out / "raw" / "test.de").read_text()
        assert list((out / "analysis" / method).glob("*.png"))
        assert (out / "analysis" / method / "swap_probe.json").exists()
        assert f"\n| {method} | " in (out / "results" / "analysis.md").read_text()
    assert list((out / "results").glob("*.png"))

    again = subprocess.run([*DEMO, "--out", out, *SMALL], capture_output=True, text=True, cwd=tmp_path)
    assert again.returncode == first.returncode
    assert again.stdout.count("decoded already") == 3 and "train transformer_" not in again.stdout


def test_bad_flags_name_the_flag(tmp_path):
    from pe_tools.demo import main

    for flag, value in (("--updates", "2"), ("--jobs", "0"), ("--heldout", "3")):
        out = call_main(main, ["--out", tmp_path, flag, value], prog="demo.py")  # DEMO's main, in this interpreter
        assert out.returncode == 2 and flag in out.stderr, out.stderr


@pytest.mark.parametrize("bleu, code, verdict", [
    ({"sape": 30.0, "nope": 5.0, "posnet_embed": 15.0}, 0, "no-PE BLEU 5.0; the weakest encoding (posnet_embed) 15.0: "
                                                          "+10.0 (as expected)"),
    ({"sape": 30.0, "nope": 5.0, "posnet_embed": 14.9}, 1, "+9.9 (UNEXPECTED: every encoding should lead by 10 BLEU"),
    ({"sape": 3.0, "nope": 5.0, "posnet_embed": 40.0}, 1, "(sape) 3.0: -2.0 (UNEXPECTED"),
])
def test_the_verdict_is_no_pe_against_the_weakest_encoding(bleu, code, verdict, capsys):
    """The demo's check: no-PE 10 BLEU or more below every encoding, exit status 0; else 1 and UNEXPECTED."""
    from pe_tools import demo

    report = {"systems": [{"name": m, "summary": {"bleu": {"mean": b}}} for m, b in bleu.items()]}
    assert demo.check_order_matters(report) == code
    assert verdict in capsys.readouterr().out

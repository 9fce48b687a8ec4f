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


def test_several_tools_run_in_one_interpreter_in_order_and_stop_at_the_first_failure(tmp_path):
    """process.mains_argv (the demo's two probes of a model in one child): each module's main(argv) in order, as
    `python -m MODULE` would run it; the first non-zero status (returned, argparse's, or sys.exit's message) ends
    the child with it and the later tools do not run."""
    import os
    from pe_tools.process import mains_argv

    (tmp_path / "tool_a.py").write_text("import sys\ndef main(argv):\n    assert sys.argv[1:] == argv\n"
                                        "    open(argv[0], 'a').write(f'a {sys.argv[0]} ' + ' '.join(argv[1:]) + '\\n')\n"
                                        "    return 0\n")
    (tmp_path / "tool_b.py").write_text("def main(argv):\n    open(argv[0], 'a').write('b\\n')\n    return int(argv[1])\n")
    (tmp_path / "tool_c.py").write_text("import argparse\ndef main(argv):\n    p = argparse.ArgumentParser()\n"
                                        "    p.add_argument('--x', type=int)\n    p.parse_args(argv)\n")
    (tmp_path / "tool_d.py").write_text("import sys\ndef main(argv):\n    sys.exit('no such file: ' + argv[0])\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]))
    trace = tmp_path / "trace.txt"

    def run(calls):
        trace.unlink(missing_ok=True)
        proc = subprocess.run(mains_argv(calls), capture_output=True, text=True, env=env, cwd=tmp_path)
        return proc, trace.read_text() if trace.exists() else ""

    proc, ran = run([("tool_a", [trace, "x y", 3]), ("tool_b", [trace, 0])])
    assert (proc.returncode, ran) == (0, "a tool_a x y 3\nb\n"), proc.stderr
    assert f"== python -m tool_a {trace} 'x y' 3\n" in proc.stdout and f"== python -m tool_b {trace} 0\n" in proc.stdout
    proc, ran = run([("tool_b", [trace, 3]), ("tool_a", [trace])])
    assert (proc.returncode, ran) == (3, "b\n")
    proc, ran = run([("tool_c", ["--x", "no"]), ("tool_a", [trace])])
    assert (proc.returncode, ran) == (2, "") and "usage: tool_c" in proc.stderr
    proc, ran = run([("tool_d", ["f.txt"]), ("tool_a", [trace])])
    assert (proc.returncode, ran) == (1, "") and "no such file: f.txt" in proc.stderr

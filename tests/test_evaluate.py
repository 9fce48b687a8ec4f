"""scripts/evaluate.py against independent references: sacrebleu's own CLI (scores, CIs, p-values,
signatures), perl's compound-split one-liner plus a closed-form BLEU-4, and direct sacrebleu calls.
No expected number here comes from evaluate.py itself."""
import csv
import functools
import json
import math
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
from argparse import Namespace
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from sacrebleu.metrics import BLEU, CHRF
from sacremoses import MosesTokenizer

from pe_testing import lines as lines_of

from pe_tools import file_io
from pe_tools.scoring import cli as scoring_cli, metrics as scoring_metrics, significance
from pe_tools.scoring import style

REPO = Path(__file__).resolve().parents[1]

WORDS = ("der die das Haus Auto-Bahn Welt ist groß klein und oder nicht sehr gut Stadt-Rand Mann Frau Kind "
         "geht läuft sieht , . ! ? \" 's (heute) 3,5 E-Mail Haus. „Zug“ well-known").split()
N_SEG = 60


def _perturb(line, rate, rng):
    out = []
    for tok in line.split():
        x = rng.random()
        if x < rate / 3:
            continue  # drop
        out += [rng.choice(WORDS)] if x < 2 * rate / 3 else [tok, rng.choice(WORDS)] if x < rate else [tok]
    return " ".join(out)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """ref.de and hypotheses of three quality levels; two runs (seeds) each."""
    d = tmp_path_factory.mktemp("corpus")
    rng = random.Random(11)
    ref = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 20))) for _ in range(N_SEG)]
    (d / "ref.de").write_text("\n".join(ref) + "\n", encoding="utf-8")
    for name, rate in [("base", 0.3), ("good", 0.15), ("bad", 0.4)]:
        for run in (1, 2):
            r = random.Random(f"{name}{run}")
            text = "\n".join(_perturb(s, rate, r) for s in ref) + "\n"
            (d / f"{name}{run}.de").write_text(text, encoding="utf-8")
    return d


def evaluate(corpus, out, *extra):
    """evaluate.py's main() run inside the corpus folder, so that file names stay short and relative; the corpus's
    files have no meta files (--allow-unchecked)."""
    cwd = os.getcwd()
    os.chdir(corpus)
    try:
        return scoring_cli.main(["--ref", "ref.de", "--trg-lang", "de", "--out-dir", str(out), "--allow-unchecked",
                                 *extra])
    finally:
        os.chdir(cwd)


def load_json(out, prefix="results"):
    return json.loads((out / f"{prefix}.json").read_text(encoding="utf-8"))


def by_name(report):
    return {s["name"]: s for s in report["systems"]}


def sacrebleu_cli(cwd, args, seed=None):
    env = {k: v for k, v in os.environ.items() if k != "SACREBLEU_SEED"}
    if seed is not None:
        env["SACREBLEU_SEED"] = str(seed)
    res = subprocess.run([sys.executable, "-m", "sacrebleu", *args], cwd=cwd, env=env,
                         capture_output=True, text=True, check=True)
    return res.stdout


def parse_cli_bootstrap(text):
    """sacrebleu -f text -w 4 --no-color: cells 'score (mu ± ci)' row by row, then '(p = x)' per system."""
    cells = [tuple(map(float, m)) for m in re.findall(r"(\d+\.\d+) \((\d+\.\d+) ± (\d+\.\d+)\)", text)]
    pvals = [float(p) for p in re.findall(r"\(p = (\d\.\d+)\)", text)]
    sigs = dict(re.findall(r"^ - (\S+)\s+(nrefs:\S+)$", text, flags=re.M))
    return cells, pvals, sigs


def assert_bootstrap_cell(mine, cli_cell, cli_p=None):
    score, mu, ci = cli_cell
    assert mine["score"] == pytest.approx(score, abs=6e-5)
    assert mine["mu"] == pytest.approx(mu, abs=6e-5)
    assert mine["ci95"] == pytest.approx(ci, abs=6e-5)
    if cli_p is not None:
        assert mine["p"] == pytest.approx(cli_p, abs=6e-5)


# ------------------------------------------------------------------------------------------------
# Agreement with sacrebleu's CLI


def test_defaults_match_sacrebleu_cli_paired_bootstrap(corpus, tmp_path, monkeypatch):
    """Default settings (1000 resamples, seed 12345) equal sacrebleu's CLI defaults, scores to p-values."""
    monkeypatch.delenv("SACREBLEU_SEED", raising=False)
    out = tmp_path / "out"
    assert evaluate(corpus, out, "--baseline", "base=base1.de", "--system", "good=good1.de",
                    "--system", "bad=bad1.de") == 0
    text = sacrebleu_cli(corpus, ["ref.de", "-i", "base1.de", "good1.de", "bad1.de", "-m", "bleu", "chrf",
                                  "--chrf-word-order", "2", "--paired-bs", "-f", "text", "-w", "4",
                                  "--no-color"])
    cells, pvals, sigs = parse_cli_bootstrap(text)
    assert len(cells) == 6 and len(pvals) == 4
    rep = by_name(load_json(out))
    for i, name in enumerate(["base", "good", "bad"]):
        run = rep[name]["runs"][0]["scores"]
        p_bleu, p_chrf = (None, None) if i == 0 else pvals[2 * i - 2: 2 * i]
        assert_bootstrap_cell(run["bleu"], cells[2 * i], p_bleu)
        assert_bootstrap_cell(run["chrf"], cells[2 * i + 1], p_chrf)
    report = load_json(out)
    assert report["metrics"]["bleu"]["signature"] == sigs["BLEU"]
    assert report["metrics"]["chrf"]["signature"] == sigs["chrF2++"]
    assert "bs:1000|seed:12345" in sigs["BLEU"]


@pytest.mark.parametrize("spec", scoring_metrics.METRICS, ids=lambda spec: spec.key)
@pytest.mark.parametrize("seed, n_samples", [(12345, 1000), (7, 333)])
def test_the_paired_bootstrap_is_sacrebleus_to_the_bit(corpus, spec, seed, n_samples):
    """significance.paired_test's bootstrap (every resample's statistics summed at once) against sacrebleu's own
    PairedTest on the same systems: every score, mean, CI and p-value equal to the bit, the signature equal, for
    each metric the reports compute; a system identical to the baseline included."""
    from sacrebleu.significance import PairedTest

    ref = lines_of(corpus / "ref.de")
    text = (lambda ls: scoring_metrics.compound_split(ls, "de")) if spec.tokenised else (lambda ls: ls)
    named = [(name, text(lines_of(corpus / f"{name}.de"))) for name in ("base1", "good1", "bad2", "base2")]
    named.append(("copy", named[0][1]))
    sig, mine = significance.paired_test(spec.build("de", [text(ref)]), named, "bs", n_samples, seed)
    with significance.sacrebleu_seed(seed):
        sigs, theirs = PairedTest(named, {"m": spec.build("de", [text(ref)])}, references=None, test_type="bs",
                                  n_samples=n_samples)()
    ((name, their_sig),) = sigs.items()
    assert sig.format() == their_sig.format()
    as_tuples = lambda results: [(r.score, r.p_value, r.mean, r.ci) for r in results]  # noqa: E731
    assert as_tuples(mine) == as_tuples(theirs[name]) and len(mine) == len(named)


def test_the_paired_bootstrap_leaves_to_sacrebleu_what_it_cannot_sum_exactly(corpus, monkeypatch):
    """Statistics that are not whole numbers, sums that float32 may round (2**24 and beyond: here 32 segments of
    2**19) and seed 0 (which sacrebleu's per-system test reads as unseeded) go to sacrebleu's PairedTest; sums
    just below 2**24 do not."""
    ref, n = lines_of(corpus / "ref.de")[:32], 32
    systems = [lines_of(corpus / f"{name}.de")[:n] for name in ("base1", "good1")]
    ran, real = [], significance.PairedTest
    monkeypatch.setattr(significance, "PairedTest", lambda *a, **k: ran.append(1) or real(*a, **k))
    bleu = BLEU(trg_lang="de", references=[ref])
    named = list(zip(("base", "good"), systems))
    for seed, sacrebleu_runs in ((3, False), (0, True)):
        ran.clear()
        significance.paired_test(bleu, named, "bs", 50, seed)
        assert ran == ([1] if sacrebleu_runs else []), seed
    for row, exact in (([0.5, 1], False), ([2 ** 19 - 1, 1], True), ([2 ** 19, 1], False), ([-1, 1], False)):
        monkeypatch.setattr(bleu, "_extract_corpus_statistics", lambda lines, refs, row=row: [row] * len(lines))
        assert (significance.paired_bootstrap(bleu, systems, 50, 3) is not None) == exact, row


def test_output_identical_to_the_baseline_gets_p_one(corpus, tmp_path):
    """A system whose output is the baseline's, line for line (the recipes' stock fairseq model beside
    transformer_sape_*): no difference, so p = 1 and no mark, where sacrebleu's own test (MultEval's strict '>')
    reports its smallest p-value 1/(N+1); a system that differs keeps sacrebleu's p."""
    out = tmp_path / "out"
    (corpus / "same1.de").write_bytes((corpus / "base1.de").read_bytes())
    assert evaluate(corpus, out, "--baseline", "base=base1.de", "--system", "same=same1.de",
                    "--system", "good=good1.de") == 0
    text = sacrebleu_cli(corpus, ["ref.de", "-i", "base1.de", "same1.de", "good1.de", "-m", "bleu", "chrf",
                                  "--chrf-word-order", "2", "--paired-bs", "-f", "text", "-w", "4", "--no-color"])
    _, pvals, _ = parse_cli_bootstrap(text)
    assert pvals[:2] == [pytest.approx(1 / 1001, abs=6e-5)] * 2  # what sacrebleu says of identical output
    rep = by_name(load_json(out))
    for key, cli_p in (("bleu", pvals[2]), ("chrf", pvals[3])):
        same = rep["same"]["runs"][0]["scores"][key]
        assert (same["p"], same["mark"], same["delta"], same["identical"]) == (1.0, "", 0.0, True)
        good = rep["good"]["runs"][0]["scores"][key]
        assert good["p"] == pytest.approx(cli_p, abs=6e-5) and "identical" not in good
    md = (out / "results.md").read_text(encoding="utf-8")
    assert "p = 1.0000" in md and "identical to its baseline run's" in md


def test_approximate_randomisation_matches_sacrebleu_cli(corpus, tmp_path):
    out = tmp_path / "out"
    assert evaluate(corpus, out, "--baseline", "base=base1.de", "--system", "good=good1.de",
                    "--system", "bad=bad1.de", "--paired", "ar", "--n-samples", "400", "--seed", "4242") == 0
    cli = json.loads(sacrebleu_cli(corpus, ["ref.de", "-i", "base1.de", "good1.de", "bad1.de", "-m", "bleu",
                                            "chrf", "--chrf-word-order", "2", "--paired-ar", "--paired-ar-n",
                                            "400", "-f", "json"], seed=4242))
    rep = by_name(load_json(out))
    for name, row in zip(["base", "good", "bad"], cli):
        mine = rep[name]["runs"][0]["scores"]
        assert mine["bleu"]["score"] == pytest.approx(row["BLEU"]["score"], abs=1e-9)
        assert mine["chrf"]["score"] == pytest.approx(row["chrF2++"]["score"], abs=1e-9)
        if name != "base":
            assert mine["bleu"]["p"] == pytest.approx(row["BLEU"]["p_value"], abs=1e-12)
            assert mine["chrf"]["p"] == pytest.approx(row["chrF2++"]["p_value"], abs=1e-12)
        assert mine["bleu"]["ci95"] > 0  # AR runs come with bootstrap CIs as well
    sig = load_json(out)["metrics"]["bleu"]["signature"]
    assert "ar:400" in sig and "seed:4242" in sig


# ------------------------------------------------------------------------------------------------
# Compound-split BLEU


def perl_compound_split(lines):
    """fairseq scripts/compound_split_bleu.sh, step for step: the perl one-liner itself (perl is required, never
    skipped: a Python re-implementation would not be an independent reference)."""
    res = subprocess.run(["perl", "-ple", r"s{(\S)-(\S)}{$1 ##AT##-##AT## $2}g"], input="\n".join(lines) + "\n",
                         capture_output=True, text=True, check=True)
    return res.stdout.split("\n")[:-1]


def closed_form_bleu4(hyps, refs):
    """Corpus BLEU-4 on whitespace tokens: clipped n-gram precisions, geometric mean, brevity penalty."""
    match, total, hyp_len, ref_len = [0] * 4, [0] * 4, 0, 0
    for h, r in zip(hyps, refs):
        h, r = h.split(), r.split()
        hyp_len, ref_len = hyp_len + len(h), ref_len + len(r)
        for n in range(1, 5):
            hc = Counter(tuple(h[i:i + n]) for i in range(len(h) - n + 1))
            rc = Counter(tuple(r[i:i + n]) for i in range(len(r) - n + 1))
            match[n - 1] += sum(min(c, rc[g]) for g, c in hc.items())
            total[n - 1] += max(len(h) - n + 1, 0)
    assert all(match), "test data must have matches at every order (no smoothing here)"
    log_prec = sum(math.log(m / t) for m, t in zip(match, total)) / 4
    bp = 1.0 if hyp_len >= ref_len else math.exp(1 - ref_len / hyp_len)
    return 100 * bp * math.exp(log_prec)


def test_compound_split_recipe_on_known_strings():
    assert scoring_metrics.compound_split(['Das well-known Auto "Haus" (heute) E-Mail&Co.'], "de") == [
        "Das well @ ##AT##-##AT## @ known Auto &quot; Haus &quot; ( heute ) E @ ##AT##-##AT## @ Mail &amp; Co."]
    # without Moses -a (tensor2tensor's get_ende_bleu.sh): perl's non-overlapping /g leaves "b-c" alone
    assert scoring_metrics.compound_split(["a-b-c well-known"], "de", aggressive=False) == perl_compound_split(
        ["a-b-c well-known"]) == ["a ##AT##-##AT## b-c well ##AT##-##AT## known"]


def test_compound_split_bleu_matches_cli_and_closed_form(corpus, tmp_path):
    tok = MosesTokenizer(lang="de")
    names = ["ref", "base1", "good1"]
    for name in names:
        lines = (corpus / f"{name}.de").read_text(encoding="utf-8").split("\n")[:-1]
        moses = [tok.tokenize(s, aggressive_dash_splits=True, escape=True, return_str=True) for s in lines]
        (tmp_path / f"{name}.tok").write_text("\n".join(perl_compound_split(moses)) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    assert evaluate(corpus, out, "--baseline", "base=base1.de", "--system", "good=good1.de",
                    "--n-samples", "200", "--seed", "99") == 0
    text = sacrebleu_cli(tmp_path, ["ref.tok", "-i", "base1.tok", "good1.tok", "-m", "bleu", "--tokenize", "none",
                                    "--force", "--paired-bs", "--paired-bs-n", "200", "-f", "text", "-w", "4",
                                    "--no-color"], seed=99)
    cells, pvals, _ = parse_cli_bootstrap(text)
    rep = by_name(load_json(out))
    assert_bootstrap_cell(rep["base"]["runs"][0]["scores"]["bleu_cs"], cells[0])
    assert_bootstrap_cell(rep["good"]["runs"][0]["scores"]["bleu_cs"], cells[1], pvals[0])
    ref = (tmp_path / "ref.tok").read_text(encoding="utf-8").split("\n")[:-1]
    for name, file in [("base", "base1"), ("good", "good1")]:
        hyp = (tmp_path / f"{file}.tok").read_text(encoding="utf-8").split("\n")[:-1]
        assert rep[name]["runs"][0]["scores"]["bleu_cs"]["score"] == pytest.approx(
            closed_form_bleu4(hyp, ref), abs=1e-6)
    assert "tok:none" in rep["good"]["summary"]["bleu_cs"]["signature"]
    assert "pre:moses-de-a+compound-split" in rep["good"]["summary"]["bleu_cs"]["signature"]


@pytest.mark.parametrize("delta, p, expected", [
    (1.2, 0.001, "++"), (0.3, 0.0499, "++"), (0.3, 0.05, "+"), (0.3, 0.0999, "+"), (0.3, 0.10, ""),
    (0.3, 0.6, ""), (-0.4, 0.01, "--"), (-0.4, 0.07, "-"), (-0.4, 0.2, ""), (0.0, 0.001, ""), (0.5, None, ""),
])
def test_significance_marks(delta, p, expected):
    """'++' p < 0.05 and '+' p < 0.10 when better than the baseline; '--'/'-' when worse."""
    assert significance.mark(delta, p) == expected


def test_lines_are_split_like_the_sacrebleu_cli(corpus, tmp_path):
    """Only '\\n' ends a line (CRLF, form feed and U+2028 do not), as in sacrebleu's CLI."""
    d = tmp_path / "in"
    shutil.copytree(corpus, d)
    lines = (d / "good1.de").read_text(encoding="utf-8").split("\n")[:-1]
    lines[3] = lines[3].replace(" ", "\u2028", 1)
    lines[5] = lines[5].replace(" ", "\x0c", 1)
    (d / "odd.de").write_bytes(("\r\n".join(lines) + "\r\n").encode("utf-8"))
    out = tmp_path / "out"
    assert evaluate(d, out, "--baseline", "base=base1.de", "--system", "odd=odd.de", "--n-samples", "50") == 0
    scores = by_name(load_json(out))["odd"]["runs"][0]["scores"]
    for metric, key, cli_args in [("bleu", "score", ["-m", "bleu"]),
                                  ("chrf", "score", ["-m", "chrf", "--chrf-word-order", "2"])]:
        cli = json.loads(sacrebleu_cli(d, ["ref.de", "-i", "odd.de", *cli_args, "-f", "json", "-w", "6"]))
        assert scores[metric]["score"] == pytest.approx(cli["score"], abs=1e-6)


# ------------------------------------------------------------------------------------------------
# Several runs per system


def test_several_runs_mean_sd_and_per_run_tests(corpus, tmp_path):
    out = tmp_path / "out"
    assert evaluate(corpus, out, "--baseline", "base=base1.de,base2.de", "--system", "good=good1.de,good2.de",
                    "--system", "bad=bad1.de,bad2.de", "--n-samples", "150", "--seed", "7") == 0
    rep = by_name(load_json(out))
    ref = (corpus / "ref.de").read_text(encoding="utf-8").split("\n")[:-1]
    for name in ["base", "good", "bad"]:
        direct = [CHRF(word_order=2).corpus_score((corpus / f"{name}{r}.de").read_text(encoding="utf-8")
                                                  .split("\n")[:-1], [ref]).score for r in (1, 2)]
        summary = rep[name]["summary"]["chrf"]
        assert summary["mean"] == pytest.approx(statistics.mean(direct), abs=1e-9)
        assert summary["sd"] == pytest.approx(statistics.stdev(direct), abs=1e-9)
    # run r of a system is tested against run r of the baseline: same p as a two-system CLI call
    for r in (1, 2):
        text = sacrebleu_cli(corpus, ["ref.de", "-i", f"base{r}.de", f"good{r}.de", f"bad{r}.de", "-m", "bleu",
                                      "--paired-bs", "--paired-bs-n", "150", "-f", "text", "-w", "4",
                                      "--no-color"], seed=7)
        _, pvals, _ = parse_cli_bootstrap(text)
        assert rep["good"]["runs"][r - 1]["scores"]["bleu"]["p"] == pytest.approx(pvals[0], abs=6e-5)
        assert rep["bad"]["runs"][r - 1]["scores"]["bleu"]["p"] == pytest.approx(pvals[1], abs=6e-5)
        assert rep["good"]["runs"][r - 1]["scores"]["bleu"]["baseline_run"] == r
    # the table's mark holds for every run: it follows the largest p-value and the shared sign
    for name in ["good", "bad"]:
        for key in ["bleu", "chrf", "bleu_cs"]:
            runs = [run["scores"][key] for run in rep[name]["runs"]]
            p = max(x["p"] for x in runs)
            signs = {math.copysign(1, x["delta"]) for x in runs}
            expect = "" if len(signs) > 1 or p >= 0.10 else ("+" if signs == {1.0} else "-") * (2 if p < 0.05 else 1)
            assert rep[name]["summary"][key]["mark"] == expect
    table = list(csv.DictReader((out / "results.csv").open(encoding="utf-8")))
    assert [row["runs"] for row in table] == ["2", "2", "2"] and table[1]["chrf_sd"] != ""
    assert len(list(csv.DictReader((out / "results_runs.csv").open(encoding="utf-8")))) == 6


def test_single_baseline_run_pairs_with_every_system_run(corpus, tmp_path):
    out = tmp_path / "out"
    assert evaluate(corpus, out, "--baseline", "base=base1.de", "--system", "good=good1.de,good2.de",
                    "--n-samples", "100") == 0
    runs = by_name(load_json(out))["good"]["runs"]
    assert [run["scores"]["bleu"]["baseline_run"] for run in runs] == [1, 1]


# ------------------------------------------------------------------------------------------------
# Bad input: a clear error, exit code 2, and no output at all


def _bad_utf8(d):
    (d / "latin1.de").write_bytes((d / "good1.de").read_bytes().replace(b"\n", b"\n\xe4 ", 3))
    return ["--baseline", "base=base1.de", "--system", "x=latin1.de"], ["latin1.de", "UTF-8", "line 2"]


def _short(d):
    (d / "short.de").write_text("\n".join((d / "good1.de").read_text(encoding="utf-8").split("\n")[:-3]) + "\n")
    return ["--baseline", "base=base1.de", "--system", "x=short.de"], ["short.de", "ref.de", f"{N_SEG - 2} lines",
                                                                      f"{N_SEG} lines"]


def _empty(d):
    (d / "empty.de").write_bytes(b"")
    return ["--baseline", "base=empty.de", "--system", "good=good1.de"], ["empty.de", "empty"]


BAD_INPUTS = {
    "line counts differ": _short,
    "empty file": _empty,
    "not UTF-8": _bad_utf8,
    "no baseline": lambda d: (["--system", "good=good1.de"], ["baseline", "--baseline"]),
    "baseline file missing": lambda d: (["--baseline", "base=nope.de", "--system", "good=good1.de"],
                                        ["nope.de", "not found"]),
    "no NAME=": lambda d: (["--baseline", "base1.de", "--system", "good=good1.de"], ["NAME=FILE"]),
    "empty NAME": lambda d: (["--baseline", "base=base1.de", "--system", "=good1.de"], ["'=good1.de'", "NAME=FILE"]),
    "meta without a file": lambda d: (["--baseline", "base=base1.de", "--system", "good=good1.de", "--meta", "good="],
                                      ["--meta 'good='", "expected NAME=FILE.json"]),
    "duplicate name": lambda d: (["--baseline", "base=base1.de", "--system", "base=good1.de"], ["'base'"]),
    "run counts differ": lambda d: (["--baseline", "base=base1.de,base2.de", "--system", "good=good1.de"],
                                    ["good has 1 runs", "base has 2"]),
    "run counts differ, first of two systems": lambda d: (  # every system checked, not only those after the first
        ["--baseline", "base=base1.de,base2.de", "--system", "odd=good1.de", "--system", "good=good1.de,good2.de"],
        ["odd has 1 runs", "base has 2"]),
    "seed 0": lambda d: (["--baseline", "base=base1.de", "--system", "good=good1.de", "--seed", "0"],
                         ["--seed 0", "unseeded"]),
    "bad meta": lambda d: ((d / "bad.json").write_text("{oops") and [
        "--baseline", "base=base1.de", "--system", "good=good1.de", "--meta", "good=bad.json"], ["bad.json", "JSON"]),
}


def write_source(d, lengths, name="src.en"):
    """A source file with the given number of words per line (the words themselves do not matter)."""
    rng = random.Random(len(lengths))
    (d / name).write_text("".join(" ".join(rng.choice(["the", "dog,", "sees", "a", "cat"]) for _ in range(n)) + "\n"
                                  for n in lengths), encoding="utf-8")
    return name


PAIR = ["--baseline", "base=base1.de", "--system", "good=good1.de"]


def _misaligned(d):
    rng = random.Random(1)
    name = write_source(d, [rng.randint(1, 9) for _ in range(N_SEG - 5)], "short.en")
    return [*PAIR, "--source", name, "--length-quantiles", "3"], ["short.en", f"{N_SEG - 5} lines", "ref.de",
                                                                  f"{N_SEG} lines"]


def _with_source(*flags):
    return lambda d: [*PAIR, "--source", write_source(d, [3] * N_SEG), *flags]


BAD_INPUTS.update({  # scores by source length: --source and the bucket flags
    "source misaligned": _misaligned,
    "source missing": lambda d: ([*PAIR, "--source", "none.en", "--length-quantiles", "3"], ["none.en", "not found"]),
    "buckets without source": lambda d: ([*PAIR, "--length-buckets", "5,10"], ["--source"]),
    "source without buckets": lambda d: (_with_source()(d), ["--length-buckets", "--length-quantiles"]),
    "edges not increasing": lambda d: (_with_source("--length-buckets", "10,5")(d),
                                       ["--length-buckets '10,5'", "increasing"]),
    "edges not numbers": lambda d: (_with_source("--length-buckets", "short,long")(d),
                                    ["--length-buckets 'short,long'"]),
    "both bucket flags": lambda d: (_with_source("--length-buckets", "5", "--length-quantiles", "2")(d),
                                    ["give one of them"]),
    "one quantile": lambda d: (_with_source("--length-quantiles", "1")(d), ["--length-quantiles 1", "at least 2"]),
})


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_reported_and_nothing_is_written(case, corpus, tmp_path, capsys, monkeypatch):
    d = tmp_path / "in"
    shutil.copytree(corpus, d)
    monkeypatch.chdir(d)
    argv, words = BAD_INPUTS[case](d)
    out = tmp_path / "out"
    assert scoring_cli.main(["--ref", "ref.de", "--trg-lang", "de", "--out-dir", str(out), "--ngram-analysis", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pe-evaluate: error: ")
    for word in words:
        assert word in err
    assert not out.exists()


# ------------------------------------------------------------------------------------------------
# sacrebleu quirks and their workarounds


def test_json_holds_numpy2_float32_values(corpus, tmp_path):
    with pytest.raises(TypeError):
        json.dumps({"mean": np.float32(27.5)})  # the CLI's --paired-bs JSON crash under numpy 2
    assert json.loads(json.dumps(file_io.to_jsonable({"m": [np.float32(27.5), np.float64(1.0)], "n": np.int64(3)}))) \
        == {"m": [27.5, 1.0], "n": 3}
    out = tmp_path / "out"
    assert evaluate(corpus, out, "--baseline", "base=base1.de", "--system", "good=good1.de", "--n-samples", "100") == 0
    good = by_name(load_json(out))["good"]["runs"][0]["scores"]["bleu"]
    assert isinstance(good["mu"], float) and isinstance(good["ci95"], float)


def test_json_report_is_indented_by_two_spaces_and_ends_with_a_newline(corpus, tmp_path):
    """PREFIX.json is meant to be read and diffed: one value per line, indented by two spaces (like the other JSON
    reports of the repository), UTF-8 characters as they are, a final newline; the reference is the standard
    library's own rendering of the same data."""
    out = tmp_path / "out"
    assert evaluate(corpus, out, "--baseline", "base=base1.de", "--system", "good=good1.de", "--n-samples", "10",
                    "--prefix", "r") == 0
    text = (out / "r.json").read_text(encoding="utf-8")
    assert text == json.dumps(json.loads(text), indent=2, ensure_ascii=False) + "\n"
    assert '\n  "systems": [\n' in text  # a top-level key, two spaces in


def test_seed_is_ours_and_reproducible_whatever_the_environment(corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("SACREBLEU_SEED", "0")  # would unseed sacrebleu's paired tests
    ps = []
    for i in range(2):
        out = tmp_path / f"out{i}"
        assert evaluate(corpus, out, "--baseline", "base=base1.de", "--system", "bad=bad1.de",
                        "--n-samples", "100", "--seed", "31") == 0
        ps.append([run["scores"][k]["p"] for run in by_name(load_json(out))["bad"]["runs"]
                   for k in ("bleu", "chrf", "bleu_cs")])
    assert ps[0] == ps[1]
    assert os.environ["SACREBLEU_SEED"] == "0"  # restored
    assert "seed:31" in load_json(tmp_path / "out0")["metrics"]["chrf"]["signature"]


def test_two_bleu_variants_do_not_collide(corpus, tmp_path):
    """sacreBLEU and compound-split BLEU are both named 'BLEU'; each must keep its own numbers."""
    out = tmp_path / "out"
    assert evaluate(corpus, out, "--baseline", "base=base1.de", "--system", "good=good1.de", "--n-samples", "100") == 0
    rep = by_name(load_json(out))
    ref = (corpus / "ref.de").read_text(encoding="utf-8").split("\n")[:-1]
    hyp = (corpus / "good1.de").read_text(encoding="utf-8").split("\n")[:-1]
    tok = MosesTokenizer(lang="de")
    split = [re.sub(r"(\S)-(\S)", r"\1 ##AT##-##AT## \2",
                    tok.tokenize(s, aggressive_dash_splits=True, escape=True, return_str=True)) for s in ref + hyp]
    cs = BLEU(tokenize="none", force=True).corpus_score(split[len(ref):], [split[:len(ref)]]).score
    scores = rep["good"]["runs"][0]["scores"]
    assert scores["bleu"]["score"] == pytest.approx(BLEU().corpus_score(hyp, [ref]).score, abs=1e-9)
    assert scores["bleu_cs"]["score"] == pytest.approx(cs, abs=1e-9)
    assert scores["bleu"]["score"] != pytest.approx(scores["bleu_cs"]["score"], abs=1e-3)
    assert scores["bleu"]["p"] != scores["bleu_cs"]["p"] or scores["bleu"]["mu"] != scores["bleu_cs"]["mu"]


# ------------------------------------------------------------------------------------------------
# Figure 4 analysis, metadata, report files


def test_ngram_analysis_csv_png_and_order_one_gap(corpus, tmp_path):
    out = tmp_path / "out"
    assert evaluate(corpus, out, "--baseline", "base=base1.de", "--system", "good=good1.de",
                    "--system", "bad=bad1.de", "--n-samples", "100", "--ngram-analysis") == 0
    rows = list(csv.DictReader((out / "results_ngram.csv").open(encoding="utf-8")))
    assert len(rows) == 2 * (30 + 8 + 8)
    assert (out / "results_ngram.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ref = (corpus / "ref.de").read_text(encoding="utf-8").split("\n")[:-1]
    hyps = {n: (corpus / f"{n}1.de").read_text(encoding="utf-8").split("\n")[:-1] for n in ("base", "good", "bad")}
    metrics = {"chrf_char": lambda n: CHRF(char_order=n, word_order=2),
               "chrf_word": lambda n: CHRF(char_order=6, word_order=n),
               "bleu": lambda n: BLEU(max_ngram_order=n)}

    @functools.lru_cache(maxsize=None)
    def direct(analysis, system, n):
        return metrics[analysis](n).corpus_score(hyps[system], [ref]).score

    for row in rows:
        key, name, n = row["analysis"], row["system"], int(row["order"])
        if n == 1:  # the gap at order 1 is the difference of the two scores
            assert float(row["gap"]) == pytest.approx(direct(key, name, 1) - direct(key, "base", 1), abs=1e-9)
        if n in (2, 3, 8, 17, 30):  # and any order is scored as sacrebleu scores it directly
            assert float(row["system_score"]) == pytest.approx(direct(key, name, n), abs=1e-9)
            assert float(row["baseline_score"]) == pytest.approx(direct(key, "base", n), abs=1e-9)
    bleu_sigs = {r["signature"] for r in rows if r["analysis"] == "bleu"}
    assert len(bleu_sigs) == 8 and all(f"ngram:{n}|" in " ".join(bleu_sigs) for n in range(1, 9))
    assert len(load_json(out)["ngram_analysis"]) == len(rows)


def test_ngram_character_sweep_is_the_papers_chrf_with_word_bigrams(corpus, tmp_path):
    """Figure 4's character sweep is "n-gram character F2 and 2-gram word F2": chrF with character order n and
    word order 2, as sacrebleu's CLI computes it (-cc n -cw 2), signature included. The sweep used to score word
    order 0 (plain chrF of character order n): its scores and its signature (nw:0) both fail this test."""
    out = tmp_path / "out"
    assert evaluate(corpus, out, "--baseline", "base=base1.de", "--system", "good=good1.de", "--n-samples", "10",
                    "--ngram-analysis") == 0
    rows = {(r["system"], int(r["order"])): r for r in load_json(out)["ngram_analysis"] if r["analysis"] == "chrf_char"}
    assert sorted({n for _, n in rows}) == list(range(1, 31))
    for n in (1, 2, 6, 13, 30):
        cli = {name: json.loads(sacrebleu_cli(corpus, ["ref.de", "-i", f"{name}1.de", "-m", "chrf", "--chrf-char-order",
                                                       str(n), "--chrf-word-order", "2", "-w", "10"]))
               for name in ("base", "good")}
        row = rows["good", n]
        assert row["system_score"] == pytest.approx(cli["good"]["score"], abs=1e-8), n
        assert row["baseline_score"] == pytest.approx(cli["base"]["score"], abs=1e-8), n
        assert row["gap"] == pytest.approx(cli["good"]["score"] - cli["base"]["score"], abs=1e-8), n
        assert row["signature"] == cli["good"]["signature"] and f"|nc:{n}|nw:2|" in row["signature"]


def test_meta_sidecar_and_override_reach_every_output(corpus, tmp_path):
    d = tmp_path / "in"
    shutil.copytree(corpus, d)
    (d / "good1.de.meta.json").write_text(json.dumps({"pe_signature": "pe:posnet|side:encoder", "seed": 1}))
    (d / "sape.json").write_text(json.dumps({"pe_signature": "pe:sinusoidal"}))
    out = tmp_path / "out"
    assert evaluate(d, out, "--baseline", "base=" + str(d / "base1.de"), "--system", "good=" + str(d / "good1.de"),
                    "--meta", "base=" + str(d / "sape.json"), "--n-samples", "100") == 0
    rep = by_name(load_json(out))
    assert rep["good"]["meta"]["seed"] == 1 and rep["good"]["runs"][0]["meta"]["seed"] == 1
    assert rep["base"]["pe_signature"] == "pe:sinusoidal"
    md = (out / "results.md").read_text(encoding="utf-8")
    assert "| `pe:posnet\\|side:encoder` |" in md and "| `pe:sinusoidal` |" in md  # '|' escaped in a table
    table = {r["system"]: r for r in csv.DictReader((out / "results.csv").open(encoding="utf-8"))}
    assert table["good"]["pe_signature"] == "pe:posnet|side:encoder"


def test_markdown_shows_training_columns_and_where_the_runs_trained(corpus, tmp_path):
    """Runs whose meta files carry pe-generate's ``training`` block add Params (millions) and Train min (mean
    wall time over runs) columns, and the note says on what they trained; a system without it gets empty cells."""
    d = tmp_path / "in"
    shutil.copytree(corpus, d)
    for run, seconds in ((1, 240.0), (2, 360.0)):
        (d / f"good{run}.de.meta.json").write_text(json.dumps(
            {"pe_signature": "pe:posnet", "training": {"params": 2_500_000, "train_seconds": seconds, "device": "cpu",
                                                       "threads": 2}}))
    out = tmp_path / "out"
    assert evaluate(d, out, "--baseline", "base=base1.de", "--system", "good=good1.de,good2.de",
                    "--n-samples", "10") == 0
    md = (out / "results.md").read_text(encoding="utf-8")
    head = next(line for line in md.splitlines() if line.startswith("| System"))
    assert head.endswith("| Params | Train min | PE |")
    good = next(line for line in md.splitlines() if line.startswith("| good "))
    base = next(line for line in md.splitlines() if line.startswith("| base (baseline) "))
    assert good.endswith("| 2.50M | 5 | `pe:posnet` |")  # 2.5 million parameters; (240 s + 360 s) / 2 = 5 minutes
    assert base.endswith("|  |  |  |")
    assert "summed over resumed segments), mean over runs, on cpu, 2 thread(s). " in md


def test_markdown_report_ends_with_exactly_one_newline(corpus, tmp_path, capsys):
    """PREFIX.md is a text file: its last line (the last signature) ends with a newline, and nothing follows."""
    out = tmp_path / "out"
    assert evaluate(corpus, out, "--baseline", "base=base1.de", "--system", "good=good1.de", "--n-samples", "10") == 0
    md = (out / "results.md").read_text(encoding="utf-8")
    assert md.endswith("`\n") and not md.endswith("\n\n")
    assert md.splitlines()[-1].startswith("- BLEU (compound split): `")
    assert capsys.readouterr().out == md


def test_markdown_table_marks_follow_p_and_sign(corpus, tmp_path, capsys):
    out = tmp_path / "out"
    assert evaluate(corpus, out, "--baseline", "base=base1.de", "--system", "good=good1.de",
                    "--system", "bad=bad1.de", "--n-samples", "200", "--prefix", "t1") == 0
    md = (out / "t1.md").read_text(encoding="utf-8")
    assert capsys.readouterr().out == md
    rep = by_name(load_json(out, "t1"))
    rows = {line.split(" | ")[0].strip("| ").removesuffix(" (unchecked)"): line for line in md.splitlines()
            if line.startswith("| ")}
    for name in ["good", "bad"]:
        s = rep[name]["runs"][0]["scores"]["bleu"]
        expect = "" if s["p"] >= 0.10 else ("+" if s["delta"] > 0 else "-") * (2 if s["p"] < 0.05 else 1)
        assert s["mark"] == expect
        assert f"{s['score']:.2f}{expect} (" in rows[name]
    assert "base (baseline)" in rows
    assert sorted(p.name for p in out.iterdir()) == ["t1.csv", "t1.json", "t1.md", "t1_runs.csv"]  # no temp files


def test_marks_and_deltas_point_to_the_better_system(corpus, tmp_path):
    """By construction "good" perturbs the reference half as much as "base": against base, good's delta is
    sacrebleu's score of good less base's on the same run and earns '++' in every run, in the summary and in the
    table; with the roles swapped, base's delta is the opposite and earns '--'. Each summary delta is the mean of
    the direct differences."""
    ref = lines_of(corpus / "ref.de")
    for base, system, sign, want in (("base", "good", 1, "++"), ("good", "base", -1, "--")):
        out = tmp_path / base
        assert evaluate(corpus, out, "--baseline", f"{base}={base}1.de,{base}2.de",
                        "--system", f"{system}={system}1.de,{system}2.de", "--n-samples", "200") == 0
        rep = by_name(load_json(out))[system]
        for key, metric in (("bleu", BLEU()), ("chrf", CHRF(word_order=2))):
            direct = [metric.corpus_score(lines_of(corpus / f"{system}{r}.de"), [ref]).score
                      - metric.corpus_score(lines_of(corpus / f"{base}{r}.de"), [ref]).score for r in (1, 2)]
            assert all(sign * d > 5 for d in direct)  # the construction holds, by a clear margin
            runs = [run["scores"][key] for run in rep["runs"]]
            assert [x["delta"] for x in runs] == pytest.approx(direct, abs=1e-9)
            assert [x["mark"] for x in runs] == [want, want] and all(x["p"] < 0.05 for x in runs)
            assert rep["summary"][key]["delta"] == pytest.approx(statistics.mean(direct), abs=1e-9)
            assert rep["summary"][key]["mark"] == want
        row = [line for line in (out / "results.md").read_text(encoding="utf-8").splitlines()
               if line.startswith(f"| {system} (unchecked) |")]
        assert len(row) == 1 and row[0].count(f"{want} (") == 3
        assert ("--" if want == "++" else "++") not in row[0]


# ------------------------------------------------------------------------------------------------
# Scores by source length


@pytest.fixture
def with_source(corpus, tmp_path):
    """The corpus plus src.en: 1 to 30 words a line, drawn at random."""
    d = tmp_path / "in"
    shutil.copytree(corpus, d)
    rng = random.Random(5)
    write_source(d, [rng.randint(1, 30) for _ in range(N_SEG)])
    return d


def test_length_buckets_equal_sacrebleu_on_each_subset(with_source, tmp_path):
    """Each bucket's scores are sacrebleu's on the lines whose source has that many words, and its test is
    sacrebleu's CLI paired bootstrap on those lines; the plot carries the CLI's signatures."""
    d, out = with_source, tmp_path / "out"
    assert evaluate(d, out, "--baseline", "base=base1.de", "--system", "good=good1.de", "--system", "bad=bad1.de",
                    "--source", "src.en", "--length-buckets", "8,16", "--n-samples", "200", "--seed", "99") == 0
    words = [len(line.split()) for line in lines_of(d / "src.en")]
    ref = lines_of(d / "ref.de")
    hyps = {name: lines_of(d / f"{name}1.de") for name in ("base", "good", "bad")}
    ranges = {"≤8": (0, 8), "9-16": (9, 16), "≥17": (17, 10 ** 9)}
    lb = load_json(out)["length_buckets"]
    assert [b["label"] for b in lb["buckets"]] == list(ranges) and lb["edges"] == [8, 16]
    for b in lb["buckets"]:
        lo, hi = ranges[b["label"]]
        pick = [i for i, n in enumerate(words) if lo <= n <= hi]
        assert b["segments"] == len(pick) > 5
        sub_ref = [ref[i] for i in pick]
        for s in b["systems"]:
            sub_hyp = [hyps[s["name"]][i] for i in pick]
            assert s["summary"]["bleu"]["mean"] == pytest.approx(BLEU().corpus_score(sub_hyp, [sub_ref]).score,
                                                                 abs=1e-9)
            assert s["summary"]["chrf"]["mean"] == pytest.approx(
                CHRF(word_order=2).corpus_score(sub_hyp, [sub_ref]).score, abs=1e-9)
        if b["label"] == "9-16":  # the bucket's test: sacrebleu's CLI on the bucket's lines
            for name, lines in [("ref", sub_ref)] + [(n, [hyps[n][i] for i in pick]) for n in hyps]:
                (tmp_path / f"{name}.sub").write_text("\n".join(lines) + "\n", encoding="utf-8")
            text = sacrebleu_cli(tmp_path, ["ref.sub", "-i", "base.sub", "good.sub", "bad.sub", "-m", "bleu", "chrf",
                                            "--chrf-word-order", "2", "--paired-bs", "--paired-bs-n", "200", "-f",
                                            "text", "-w", "4", "--no-color"], seed=99)
            cells, pvals, sigs = parse_cli_bootstrap(text)
            systems = {s["name"]: s["runs"][0] for s in b["systems"]}
            for i, name in enumerate(["base", "good", "bad"]):
                p_bleu, p_chrf = (None, None) if i == 0 else pvals[2 * i - 2: 2 * i]
                assert_bootstrap_cell(systems[name]["bleu"], cells[2 * i], p_bleu)
                assert_bootstrap_cell(systems[name]["chrf"], cells[2 * i + 1], p_chrf)
            assert b["signatures"] == {"bleu": sigs["BLEU"], "chrf": sigs["chrF2++"]}
    rows = list(csv.DictReader((out / "results_length.csv").open(encoding="utf-8")))
    assert len(rows) == 9 and sum(int(r["segments"]) for r in rows if r["system"] == "base") == N_SEG
    png = out / "results_length.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from PIL import Image

    description = Image.open(png).text["Description"]
    assert sigs["BLEU"] in description and sigs["chrF2++"] in description
    md = (out / "results_length.md").read_text(encoding="utf-8")
    assert "| sacreBLEU | ≤8 (" in md and sigs["chrF2++"] in md and "words" in md


def test_length_plot_draws_each_system_at_its_own_bucket_scores(with_source, tmp_path, monkeypatch):
    """The length figure has one panel per metric (sacreBLEU, chrF++) and one line per system whose points are that
    system's sacrebleu scores on the lines of each bucket, computed here from the files."""
    from pe_tools.scoring import length_buckets

    figures = []  # the figure pe-evaluate draws, kept instead of saved
    monkeypatch.setattr(length_buckets, "png_bytes", lambda fig, **kw: figures.append(fig) or b"")
    d, out = with_source, tmp_path / "out"
    assert evaluate(d, out, "--baseline", "base=base1.de", "--system", "good=good1.de", "--system", "bad=bad1.de",
                    "--source", "src.en", "--length-buckets", "8,16", "--n-samples", "10") == 0
    words = [len(line.split()) for line in lines_of(d / "src.en")]
    ref = lines_of(d / "ref.de")
    picks = [[i for i, n in enumerate(words) if lo <= n <= hi] for lo, hi in ((0, 8), (9, 16), (17, 10 ** 9))]
    (fig,) = figures
    panels = [ax for ax in fig.axes if ax.lines]
    assert [ax.get_title() for ax in panels] == ["sacreBLEU", "chrF++"]
    for ax, score in zip(panels, (lambda h, r: BLEU().corpus_score(h, [r]).score,
                                  lambda h, r: CHRF(word_order=2).corpus_score(h, [r]).score)):
        drawn = {line.get_label(): list(line.get_ydata()) for line in ax.lines}
        assert list(drawn) == ["base (baseline)", "good", "bad"]
        for label, name in zip(drawn, ("base", "good", "bad")):
            hyp = lines_of(d / f"{name}1.de")
            expect = [score([hyp[i] for i in pick], [ref[i] for i in pick]) for pick in picks]
            assert drawn[label] == pytest.approx(expect, abs=1e-9), (ax.get_title(), name)
    length_buckets.pyplot().close(fig)


def test_ngram_figure_draws_each_sweep_in_its_own_panel(monkeypatch):
    """Figure 4's panels, one per n-gram sweep (titled as the sweep), each with one line per system through that
    sweep's (order, gap) rows and no other sweep's: rows made up here, each sweep at its own gaps."""
    from pe_tools.scoring import ngram

    figures = []  # the figure, kept instead of saved
    monkeypatch.setattr(ngram, "png_bytes", lambda fig, **kw: figures.append(fig) or b"")
    rows = [{"analysis": sweep.key, "system": name, "order": n, "gap": 10 * k + n + (0.5 if name == "b" else 0.0)}
            for k, sweep in enumerate(ngram.NGRAM_SWEEPS) for name in ("a", "b") for n in (1, 2, 3)]
    ngram.plot_ngram_gaps(rows, "base")
    (fig,) = figures
    panels = [ax for ax in fig.axes if ax.lines]
    assert [ax.get_title() for ax in panels] == [sweep.title for sweep in ngram.NGRAM_SWEEPS]
    for k, ax in enumerate(panels):
        drawn = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in ax.lines
                 if not line.get_label().startswith("_")}  # the zero line is unlabelled
        assert drawn == {"a": ([1, 2, 3], [10 * k + 1, 10 * k + 2, 10 * k + 3]),
                         "b": ([1, 2, 3], [10 * k + 1.5, 10 * k + 2.5, 10 * k + 3.5])}, ax.get_title()
        assert ax.get_ylabel() == "score - base"
    ngram.pyplot().close(fig)


def test_length_quantiles_and_several_runs(corpus, tmp_path):
    """Quantile edges are numpy's inverted-CDF quantiles of the source lengths, ties merged; with two runs a
    bucket's score is the mean of the runs' sacrebleu scores on its lines."""
    d = tmp_path / "in"
    shutil.copytree(corpus, d)
    rng = random.Random(8)
    words = [rng.choice([2, 4, 4, 4, 7, 7, 9, 12, 15, 15, 21]) for _ in range(N_SEG)]  # many ties
    write_source(d, words)
    ref = lines_of(d / "ref.de")
    for q in (4, 10):
        out = tmp_path / f"out{q}"
        assert evaluate(d, out, "--baseline", "base=base1.de,base2.de", "--system", "good=good1.de,good2.de",
                        "--source", "src.en", "--length-quantiles", str(q), "--n-samples", "50") == 0
        lb = load_json(out)["length_buckets"]
        expect = sorted({int(np.quantile(words, k / q, method="inverted_cdf")) for k in range(1, q)} - {max(words)})
        assert lb["edges"] == expect and len(lb["buckets"]) == len(expect) + 1
        assert not lb["empty"] and sum(b["segments"] for b in lb["buckets"]) == N_SEG
        bounds = [-1] + expect + [max(words)]
        for b, lo, hi in zip(lb["buckets"], bounds, bounds[1:]):
            pick = [i for i, n in enumerate(words) if lo < n <= hi]
            assert b["segments"] == len(pick)
            good = next(s for s in b["systems"] if s["name"] == "good")["summary"]["chrf"]
            direct = [CHRF(word_order=2).corpus_score([lines_of(d / f"good{r}.de")[i] for i in pick],
                                                      [[ref[i] for i in pick]]).score for r in (1, 2)]
            assert good["mean"] == pytest.approx(statistics.mean(direct), abs=1e-9)
            assert good["sd"] == pytest.approx(statistics.stdev(direct), abs=1e-9)


def test_source_words_are_whitespace_runs_not_single_spaces(corpus, tmp_path):
    """A source whose words are separated by tabs and double spaces, with spaces at the ends: a line's length is
    its number of words (runs of non-space, counted by a regular expression here), so a bucket holds the lines of
    that many words and scores as sacrebleu on them."""
    d = tmp_path / "in"
    shutil.copytree(corpus, d)
    rng = random.Random(3)
    words = [rng.randint(1, 12) for _ in range(N_SEG)]
    src = ["".join(rng.choice([" ", "  ", "\t", " \t "]) + "w" for _ in range(n)) + rng.choice(["", " ", "\t"])
           for n in words]
    (d / "src.en").write_text("".join(line + "\n" for line in src), encoding="utf-8")
    assert all(len(re.findall(r"\S+", line)) == n for line, n in zip(src, words))
    assert sum(len(line.split(" ")) != n for line, n in zip(src, words)) > N_SEG / 2  # the control
    out = tmp_path / "out"
    assert evaluate(d, out, "--baseline", "base=base1.de", "--system", "good=good1.de", "--source", "src.en",
                    "--length-buckets", "4,8", "--n-samples", "50") == 0
    ref, good = lines_of(d / "ref.de"), lines_of(d / "good1.de")
    buckets = load_json(out)["length_buckets"]["buckets"]
    assert [b["label"] for b in buckets] == ["≤4", "5-8", "≥9"]
    for b, (lo, hi) in zip(buckets, [(0, 4), (5, 8), (9, 99)]):
        pick = [i for i, n in enumerate(words) if lo <= n <= hi]
        assert b["segments"] == len(pick) > 5
        system = next(s for s in b["systems"] if s["name"] == "good")["summary"]["bleu"]
        assert system["mean"] == pytest.approx(BLEU().corpus_score([good[i] for i in pick], [[ref[i] for i in pick]])
                                               .score, abs=1e-9)


def test_empty_length_bucket_is_reported_not_scored(with_source, tmp_path, capsys):
    out = tmp_path / "out"
    assert evaluate(with_source, out, "--baseline", "base=base1.de", "--system", "good=good1.de",
                    "--source", "src.en", "--length-buckets", "0,8,16,100", "--n-samples", "50") == 0
    err = capsys.readouterr().err
    assert "length bucket ≤0 holds no segment" in err and "length bucket ≥101 holds no segment" in err
    lb = load_json(out)["length_buckets"]
    assert lb["empty"] == ["≤0", "≥101"]
    assert [b["segments"] > 0 for b in lb["buckets"]] == [False, True, True, True, False]
    assert "systems" not in lb["buckets"][0]
    assert "Empty buckets (no source segment of that length; no scores): ≤0, ≥101." in (
        out / "results_length.md").read_text(encoding="utf-8")
    rows = list(csv.DictReader((out / "results_length.csv").open(encoding="utf-8")))
    empty = [r for r in rows if r["segments"] == "0"]
    assert [r["bucket"] for r in empty] == ["≤0", "≥101"] and all(r["bleu"] == r["chrf"] == "" for r in empty)
    assert (out / "results_length.png").exists()


def test_plot_styles_stay_distinct_beyond_the_colour_cycle():
    """matplotlib cycles 10 colours; a report of 17 systems (the Multi30k one) must not draw two alike."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import colors

    from pe_tools.scoring.style import system_style

    styles = [system_style(i) for i in range(40)]
    assert len({(colors.to_hex(s["color"]), s["marker"]) for s in styles}) == 40


# ---------------------------------------------------------------------------------- comparable inputs only
# one test set in three languages (Multi30k-like captions, translated by hand): the language check's references
DE = ["Ein Mann fährt mit dem Fahrrad auf der Straße .", "Zwei Hunde spielen im Schnee .",
      "Eine Frau liest ein Buch im Park .", "Kinder spielen Fußball auf einer Wiese .",
      "Ein Junge springt in das Wasser und lacht ."] * 4
FR = ["Un homme fait du vélo dans la rue .", "Deux chiens jouent dans la neige .",
      "Une femme lit un livre dans le parc .", "Des enfants jouent au football sur une pelouse .",
      "Un garçon saute dans l' eau et il rit ."] * 4
EN = ["A man rides a bike on the street .", "Two dogs play in the snow .", "A woman reads a book in the park .",
      "Children play football on the lawn .", "A boy jumps into the water with his dog and laughs ."] * 4


def write_lines(path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return path


@pytest.mark.parametrize("hyp, ref, trg, refused", [
    (FR, DE, "de", "reads as 'fr', not the target language --trg-lang de"),  # issue 56: French against German
    (EN, DE, "de", "reads as 'en', not the target language --trg-lang de"),
    (DE, DE, "de", None),
    (FR, FR, "fr", None),
    (DE, FR, "fr", "reads as 'de', not the target language --trg-lang fr"),
    (FR, DE, "xx", "reads as 'fr', the reference ref.txt as 'de'"),  # a language without a list: the reference's
    (DE, DE, "xx", None),
    (FR[:4], DE, "de", None),  # too few words to tell: not refused
    (["the man the dog the the"] * 20, DE, "de", None),  # an untrained model's repetition: not a language
    (["Le chien et le chat sur la table ."] * 20, DE, "de", None),  # 4 different French words, one short of 5
    (["Le chien et le chat sont sur la table ."] * 20, DE, "de", "reads as 'fr', not the target language --trg-lang de"),
])
def test_a_hypothesis_in_another_language_than_the_reference_is_refused(hyp, ref, trg, refused, tmp_path, capsys):
    """Seen failing with check_languages' call removed from load_inputs (the refused cases) and with
    language.identify always answering 'fr' (the accepted ones)."""
    write_lines(tmp_path / "ref.txt", ref[:len(hyp)])
    write_lines(tmp_path / "base.txt", ref[:len(hyp)])
    write_lines(tmp_path / "sys.txt", hyp)
    argv = ["--trg-lang", trg, "--baseline", "base=base.txt", "--system", "sys=sys.txt", "--n-samples", "10",
            "--allow-unchecked"]
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        rc = scoring_cli.main(["--ref", "ref.txt", "--out-dir", "out", *argv])
        err = capsys.readouterr().err
        if refused:
            assert rc == 2 and f"sys: sys.txt {refused}" in err and not (tmp_path / "out").exists(), err
            assert scoring_cli.main(["--ref", "ref.txt", "--out-dir", "out", *argv, "--no-language-check"]) == 0
        else:
            assert rc == 0, err
    finally:
        os.chdir(cwd)


def decode_folder(root, name, identity=None, command=None, checkpoints=("checkpoint_1_6.pt",), lines=DE):
    """A hypothesis file as pe-generate (``identity``: its meta's run) or an older pe-record (``command``: a
    command.json beside a meta file without run) leaves it."""
    hyp = write_lines(root / name / "hyp.detok.de", lines)
    meta = {"pe_signature": f"pe:{name}", "checkpoints": list(checkpoints)}
    if identity is not None:
        meta["run"] = identity
    Path(f"{hyp}.meta.json").write_text(json.dumps(meta))
    if command is not None:
        (root / name / "command.json").write_text(json.dumps(command))
    return hyp


RUN = {"recipe": "multi30k", "pair": "en-de", "size": "small", "updates": 1500, "changes": "", "method": "sape",
       "seed": 1}
OTHER = {"recipe": "wmt14", "pair": "en-fr", "size": "annealed", "updates": 100, "changes": "--max-update 100"}


@pytest.mark.parametrize("key", list(OTHER))
def test_a_system_of_another_run_identity_is_refused_or_marked(key, tmp_path, capsys):
    """pe-evaluate compares a system with the baseline only when their runs agree in every identity key but
    method and seed (pe_tools.recipes.results.IDENTITY); with --allow-mismatch it scores it marked (‡, a note and
    a CSV column naming the key). Seen failing with check_comparable's call removed (refusals) and with its
    ``mismatch`` never filled (marks)."""
    base = decode_folder(tmp_path, "sape", RUN)
    same = decode_folder(tmp_path, "rope", dict(RUN, method="rope", seed=2), lines=DE[1:] + DE[:1])
    other = decode_folder(tmp_path, "alibi", dict(RUN, method="alibi", **{key: OTHER[key]}), lines=DE[::-1])
    ref = write_lines(tmp_path / "ref.de", DE)
    argv = ["--ref", str(ref), "--trg-lang", "de", "--out-dir", str(tmp_path / "out"), "--baseline", f"sape={base}",
            "--system", f"rope={same}", "--n-samples", "10"]
    assert scoring_cli.main(argv) == 0 and "‡" not in (tmp_path / "out" / "results.md").read_text()
    assert "mismatch" not in (tmp_path / "out" / "results.csv").read_text()
    argv += ["--system", f"alibi={other}"]
    assert scoring_cli.main(argv) == 2
    differs = f"{key} {OTHER[key]} (baseline {RUN[key] if RUN[key] != '' else repr('')})"
    assert f"alibi is not comparable with the baseline sape's run 1 ({base}): its {differs}" in capsys.readouterr().err
    assert scoring_cli.main(argv + ["--allow-mismatch"]) == 0
    md = (tmp_path / "out" / "results.md").read_text()
    assert "| alibi ‡ |" in md and "| rope |" in md
    assert f"‡ alibi is not a run like the baseline's, compared as asked (--allow-mismatch): run 1 ({other}): {differs}." in md
    with open(tmp_path / "out" / "results.csv", newline="") as f:
        rows = {r["system"]: r["mismatch"] for r in csv.DictReader(f)}
    assert rows == {"sape": "", "rope": "", "alibi": f"run 1 ({other}): {differs}"}


AVERAGE4 = ["checkpoint_6_1200.pt", "checkpoint_7_1300.pt", "checkpoint_8_1400.pt", "checkpoint_9_1500.pt"]


def compare(tmp_path, baseline, *systems, extra=()):
    """pe-evaluate of ``baseline`` (NAME=FILE) and ``systems`` against ref.de (DE), out/ beside them."""
    ref = write_lines(tmp_path / "ref.de", DE)
    argv = ["--ref", str(ref), "--trg-lang", "de", "--out-dir", str(tmp_path / "out"), "--n-samples", "10",
            "--baseline", baseline, *[x for s in systems for x in ("--system", s)], *extra]
    return scoring_cli.main(argv)


def test_an_average_is_not_compared_with_a_last_checkpoint_decode(tmp_path, capsys):
    """Two decodes of runs alike in every key, one the average of the last 4 checkpoints and one the last
    checkpoint alone (their meta files' ``checkpoints``; the newest, hence the updates, alike): refused naming both
    decodes and pe-generate's --checkpoints, or with --allow-mismatch marked; average against average passes.
    Seen failing before the decode was part of a run's identity (it scored them, exit 0)."""
    base = decode_folder(tmp_path, "sape", RUN, checkpoints=AVERAGE4)
    avg = decode_folder(tmp_path, "rope", dict(RUN, method="rope"), checkpoints=AVERAGE4, lines=DE[::-1])
    last = decode_folder(tmp_path, "alibi", dict(RUN, method="alibi"), checkpoints=AVERAGE4[-1:], lines=DE[::-1])
    assert compare(tmp_path, f"sape={base}", f"rope={avg}") == 0
    assert compare(tmp_path, f"sape={base}", f"rope={avg}", f"alibi={last}") == 2
    err = capsys.readouterr().err
    differs = "decode 1 checkpoint (baseline average of 4 checkpoints spanning 300 updates)"
    assert f"alibi is not comparable with the baseline sape's run 1 ({base}): its {differs}" in err
    assert "pe-generate --checkpoints" in err and "--allow-mismatch" in err
    assert compare(tmp_path, f"sape={base}", f"rope={avg}", f"alibi={last}", extra=["--allow-mismatch"]) == 0
    md = (tmp_path / "out" / "results.md").read_text()
    assert "| alibi ‡ |" in md and "| rope |" in md and differs in md


def test_a_label_that_names_another_method_than_its_run_is_refused(tmp_path, capsys):
    """Labels swapped (--baseline sape=<a rope run's decode> --system rope=<the sape run's>): each meta's method
    contradicts its label, so it is refused naming the run's method, or with --allow-mismatch marked on both;
    the labels of the runs' own methods or encodings pass, and so does a label that names no method (``mine``).
    Seen failing before labels were checked (exit 0, the conclusion flipped)."""
    sape = decode_folder(tmp_path, "sape", RUN)
    rope = decode_folder(tmp_path, "rope", dict(RUN, method="rope"), lines=DE[::-1])
    assert compare(tmp_path, f"sape={sape}", f"rope={rope}") == 0
    assert compare(tmp_path, f"sape={sape}", f"mine={rope}") == 0
    variant = decode_folder(tmp_path, "posnet_embed", dict(RUN, method="posnet_embed_lmax256"), lines=DE[::-1])
    assert compare(tmp_path, f"sape={sape}", f"posnet_embed={variant}") == 0  # its encoding (pe:posnet_embed)
    assert compare(tmp_path, f"sape={rope}", f"rope={sape}") == 2
    err = capsys.readouterr().err
    assert f"--baseline sape={rope}: the label sape names another method than its run's: {rope} is a decode of " \
           f"a rope run" in err and "--allow-mismatch" in err
    assert compare(tmp_path, f"sape={sape}", f"alibi={rope}") == 2
    assert f"--system alibi={rope}: the label alibi names another method" in capsys.readouterr().err
    assert compare(tmp_path, f"sape={rope}", f"rope={sape}", extra=["--allow-mismatch"]) == 0
    md = (tmp_path / "out" / "results.md").read_text()
    assert "| sape (baseline) ‡ |" in md and "| rope ‡ |" in md
    assert f"run 1 ({rope}): labelled sape, a decode of a rope run" in md


def generate_output_of(lines):
    """fairseq-generate's raw output (S-/H-/D- lines, batch order) of ``lines``."""
    return "".join(f"S-{i}\tx\nH-{i}\t-0.5\t{line}\nD-{i}\t-0.5\t{line}\n"
                   for i, line in reversed(list(enumerate(lines))))


@pytest.mark.parametrize("kind", ["copied", "raw"])
def test_a_file_without_its_meta_is_compared_only_when_asked_and_marked_unchecked(kind, tmp_path, capsys):
    """A hypothesis file copied away from its meta file (or fairseq-generate's raw output): nothing tells which run
    it decodes, so it is refused naming the file and --allow-unchecked; with it, it is scored and the table says
    its identity is unchecked; the decode with its meta beside it is checked as ever. Seen failing before files
    without a meta file were refused (exit 0, unmarked)."""
    base = decode_folder(tmp_path, "sape", RUN)
    rope = decode_folder(tmp_path, "rope", dict(RUN, method="rope", updates=100), lines=DE[::-1])
    away = tmp_path / "away" / ("rope.de" if kind == "copied" else "generate.out")
    away.parent.mkdir()
    away.write_text(rope.read_text() if kind == "copied" else generate_output_of(DE[::-1]))
    assert compare(tmp_path, f"sape={base}", f"rope={rope}") == 2  # with its meta: refused (another update count)
    capsys.readouterr()
    assert compare(tmp_path, f"sape={base}", f"rope={away}") == 2
    err = capsys.readouterr().err
    assert f"rope: {away} has no meta file ({away}.meta.json)" in err and "--allow-unchecked" in err
    assert not (tmp_path / "out").exists()
    assert compare(tmp_path, f"sape={base}", f"rope={away}", extra=["--allow-unchecked"]) == 0
    md = (tmp_path / "out" / "results.md").read_text()
    assert "| rope (unchecked) |" in md and "| sape (baseline) |" in md
    assert f"rope (unchecked): its identity is unchecked (--allow-unchecked): run 1: {away} has no meta file " \
           f"({away}.meta.json)." in md
    with open(tmp_path / "out" / "results.csv", newline="") as f:
        assert {r["system"]: r["unchecked"] for r in csv.DictReader(f)} == {
            "sape": "", "rope": f"run 1: {away} has no meta file ({away}.meta.json)"}


def test_the_table_names_the_updates_changed_flags_and_decode_of_the_runs_it_compares(tmp_path):
    """results.md says what the compared runs are: their recipe, pair, size, updates, changed flags and decode, once
    when every run is alike, else each kind with its systems (a run compared with --allow-mismatch); a file
    without a meta file adds nothing (--allow-unchecked)."""
    base = decode_folder(tmp_path, "sape", RUN, checkpoints=AVERAGE4)
    rope = decode_folder(tmp_path, "rope", dict(RUN, method="rope"), checkpoints=AVERAGE4, lines=DE[::-1])
    short = decode_folder(tmp_path, "alibi", dict(RUN, method="alibi", updates=200, changes="--max-update 200"),
                          checkpoints=["checkpoint_2_200.pt"], lines=DE[::-1])
    plain = write_lines(tmp_path / "plain.de", DE[1:] + DE[:1])
    alike = "multi30k en-de small, 1500 updates, the recipe's flags, decoded from average of 4 checkpoints spanning " \
            "300 updates"
    assert compare(tmp_path, f"sape={base}", f"rope={rope}", f"mine={plain}", extra=["--allow-unchecked"]) == 0
    assert f" Runs: {alike}. " in (tmp_path / "out" / "results.md").read_text()
    assert compare(tmp_path, f"sape={base}", f"rope={rope}", f"alibi={short}", extra=["--allow-mismatch"]) == 0
    assert f" Runs: {alike} (sape, rope); multi30k en-de small, 200 updates, flags changed: --max-update 200, " \
           "decoded from 1 checkpoint (alibi). " in (tmp_path / "out" / "results.md").read_text()
    runs = {s["name"]: s["runs"][0]["identity"] for s in json.loads((tmp_path / "out" / "results.json").read_text())["systems"]}
    assert runs["alibi"]["updates"] == 200 and runs["sape"]["changes"] == ""


def test_every_run_of_the_baseline_is_checked_like_a_system(tmp_path, capsys):
    """The baseline's runs are checked against its first run as a system's are against theirs: a second seed of
    another size is refused (a system paired with it would pass otherwise)."""
    one = decode_folder(tmp_path, "sape1", RUN)
    two = decode_folder(tmp_path, "sape2", dict(RUN, seed=2))
    other = decode_folder(tmp_path, "sape3", dict(RUN, seed=3, size="annealed"))
    r1 = decode_folder(tmp_path, "rope1", dict(RUN, method="rope"))
    r2 = decode_folder(tmp_path, "rope2", dict(RUN, method="rope", seed=2, size="annealed"))
    assert compare(tmp_path, f"sape={one},{two}", f"rope={r1},{r1}") == 0
    assert compare(tmp_path, f"sape={one},{other}", f"rope={r1},{r2}") == 2
    assert f"the baseline sape's run 2 ({other}) is not comparable with its run 1 ({one}): its size annealed " \
           "(baseline small)" in capsys.readouterr().err


def test_the_identity_of_an_older_record_comes_from_its_command_json(tmp_path, capsys):
    """A recorded run's meta file without ``run`` (pe-record before it wrote one): its folder's command.json and
    the meta's checkpoints tell the identity; a command.json without ``extra`` names the flags after --save-dir."""
    argv = ["x", "--max-update", "1500", "--save-dir", "r", "--fp16"]
    command = {"recipe": "multi30k", "method": "sape", "pair": "en-de", "size": "small", "seed": 1, "argv": argv}
    base = decode_folder(tmp_path, "sape", command=command, checkpoints=["checkpoint_9_1500.pt"])
    full = decode_folder(tmp_path, "rope", command=dict(command, method="rope"), checkpoints=["checkpoint_9_1500.pt"])
    short = decode_folder(tmp_path, "nope", command=dict(command, method="nope", argv=argv + ["--max-update", "100"]),
                          checkpoints=["checkpoint_1_100.pt"])
    ref = write_lines(tmp_path / "ref.de", DE)
    common = ["--ref", str(ref), "--trg-lang", "de", "--out-dir", str(tmp_path / "out"), "--baseline", f"sape={base}",
              "--n-samples", "10"]
    assert scoring_cli.main(common + ["--system", f"rope={full}"]) == 0
    assert scoring_cli.main(common + ["--system", f"nope={short}"]) == 2
    assert "its updates 100 (baseline 1500); changes --max-update 100 (baseline '')" in capsys.readouterr().err


def test_system_styles_are_distinct_for_forty_systems():
    """matplotlib's default cycle has 10 colours (C0..C9): system i takes colour i mod 10 and the marker of its
    group of ten, so 40 systems get 40 distinct (colour, marker) pairs, and systems 10 apart share a colour only."""
    styles = [style.system_style(i) for i in range(40)]
    assert [s["color"] for s in styles] == [f"C{i % 10}" for i in range(40)]
    assert len({(s["color"], s["marker"]) for s in styles}) == 40
    assert [s["marker"] for s in styles[::10]] == list(style.MARKERS)  # a new marker every ten systems


# ---- the metrics (pe_tools.scoring.metrics) -------------------------------------------------------------------
def test_compound_split_bleu_does_not_warn_about_tokenised_input(caplog):
    """Compound-split BLEU scores Moses tokens on purpose: its hypotheses end in ' .', and sacrebleu's BLEU warns
    ('you forgot to detokenize') from 100 such lines unless built with force=True. sacreBLEU proper keeps the
    warning, which is right for it."""
    import logging

    from sacrebleu.metrics import BLEU

    from pe_tools.scoring.metrics import METRICS, compound_split

    spec = {s.key: s for s in METRICS}["bleu_cs"]
    tokens = compound_split([f"Das Haus Nummer {i} ist groß." for i in range(100)], "de")
    assert all(t.endswith(" groß .") for t in tokens)  # Moses splits the full stop off
    with caplog.at_level(logging.WARNING, logger="sacrebleu"):
        BLEU(tokenize="none").corpus_score(tokens, [tokens])  # the reference: sacrebleu's default warns
        assert "tokenized period" in caplog.text
        caplog.clear()
        assert spec.build("de", [tokens]).corpus_score(tokens, None).score == pytest.approx(100.0)
        assert caplog.text == ""


def test_metric_specs_cannot_be_changed_in_place_and_are_hashable():
    """METRICS is one module-level tuple shared by every report a process builds (the whole set, the length
    buckets): its specs are frozen, so a caller cannot rename or rewire a metric for the others, and they can be
    set members and dict keys."""
    import dataclasses

    from pe_tools.scoring.metrics import METRICS

    for spec in METRICS:
        with pytest.raises(dataclasses.FrozenInstanceError):
            spec.key = "renamed"
        with pytest.raises(dataclasses.FrozenInstanceError):
            spec.tokenised = not spec.tokenised
    assert [s.key for s in METRICS] == ["bleu", "chrf", "bleu_cs"] and not METRICS[0].tokenised
    assert len({*METRICS, *METRICS}) == len(METRICS) == len({s: s.label for s in METRICS})


@pytest.mark.parametrize("english_words,expected", [(10, "de"), (11, None)])
def test_a_language_is_identified_at_exactly_the_ratio_and_not_below(english_words, expected):
    """pe_tools/scoring/language.identify at its ratio (survivor: ``s[best] >= RATIO * rest`` -> ``>``): 30 German
    stop words against 10 English ones (40 words: shares 0.75 and 0.25, exactly 3 to 1) are German; against 11 the
    ratio falls under 3 and nothing is identified. The counts are this test's own."""
    from pe_tools.scoring.language import RATIO, STOP_WORDS, identify

    german, english = "der das und nicht eine einen".split(), "the with from this that".split()
    assert all(w in STOP_WORDS["de"] and w not in STOP_WORDS["en"] for w in german)
    assert all(w in STOP_WORDS["en"] and w not in STOP_WORDS["de"] for w in english)
    assert all(w not in stop for lang, stop in STOP_WORDS.items() if lang not in ("de", "en") for w in german + english)
    words = german * 5 + (english * 3)[:english_words]
    assert RATIO == 3.0 and (30 >= RATIO * english_words) == (expected == "de")
    assert identify([" ".join(words)]) == expected


@pytest.mark.parametrize("value,ok", [("10,20,30", True), ("0,1", True), ("10,10,20", False), ("20,10", False),
                                      ("-1,5", False), ("", False)])
def test_length_bucket_edges_must_strictly_increase(value, ok):
    """pe_tools/scoring/length_buckets.parse_edges (survivor: ``a >= b`` -> ``a > b``): a repeated edge is refused,
    as a decrease is (it would make an empty bucket 11-10)."""
    from pe_tools.scoring.errors import InputError
    from pe_tools.scoring.length_buckets import parse_edges

    if ok:
        assert parse_edges(value) == [int(x) for x in value.split(",")]
    else:
        with pytest.raises(InputError, match="expected increasing whole numbers"):
            parse_edges(value)


# ---- the language check (pe_tools/scoring/language.py) ------------------------------------------------------
FILLER = "haus katze baum wiese garten hund wagen straße fenster tisch".split()  # on no language's list


def _check_lists():
    from pe_tools.scoring.language import STOP_WORDS

    assert not any(w in stop for stop in STOP_WORDS.values() for w in FILLER)
    return STOP_WORDS


def test_shares_are_fractions_of_all_the_words():
    """language.shares gives each language's share of all the words (hits / words), with the counts apart;
    counted here over a text of 4 German, 1 English and 5 other words, and for no words at all."""
    from pe_tools.scoring.language import shares

    stop = _check_lists()
    german, english = ["der", "und", "nicht", "mit"], ["the"]
    assert all(w in stop["de"] for w in german) and english[0] in stop["en"]
    s = shares([" ".join(german + FILLER[:3]), " ".join(english + FILLER[3:5])])
    assert s["_words"] == 10 and s["_hits"]["de"] == 4 and s["_hits"]["en"] == 1
    assert s["de"] == pytest.approx(0.4) and s["en"] == pytest.approx(0.1) and s["fr"] == 0
    empty = shares(["", "123 ..."])
    assert empty["_words"] == 0 and all(empty[lang] == 0 for lang in stop)


@pytest.mark.parametrize("words,expected", [(250, "de"), (251, None)])
def test_a_language_is_identified_at_exactly_the_minimum_share_and_not_below(words, expected):
    """20 German stop words (5 different) among 250 words are a share of exactly 20/250 = 0.08, the minimum:
    German; among 251 words the share is just under it: not identified. Every other condition holds in both (20
    hits, 5 distinct, no other language's word)."""
    from pe_tools.scoring.language import MIN_DISTINCT, MIN_SHARE, MIN_WORDS, identify

    stop = _check_lists()
    german = ["der", "und", "nicht", "mit", "eine"] * 4
    assert all(w in stop["de"] and not any(w in s for lang, s in stop.items() if lang != "de") for w in german)
    assert (MIN_WORDS, MIN_DISTINCT, MIN_SHARE) == (20, 5, 0.08) and 20 / 250 == 0.08 and 20 / 251 < 0.08
    text = german + (FILLER * 30)[:words - 20]
    assert identify([" ".join(text)]) == expected


def test_a_long_text_with_enough_stop_words_but_too_small_a_share_is_not_identified():
    """MIN_WORDS stop words are not enough in a long text: 20 German ones among 1000 words (a share of 0.02, under
    0.08) identify nothing, while the same 20 among 100 words (0.2) are German."""
    from pe_tools.scoring.language import identify

    german = ["der", "und", "nicht", "mit", "eine"] * 4
    assert identify([" ".join(german + (FILLER * 100)[:980])]) is None
    assert identify([" ".join(german + (FILLER * 10)[:80])]) == "de"


# ---- significance marks and signatures (pe_tools/scoring/significance.py) -----------------------------------
@pytest.mark.parametrize("p,better,worse", [
    (0.0499, "++", "--"), (0.05, "+", "-"), (0.0999, "+", "-"), (0.10, "", ""), (None, "", ""),
])
def test_marks_at_exactly_the_significance_levels(p, better, worse):
    """'++' needs p < 0.05 and '+' p < 0.10: exactly 0.05 earns one sign, exactly 0.10 none; the sign follows the
    delta, and a zero delta earns nothing."""
    from pe_tools.scoring.significance import mark

    assert (mark(1.5, p), mark(-1.5, p), mark(0.0, p)) == (better, worse, "")


@pytest.mark.parametrize("aggressive", [True, False])
def test_only_the_compound_split_bleu_signature_names_its_preprocessing(aggressive):
    """The report's signatures: compound-split BLEU's says how its text was prepared (pre:moses-de[-a]+compound-
    split, -a with the aggressive dash split); sacreBLEU's BLEU and chrF++ score the text as given, and their
    signatures name no preprocessing."""
    from pe_tools.scoring.inputs import Inputs, System
    from pe_tools.scoring.significance import score_systems

    ref = ["Der Hund läuft schnell über die Wiese.", "Ein Kind spielt im Garten."] * 3
    base = System("base", ["b"], runs=[["Der Hund rennt über die Wiese.", "Ein Kind spielt im Park."] * 3])
    other = System("other", ["o"], runs=[["Der Hund läuft über die Wiese.", "Ein Kind spielt im Garten."] * 3])
    args = Namespace(n_samples=10, paired="bs", no_aggressive_dash=not aggressive, trg_lang="de", seed=1, jobs=1)
    sigs = score_systems(Inputs("ref", ref, base, [other]), args)["signatures"]
    fields = {key: dict(f.split(":", 1) for f in sig.split("|")) for key, sig in sigs.items()}
    assert fields["bleu_cs"]["pre"] == ("moses-de-a+compound-split" if aggressive else "moses-de+compound-split")
    assert "pre" not in fields["bleu"] and "pre" not in fields["chrf"], sigs
    assert fields["bleu"]["tok"] == "13a" and fields["bleu_cs"]["tok"] == "none"


# ---- pe-evaluate's options (pe_tools/scoring/cli.py) --------------------------------------------------------
@pytest.mark.parametrize("n_samples,refused", [(None, False), (2, False), (1, False), (0, True), (-1, True)])
def test_pe_evaluate_takes_one_resample_or_more(n_samples, refused, tmp_path, capsys):
    """pe-evaluate --n-samples N: N = 1 is the least it takes (one resample or trial); 0 and below are refused
    before any file is read, with status 2 and the option named; without the option, the test's default."""
    from pe_tools.scoring import cli
    from pe_tools.scoring.inputs import InputError

    argv = ["--ref", str(tmp_path / "missing.ref"), "--baseline", "base=b.de", "--system", "sys=s.de",
            "--trg-lang", "de", "--out-dir", str(tmp_path / "out")]
    if n_samples is not None:
        argv += ["--n-samples", str(n_samples)]
    args = cli.build_parser().parse_args(argv)
    if refused:
        with pytest.raises(InputError, match=f"^--n-samples {n_samples}: must be at least 1$"):
            cli.check_options(args)
        assert cli.main(argv) == 2
        assert f"error: --n-samples {n_samples}: must be at least 1" in capsys.readouterr().err
    else:
        assert cli.check_options(args) is None


@pytest.mark.parametrize("paired,signature", [("bs", "|bs:1|"), ("ar", "|ar:1|")])
def test_pe_evaluate_scores_with_a_single_resample(paired, signature, corpus, tmp_path, capsys):
    """The least --n-samples taken, 1, runs through: pe-evaluate writes its report, whose signatures name one
    resample (bs) or one trial (ar)."""
    out = tmp_path / "out"
    assert evaluate(corpus, out, "--baseline", "base=base1.de", "--system", "good=good1.de", "--paired", paired,
                    "--n-samples", "1") == 0
    assert signature in capsys.readouterr().out
    assert load_json(out)["test"]["n_samples"] == 1


@pytest.mark.parametrize("lang,tokens", [
    ("en", "C &apos;est l &apos;été , I can &apos;t go ."),  # English: the apostrophe stays with the clitic after it
    ("fr", "C&apos; est l&apos; été , I can&apos; t go ."),  # French: with the elided word before it
    ("de", "C &apos; est l &apos; été , I can &apos; t go ."),  # no rule of its own: split off both sides
])
def test_compound_split_bleu_tokenises_by_the_target_languages_rules(lang, tokens):
    """Compound-split BLEU tokenises hypotheses and references as ``tokenizer.perl -l LANG`` does for the target
    language of the comparison (--trg-lang), each shipped language by its own apostrophe rule."""
    from pe_tools.scoring.metrics import compound_split

    assert compound_split(["C'est l'été, I can't go."], lang) == [tokens]


@pytest.mark.parametrize("problem", ["language", "line_count"])
@pytest.mark.parametrize("wrong", ["base_run1", "base_run2", "sys_run1", "sys_run2", "other_run2"])
def test_every_input_of_a_comparison_is_checked_alike_baseline_included(wrong, problem, tmp_path, capsys):
    """The checks of a file are one for every file pe-evaluate compares: the baseline's runs as the systems' (a
    baseline in French against a German reference, or one line short, is refused, not scored and every system
    compared with it). Each position in turn holds the odd file, the others German and whole; the refusal names
    that file (the language check names its input too)."""
    odd = {"language": FR, "line_count": DE[:-1]}[problem]
    files = {n: write_lines(tmp_path / f"{n}.txt", odd if n == wrong else DE)
             for n in ("base_run1", "base_run2", "sys_run1", "sys_run2", "other_run1", "other_run2")}
    write_lines(tmp_path / "ref.txt", DE)
    named = lambda label, key: f"{label}={files[key + '_run1']},{files[key + '_run2']}"  # noqa: E731
    argv = ["--ref", str(tmp_path / "ref.txt"), "--trg-lang", "de", "--out-dir", str(tmp_path / "out"),
            "--baseline", named("base", "base"), "--system", named("sys", "sys"), "--system", named("other", "other"),
            "--n-samples", "10", "--allow-unchecked"]
    assert scoring_cli.main(argv) == 2
    err = capsys.readouterr().err
    label = wrong.split("_")[0]
    want = {"language": f"{label}: {files[wrong]} reads as 'fr', not the target language --trg-lang de",
            "line_count": f"line counts differ: {files[wrong]} has {len(DE) - 1} lines, reference "
                          f"{tmp_path / 'ref.txt'} has {len(DE)} lines"}[problem]
    assert want in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name, data, says", [
    ("cut.meta.json", b'{"recipe": "multi30k", "pair', "not a valid UTF-8 JSON file"),  # written half
    ("latin1.meta.json", '{"recipe": "r\xe9sum\xe9"}'.encode("latin-1"), "not a valid UTF-8 JSON file"),
    ("list.meta.json", b"[1, 2]", "metadata must be a JSON object, got list"),
])
def test_a_meta_file_half_written_or_not_utf8_is_refused_naming_it(tmp_path, name, data, says):
    """A decode's meta file cut short (its writer stopped), in another encoding, or not an object: pe-evaluate's
    reader refuses it naming the file, as an input error (not a traceback of json or of the codec)."""
    from pe_tools.scoring.errors import InputError
    from pe_tools.scoring.inputs import read_meta

    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(InputError) as e:
        read_meta(str(path))
    assert str(e.value).startswith(f"{path}: {says}"), e.value


@pytest.mark.parametrize("seed, meta", [
    ("one", {}),  # a seed that is not a number (int() raises ValueError)
    ([1], {}),  # nor a string (TypeError)
    (1, {"training": "done"}),  # a meta file whose training summary is not an object (AttributeError)
])
def test_a_run_whose_command_or_meta_file_cannot_be_read_has_no_identity(tmp_path, seed, meta):
    """A decode whose run's command.json or meta file holds a value of the wrong kind is a decode of an unknown run
    (identity None, so pe-evaluate names it and asks for --allow-unchecked), not a traceback; a whole record gives the
    run's identity."""
    from pe_tools.scoring.inputs import identity

    command = {"recipe": "multi30k", "method": "rope", "pair": "de-en", "seed": seed, "argv": []}
    (tmp_path / "command.json").write_text(json.dumps(command))
    assert identity(str(tmp_path / "hyp.detok.de"), meta) is None
    (tmp_path / "command.json").write_text(json.dumps(dict(command, seed=1)))
    assert identity(str(tmp_path / "hyp.detok.de"), {})["seed"] == 1

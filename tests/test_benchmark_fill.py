"""pe-bench wmt-corpus (a binarised WMT-shaped corpus), the busy window inside real fairseq-train
(pe_tools/bench/_busy_train.py) and pe-bench fill: their arithmetic here, one real run on the CPU (slow)."""
import json
import struct
import subprocess
import sys

import numpy as np
import pytest

from pe_testing import REPO
from pe_tools.bench import _busy_train as busy, fill, wmt_corpus
from pe_tools.recipes import batching


# ------------------------------------------------------------------------------------------------
# the corpus

@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("wmt_shaped")
    return out, wmt_corpus.generate(out, sentences_n=20_000, valid_n=200, vocab=1000, seed=3)


def test_the_corpus_has_wmt14s_lengths(corpus):
    out, record = corpus
    src = record["stats"]["train.en"]
    assert src["sentences"] == 20_000
    assert 25.5 <= src["mean"] <= 28.5 and 19 <= src["median"] <= 25  # about 27 BPE tokens, median below the mean
    assert src["p99"] >= 3 * src["mean"] and src["max"] <= wmt_corpus.MAX_TOKENS  # a long tail, cut at 250
    sizes = {}
    for lang in ("en", "de"):
        idx = (out / f"train.en-de.{lang}.idx").read_bytes()
        assert idx[:9] == wmt_corpus.MAGIC and struct.unpack("<QBQ", idx[9:26]) == (1, wmt_corpus.UINT16, 20_000)
        sizes[lang] = np.frombuffer(idx[26:26 + 4 * 20_000], dtype=np.int32)
        tokens = np.frombuffer((out / f"train.en-de.{lang}.bin").read_bytes(), dtype=np.uint16)
        assert len(tokens) == sizes[lang].sum()
        ends = np.cumsum(sizes[lang]) - 1
        assert (tokens[ends] == wmt_corpus.EOS).all() and (tokens == wmt_corpus.EOS).sum() == 20_000
        body = np.delete(tokens, ends)
        assert body.min() >= wmt_corpus.SPECIALS and body.max() < 1000
        assert np.bincount(body)[4] > 20 * np.bincount(body)[500]  # Zipf: the first word far above the 497th
    ratio = (sizes["de"] - 1) / (sizes["en"] - 1)
    assert ratio.max() <= wmt_corpus.MAX_RATIO and ratio.min() >= 1 / wmt_corpus.MAX_RATIO
    assert (out / "dict.en.txt").read_text() == (out / "dict.de.txt").read_text()
    assert len((out / "dict.en.txt").read_text().splitlines()) == 1000 - wmt_corpus.SPECIALS


def test_fairseq_reads_the_corpus(corpus):
    from fairseq.data import Dictionary, data_utils

    out, record = corpus
    d = Dictionary.load(str(out / "dict.en.txt"))
    assert len(d) == 1000
    ds = data_utils.load_indexed_dataset(str(out / "train.en-de.en"), d)
    assert len(ds) == 20_000 and ds[0][-1] == d.eos() and ds.sizes.mean() == pytest.approx(record["stats"]["train.en"]["tokens"] / 20_000)


def test_the_corpus_is_deterministic_and_reused(tmp_path, corpus):
    out, _ = corpus
    again = wmt_corpus.generate(tmp_path / "a", sentences_n=20_000, valid_n=200, vocab=1000, seed=3)
    assert (tmp_path / "a" / "train.en-de.de.bin").read_bytes() == (out / "train.en-de.de.bin").read_bytes()
    stamp = (tmp_path / "a" / "train.en-de.de.bin").stat().st_mtime_ns
    assert wmt_corpus.generate(tmp_path / "a", sentences_n=20_000, valid_n=200, vocab=1000, seed=3) == again
    assert (tmp_path / "a" / "train.en-de.de.bin").stat().st_mtime_ns == stamp  # complete: left as it is
    wmt_corpus.generate(tmp_path / "a", sentences_n=100, valid_n=200, vocab=1000, seed=3)  # other settings: rewritten
    assert json.loads((tmp_path / "a" / "wmt_shaped.json").read_text())["stats"]["train.en"]["sentences"] == 100
    with pytest.raises(ValueError, match="--vocab 70000"):
        wmt_corpus.generate(tmp_path / "b", vocab=70_000)


# ------------------------------------------------------------------------------------------------
# the busy window's arithmetic

def test_busy_time_is_the_union_of_the_intervals():
    assert busy.union_seconds([]) == 0
    assert busy.union_seconds([(0, 1), (2, 3)]) == 2
    assert busy.union_seconds([(0, 2), (1, 3), (5, 6), (5.5, 5.7)]) == pytest.approx(4)  # overlaps count once
    assert busy.union_seconds([(0, 10), (1, 2), (3, 4)]) == 10  # nested
    events = [("gemm", 0.0, 0.4), ("copy", 0.2, 0.4), ("gemm", 0.8, 0.1)]  # the copy overlaps the first gemm
    s = busy.summarize(events, wall_s=2.0, updates=2, timed_wall_per_update=0.8)
    assert s["busy_s"] == pytest.approx(0.7) and s["kernel_s"] == pytest.approx(0.9) and s["kernels"] == 3
    assert s["busy_fraction"] == pytest.approx(0.35)
    assert s["busy_fraction_unprofiled"] == pytest.approx(0.35 / 0.8 * 2 / 2)  # 0.35 s an update over 0.8 s
    assert s["top_kernels"] == [["gemm", 2, pytest.approx(0.5)], ["copy", 1, pytest.approx(0.4)]]


def test_the_window_needs_fairseq_arguments():
    with pytest.raises(SystemExit):
        busy.parse(["--json", "x.json"])
    with pytest.raises(SystemExit):
        busy.parse(["--json", "x.json", "--timed", "0", "--", "data"])
    a, rest = busy.parse(["--json", "x.json", "--warmup", "0", "--", "data", "--arch", "a"])
    assert (a.warmup, a.timed, a.profiled, rest) == (0, 20, 4, ["data", "--arch", "a"])


# ------------------------------------------------------------------------------------------------
# pe-bench fill: rows, splits, ratios

NAMES = ["nope", "sape", "rpe", "stock"]


def test_rows_and_splits():
    assert fill.parse_row("sape@4096x8", "base", NAMES) == [("sape", None, "base", (4096, 8))]
    assert fill.parse_row("rpe:triton", "base", NAMES) == [("rpe", "triton", "base", "auto")]
    assert fill.parse_row("sape/big@auto", "base", NAMES) == [("sape", None, "big", "auto")]
    assert [r[0] for r in fill.parse_row("all", "base", NAMES)] == NAMES
    for bad, msg in [("posnet", "not one of"), ("sape:fast", "impl 'fast'"), ("sape/huge", "size 'huge'"),
                     ("sape@4096", "not MAXTOKENSxUPDATEFREQ"), ("stock:triton", "no --pe-attention-impl")]:
        with pytest.raises(ValueError, match=msg):
            fill.parse_row(bad, "base", NAMES)
    assert fill.resolve_split((8192, 4), "base", 32768, "wmt14") == (8192, 4, "given")
    with pytest.raises(ValueError, match="not --tokens-per-update 32,768"):
        fill.resolve_split((8192, 8), "base", 32768, "wmt14")  # tokens per update never change
    h100 = lambda: {"free": 79 * batching.GB, "total": 80 * batching.GB, "name": "H100", "count": 1}  # noqa: E731
    assert fill.resolve_split("auto", "base", 32768, "wmt14", memory=h100)[:2] == (32768, 1)
    assert fill.resolve_split("auto", "big", 32768, "wmt14", memory=h100)[:2] == (16384, 2)
    assert fill.resolve_split("auto", "base", 32768, "wmt14", memory=lambda: None)[:2] == (4096, 8)


def test_the_profiled_stretch_counts_micro_batches():
    args = type("A", (), {"warmup": 5, "timed": 20, "profiled_micro_batches": 16})
    assert fill.window(8, args) == (5, 20, 2)
    assert fill.window(2, args) == (5, 20, 8)
    assert fill.window(1, args) == (5, 20, 16)
    assert fill.window(32, args) == (5, 20, 2)  # at least two updates


def row(pe, m, f, wps, peak, impl="auto", busy_fraction=0.5):
    return {"pe": pe, "impl": impl, "size": "base", "max_tokens": m, "update_freq": f, "wps": wps, "ups": wps / (m * f),
            "peak_bytes": peak, "busy_fraction": busy_fraction}


def test_ratios_and_the_goals():
    results = [row("sape", 4096, 8, 30_000, 4e9), row("sape", 32768, 1, 150_000, 28e9, busy_fraction=0.9),
               row("rpe", 32768, 1, 120_000, 29e9), row("rpe", 32768, 1, 140_000, 28.5e9, impl="triton"),
               row("t5", 32768, 1, 145_000, 30e9)]
    fill.add_ratios(results)
    sape, fed, rpe, triton, t5 = results
    assert fed["wps_to_first_split"] == pytest.approx(5.0) and fed["first_split"] == "4096x8"
    assert rpe["step_to_sape"] == pytest.approx(1.25) and rpe["wps_to_sape"] == pytest.approx(0.8)
    assert triton["step_to_sape"] == pytest.approx(150 / 140) and triton["wps_to_first_split"] == 1
    assert t5["peak_to_sape"] == pytest.approx(30 / 28)
    lines = fill.goal_lines(results, "cuda")
    assert "sape base at 32768x1: 5.00x the words/s of 4096x8 (goal 4x), busy 90% of the step (goal 80%)" in lines[0]
    assert "rpe (base, 32768x1: step 1.25x" in lines[1] and "t5 (base" in lines[1] and "rpe:triton" not in lines[1]


@pytest.mark.slow
def test_a_real_fill_run_on_the_cpu(corpus, tmp_path):
    """Two rows of real fairseq-train (tiny) under the window: the JSON, the ratios, the resumed run keeps them."""
    out, _ = corpus
    cmd = [sys.executable, str(REPO / "scripts" / "benchmark.py"), "fill", "--data", str(out), "--size", "tiny",
           "--tokens-per-update", "512", "--rows", "sape@256x2", "sape@512x1", "--warmup", "1", "--timed", "2",
           "--profiled-micro-batches", "2", "--device", "cpu", "--threads", "1", "--out-dir", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((tmp_path / "fill.json").read_text())
    assert data["complete"] and [(r["max_tokens"], r["update_freq"]) for r in data["results"]] == [(256, 2), (512, 1)]
    for r in data["results"]:
        assert r["wps"] > 0 and 0 < r["busy_fraction"] <= 1.0 and r["peak_bytes"] > 0 and r["top_kernels"]
        assert r["tokens_per_update"] <= 512 and "--update-freq" in r["command"]
    assert data["results"][1]["wps_to_first_split"] == pytest.approx(data["results"][1]["wps"] / data["results"][0]["wps"])
    again = subprocess.run([*cmd, "--resume"], capture_output=True, text=True)
    assert again.returncode == 0 and "2 of 2 rows kept" in again.stderr

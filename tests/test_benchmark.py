"""pe-bench models (scripts/benchmark.py models): one tiny run end to end (JSON, CSV, markdown, chart), its
parameter counts against counts worked out by hand, ratios of fixed figures; bad input rejected with a useful
message."""
import csv
import json
import os
import subprocess
import sys

import pytest

from pe_testing import REPO

ENCODINGS = ["nope", "sape", "posnet_embed"]
VOCAB = 100
FILES = {"benchmark.json", "benchmark.csv", "benchmark.md", "benchmark.png"}
# raw figure -> its ratio to SAPE (pe_tools/bench/models/measure.py RATIOS, restated so a renamed key fails here)
RATIOS = {"forward_s": "forward_ratio", "forward_median_s": "forward_median_ratio", "step_s": "step_ratio",
          "step_median_s": "step_median_ratio", "step_cpu_s": "cpu_ratio", "peak_bytes": "peak_ratio",
          "step_bytes": "step_mem_ratio"}


def benchmark(*args):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, str(REPO / "scripts" / "benchmark.py"), "models", *map(str, args)],
                          cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    proc = benchmark("--sizes", "tiny", "--pe", *ENCODINGS, "--rounds", 1, "--steps", 1, "--warmup", 0,
                     "--forward-passes", 2, "--vocab", VOCAB, "--batch", 4, "--length", 6, "--threads", 1,
                     "--out-dir", out)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, proc, json.loads((out / "benchmark.json").read_text())


def test_every_encoding_and_size_measured_and_files_complete(tiny_run):
    out, proc, data = tiny_run
    assert {p.name for p in out.iterdir()} == FILES  # no temporary file left behind
    settings, results = data["settings"], data["results"]
    assert settings["sizes"] == ["tiny"] and settings["encodings"] == ENCODINGS  # registry order
    assert settings["forward_passes"] == 2 and settings["threads"] == 1
    assert settings["memory_kind"] in ("cuda-allocated", "cpu-rss")
    assert len(settings["loadavg_start"]) == len(settings["loadavg_end"]) == 3 and settings["torch"]
    assert [(r["size"], r["pe"]) for r in results] == [("tiny", pe) for pe in ENCODINGS]
    cpu = settings["memory_kind"] == "cpu-rss"
    assert settings.get("memory_env") == ({"MALLOC_MMAP_THRESHOLD_": "131072"} if cpu else None)
    for r in results:
        assert r["memory_kind"] == settings["memory_kind"]
        assert r["forward_s"] > 0 and r["step_s"] > 0 and r["peak_bytes"] > 0
        assert ("malloc_default_step_bytes" in r) == cpu  # the timing interpreter's own RSS, kept beside
        assert r["forward_s"] <= r["forward_median_s"] and r["step_s"] <= r["step_median_s"]

    with open(out / "benchmark.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [row["pe"] for row in rows] == ENCODINGS
    assert [int(row["params"]) for row in rows] == [r["params"] for r in results]

    assert (out / "benchmark.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for text in ((out / "benchmark.md").read_text(), proc.stdout):
        for pe in ENCODINGS:
            assert sum(line.startswith(f"| {pe} |") for line in text.splitlines()) == 1, pe


def test_sape_is_the_unit_of_every_ratio(tiny_run):
    results = tiny_run[2]["results"]
    sape = next(r for r in results if r["pe"] == "sape")
    for key, ratio in RATIOS.items():
        if sape[key] == 0:  # possible only for step_bytes on CPU (no RSS growth): no ratio then
            assert key == "step_bytes" and all(r[ratio] is None for r in results)
            continue
        assert sape[ratio] == 1.0, ratio
        assert all(r[ratio] >= 0 for r in results), ratio


# The tiny models of the wmt14 recipe with a 100-symbol dictionary (VOCAB), worked out by hand from fairseq's
# tiny_architecture (d = 64, FFN 64, 2 + 2 layers) with --share-all-embeddings:
#   embeddings 100 x 64 = 6,400 (one table: encoder, decoder and output projection)
#   encoder layer: 4 attention projections 4 x (64 x 64 + 64) = 16,640, FFN 2 x (64 x 64 + 64) = 8,320,
#                  2 LayerNorms 2 x 128 = 256: 25,216; two layers 50,432
#   decoder layer: self- and cross-attention 2 x 16,640, FFN 8,320, 3 LayerNorms 384: 41,984; two layers 83,968
#   no-PE and SAPE (sinusoids are a buffer): 6,400 + 50,432 + 83,968 = 140,800
#   PosNet-Embed (d_p 16 at tiny, the recipe's L_max 200, one kernel set for both stacks):
#                  2 d d_p + L_max d_p^2 = 2 x 64 x 16 + 200 x 16^2 = 2,048 + 51,200 = 53,248; 194,048 in all
PARAMS = {"nope": (140800, 0), "sape": (140800, 0), "posnet_embed": (194048, 53248)}
MAX_POSITIONS = {"nope": [1024, 1024], "sape": [1024, 1024], "posnet_embed": [200, 200]}  # fairseq's default; L_max


def test_parameter_counts_are_the_recipe_models(tiny_run):
    assert tiny_run[2]["settings"]["recipe"] == "wmt14"
    results = tiny_run[2]["results"]
    assert {r["pe"]: (r["params"], r["pe_params"]) for r in results} == PARAMS
    assert {r["pe"]: r["max_positions"] for r in results} == MAX_POSITIONS


def test_ratios_of_fixed_figures():
    from pe_tools.bench.models.measure import add_ratios

    figures = dict.fromkeys(RATIOS, 1.0)
    results = [dict(figures, pe="sape", size="tiny", forward_s=2.0, step_bytes=0),
               dict(figures, pe="rope", size="tiny", forward_s=3.0, step_s=0.5, step_bytes=5),
               dict(figures, pe="sape", size="base", forward_s=4.0, step_bytes=8),
               dict(figures, pe="rope", size="base", forward_s=1.0, step_bytes=2)]
    add_ratios(results)
    assert [(r["forward_ratio"], r["step_ratio"], r["step_mem_ratio"]) for r in results] == [
        (1.0, 1.0, None), (1.5, 0.5, None), (1.0, 1.0, 1.0), (0.25, 1.0, 0.25)]


def test_unknown_encoding_lists_the_valid_names():
    proc = benchmark("--sizes", "tiny", "--pe", "sape", "no_such_pe")
    assert proc.returncode != 0
    assert "no_such_pe" in proc.stderr
    for name in ["nope", "sape", "lape", "rpe", "t5", "at5", "posnet_embed", "posnet_attn", "rope", "alibi"]:
        assert name in proc.stderr, name


@pytest.mark.parametrize("flag", ["--forward-passes", "--rounds"])
def test_zero_counts_rejected_naming_the_flag(flag):
    proc = benchmark(flag, 0)
    assert proc.returncode != 0 and flag in proc.stderr and "at least 1" in proc.stderr


def test_an_isolated_run_gets_the_environment_it_is_given(monkeypatch):
    """The memory interpreter's allocator setting must reach the child (glibc reads it at start-up)."""
    from pe_tools.bench._timing import run_isolated

    monkeypatch.delenv("PE_BENCH_PROBE", raising=False)
    assert run_isolated("os", "getenv", {"key": "PE_BENCH_PROBE"}) is None
    assert run_isolated("os", "getenv", {"key": "PE_BENCH_PROBE"}, env={"PE_BENCH_PROBE": "131072"}) == "131072"

"""pe-bench models (scripts/benchmark.py models): one tiny run end to end (JSON, CSV, markdown, chart), ratios and parameter counts
checked against figures recomputed here; bad input rejected with a useful message."""
import csv
import json
import os
import subprocess
import sys
import tomllib

import pytest

from pe_testing import REPO, build_model

ENCODINGS = ["nope", "sape", "posnet_embed"]
VOCAB = 100
FILES = {"benchmark.json", "benchmark.csv", "benchmark.md", "benchmark.png"}
# raw figure -> its ratio to SAPE (pe_tools/bench/models.py RATIOS, restated so a renamed key fails here)
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


def test_ratios_are_figures_over_sape(tiny_run):
    results = tiny_run[2]["results"]
    sape = next(r for r in results if r["pe"] == "sape")
    for key, ratio in RATIOS.items():
        if sape[key] == 0:  # possible only for step_bytes on CPU (no RSS growth): no ratio then
            assert key == "step_bytes" and all(r[ratio] is None for r in results)
            continue
        assert sape[ratio] == 1.0, ratio
        for r in results:
            assert r[ratio] == pytest.approx(r[key] / sape[key], rel=1e-12), (r["pe"], ratio)


def test_parameter_counts_match_a_model_built_here(tiny_run, tmp_path):
    from pe_plugin.models.validation import pe_parameter_count

    for lang in ("src", "tgt"):  # VOCAB symbols in all: fairseq's Dictionary adds its 4 specials
        (tmp_path / f"dict.{lang}.txt").write_text("".join(f"w{i} 1\n" for i in range(VOCAB - 4)))
    with open(REPO / "pe_tools" / "recipes" / "wmt14" / "methods.toml", "rb") as f:  # the models are the recipe's
        recipe = tomllib.load(f)["method"]
    assert tiny_run[2]["settings"]["recipe"] == "wmt14"
    for r in tiny_run[2]["results"]:
        flags = recipe[r["pe"]]["flags"]
        task, model, _ = build_model(tmp_path, f"transformer_{r['pe']}_tiny", extra=["-s", "src", "-t", "tgt", *flags])
        assert r["max_positions"] == [model.encoder.max_source_positions, model.decoder.max_target_positions]
        if r["pe"] == "posnet_embed":  # the recipe's L_max, not fairseq's default 1024
            lmax = int(flags[flags.index("--max-source-positions") + 1])
            assert lmax < 1024 and model.encoder.pe.max_positions == lmax
            assert r["pe_params"] == 2 * 64 * 16 + lmax * 16 ** 2  # 2 C d_p + L_max d_p^2 at tiny size
        assert len(task.source_dictionary) == VOCAB
        assert r["params"] == sum(p.numel() for p in model.parameters()), r["pe"]
        assert r["pe_params"] == pe_parameter_count(model), r["pe"]


def test_unknown_encoding_lists_the_valid_names():
    from pe_plugin.encodings import PE_REGISTRY

    proc = benchmark("--sizes", "tiny", "--pe", "sape", "no_such_pe")
    assert proc.returncode != 0
    assert "no_such_pe" in proc.stderr
    for name in PE_REGISTRY:
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

"""pe-bench models (scripts/benchmark.py models): one tiny run at two lengths end to end (JSON, CSV, markdown,
chart), its parameter counts against counts worked out by hand (stock fairseq's equal to SAPE's), its
--max-tokens batches, the padded batch, fairseq's fp16 step, ratios of fixed figures; bad input rejected with a
useful message."""
import csv
import json
import math
import os
import subprocess
import sys

import pytest

from pe_testing import REPO, call_main

ENCODINGS = ["sape", "posnet_embed", "stock"]  # registry order, stock last (no PE's row adds nothing here)
LENGTHS = [6, 10]
FRESH_LENGTH = 10  # the fresh-interpreter run's one length (two interpreters a row)
MAX_TOKENS = 40  # batches of 40 // 6 = 6 and 40 // 10 = 4 sentences
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


def benchmark_here(*args):
    """``benchmark(*args)`` called in this interpreter (pe_tools.bench.cli.main): for the argument errors."""
    from pe_tools.bench import cli

    return call_main(cli.main, ["models", *args], prog="benchmark.py", cwd=REPO)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """The CPU's default run: a fresh interpreter per measurement (two: timing, then memory), at one length."""
    out = tmp_path_factory.mktemp("bench")
    proc = benchmark("--sizes", "tiny", "--pe", *ENCODINGS, "--rounds", 1, "--steps", 1, "--warmup", 0,
                     "--forward-passes", 2, "--vocab", VOCAB, "--lengths", FRESH_LENGTH, "--max-tokens", MAX_TOKENS,
                     "--threads", 1, "--device", "cpu", "--out-dir", out)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, proc, json.loads((out / "benchmark.json").read_text())


@pytest.fixture(scope="module")
def lengths_run(tmp_path_factory):
    """Every row at both LENGTHS, two rounds, measured in one process (--processes one): the batches and the
    ratios per length."""
    out = tmp_path_factory.mktemp("bench_lengths")
    proc = benchmark("--sizes", "tiny", "--pe", *ENCODINGS, "--rounds", 2, "--steps", 1, "--warmup", 0,
                     "--forward-passes", 1, "--vocab", VOCAB, "--lengths", *LENGTHS, "--max-tokens", MAX_TOKENS,
                     "--threads", 1, "--device", "cpu", "--processes", "one", "--json", out / "one.json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, proc, json.loads((out / "one.json").read_text())


@pytest.mark.slow
def test_every_encoding_and_size_measured_and_files_complete(tiny_run):
    out, proc, data = tiny_run
    assert {p.name for p in out.iterdir()} == FILES  # no temporary file left behind
    settings, results = data["settings"], data["results"]
    assert settings["sizes"] == ["tiny"] and settings["encodings"] == ENCODINGS  # registry order
    assert settings["lengths"] == [FRESH_LENGTH] and settings["max_tokens"] == MAX_TOKENS
    assert settings["forward_passes"] == 2 and settings["threads"] == 1
    assert settings["memory_kind"] in ("cuda-allocated", "cpu-rss")
    assert len(settings["loadavg_start"]) == len(settings["loadavg_end"]) == 3 and settings["torch"]
    assert settings["fp16"] is False and settings["device"] == "cpu" and settings["device_name"]
    assert "cuda" in settings  # torch.version.cuda: None on a CPU build
    assert [(r["size"], r["length"], r["pe"]) for r in results] == [("tiny", FRESH_LENGTH, pe) for pe in ENCODINGS]
    cpu = settings["memory_kind"] == "cpu-rss"
    assert settings.get("memory_env") == ({"MALLOC_MMAP_THRESHOLD_": "131072"} if cpu else None)
    for r in results:
        assert r["memory_kind"] == settings["memory_kind"]
        assert r["forward_s"] > 0 and r["step_s"] > 0 and r["peak_bytes"] > 0
        assert ("malloc_default_step_bytes" in r) == cpu  # the timing interpreter's own RSS, kept beside
        assert r["forward_s"] <= r["forward_median_s"] and r["step_s"] <= r["step_median_s"]

    with open(out / "benchmark.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(row["pe"], int(row["length"])) for row in rows] == [(pe, FRESH_LENGTH) for pe in ENCODINGS]
    assert [int(row["params"]) for row in rows] == [r["params"] for r in results]

    assert (out / "benchmark.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for text in ((out / "benchmark.md").read_text(), proc.stdout):
        for pe in ENCODINGS:  # one row per length
            assert sum(line.startswith(f"| {pe} |") for line in text.splitlines()) == 1, pe
        assert "torch " in text and "CUDA " in text and "fp32" in text


@pytest.mark.slow
def test_batches_hold_max_tokens_at_each_length(lengths_run):
    settings, results = lengths_run[2]["settings"], lengths_run[2]["results"]
    assert [(r["length"], r["pe"]) for r in results] == [(length, pe) for length in LENGTHS for pe in ENCODINGS]
    assert settings["batches"] == {"6": 6, "10": 4}  # 40 // 6, 40 // 10
    for r in results:
        assert r["batch"] == MAX_TOKENS // r["length"]
        # every sentence between ceil(0.7 L) and L tokens, eos included: the real tokens of the padded batch
        assert math.ceil(0.7 * r["length"]) * r["batch"] <= r["src_tokens"] < r["length"] * r["batch"]
        assert math.ceil(0.7 * r["length"]) * r["batch"] <= r["tokens"] <= r["length"] * r["batch"]


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.slow
def test_sape_is_the_unit_of_every_ratio(lengths_run, length):
    results = [r for r in lengths_run[2]["results"] if r["length"] == length]
    sape = next(r for r in results if r["pe"] == "sape")
    for key, ratio in RATIOS.items():
        if sape[key] == 0:  # possible only for step_bytes on CPU (no RSS growth): no ratio then
            assert key == "step_bytes" and all(r[ratio] is None for r in results)
            continue
        assert sape[ratio] == 1.0, ratio
        assert all(r[ratio] >= 0 for r in results), ratio
        assert all(r[ratio] == r[key] / sape[key] for r in results), ratio  # to sape at the same length


# The tiny models of the wmt14 recipe with a 100-symbol dictionary (VOCAB), worked out by hand from fairseq's
# tiny_architecture (d = 64, FFN 64, 2 + 2 layers) with --share-all-embeddings:
#   embeddings 100 x 64 = 6,400 (one table: encoder, decoder and output projection)
#   encoder layer: 4 attention projections 4 x (64 x 64 + 64) = 16,640, FFN 2 x (64 x 64 + 64) = 8,320,
#                  2 LayerNorms 2 x 128 = 256: 25,216; two layers 50,432
#   decoder layer: self- and cross-attention 2 x 16,640, FFN 8,320, 3 LayerNorms 384: 41,984; two layers 83,968
#   SAPE (sinusoids are a buffer): 6,400 + 50,432 + 83,968 = 140,800
#   stock fairseq transformer_tiny: the same model as the plugin's SAPE, 140,800
#   PosNet-Embed (d_p 16 at tiny, the recipe's L_max 200, one kernel set for both stacks):
#                  2 d d_p + L_max d_p^2 = 2 x 64 x 16 + 200 x 16^2 = 2,048 + 51,200 = 53,248; 194,048 in all
PARAMS = {"sape": (140800, 0), "posnet_embed": (194048, 53248), "stock": (140800, 0)}
MAX_POSITIONS = {"sape": [1024, 1024], "posnet_embed": [200, 200],  # fairseq's default; L_max
                 "stock": [1024, 1024]}
ARCHS = {"sape": "transformer_sape_tiny",
         "posnet_embed": "transformer_posnet_embed_tiny", "stock": "transformer_tiny"}


@pytest.mark.slow
@pytest.mark.parametrize("run", ["tiny_run", "lengths_run"])
def test_parameter_counts_are_the_recipe_models(run, request):
    data = request.getfixturevalue(run)[2]
    assert data["settings"]["recipe"] == "wmt14"
    for length in data["settings"]["lengths"]:
        results = [r for r in data["results"] if r["length"] == length]
        assert {r["pe"]: (r["params"], r["pe_params"]) for r in results} == PARAMS
        assert {r["pe"]: r["max_positions"] for r in results} == MAX_POSITIONS
        assert {r["pe"]: r["arch"] for r in results} == ARCHS


def test_stock_fairseq_is_built_without_the_plugin():
    """The stock row is fairseq's own TransformerModel, not a plugin class, with the plugin SAPE's parameters:
    the same names, and under seed 1 the same values (the two models are byte-identical)."""
    import torch

    from pe_tools.bench._build import STOCK, build_model

    stock, args = build_model(STOCK, "tiny", VOCAB, "wmt14", "cpu")
    sape, _ = build_model("sape", "tiny", VOCAB, "wmt14", "cpu")
    assert type(stock).__module__.startswith("fairseq.models.") and args.arch == "transformer_tiny"
    assert type(sape).__module__.startswith("pe_plugin.")
    a, b = dict(stock.named_parameters()), dict(sape.named_parameters())
    assert a.keys() == b.keys() and sum(p.numel() for p in a.values()) == PARAMS["stock"][0]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_padded_batch_is_left_padded_on_the_source():
    from pe_tools.bench._build import EOS, PAD, padded_batch

    batch, length = 12, 20
    src, src_len, prev, target = padded_batch(batch, length, VOCAB, "cpu")
    assert src.shape == prev.shape == target.shape == (batch, length)
    assert src_len.tolist() == sorted(src_len.tolist(), reverse=True) and src_len[0] == length  # longest = L
    assert len(set(src_len.tolist())) > 1 and src_len.min() >= math.ceil(0.7 * length)  # varied, in [0.7 L, L]
    assert (src[:, 0] == PAD).any() and (src[:, -1] == EOS).all()  # padding on the left, every source ends in eos
    tgt_len = target.ne(PAD).sum(1)
    assert tgt_len.max() == length and len(set(tgt_len.tolist())) > 1
    for b in range(batch):
        n, m = int(src_len[b]), int(tgt_len[b])
        assert (src[b, :length - n] == PAD).all() and (src[b, length - n:] != PAD).all()
        assert (src[b, length - n:-1] >= 4).all()  # ordinary symbols only before eos
        assert (target[b, :m] != PAD).all() and (target[b, m:] == PAD).all() and target[b, m - 1] == EOS
        assert prev[b, 0] == EOS and (prev[b, 1:m] == target[b, :m - 1]).all() and (prev[b, m:] == PAD).all()


def test_batch_size_is_max_tokens_over_length():
    from pe_tools.bench._build import batch_size

    assert [batch_size(4096, n) for n in (20, 50, 100, 200)] == [204, 81, 40, 20]
    assert batch_size(30, 30) == 1
    with pytest.raises(ValueError, match="smaller than length 31"):
        batch_size(30, 31)
    with pytest.raises(ValueError, match="at least 1"):
        batch_size(30, 0)


def test_fp16_step_is_fairseqs_with_fp32_master_weights():
    """--fp16: the model halved, fairseq's FP16Optimizer holding float32 masters (one per parameter off CUDA);
    after a step the fp16 weights are the updated masters rounded to half."""
    import torch

    from pe_tools.bench._build import build_model, build_optimizer
    from fairseq.optim.fp16_optimizer import FP16Optimizer

    model, args = build_model("sape", "tiny", VOCAB, "wmt14", "cpu", fp16=True)
    assert args.fp16 and args.fp16_no_flatten_grads
    opt = build_optimizer(model, args, fp16=True)
    assert isinstance(opt, FP16Optimizer) and opt.scaler is not None and not opt.has_flat_params
    params = list(model.parameters())
    assert {p.dtype for p in params} == {torch.float16}
    assert {p.dtype for p in opt.fp32_params} == {torch.float32} and len(opt.fp32_params) == len(params)
    before = [p.detach().float().clone() for p in opt.fp32_params]
    src = torch.randint(4, VOCAB, (2, 5))
    logits, _ = model(src, torch.tensor([5, 5]), src)
    opt.zero_grad()
    opt.backward(logits.float().logsumexp(-1).sum())
    opt.clip_grad_norm(0.0)
    opt.step()
    assert any(not torch.equal(b, p) for b, p in zip(before, opt.fp32_params))  # the masters moved
    assert all(torch.equal(p, m.half()) for p, m in zip(params, opt.fp32_params))  # fp16 = rounded masters


@pytest.mark.slow
def test_fp16_run_and_the_old_batch_length_flags(tmp_path):
    """A whole --fp16 run on a CPU at tiny size, with the single-length --length and a fixed --batch."""
    proc = benchmark("--sizes", "tiny", "--pe", "sape", "--rounds", 1, "--steps", 1, "--warmup", 0,
                     "--forward-passes", 1, "--vocab", VOCAB, "--batch", 3, "--length", 7, "--threads", 1,
                     "--device", "cpu", "--fp16", "--json", tmp_path / "b.json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((tmp_path / "b.json").read_text())
    settings, (sape,) = data["settings"], data["results"]
    assert settings["fp16"] is True and settings["lengths"] == [7] and settings["max_tokens"] is None
    assert (sape["length"], sape["batch"]) == (7, 3)
    assert sape["param_dtypes"] == ["torch.float16"] and sape["master_dtypes"] == ["torch.float32"]
    assert "fp16" in proc.stdout and "FP16Optimizer" in proc.stdout


def test_ratios_of_fixed_figures():
    """The models' ratios: the one ratio function, against SAPE at the same size and length."""
    from pe_tools.bench._common import add_ratios
    from pe_tools.bench.models import AGAINST_SAPE, RATIOS as MODEL_RATIOS

    assert MODEL_RATIOS.items() >= RATIOS.items()
    figures = dict.fromkeys(RATIOS, 1.0)
    results = [dict(figures, pe="sape", size="tiny", length=6, forward_s=2.0, step_bytes=0),
               dict(figures, pe="rope", size="tiny", length=6, forward_s=3.0, step_s=0.5, step_bytes=5),
               dict(figures, pe="sape", size="base", length=6, forward_s=4.0, step_bytes=8),
               dict(figures, pe="rope", size="base", length=6, forward_s=1.0, step_bytes=2),
               dict(figures, pe="rope", size="base", length=10, forward_s=1.0, step_bytes=2),
               dict(figures, pe="sape", size="base", length=10, forward_s=0.5, step_bytes=1)]
    add_ratios(results, MODEL_RATIOS, *AGAINST_SAPE)
    assert [(r["forward_ratio"], r["step_ratio"], r["step_mem_ratio"]) for r in results] == [
        (1.0, 1.0, None), (1.5, 0.5, None), (1.0, 1.0, 1.0), (0.25, 1.0, 0.25), (2.0, 1.0, 2.0), (1.0, 1.0, 1.0)]


def test_the_kernel_summary_groups_by_name_longest_first():
    """The one kernel summary (pe_tools/bench/_common.py): busy time is the union of the intervals, the top
    activities are summed by name, longest first (fake profiler events: name, start, duration)."""
    from pe_tools.bench._common import kernel_summary

    events = [("gemm", 0.0, 30e-6), ("softmax", 10e-6, 25e-6), ("gemm", 50e-6, 20e-6), ("copy", 80e-6, 5e-6),
              ("add", 82e-6, 5e-6)]
    k = kernel_summary(events)
    assert k["top_kernels"] == [["gemm", 2, 50e-6], ["softmax", 1, 25e-6], ["add", 1, 5e-6], ["copy", 1, 5e-6]]
    assert kernel_summary(events, top=1)["top_kernels"] == [["gemm", 2, 50e-6]]
    assert (k["kernels"], k["kernel_s"]) == (5, pytest.approx(85e-6))
    assert k["busy_s"] == pytest.approx(35e-6 + 20e-6 + 7e-6)  # [0, 35], [50, 70], [80, 87]


def test_unknown_encoding_lists_the_valid_names():
    proc = benchmark_here("--sizes", "tiny", "--pe", "sape", "no_such_pe")
    assert proc.returncode != 0
    assert "no_such_pe" in proc.stderr
    for name in ["nope", "sape", "lape", "rpe", "t5", "at5", "posnet_embed", "posnet_attn", "rope", "alibi"]:
        assert name in proc.stderr, name


@pytest.mark.parametrize("flag", ["--forward-passes", "--rounds", "--lengths", "--max-tokens", "--batch"])
def test_zero_counts_rejected_naming_the_flag(flag):
    proc = benchmark_here(flag, 0)
    assert proc.returncode != 0 and flag in proc.stderr and "at least 1" in proc.stderr


def test_max_tokens_below_a_length_rejected():
    proc = benchmark_here("--sizes", "tiny", "--lengths", 20, 50, 100, "--max-tokens", 60)
    assert proc.returncode == 2
    assert "--max-tokens 60 is smaller than --lengths 100" in proc.stderr and "--batch" in proc.stderr


def test_batch_and_max_tokens_exclude_each_other():
    proc = benchmark_here("--batch", 4, "--max-tokens", 100)
    assert proc.returncode != 0 and "not allowed with argument" in proc.stderr


def test_an_isolated_run_gets_the_environment_it_is_given(monkeypatch):
    """The memory interpreter's allocator setting must reach the child (glibc reads it at start-up)."""
    from pe_tools.bench._common import run_isolated

    monkeypatch.delenv("PE_BENCH_PROBE", raising=False)
    assert run_isolated("os", "getenv", {"key": "PE_BENCH_PROBE"}) is None
    assert run_isolated("os", "getenv", {"key": "PE_BENCH_PROBE"}, env={"PE_BENCH_PROBE": "131072"}) == "131072"


@pytest.mark.slow
def test_one_process_measures_every_row_and_moves_one_model_copy_at_a_time(tmp_path, monkeypatch):
    """--processes one (CUDA's default): every row in this process, each (pe, size) built once, a fresh copy per
    measurement; the same rows, parameter counts and weights as the fresh-interpreter path."""
    import torch

    from pe_tools.bench import _build as build, models as measure

    built = []
    real_build = build.build_model

    def counting_build(pe, size, *args, **kwargs):
        built.append((pe, size))
        return real_build(pe, size, *args, **kwargs)

    monkeypatch.setattr(measure, "build_model", counting_build)
    kwargs = dict(vocab=VOCAB, steps=1, warmup=0, forward_passes=1, threads=1, device="cpu", recipe="wmt14",
                  fp16=False, batch=4, length=10)
    cache = {}
    runs = [measure.measure_in_process(pe, "tiny", kwargs, cache) for pe in ("sape", "posnet_embed")]
    runs += [measure.measure_in_process(pe, "tiny", kwargs, cache) for pe in ("sape", "posnet_embed")]
    assert built == [("sape", "tiny"), ("posnet_embed", "tiny")]  # once each, whatever the rounds
    assert [(r["pe"], r["params"], r["pe_params"]) for r in runs] == [
        (pe, *PARAMS[pe]) for pe in ("sape", "posnet_embed")] * 2
    assert all(r["leftover_bytes"] == 0 and min(r["step_wall_s"]) > 0 for r in runs)
    # the cached model is left untouched by the measurements (each trained a copy): still seed 1's weights
    fresh, _ = real_build("sape", "tiny", VOCAB, "wmt14", "cpu")
    cached = cache["sape", "tiny"][0]
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), cached.state_dict().values()))


@pytest.mark.slow
def test_one_process_run_from_the_command_line(lengths_run):
    out, proc, data = lengths_run
    assert [p.name for p in out.iterdir()] == ["one.json"]  # --json alone: no markdown, CSV or chart
    assert data["settings"]["processes"] == "one" and "memory_env" not in data["settings"]
    assert [(r["pe"], len(r["rounds"]["step_wall_s"])) for r in data["results"]] == [
        (pe, 2) for _ in LENGTHS for pe in ENCODINGS]
    assert "one process" in proc.stdout and "not comparable" in proc.stdout

"""Every figure in the prose of a document (two or three decimals) is the one recorded value it states, read from
the recorded file (or computed from it, or from the code's own constants) and rounded as written: each page's figures,
in order, are pinned in tests/data/pinned_figures.json (PINNED). Also the whole-number counts and settings the prose
spells out. The tables of the same documents: tests/test_tables.py."""
import json
import math
import re
from pathlib import Path

import pytest
from pe_recorded import flat, gpu_models, read_csv
from pe_testing import REPO

# A pinned page: each figure of its prose, in the order of the page, with the one recorded value it states (not any
# number of any file: a random two-decimal figure would match one of those more often than not). A row is (figure,
# source file, column, the key columns naming one row, format): format "" x, "+" x signed, "-" -x (a deficit stated as
# "below"), "p" a p-value to two significant digits, "3" x to three decimals, "M" (or "+M") a count in millions, "<" a
# bound the value stays under, the tightest as written; a source "computed:NAME" is a figure of COMPUTED. Sources that
# are not CSV: a JSON file's column is a path of keys ("rows.0.kendall_tau"), within the one row of its "results" that
# ``where`` names if it names one; any other file's column is a regular expression whose one group is the value,
# ``where`` {"match": n} its n-th match (the first by default). A source "exempt" is a figure no file of the tree
# records or left to another check, its column the reason.
PROSE_FIGURE = re.compile(r"(?<![\w.])[+-]?\d+\.\d{2,3}(?=[xM]?(?![\w]|\.\d))")  # also before a full stop
THRESHOLDS = re.compile(r"p < 0\.(05|10)\b( / 0\.10\b)?")  # the significance levels, not results
M30K_REPORT = "examples/multi30k/report/"
SETUP_ENV = "scripts/setup_env.sh"  # the versions make setup installs and the Pythons it accepts
QUICKSTART = "examples/quickstart/toy_posnet.txt"
CPU_BENCH = "examples/benchmarks/cpu/models/benchmark.csv"
COST = "examples/benchmarks/cost/cost.csv"
PAPER = "examples/wmt14/paper_results.md"
PAPER_PARAMS = r"(?m)^\| [^|]*\(`{}`\) \|.*\| ([\d.]+)M \|$"  # its Table 1 total for En-De, millions
CPU_BENCH_JSON = "examples/benchmarks/cpu/models/benchmark.json"
KERNEL_BENCH = "examples/benchmarks/cpu/posnet_kernel.json"

GPU_MODELS = "examples/benchmarks/gpu/models.json"  # JSON sources with ``where``: the one row of "results" that matches
GPU_MODELS_AFTER = "examples/benchmarks/gpu/models_after.json"
GPU_TRAIN_SPEED = "examples/benchmarks/gpu/train_speed.json"


PINNED_FILE = REPO / "tests" / "data" / "pinned_figures.json"
PINNED = {doc: [tuple(entry[:5]) for entry in entries]
          for doc, entries in json.loads(PINNED_FILE.read_text(encoding="utf-8")).items()}


def _small_lr_at_the_end() -> float:
    """The learning rate at the last update of size small (inverse-sqrt after linear warm-up) over its peak."""
    from pe_tools.recipes import load_table

    flags = load_table("multi30k")["size"]["small"]["flags"]
    value = lambda flag: float(flags[len(flags) - 1 - flags[::-1].index(flag) + 1])  # noqa: E731  (the last one)
    assert flags[flags.index("--lr-scheduler") + 1] == "inverse_sqrt"
    return math.sqrt(value("--warmup-updates") / value("--max-update"))


def _user_default_less_lmax256() -> float:
    """What capping L_max at 256 (posnet_embed_lmax256) gains over PosNet-Embed's old default (posnet_embed_user):
    the difference of their three-seed mean BLEU deltas."""
    rows = {r["system"]: r for r in read_csv(REPO / M30K_REPORT / "results_seeds.csv")}
    return float(rows["posnet_embed_lmax256"]["bleu_delta"]) - float(rows["posnet_embed_user"]["bleu_delta"])


def _goal(name: str) -> float:
    """The GPU benchmark's goal for an encoding's cost to SAPE (examples/benchmarks/gpu/goals.json, what
    pe-bench train-speed --goals checks): time per update, peak memory."""
    return json.loads((REPO / "examples" / "benchmarks" / "gpu" / "goals.json").read_text(encoding="utf-8"))[name]


def _kerple_and_t5_busy_at_200() -> float:
    """The H100 busy time to SAPE at L = 200 (the longest) that KERPLE and T5 both reach, as the table rounds it."""
    gpu = gpu_models()
    longest = max(n for _, n in gpu)
    kerple, t5 = (gpu[pe, longest]["kernel_ratio"] for pe in ("kerple", "t5"))
    assert longest == 200 and f"{kerple:.2f}" == f"{t5:.2f}", (longest, kerple, t5)
    return kerple


def _posnet_embed_params(lmax: int) -> float:
    """PosNet-Embed's parameters at base size (C 512, d_p 128) and an L_max, counted on the module itself."""
    from pe_plugin.encoding_parts.base import Dims
    from pe_plugin.encodings.posnet_embedding import PosNetEmbedConfig, PosNetEmbedding

    cfg = PosNetEmbedConfig(posnet_dim=128, posnet_max_positions=lmax, posnet_init="per-matrix")
    dims = Dims(embed_dim=512, num_heads=8, num_layers=6, max_positions=lmax, padding_idx=1, side="encoder")
    return sum(p.numel() for p in PosNetEmbedding.build(cfg, dims, {}).parameters())


def _rpe_one_table_per_layer() -> float:
    """Shaw RPE's base-size tables shared by the heads of a layer: the recorded per-head count over fairseq's base
    number of heads."""
    from argparse import Namespace

    from fairseq.models.transformer import base_architecture

    args = Namespace()
    base_architecture(args)
    rows = [r for r in read_csv(REPO / CPU_BENCH) if r["pe"] == "rpe" and r["size"] == "base"]
    return int(rows[0]["pe_params"]) / args.encoder_attention_heads


def _paper_params_less_sape(pe: str) -> float:
    """What an encoding adds to the paper's Table 1 total (millions), as transcribed."""
    total = lambda name: stated_value(PAPER, PAPER_PARAMS.format(name), {})  # noqa: E731
    return (total(pe) - total("sape")) * 1e6


def _xavier_std_of_a_kernel() -> float:
    """torch's Xavier-normal std for one d_p x d_p kernel at base size (d_p 128)."""
    import torch

    fan_in, fan_out = torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(128, 128))
    return math.sqrt(2.0 / (fan_in + fan_out))


def _bench_sape_less_paper_sape() -> float:
    """How many more parameters our SAPE model has than the paper's Table 1 total (our 40k vocabulary against ~37k)."""
    rows = [r for r in read_csv(REPO / CPU_BENCH) if r["pe"] == "sape" and r["size"] == "base"]
    return int(rows[0]["params"]) - stated_value(PAPER, PAPER_PARAMS.format("sape"), {}) * 1e6


def _cpu_bench_max(column: str) -> float:
    """The largest ratio to SAPE of the recorded base-size CPU benchmark ("every encoding within ...")."""
    return max(float(r[column]) for r in read_csv(REPO / CPU_BENCH) if r["size"] == "base")


def _fairseq_scaling_nmt_bleu() -> float:
    """The compound-split BLEU that fairseq's authors print for their WMT14 En-De model, in the README of
    fairseq's examples/scaling_nmt that the installed ve-fairseq ships."""
    import importlib.util

    folder = Path(importlib.util.find_spec("fairseq").submodule_search_locations[0])
    text = (folder / "examples" / "scaling_nmt" / "README.md").read_text(encoding="utf-8")
    return float(re.findall(r"BLEU4 = ([\d.]+)", text)[0])


def _paper_table3_memory_ratio() -> float:
    """The paper's Table 3 GPU memory of RPE and PosNet over SAPE's, from the two figures the sentence quotes."""
    m = re.search(r"Table 3: RPE and PosNet ([\d.]+) GB against SAPE's ([\d.]+) GB", flat("docs/benchmarks_cpu.md"))
    return float(m[1]) / float(m[2])


def _smallest_bootstrap_p() -> float:
    """The smallest p-value paired bootstrap resampling can give at its default number of resamples, 1/(n+1)."""
    from pe_tools.scoring.significance import DEFAULT_SAMPLES

    return 1 / (DEFAULT_SAMPLES["bs"] + 1)


def _seeds_agreement(metric: str, column: str, pick) -> float:
    """The least or greatest Kendall tau-b (or p-value) of the recorded seed-against-seed rank agreements."""
    path = REPO / "examples" / "multi30k" / "agreement" / f"seeds_{metric}.md.json"
    return pick(float(r[column]) for r in json.loads(path.read_text(encoding="utf-8"))["rows"])


def _cost_rpe_flops(pick) -> float:
    """The least or greatest ratio of Shaw RPE's FLOPs to SAPE's over the recorded lengths of the cost benchmark."""
    return pick(float(r["flops_to_sape"]) for r in read_csv(REPO / COST) if r["pe"] == "rpe" and r["size"] == "base")


def _gpu(name: str) -> dict:
    """A recorded H100 run of pe-bench models (fp16, base): {(pe, length): result}, each against its own run's SAPE."""
    data = json.loads((REPO / "examples" / "benchmarks" / "gpu" / f"{name}.json").read_text(encoding="utf-8"))
    return {(r["pe"], r["length"]): r for r in data["results"] if r["size"] == "base"}


def _gpu_goal_held_but_rpe(goal: str, column: str) -> float:
    """Issue 40's goal that every encoding but Shaw RPE stays within in the first H100 run (its README says so)."""
    rows = _gpu("models")
    worst = max(r[column] for (pe, _), r in rows.items() if pe != "rpe")
    assert worst <= _goal(goal) < max(r[column] for (pe, _), r in rows.items() if pe == "rpe"), (goal, worst)
    return _goal(goal)


def _gpu_t5_and_kerple_busy_at_200(name: str) -> float:
    """The busy time to SAPE at L = 200 that T5 and KERPLE both reach in a run, as the README rounds it."""
    t5, kerple = (_gpu(name)[pe, 200]["kernel_ratio"] for pe in ("t5", "kerple"))
    assert f"{t5:.2f}" == f"{kerple:.2f}", (name, t5, kerple)
    return t5


def _gpu_rpe(name: str, column: str, pick) -> float:
    """The least or greatest ratio of Shaw RPE over the lengths of a recorded H100 run."""
    return pick(r[column] for (pe, _), r in _gpu(name).items() if pe == "rpe")


def _gpu_python() -> float:
    """The Python (major.minor) of the recorded H100 runs."""
    versions = {json.loads((REPO / GPU_MODELS).read_text())["settings"]["python"].rsplit(".", 1)[0],
                json.loads((REPO / GPU_MODELS_AFTER).read_text())["settings"]["python"].rsplit(".", 1)[0]}
    assert len(versions) == 1, versions
    return float(versions.pop())


def _gpu_kernel_ms(candidate: str) -> float:
    """PosNet-Embed's kernel product on the H100: a candidate's median wall time, milliseconds."""
    record = json.loads((REPO / "examples" / "benchmarks" / "gpu" / "posnet_kernel.json").read_text(encoding="utf-8"))
    return record["median_wall_s"][candidate] * 1e3


def _cpu_bench_malloc_default_step(pe: str) -> float:
    """An encoding's step memory over SAPE's in the recorded CPU benchmark as the timing interpreter (glibc's default
    allocator) measured it."""
    rows = {r["pe"]: r for r in read_csv(REPO / CPU_BENCH) if r["size"] == "base"}
    return int(rows[pe]["malloc_default_step_bytes"]) / int(rows["sape"]["malloc_default_step_bytes"])


def _nope_swap_largest_change() -> float:
    """No-PE's largest change under the recorded word-swap probes (output chrF++/BLEU, NLL per token, share changed)."""
    rows = [r for r in read_csv(REPO / "examples" / "multi30k" / "analysis" / "analysis.csv")
            if r["pe"] == "nope" and r["kind"] == "model"]
    columns = [c for c in rows[0] if re.match(r"(dout_chrf|dout_bleu|dnll|changed)_(local|global|shuffle)$", c)]
    assert len(rows) == 1 and len(columns) == 12, (len(rows), columns)
    return max(abs(float(rows[0][c])) for c in columns)


def _kernel(candidate: str, what: str) -> float:
    """PosNet-Embed's kernel benchmark: the released broadcast's median wall time (or peak) over a candidate's."""
    record = json.loads((REPO / KERNEL_BENCH).read_text(encoding="utf-8"))[what]
    return record["released"] / record[candidate]


COMPUTED = {"small_lr_at_the_end": _small_lr_at_the_end, "user_default_less_lmax256": _user_default_less_lmax256,
            "bench_sape_less_paper_sape": _bench_sape_less_paper_sape,
            "paper_posnet_embed_less_sape": lambda: _paper_params_less_sape("posnet_embed"),
            "paper_lape_less_sape": lambda: _paper_params_less_sape("lape"),
            "fairseq_scaling_nmt_bleu": _fairseq_scaling_nmt_bleu,
            "paper_table3_memory_ratio": _paper_table3_memory_ratio,
            "smallest_bootstrap_p": _smallest_bootstrap_p,
            "nope_swap_largest_change": _nope_swap_largest_change,
            **{f"cpu_bench_malloc_default_step_{pe}": (lambda pe=pe: _cpu_bench_malloc_default_step(pe))
               for pe in ("rpe", "t5")},
            "gpu_python": _gpu_python,
            # docs/cluster.md: "32,768 / 28,452" seconds per update at SAPE's recorded speed (the WMT14 tokens per update)
            "gpu_sape_seconds_per_32k_update": lambda: 32768 / stated_value(GPU_TRAIN_SPEED, "wps",
                                                                            {"pe": "sape", "size": "base"}),
            "gpu_busy_goal_held_but_rpe": lambda: _gpu_goal_held_but_rpe("step", "kernel_ratio"),
            "gpu_peak_goal_held_but_rpe": lambda: _gpu_goal_held_but_rpe("peak", "peak_ratio"),
            "gpu_t5_and_kerple_busy_at_200": lambda: _gpu_t5_and_kerple_busy_at_200("models"),
            "gpu_after_t5_and_kerple_busy_at_200": lambda: _gpu_t5_and_kerple_busy_at_200("models_after"),
            **{f"gpu_{run}rpe_{what}_{name}": (lambda r=r, c=c, f=f: _gpu_rpe(r, c, f))
               for run, r in (("", "models"), ("after_", "models_after"))
               for what, c in (("kernels", "kernels_ratio"), ("peak", "peak_ratio"))
               for name, f in (("min", min), ("max", max))},
            **{f"gpu_kernel_ms_{c}": (lambda c=c: _gpu_kernel_ms(c)) for c in ("released", "bmm", "bmm-leftpad")},
            "cost_rpe_flops_min": lambda: _cost_rpe_flops(min), "cost_rpe_flops_max": lambda: _cost_rpe_flops(max),
            **{f"seeds_tau_{name}_{m}": (lambda m=m, f=f: _seeds_agreement(m, "kendall_tau", f))
               for m in ("bleu", "chrf") for name, f in (("min", min), ("max", max))},
            "seeds_p_max": lambda: max(_seeds_agreement(m, c, max) for m in ("bleu", "chrf")
                                       for c in ("kendall_p", "spearman_p")),
            **{f"cpu_bench_max_{c}": (lambda c=c: _cpu_bench_max(c))
               for c in ("step_ratio", "step_mem_ratio", "forward_ratio", "cpu_ratio")},
            **{f"kernel_{k}_{c}": (lambda c=c, w=w: _kernel(c, w)) for c in ("bmm", "bmm-leftpad")
               for k, w in (("speed_up", "median_wall_s"), ("memory_saving", "peak_bytes"))},
            "goal_step": lambda: _goal("step"), "goal_peak": lambda: _goal("peak"),
            "kerple_and_t5_busy_at_200": _kerple_and_t5_busy_at_200,
            "posnet_embed_params_512": lambda: _posnet_embed_params(512),
            "posnet_embed_params_256": lambda: _posnet_embed_params(256),
            "rpe_one_table_per_layer": _rpe_one_table_per_layer,
            "paper_rpe_less_sape": lambda: _paper_params_less_sape("rpe"),
            "paper_posnet_attn_less_sape": lambda: _paper_params_less_sape("posnet_attn"),
            "xavier_std_of_a_kernel": _xavier_std_of_a_kernel}


def stated_value(source: str, column, where: dict) -> float:
    if source.startswith("computed:"):
        return COMPUTED[source.split(":", 1)[1]]()
    if source.endswith(".json"):
        value = json.loads((REPO / source).read_text(encoding="utf-8"))
        if where:  # the one row of its "results" with these values
            rows = [r for r in value["results"] if all(r[k] == v for k, v in where.items())]
            assert len(rows) == 1, (source, where, len(rows))
            value = rows[0]
        for key in column.split("."):
            value = value[int(key)] if isinstance(value, list) else value[key]
        return float(value)
    if not source.endswith(".csv"):
        return float(re.findall(column, (REPO / source).read_text(encoding="utf-8"))[where.get("match", 0)])
    rows = [r for r in read_csv(REPO / source) if all(r[k] == v for k, v in where.items())]
    assert len(rows) == 1, (source, where, len(rows))
    return float(rows[0][column])


def prose_figures(doc: str) -> list:
    """The figures of a page's prose (tables, code and inline code left out), significance levels removed."""
    text = (REPO / doc).read_text(encoding="utf-8")
    prose = re.sub(r"```.*?```", "", "\n".join(line for line in text.split("\n") if not line.startswith("|")), flags=re.S)
    return PROSE_FIGURE.findall(THRESHOLDS.sub("", re.sub(r"`[^`]*`", "", prose)))


def shown(x: float, form: str, figure: str) -> str:
    """A value as PINNED's format writes it; "<" the tightest bound above it with the figure's decimals (0.001 for
    0.00044: "p < 0.001", not "p < 0.01")."""
    if form == "<":
        decimals = len(figure.split(".")[1])
        return f"{math.floor(x * 10 ** decimals + 1) / 10 ** decimals:.{decimals}f}"
    fmt = {"": "{:.2f}", "+": "{:+.2f}", "-": "{:.2f}", "p": "{:.2g}", "3": "{:.3f}"}
    return fmt[form.rstrip("M")].format((-x if form == "-" else x) / (1e6 if form.endswith("M") else 1))


@pytest.mark.parametrize("doc", sorted(PINNED))
def test_each_figure_of_the_prose_is_the_value_it_states(doc):
    """Every figure of the page's prose, in order, is listed in PINNED, and each is its one recorded (or computed)
    value as rounded: a figure gone stale, added without a source or pointing at another row fails."""
    assert prose_figures(doc) == [f for f, *_ in PINNED[doc]]
    wrong = [(f, source, column, where, shown(x, form, f))
             for f, source, column, where, form in PINNED[doc] if source != "exempt"
             for x in [stated_value(source, column, where)] if shown(x, form, f) != f]
    assert not wrong, f"{doc}: figures that are not the value they state: {wrong}"


def test_the_parameter_counts_in_the_design_prose():
    """docs/design.md's whole-number parameter counts (not two-decimal figures, so not in PINNED): each encoding's
    count in the recorded benchmark, and the products that spell them out."""
    bench = {r["pe"]: int(r["pe_params"]) for r in read_csv(REPO / CPU_BENCH) if r["size"] == "base"}
    text = flat("docs/design.md")
    stated = {"rpe": r"2 stacks x 6 layers x 8 heads x 33 x 64 x 2 = ([\d,]+)", "t5": r"T5 \+([\d,]+) \(32 buckets",
              "at5": r"Adaptive-T5 \+([\d,]+) \(paper"}
    for pe, pattern in stated.items():
        m = re.search(pattern, text)
        assert m and m[1] == f"{bench[pe]:,}", (pe, m and m[1], bench[pe])
    assert bench["rpe"] == 2 * 6 * 8 * 33 * 64 * 2 and bench["t5"] == 32 * 8 * 2 and bench["lape"] == 2 * 1026 * 512
    assert "LAPE +1.05M (paper +1.05M, 2 x 1026 x 512)" in text


def test_the_cpu_benchmark_settings_in_the_text():
    """docs/benchmarks_cpu.md's whole-number settings of the recorded models run are those of benchmark.json."""
    s = json.loads((REPO / CPU_BENCH_JSON).read_text(encoding="utf-8"))["settings"]
    text = flat("docs/benchmarks_cpu.md")
    m = re.search(r"Its settings line, as `benchmark\.md` records it: B=(\d+), T=(\d+), vocab (\d+), device (\w+), "
                  r"memory [\w-]+ \(`MALLOC_MMAP_THRESHOLD_=(\d+)`\), (\d+) threads, fastest of (\d+) steps and of "
                  r"(\d+)-pass forward blocks x (\d+) rounds, warmup (\d+), torch ([\w.+]+);", text)
    assert m, "the settings line"
    assert list(m.groups()) == [str(s[k]) for k in ("batch", "length", "vocab", "device")] + [
        s["memory_env"]["MALLOC_MMAP_THRESHOLD_"]] + [str(s[k]) for k in (
            "threads", "steps", "forward_passes", "rounds", "warmup")] + [s["torch"]]
    assert f"measures on one fixed batch (B={s['batch']}, T={s['length']}, 40k joined vocabulary)" in text
    assert s["vocab"] == 40000 and s["cpu_count"] == 2  # "40k", "a 2-core machine"

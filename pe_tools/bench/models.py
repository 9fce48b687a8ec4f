"""Forward time, training-step time and peak training memory of every registered encoding, as ratios to SAPE
(the paper's Figure 2 and Table 3).

    pe-bench models                        # tiny and base sizes, every encoding, B=32, T=30
    pe-bench models --sizes base big --rounds 5 --out-dir runs/bench
    pe-bench models --sizes tiny --pe sape posnet_embed --device cpu --threads 1
    pe-bench models --size tiny           # --size SIZE is an alias of --sizes SIZE

Setup. Each (size, encoding) runs in its own fresh interpreter (peak RSS is monotonic, so sharing a process
would hide every peak but the first): it builds ``transformer_<pe>_<arch>`` (arch: tiny -> tiny,
base -> wmt_en_de, big -> wmt_en_de_big) with the flags of the encoding's entry in the ``--recipe``'s
pe_tools/recipes/RECIPE/methods.toml (default wmt14: the models the paper's runs train, e.g. PosNet-Embed with
L_max 200 and PosNet-Attn with 251, as Table 1's parameter counts; ``--recipe none``: the architecture's own
defaults, L_max 1024), through fairseq's parser with a dummy joined dictionary of
``--vocab`` symbols (fairseq's 4 specials included; ``--share-all-embeddings``), moves it to ``--device``
(auto: CUDA when available) and draws one fixed random batch: source, previous-output and target tokens,
each (B, T) = (``--batch``, ``--length``). SAPE runs on fairseq's stock fused attention, so every ratio
includes the cost of leaving it. Per process, in this order:

  1. training steps (``--warmup`` untimed, then ``--steps`` timed), model in training mode: forward,
     cross-entropy, backward, Adam step. ``step ms`` is the wall time of one step, ``cpu`` its process CPU
     time (on CUDA this is mostly launch overhead).
  2. memory, read right after the training steps, so it is the training peak (the paper's Table 3 training
     memory); the forward passes come later and cannot raise it:
       cuda-allocated (model on CUDA): ``peak`` = torch.cuda.max_memory_allocated() with the peak reset just
           before the warmup steps; ``step`` = peak - memory_allocated() after the model and batch were built.
       cpu-rss (model on CPU): ``peak`` = the process's peak RSS (interpreter, libraries, model, Adam state,
           activations); ``step`` = peak - RSS after the model and batch were built (gradients, Adam state and
           activations). On a CPU the memory comes from a second fresh interpreter per round, which runs the
           same warm-up and one step under glibc's ``MALLOC_MMAP_THRESHOLD_`` fixed at 128 KiB
           (``CPU_MEMORY_ENV``): every tensor above 128 KiB is then its own mapping, returned to the system
           when freed, so the RSS follows the live tensors, as CUDA's allocated memory does. With glibc's
           default the threshold rises as large blocks are freed, later blocks come from a heap that keeps
           what was freed, and the peak RSS measures the order of allocations: one RoPE model read 1.11x
           SAPE's step memory that way and 1.015x with the threshold fixed, where its saved activations add
           22 MiB (1.5%). The default-malloc figures of the timing interpreter stay in the JSON and CSV
           (``malloc_default_peak_bytes``, ``malloc_default_step_bytes``). The timing interpreter keeps glibc's
           default: fresh mappings would add page faults to every step.
  3. forward passes, model in eval mode under ``torch.no_grad()``: ``--warmup`` untimed passes, then the
     total wall time of ``--forward-passes`` (default 10) consecutive teacher-forced passes
     ``model(src_tokens, src_lengths, prev_output_tokens)`` -> logits (B, T, V).

Rounds. All (size, encoding) pairs run round-robin ``--rounds`` times. Times: the fastest over all rounds is
kept (for steps: the fastest single step; for forward: the fastest block of passes): on a shared machine other
processes only ever add time, so the minimum is the least disturbed figure; the medians are kept beside it
(JSON/CSV). Memory: the median over the rounds. On a CPU shared with other work, ``--threads 1`` is steadier:
with more torch threads than idle cores, single steps were seen to stall 10-50x; the load averages at start
and end (JSON ``settings``, 1/5/15 minutes) tell how busy the machine was.

Ratios, within each size s, for every figure x (forward time, step wall time, step CPU time, peak, step
memory):

    ratio(pe, s) = x(pe, s) / x(sape, s)          (sape's ratios are exactly 1; SAPE is always measured)

Outputs: one markdown table per size on stdout; with ``--out-dir DIR`` also DIR/benchmark.json (settings and
every result), benchmark.csv (one row per size and encoding), benchmark.md (the tables under a settings line)
and benchmark.png (one panel per size: forward, training-step and memory ratios per encoding, dashed line at
1 = SAPE; the memory bars are ``peak`` on CUDA and ``step`` memory on CPU, where the peak RSS includes the
~0.4 GiB interpreter and libraries). Every file is written under a temporary name in
DIR and renamed when complete.
"""
import argparse
import csv
import io
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ..common import atomic, load_toml
from ..naming import BASELINE, SUFFIX_OF_CLASS as SIZES, arch_name
from ..recipes import recipe_names, table_path
from ._timing import current_rss_bytes, markdown_table, peak_rss_bytes, run_isolated

NAME = "models"
HELP = "forward time, training-step time and peak memory of every registered encoding, as ratios to SAPE"
# raw figure -> its ratio to SAPE within the same size
RATIOS = {"forward_s": "forward_ratio", "forward_median_s": "forward_median_ratio",
          "step_s": "step_ratio", "step_median_s": "step_median_ratio", "step_cpu_s": "cpu_ratio",
          "peak_bytes": "peak_ratio", "step_bytes": "step_mem_ratio"}
OUT_NAME = "benchmark"
MIB = 2 ** 20
# the memory interpreter's environment on a CPU (see the docstring): glibc only, ignored elsewhere
CPU_MEMORY_ENV = {"MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}


def _int_at_least(low):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low} (got {value})")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


class _OneSize(argparse.Action):
    """``--size SIZE``: the old single-size flag, kept as an alias of ``--sizes SIZE``."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, "sizes", [values])


def add_args(parser):
    from pe_plugin.encodings import PE_REGISTRY

    names = list(PE_REGISTRY)
    parser.add_argument("--sizes", nargs="+", choices=list(SIZES), default=["tiny", "base"], metavar="SIZE",
                        help=f"model sizes, all measured in this run, from {', '.join(SIZES)} (default: tiny base)")
    parser.add_argument("--size", choices=list(SIZES), action=_OneSize, dest="sizes", help="alias of --sizes SIZE")
    parser.add_argument("--pe", nargs="+", choices=names, metavar="PE",
                        help=f"encodings to measure, from {', '.join(names)} (default: all; sape is always added)")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                        help="where the models run (default: auto = cuda when available)")
    ints = [("--batch", 1, 32, "sentences per batch"), ("--length", 1, 30, "source and target length"),
            ("--vocab", 5, 40000, "joined dictionary size, fairseq's 4 specials included"),
            ("--steps", 1, 3, "timed training steps per round"), ("--warmup", 0, 1,
             "untimed training steps, and untimed forward passes, before the timed ones"),
            ("--forward-passes", 1, 10, "timed consecutive forward passes per round"),
            ("--rounds", 1, 3, "round-robin repetitions"), ("--threads", 0, 0, "torch threads (0: torch's choice)")]
    for flag, low, default, text in ints:
        parser.add_argument(flag, type=_int_at_least(low), default=default, help=f"{text} (default: {default})")
    recipes = recipe_names("methods")
    parser.add_argument("--recipe", choices=recipes + ["none"], default="wmt14",
                        help="build each encoding with its entry's flags in pe_tools/recipes/RECIPE/methods.toml, e.g. "
                             "PosNet's L_max (default: wmt14); none: the architectures' defaults")
    parser.add_argument("--out-dir", help=f"write {OUT_NAME}.json, .csv, .md and .png into this folder")
    parser.add_argument("--json", help="also write the JSON results to this file")
    parser.add_argument("--csv", help="also write the CSV results to this file")


def recipe_flags(recipe: str, pe: str) -> list:
    """The flags of ``pe``'s entry in pe_tools/recipes/RECIPE/methods.toml ([] for --recipe none or no such entry)."""
    if recipe == "none":
        return []
    entry = load_toml(table_path(recipe), "recipe table")["method"].get(pe, {})
    return list(entry.get("flags", []))


def measure(pe: str, size: str, batch: int, length: int, vocab: int, steps: int, warmup: int, forward_passes: int,
            threads: int, device: str, recipe: str = "none", memory_only: bool = False):
    """One encoding at one size, in this (fresh) process: parameter counts, step and forward times, memory;
    ``memory_only``: the warm-up and one step, then only the memory figures."""
    import gc

    import torch
    import torch.nn.functional as F
    from fairseq import options, tasks

    if threads:
        torch.set_num_threads(threads)
    cuda = device == "cuda"
    from ..common import plugin_dir

    plugin = plugin_dir()
    with tempfile.TemporaryDirectory() as data:
        for lang in ("src", "tgt"):  # fairseq's Dictionary adds its 4 special symbols to these vocab - 4
            Path(data, f"dict.{lang}.txt").write_text("".join(f"w{i} 1\n" for i in range(vocab - 4)))
        argv = [data, "--user-dir", str(plugin), "--arch", arch_name(pe, SIZES[size]), "--task", "translation",
                "-s", "src", "-t", "tgt", "--share-all-embeddings", "--cpu",  # --cpu: we place the model below
                *recipe_flags(recipe, pe)]
        args = options.parse_args_and_arch(options.get_training_parser(), argv)
        torch.manual_seed(1)
        task = tasks.setup_task(args)
        model = task.build_model(args).to(device)
    from pe_plugin.models.validation import pe_parameter_count

    src = torch.randint(4, vocab, (batch, length), device=device)  # (B, T) source tokens, no padding
    prev = torch.randint(4, vocab, (batch, length), device=device)  # (B, T) teacher-forced decoder input
    target = torch.randint(4, vocab, (batch, length), device=device)  # (B, T)
    lengths = torch.full((batch,), length, device=device)  # (B,)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    # 1. training steps; memory baseline taken first, after the model and batch exist
    def step():
        opt.zero_grad(set_to_none=True)
        logits, _ = model(src, lengths, prev)  # (B, T, V)
        F.cross_entropy(logits.view(-1, logits.size(-1)), target.view(-1)).backward()
        opt.step()

    model.train()
    gc.collect()
    if cuda:
        sync()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    else:
        before = current_rss_bytes()
    for _ in range(warmup):
        step()
    wall, cpu = [], []
    for _ in range(1 if memory_only else steps):
        sync()
        t0, c0 = time.perf_counter(), time.process_time()
        step()
        sync()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)

    # 2. the training peak, read before any forward pass could raise it
    if cuda:
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = peak_rss_bytes()
    if memory_only:
        return {"peak_bytes": peak, "step_bytes": peak - before}

    # 3. forward passes: total of forward_passes consecutive passes in eval mode, no autograd graph
    model.eval()
    with torch.no_grad():
        for _ in range(warmup):
            model(src, lengths, prev)
        sync()
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(forward_passes):
            model(src, lengths, prev)  # (B, T, V) logits, discarded
        sync()
        forward, forward_cpu = time.perf_counter() - t0, time.process_time() - c0

    return {
        "pe": pe, "size": size, "arch": arch_name(pe, SIZES[size]), "flags": recipe_flags(recipe, pe),
        "max_positions": [args.max_source_positions, args.max_target_positions],
        "params": sum(p.numel() for p in model.parameters()), "pe_params": pe_parameter_count(model),
        "step_wall_s": wall, "step_cpu_s": cpu, "forward_s": forward, "forward_cpu_s": forward_cpu,
        "peak_bytes": peak, "step_bytes": peak - before,
        "memory_kind": "cuda-allocated" if cuda else "cpu-rss", "device": device,
        "device_name": torch.cuda.get_device_name() if cuda else _cpu_name(),
        "threads": torch.get_num_threads(), "torch": torch.__version__,
    }


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def summarise(runs):
    """One result from the per-round measurements of one (size, encoding): fastest and median times, median
    memory; the raw per-round figures are kept under ``rounds``."""
    first = runs[0]
    r = {k: first[k] for k in ("pe", "size", "arch", "params", "pe_params", "memory_kind")}
    r["max_positions"] = first["max_positions"]  # (source, target): PosNet's and LAPE's L_max
    steps = [t for x in runs for t in x["step_wall_s"]]
    forwards = [x["forward_s"] for x in runs]
    r.update(
        forward_s=min(forwards), forward_median_s=statistics.median(forwards),
        forward_cpu_s=min(x["forward_cpu_s"] for x in runs),
        step_s=min(steps), step_median_s=statistics.median(steps),
        step_cpu_s=min(t for x in runs for t in x["step_cpu_s"]),
        peak_bytes=int(statistics.median(x["peak_bytes"] for x in runs)),
        step_bytes=int(statistics.median(x["step_bytes"] for x in runs)),
    )
    for key in ("malloc_default_peak_bytes", "malloc_default_step_bytes"):  # CPU only
        if key in first:
            r[key] = int(statistics.median(x[key] for x in runs))
    r["rounds"] = {k: [x[k] for x in runs] for k in ("forward_s", "step_wall_s", "peak_bytes", "step_bytes")}
    return r


def add_ratios(results):
    """ratio = figure / sape's figure, within each size (None where sape's figure is 0)."""
    for size in {r["size"] for r in results}:
        ref = next(r for r in results if r["size"] == size and r["pe"] == BASELINE)
        for r in results:
            if r["size"] == size:
                for key, ratio in RATIOS.items():
                    r[ratio] = r[key] / ref[key] if ref[key] else None


def _x(v):
    return "n/a" if v is None else f"{v:.2f}x"


def tables(settings, results):
    """(markdown text with one table per size, each under a line giving its settings)."""
    n = settings["forward_passes"]
    headers = ["pe", "params", "pe params", f"forward ms ({n} passes)", "forward", "step ms", "step", "cpu time",
               "peak MiB", "peak", "step mem"]
    blocks = []
    for size in settings["sizes"]:
        rows = [[r["pe"], f"{r['params'] / 1e6:.2f}M", f"{r['pe_params']:,}", f"{r['forward_s'] * 1e3:.1f}",
                 _x(r["forward_ratio"]), f"{r['step_s'] * 1e3:.1f}", _x(r["step_ratio"]), _x(r["cpu_ratio"]),
                 f"{r['peak_bytes'] / MIB:.0f}", _x(r["peak_ratio"]), _x(r["step_mem_ratio"])]
                for r in results if r["size"] == size]
        blocks.append(f"{size} size (arch transformer_<pe>_{SIZES[size]}): {_settings_line(settings)}\n\n"
                      + markdown_table(headers, rows))
    legend = ("Columns: forward = total of the timed forward passes (eval, no_grad), fastest round; step = one "
              "training step (forward, cross-entropy, backward, Adam), fastest; cpu time = the step's process "
              "CPU time; peak = training peak memory; step mem = peak minus memory after building the model; "
              "every `x` column is the ratio to sape at the same size.")
    return "\n\n".join(blocks) + "\n\n" + legend + "\n"


def _settings_line(s):
    return (f"B={s['batch']}, T={s['length']}, vocab {s['vocab']}, device {s['device']} ({s['device_name']}), "
            f"memory {s['memory_kind']}{_memory_env(s)}, {s['threads']} threads, fastest of {s['steps']} steps and of "
            f"{s['forward_passes']}-pass forward blocks x {s['rounds']} round(s), warmup {s['warmup']}, "
            f"torch {s['torch']}; models as in recipe {s.get('recipe', 'none')}; ratios to sape on fairseq's stock "
            f"fused attention")


def _memory_env(s):
    env = s.get("memory_env")
    return f" ({' '.join(f'{k}={v}' for k, v in env.items())})" if env else ""


def _atomic_write(path: Path, write):
    """``write(file)`` into a temporary file in ``path``'s folder, renamed to ``path`` once complete."""
    with atomic(path) as tmp, open(tmp, "wb") as f:
        write(f)


def _text(text):
    return lambda f: f.write(text.encode())


def _csv_text(results):
    skip = {"rounds"}
    fields = [k for k in results[0] if k not in skip]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(results)
    return out.getvalue()


def chart(settings, results, f):
    """PNG into ``f``: one panel per size, grouped bars per encoding (forward, step, peak ratios), 1 = SAPE."""
    import logging

    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # the root logger may be at DEBUG here
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # memory: on CUDA the peak allocation (the paper's Table 3); on CPU the peak RSS also holds ~0.4 GiB of
    # interpreter and libraries that pull every ratio towards 1, so the chart shows what training added
    memory = (("peak_ratio", "peak training memory (CUDA)") if settings["memory_kind"] == "cuda-allocated"
              else ("step_mem_ratio", "training memory above the built model (CPU RSS)"))
    bars = [("forward_ratio", f"forward time ({settings['forward_passes']} passes)"),
            ("step_ratio", "training-step time"), memory]
    sizes = settings["sizes"]
    names = settings["encodings"]
    width = 0.8 / len(bars)
    fig, axes = plt.subplots(1, len(sizes), figsize=(max(6.0, 0.8 * len(names) + 2) * len(sizes), 4.8),
                             squeeze=False)
    for ax, size in zip(axes[0], sizes):
        by_pe = {r["pe"]: r for r in results if r["size"] == size}
        for i, (key, label) in enumerate(bars):
            values = [by_pe[pe][key] if by_pe[pe][key] is not None else float("nan") for pe in names]
            xs = [j + (i - (len(bars) - 1) / 2) * width for j in range(len(names))]
            drawn = ax.bar(xs, values, width, label=label)
            ax.bar_label(drawn, fmt="%.2f", fontsize=6, rotation=90, padding=2)
        ax.axhline(1.0, color="black", linestyle="--", linewidth=1)
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
        ax.set_ylabel("ratio to SAPE")
        ax.set_ylim(0, ax.get_ylim()[1] * 1.12)
        ax.set_title(f"{size} (transformer_<pe>_{SIZES[size]})")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=len(bars))  # below the panels, off the bars
    s = settings
    fig.suptitle(f"Ratios to SAPE: B={s['batch']} T={s['length']} vocab {s['vocab']}, {s['device']} "
                 f"({s['device_name']}), {s['threads']} threads, fastest of {s['rounds']} round(s), "
                 f"torch {s['torch']}", fontsize=9)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(f, format="png", dpi=130)
    plt.close(fig)


def measure_isolated(pe: str, size: str, kwargs: dict) -> dict:
    """``measure`` in a fresh interpreter; on a CPU its memory figures come from a second one under
    ``CPU_MEMORY_ENV`` and its own (glibc's default allocator) are kept as ``malloc_default_*``."""
    result = run_isolated("pe_tools.bench.models", "measure", dict(pe=pe, size=size, **kwargs))
    if result["memory_kind"] == "cpu-rss":
        memory = run_isolated("pe_tools.bench.models", "measure", dict(pe=pe, size=size, **kwargs, memory_only=True),
                              env=CPU_MEMORY_ENV)
        result.update(malloc_default_peak_bytes=result["peak_bytes"], malloc_default_step_bytes=result["step_bytes"],
                      **memory)
    return result


def run(args) -> int:
    import torch

    from pe_plugin.encodings import PE_REGISTRY

    if args.device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif args.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda: CUDA is not available to torch here", file=sys.stderr)
        return 2
    else:
        device = args.device
    wanted = set(args.pe or PE_REGISTRY) | {BASELINE}
    names = [pe for pe in PE_REGISTRY if pe in wanted]  # registry order, sape always in
    sizes = list(dict.fromkeys(args.sizes))
    kwargs = dict(batch=args.batch, length=args.length, vocab=args.vocab, steps=args.steps, warmup=args.warmup,
                  forward_passes=args.forward_passes, threads=args.threads, device=device, recipe=args.recipe)
    load_start, started = os.getloadavg(), time.time()

    runs = {(size, pe): [] for size in sizes for pe in names}
    for k in range(args.rounds):
        for size in sizes:
            for pe in names:
                print(f"[round {k + 1}/{args.rounds}] {size} {pe}", file=sys.stderr, flush=True)
                runs[size, pe].append(measure_isolated(pe, size, kwargs))
    results = [summarise(runs[size, pe]) for size in sizes for pe in names]
    add_ratios(results)

    any_run = runs[sizes[0], names[0]][0]
    settings = dict(
        sizes=sizes, encodings=names, **kwargs, rounds=args.rounds,
        device_name=any_run["device_name"], memory_kind=any_run["memory_kind"], torch=any_run["torch"],
        python=platform.python_version(), platform=platform.platform(), cpu_count=os.cpu_count(),
        started=time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)), seconds=round(time.time() - started, 1),
        loadavg_start=list(load_start), loadavg_end=list(os.getloadavg()),
    )
    settings.update(threads=any_run["threads"], threads_requested=args.threads)  # threads: what torch used
    if settings["memory_kind"] == "cpu-rss":
        settings["memory_env"] = CPU_MEMORY_ENV
    text = tables(settings, results)
    print("\n" + text)

    payload = json.dumps({"settings": settings, "results": results}, indent=2) + "\n"
    outputs = []
    if args.out_dir:
        out = Path(args.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        header = f"# Model benchmark: ratios to SAPE\n\n{_settings_line(settings)}; sizes {' '.join(sizes)}; " \
                 f"load average {load_start[0]:.2f} at start, {settings['loadavg_end'][0]:.2f} at end\n\n"
        outputs += [(out / f"{OUT_NAME}.json", _text(payload)), (out / f"{OUT_NAME}.csv", _text(_csv_text(results))),
                    (out / f"{OUT_NAME}.md", _text(header + text)),
                    (out / f"{OUT_NAME}.png", lambda f: chart(settings, results, f))]
    if args.json:
        outputs.append((Path(args.json), _text(payload)))
    if args.csv:
        outputs.append((Path(args.csv), _text(_csv_text(results))))
    for path, write in outputs:
        _atomic_write(path, write)
        print(f"wrote {path}", file=sys.stderr)
    return 0

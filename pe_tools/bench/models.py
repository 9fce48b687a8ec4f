"""pe-bench models: forward time, training-step time and training memory of every registered encoding and of stock
fairseq's transformer (row ``stock``), as ratios to SAPE (the paper's Figure 2 and Table 3). Every (size, length,
encoding) is measured on a padded batch (_build.py), round-robin over ``--rounds``, in a fresh interpreter or in
this process (``--processes``); the fastest times and the median memory are kept.
The method: docs/benchmarks.md §Model benchmark.

    pe-bench models --sizes base --lengths 20 50 100 200 --rounds 5 --out-dir runs/bench
    pe-bench models --device cuda --fp16 --sizes base --lengths 20 50 100 200 --out-dir runs/gpu
"""
import argparse
import os
import statistics
import sys
import time

from ..command_line import int_at_least
from ..fairseq_plugin import plugin_digest
from ..figures import png_bytes, pyplot
from ..naming import BASELINE, SUFFIX_OF_CLASS
from . import _common
from ._build import PAD, add_model_args, build_model, build_optimizer, model_arch, padded_batch, pe_params, \
    recipe_flags, rows_and_batches, summed_loss
from ._common import add_counts, add_device_arg, add_ratios, current_rss_bytes, kernel_summary, machine, \
    peak_rss_bytes, profiler_events, resolve_device, run_isolated, spread, sync as _sync, timed, times as _x
from ._partial_runs import Progress, add_args as add_output_args

NAME = "models"
HELP = "forward time, training-step time and peak memory of every registered encoding, as ratios to SAPE"
DEFAULT_LENGTHS = [30]


class _One(argparse.Action):
    """``--size SIZE``, ``--length L``: the old single-value flags, aliases of ``--sizes SIZE``, ``--lengths L``."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, [values])


def add_args(parser):
    from pe_plugin.models.pe_transformer import ATTENTION_IMPLS

    add_model_args(parser, ["tiny", "base"], DEFAULT_LENGTHS, 0, batch=True)
    parser.add_argument("--size", choices=list(SUFFIX_OF_CLASS), action=_One, dest="sizes",
                        help="alias of --sizes SIZE")
    parser.add_argument("--length", type=int_at_least(1), action=_One, dest="lengths", metavar="L",
                        help="alias of --lengths L")
    add_device_arg(parser)
    parser.add_argument("--processes", choices=["auto", "one", "fresh"], default="auto",
                        help="one: every measurement in this process (each model built once, a copy per "
                             "measurement; CUDA's peak counter reset per row); fresh: a fresh interpreter per "
                             "measurement (a CPU's peak RSS never goes down); auto: one on CUDA, fresh on a CPU")
    parser.add_argument("--fp16", action="store_true",
                        help="train as fairseq --fp16 does: fp16 model, fp32 master weights in fairseq's "
                             "FP16Optimizer, dynamic loss scaling (non-flattened fp32 copy off CUDA)")
    add_counts(parser, [("--steps", 1, 3, "timed training steps per round"),
                        ("--warmup", 0, 1, "untimed training steps, and untimed forward passes, before the timed ones"),
                        ("--forward-passes", 1, 10, "timed consecutive forward passes per round"),
                        ("--rounds", 1, 3, "round-robin repetitions")])
    parser.add_argument("--attention-impl", choices=ATTENTION_IMPLS, default="auto",
                        help="--pe-attention-impl of the plugin's rows (default: auto; stock has none), e.g. triton "
                             "to time Shaw's fused kernels on CUDA")
    add_output_args(parser, "benchmark")


def run(args) -> int:
    device = resolve_device(args.device)
    names, sizes, batches = rows_and_batches(args)
    lengths = list(batches)
    processes = args.processes if args.processes != "auto" else "one" if device == "cuda" else "fresh"
    kwargs = dict(vocab=args.vocab, steps=args.steps, warmup=args.warmup, forward_passes=args.forward_passes,
                  threads=args.threads, device=device, recipe=args.recipe, fp16=args.fp16, impl=args.attention_impl)
    load_start, started, env = os.getloadavg(), time.time(), machine(device)
    # what a resumed run must share with the stored one (docs/benchmarks.md §Partial runs); threads: what torch ran
    # with, from a measurement (threads_requested: the flag); pe_plugin_sources: the plugin code measured
    fixed = dict(sizes=sizes, lengths=lengths, encodings=names, max_tokens=None if args.batch else args.max_tokens,
                 batches={str(length): b for length, b in batches.items()}, **kwargs, rounds=args.rounds,
                 processes=processes, threads_requested=args.threads, device_name=env["device_name"],
                 torch=env["torch"], cuda=env["cuda"], pe_plugin_sources=plugin_digest())
    del fixed["threads"]
    keys = [(size, length, pe) for size in sizes for length in lengths for pe in names]
    order = [(*key, k + 1) for k in range(args.rounds) for key in keys]  # round-robin: round 1 of all, then 2, ...
    progress = Progress(args, "pe-bench models", order, fixed)
    stored = progress.stored.get("settings", {})
    history = stored.get("resumed", []) + ([stored["started"]] if stored.get("started") else [])

    def report():
        first = progress.measurements()[0] if progress.records else {}
        s = dict(fixed, threads=first.get("threads", args.threads), memory_kind="cuda-allocated" if device == "cuda"
                 else "cpu-rss", python=env["python"], platform=env["platform"], cpu_count=os.cpu_count(),
                 started=time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
                 seconds=round(stored.get("seconds", 0) + time.time() - started, 1), loadavg_start=list(load_start),
                 loadavg_end=list(os.getloadavg()))
        if history:
            s["resumed"] = history  # when the earlier parts of a resumed run started, oldest first
        if s["memory_kind"] == "cpu-rss" and processes == "fresh":
            s["memory_env"] = CPU_MEMORY_ENV
        runs = {}  # one summary per (size, length, pe) with at least one round; ratios where SAPE is there too
        for m in progress.measurements():
            runs.setdefault(tuple(m["key"][:3]), []).append(m)
        results = [summarise(runs[key]) for key in keys if key in runs]
        add_ratios(results, RATIOS, *AGAINST_SAPE)
        return s, results, header(s) + tables(s, results, progress.partial_note())

    progress.write = progress.writer(args, report, "Model benchmark: ratios to SAPE", csv_skip={"rounds"}, chart=chart)
    cache = {}  # --processes one: (pe, size) -> (model on the CPU, args)
    todo = progress.missing()
    if processes == "one" and todo:  # one discarded measurement first: the one-time costs (CUDA context, kernels)
        size, length, pe, _ = todo[0]
        measure_in_process(pe, size, dict(kwargs, batch=batches[length], length=length), cache)
    for size, length, pe, k in todo:
        print(f"[round {k}/{args.rounds}] {size} L={length} B={batches[length]} {pe}", file=sys.stderr, flush=True)
        one = dict(kwargs, batch=batches[length], length=length)
        progress.add((size, length, pe, k), measure_in_process(pe, size, one, cache) if processes == "one"
                     else measure_isolated(pe, size, one))
        if progress.stop_now():
            break
    print("\n" + report()[2])
    progress.finish()
    return 0


# ------------------------------------------------------------------------------------------ one measurement
# the memory interpreter's environment on a CPU (docs/benchmarks.md §CPU memory): glibc only, ignored elsewhere
CPU_MEMORY_ENV = {"MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}
# raw figure -> its ratio to SAPE within the same size and length
RATIOS = {"forward_s": "forward_ratio", "forward_median_s": "forward_median_ratio",
          "step_s": "step_ratio", "step_median_s": "step_median_ratio", "step_cpu_s": "cpu_ratio",
          "peak_bytes": "peak_ratio", "step_bytes": "step_mem_ratio",
          "kernel_s": "kernel_ratio", "kernels": "kernels_ratio"}  # the last two on CUDA only
# _common.add_ratios' group and reference: SAPE at the same size and length (older JSON without length: one length)
AGAINST_SAPE = (lambda r: (r["size"], r.get("length")), lambda r: r["pe"] == BASELINE)


def measure(pe: str, size: str, batch: int, length: int, vocab: int, steps: int, warmup: int, forward_passes: int,
            threads: int, device: str, recipe: str = "none", fp16: bool = False, memory_only: bool = False,
            built=None, impl: str = "auto"):
    """One encoding (or STOCK) at one size on one padded batch of ``batch`` sentences of at most ``length``
    tokens, in this (fresh) process: parameter counts, step and forward times, memory; ``memory_only``: the warm-up
    and one step, then only the memory figures. ``fp16``: the model in half precision and fairseq's fp16 step
    (_build.build_optimizer; a step whose gradients overflow is skipped as fairseq's trainer skips it, and counted
    in ``fp16_overflows``). ``built``: (model on ``device``, its args) to measure instead of building one."""
    import gc

    import torch

    if threads:
        torch.set_num_threads(threads)
    cuda = device == "cuda"
    model, args = built or build_model(pe, size, vocab, recipe, device, fp16=fp16, impl=impl)
    opt = build_optimizer(model, args, fp16)
    src, lengths, prev, target = padded_batch(batch, length, vocab, device)
    ntokens = int(target.ne(PAD).sum())
    overflows = 0

    # 1. training steps; memory baseline taken first, after the model, its optimizer and the batch exist
    def step():
        nonlocal overflows
        opt.zero_grad()  # torch's Adam: grads set to None; FP16Optimizer: fp16 grads None, fp32 ones zeroed
        loss = summed_loss(model, src, lengths, prev, target)
        if not fp16:
            (loss / ntokens).backward()
            opt.step()
            return
        try:  # fairseq's Trainer.train_step: backward of the scaled loss, grads / sample size, norm, step
            opt.backward(loss)
            opt.multiply_grads(1.0 / ntokens)
            opt.clip_grad_norm(0.0)  # no clipping; checks for overflow and updates the loss scale
            opt.step()
        except OverflowError:
            overflows += 1
            opt.zero_grad()

    model.train()
    gc.collect()
    if cuda:
        _sync(cuda)
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    else:
        before = current_rss_bytes()
    for _ in range(warmup):
        step()
    wall, cpu, _ = zip(*[timed(step, cuda) for _ in range(1 if memory_only else steps)])

    # 2. the training peak, read before any forward pass could raise it
    peak = torch.cuda.max_memory_allocated() if cuda else peak_rss_bytes()
    if memory_only:
        return {"peak_bytes": peak, "step_bytes": peak - before}
    busy = device_activity(step) if cuda else {}

    # 3. forward passes: total of forward_passes consecutive passes in eval mode, no autograd graph
    model.eval()
    with torch.no_grad():
        for _ in range(warmup):
            model(src, lengths, prev)
        def forwards():
            for _ in range(forward_passes):
                model(src, lengths, prev)  # (B, T, V) logits, discarded

        forward, forward_cpu, _ = timed(forwards, cuda)

    master = getattr(opt, "fp32_params", [])  # fp16: a list, or on CUDA {device: one flat tensor}
    master = list(master.values()) if isinstance(master, dict) else list(master)
    return {
        "pe": pe, "size": size, "length": length, "batch": batch, "tokens": ntokens,
        "src_tokens": int(src.ne(PAD).sum()), "arch": model_arch(pe, size), "flags": recipe_flags(recipe, pe),
        "max_positions": [args.max_source_positions, args.max_target_positions],
        "params": sum(p.numel() for p in model.parameters()), "pe_params": pe_params(model, pe),
        "param_dtypes": sorted({str(p.dtype) for p in model.parameters()}),
        "master_dtypes": sorted({str(p.dtype) for p in master}), "fp16_overflows": overflows,
        "step_wall_s": list(wall), "step_cpu_s": list(cpu), "forward_s": forward, "forward_cpu_s": forward_cpu,
        "peak_bytes": peak, "step_bytes": peak - before, **busy,
        "memory_kind": "cuda-allocated" if cuda else "cpu-rss", "threads": torch.get_num_threads(),
        **{k: v for k, v in machine(device).items() if k in ("device", "device_name", "torch", "cuda")},
    }


def device_activity(step) -> dict:
    """What the GPU itself did in one more training step, whatever the host's speed (_common.kernel_summary's
    ``kernel_s``, ``kernels`` and ``top_kernels``); ``kernel_error`` alone when the profiler cannot record it."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        events = profiler_events(prof, device=True)
    except Exception as e:  # no CUPTI, or a profiler already running
        return {"kernel_error": f"{type(e).__name__}: {e}"}
    if not events:
        return {"kernel_error": "the profiler recorded no device activity"}
    return {k: v for k, v in kernel_summary(events).items() if k != "busy_s"}


def measure_isolated(pe: str, size: str, kwargs: dict) -> dict:
    """``measure(pe, size, **kwargs)`` in a fresh interpreter; on a CPU its memory figures come from a second one
    under ``CPU_MEMORY_ENV`` and its own (glibc's default allocator) are kept as ``malloc_default_*``."""
    result = run_isolated(__name__, "measure", dict(pe=pe, size=size, **kwargs))
    if result["memory_kind"] == "cpu-rss":
        memory = run_isolated(__name__, "measure", dict(pe=pe, size=size, **kwargs, memory_only=True),
                              env=CPU_MEMORY_ENV)
        result.update(malloc_default_peak_bytes=result["peak_bytes"], malloc_default_step_bytes=result["step_bytes"],
                      **memory)
    return result


def measure_in_process(pe: str, size: str, kwargs: dict, cache: dict) -> dict:
    """``measure(pe, size, **kwargs)`` in this process (``--processes one``, the default on CUDA): the model is built
    once per (pe, size) and kept on the CPU in ``cache``; each measurement moves a copy of it to the device (fresh
    optimizer state, fp16 halving on the copy), so the device holds one model at a time. On CUDA the allocator's
    cache is emptied around each measurement, and the peak counter is reset inside ``measure``;
    ``leftover_bytes`` is what was still allocated before it (0 unless something of an earlier row survived)."""
    import copy
    import gc

    import torch

    device = kwargs["device"]
    if (pe, size) not in cache:
        model, args = build_model(pe, size, kwargs["vocab"], kwargs["recipe"], device, fp16=kwargs["fp16"],
                                  impl=kwargs.get("impl", "auto"))
        cache[pe, size] = (model.to("cpu"), args)
    model, args = cache[pe, size]
    gc.collect()
    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    leftover = torch.cuda.memory_allocated() if cuda else 0
    result = measure(pe, size, **kwargs, built=(copy.deepcopy(model).to(device), args))
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    result["leftover_bytes"] = leftover
    return result


def summarise(runs):
    """One result from the per-round measurements of one (size, length, encoding): fastest and median times,
    median memory; the raw per-round figures are kept under ``rounds``."""
    first = runs[0]
    r = {k: first[k] for k in ("pe", "size", "length", "batch", "tokens", "src_tokens", "arch", "params", "pe_params",
                               "memory_kind", "max_positions", "param_dtypes", "master_dtypes")}
    timings = {"forward": [x["forward_s"] for x in runs], "step": [t for x in runs for t in x["step_wall_s"]]}
    for name, values in timings.items():
        s = spread(values)
        r.update({f"{name}_s": s["min"], f"{name}_median_s": s["median"]})
    r.update(forward_cpu_s=min(x["forward_cpu_s"] for x in runs),
             step_cpu_s=min(t for x in runs for t in x["step_cpu_s"]))
    for key in ("peak_bytes", "step_bytes", "malloc_default_peak_bytes", "malloc_default_step_bytes"):  # CPU: malloc_*
        if key in first:
            r[key] = int(statistics.median(x[key] for x in runs))
    if all("kernel_s" in x for x in runs):  # CUDA: the device's own time, fastest round; launches, most of any round
        fastest = min(runs, key=lambda x: x["kernel_s"])
        r.update(kernel_s=fastest["kernel_s"], kernels=max(x["kernels"] for x in runs),
                 **{k: fastest[k] for k in ("top_kernels",) if k in fastest})  # (older results have none)
    if "leftover_bytes" in first:  # --processes one: allocated before the measurement began (0 expected)
        r["leftover_bytes"] = max(x["leftover_bytes"] for x in runs)
    r["fp16_overflows"] = sum(x["fp16_overflows"] for x in runs)  # skipped fp16 steps, warm-up ones included
    r["rounds"] = {k: [x[k] for x in runs] for k in ("forward_s", "step_wall_s", "peak_bytes", "step_bytes")}
    return r


# ------------------------------------------------------------------------------------------ the report
MIB = 2 ** 20


def tables(settings, results, partial: str = ""):
    """(markdown text with one table per size and length, each under a line giving its settings); ``partial``: the
    run is incomplete (_partial_runs.Progress.partial_note), said in the legend."""
    n = settings["forward_passes"]
    base = ["pe", "params", "pe params", f"forward ms ({n} passes)", "forward", "step ms", "step", "cpu time",
            "peak MiB", "peak", "step mem"] + (BUSY_HEADERS if any("kernel_s" in r for r in results) else [])

    def row(r):
        return ([r["pe"], f"{r['params'] / 1e6:.2f}M", f"{r['pe_params']:,}", f"{r['forward_s'] * 1e3:.1f}",
                 _x(r["forward_ratio"]), f"{r['step_s'] * 1e3:.1f}", _x(r["step_ratio"]), _x(r["cpu_ratio"]),
                 f"{r['peak_bytes'] / MIB:.0f}", _x(r["peak_ratio"]), _x(r["step_mem_ratio"])]
                + ([f"{r.get('kernel_s', 0) * 1e3:.1f}", _x(r.get("kernel_ratio")), f"{r.get('kernels', 0):,}",
                    _x(r.get("kernels_ratio"))] if len(base) > 11 else []))

    blocks = _common.tables(settings, results, base, row, lambda first: f"; {settings_line(settings)}")
    overflows = sum(r.get("fp16_overflows", 0) for r in results)
    legend = ("Columns: forward = total of the timed forward passes (eval, no_grad), fastest round; step = one "
              f"training step (forward, cross-entropy, backward, {OPTIMIZER[bool(settings.get('fp16'))]}), fastest; "
              "cpu time = the step's process CPU time; peak = training peak memory; step mem = peak minus memory "
              "after building the model; GPU busy = the summed durations of the device's kernels, copies and memsets "
              "in one more step (torch.profiler), and kernels = how many (CUDA only); every `x` column is the ratio "
              "to sape at the same size and length."
              + (" Measured in one process on a CPU: its peak RSS only grows, so the memory columns are not "
                 "comparable between rows." if settings.get("processes") == "one" and settings["memory_kind"] ==
                 "cpu-rss" else "")
              + (f" {overflows} fp16 step(s) overflowed and were skipped (see fp16_overflows in the JSON)."
                 if overflows else ""))
    if partial:
        legend += (" A partial run: tables hold the rounds measured so far (fewer rounds than the settings say "
                   "where a round is missing), and a ratio is n/a until sape is measured at its size and length.")
    return "\n\n".join(blocks) + "\n\n" + legend + "\n"


BUSY_HEADERS = ["GPU busy ms", "busy", "kernels", "kernels x"]
OPTIMIZER = ("Adam", "fairseq's FP16Optimizer: fp16 model, fp32 master weights, Adam, loss scaling")  # fp32, fp16


def settings_line(s):
    """One line of the settings a table was measured under (the batch of each length is on its table's line)."""
    batch = f"max tokens {s['max_tokens']}" if s.get("max_tokens") else "fixed batch"
    processes = {"one": "one process, ", "fresh": "a fresh interpreter per measurement, "}.get(s.get("processes"), "")
    env = " ({})".format(" ".join(f"{k}={v}" for k, v in s["memory_env"].items())) if s.get("memory_env") else ""
    return (f"{batch}, padded batches, vocab {s['vocab']}, {'fp16' if s.get('fp16') else 'fp32'}, "
            f"device {s['device']} ({s['device_name']}), {processes}memory {s['memory_kind']}{env}, "
            f"{s['threads']} threads, fastest of {s['steps']} steps and of {s['forward_passes']}-pass forward blocks "
            f"x {s['rounds']} round(s), warmup {s['warmup']}, torch {s['torch']}, CUDA {s.get('cuda') or 'none'}; "
            f"models as in recipe {s.get('recipe', 'none')}; ratios to sape on fairseq's stock fused attention")


def chart(settings, results) -> bytes:
    """A PNG: one panel per (size, length), rows sizes and columns lengths, grouped bars per encoding (forward,
    step, memory ratios), 1 = SAPE."""
    plt = pyplot()
    # memory: on CUDA the peak allocation (the paper's Table 3); on CPU the peak RSS also holds ~0.4 GiB of
    # interpreter and libraries that pull every ratio towards 1, so the chart shows what training added
    memory = (("peak_ratio", "peak training memory (CUDA)") if settings["memory_kind"] == "cuda-allocated"
              else ("step_mem_ratio", "training memory above the built model (CPU RSS)"))
    bars = [("forward_ratio", f"forward time ({settings['forward_passes']} passes)"),
            ("step_ratio", "training-step time"), memory]
    sizes, lengths, names = settings["sizes"], settings["lengths"], settings["encodings"]
    width = 0.8 / len(bars)
    fig, axes = plt.subplots(len(sizes), len(lengths), squeeze=False,
                             figsize=(max(6.0, 0.8 * len(names) + 2) * len(lengths), 4.2 * len(sizes) + 0.6))
    for row, size in zip(axes, sizes):
        for ax, length in zip(row, lengths):
            by_pe = {r["pe"]: r for r in results if r["size"] == size and r["length"] == length}
            for i, (key, label) in enumerate(bars):
                values = [by_pe[pe][key] if by_pe[pe][key] is not None else float("nan") for pe in names]
                xs = [j + (i - (len(bars) - 1) / 2) * width for j in range(len(names))]
                drawn = ax.bar(xs, values, width, label=label)
                ax.bar_label(drawn, fmt="%.2f", fontsize=6, rotation=90, padding=2)
            ax.axhline(1.0, color="black", linestyle="--", linewidth=1)
            ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
            ax.set_ylabel("ratio to SAPE")
            ax.set_ylim(0, ax.get_ylim()[1] * 1.12)
            ax.set_title(f"{size} (transformer_<pe>_{SUFFIX_OF_CLASS[size]}), L={length}, B={by_pe[names[0]]['batch']}",
                         fontsize=9)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=len(bars))  # below the panels, off the bars
    s = settings
    batch = f"max tokens {s['max_tokens']}" if s.get("max_tokens") else "fixed batch"
    fig.suptitle(f"Ratios to SAPE: {batch}, vocab {s['vocab']}, {'fp16' if s.get('fp16') else 'fp32'}, "
                 f"{s['device']} ({s['device_name']}), {s['threads']} threads, fastest of {s['rounds']} round(s), "
                 f"torch {s['torch']}, CUDA {s.get('cuda') or 'none'}", fontsize=9)
    fig.tight_layout(rect=(0, 0.06 / len(sizes), 1, 1))
    return png_bytes(fig, dpi=130)


def header(s) -> str:
    """The line above the tables in benchmark.md."""
    return (f"{settings_line(s)}; sizes {' '.join(s['sizes'])}; lengths {' '.join(map(str, s['lengths']))}; "
            f"load average {s['loadavg_start'][0]:.2f} at start, {s['loadavg_end'][0]:.2f} at end\n\n")

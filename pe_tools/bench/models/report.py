"""pe-bench models' report: a markdown table per size and length, the line of its settings and a chart of the
ratios (the files: _partial_runs.write_outputs)."""
from ...figures import png_bytes, pyplot
from ...naming import SUFFIX_OF_CLASS
from .. import _common
from .._common import times as _x

MIB = 2 ** 20


def tables(settings, results, partial: str = ""):
    """(markdown text with one table per size and length, each under a line giving its settings); ``partial``: the
    line that says a run is incomplete (_partial_runs.Progress.partial_note), put first and in the legend."""
    n = settings["forward_passes"]
    base = ["pe", "params", "pe params", f"forward ms ({n} passes)", "forward", "step ms", "step", "cpu time",
            "peak MiB", "peak", "step mem"] + (BUSY_HEADERS if any("kernel_s" in r for r in results) else [])

    def row(r):
        return ([r["pe"], f"{r['params'] / 1e6:.2f}M", f"{r['pe_params']:,}", f"{r['forward_s'] * 1e3:.1f}",
                 _x(r["forward_ratio"]), f"{r['step_s'] * 1e3:.1f}", _x(r["step_ratio"]), _x(r["cpu_ratio"]),
                 f"{r['peak_bytes'] / MIB:.0f}", _x(r["peak_ratio"]), _x(r["step_mem_ratio"])]
                + ([f"{r.get('kernel_s', 0) * 1e3:.1f}", _x(r.get("kernel_ratio")), f"{r.get('kernels', 0):,}",
                    _x(r.get("kernels_ratio"))] if len(base) > 11 else []))

    blocks = _common.tables(settings, results, lambda group: base, row, lambda first: f"; {settings_line(settings)}")
    overflows = sum(r.get("fp16_overflows", 0) for r in results)
    legend = ("Columns: forward = total of the timed forward passes (eval, no_grad), fastest round; step = one "
              f"training step (forward, cross-entropy, backward, {_optimizer(settings)}), fastest; cpu time = the "
              "step's process CPU time; peak = training peak memory; step mem = peak minus memory after building "
              "the model; GPU busy = the summed durations of the device's kernels, copies and memsets in one more "
              "step (torch.profiler), and kernels = how many (CUDA only); every `x` column is the ratio to sape at "
              "the same size and length."
              + (" Measured in one process on a CPU: its peak RSS only grows, so the memory columns are not "
                 "comparable between rows." if settings.get("processes") == "one" and settings["memory_kind"] ==
                 "cpu-rss" else "")
              + (f" {overflows} fp16 step(s) overflowed and were skipped (see fp16_overflows in the JSON)."
                 if overflows else ""))
    if partial:
        legend += (" A partial run: tables hold the rounds measured so far (fewer rounds than the settings say "
                   "where a round is missing), and a ratio is n/a until sape is measured at its size and length.")
        blocks.insert(0, f"**{partial}**")
    return "\n\n".join(blocks) + "\n\n" + legend + "\n"


BUSY_HEADERS = ["GPU busy ms", "busy", "kernels", "kernels x"]


def _optimizer(s):
    return ("fairseq's FP16Optimizer: fp16 model, fp32 master weights, Adam, loss scaling" if s.get("fp16")
            else "Adam")


def settings_line(s):
    """One line of the settings a table was measured under (the batch of each length is on its table's line)."""
    batch = f"max tokens {s['max_tokens']}" if s.get("max_tokens") else "fixed batch"
    return (f"{batch}, padded batches, vocab {s['vocab']}, {'fp16' if s.get('fp16') else 'fp32'}, "
            f"device {s['device']} ({s['device_name']}), {_processes(s)}memory {s['memory_kind']}{_memory_env(s)}, "
            f"{s['threads']} threads, fastest of {s['steps']} steps and of {s['forward_passes']}-pass forward blocks "
            f"x {s['rounds']} round(s), warmup {s['warmup']}, torch {s['torch']}, CUDA {s.get('cuda') or 'none'}; "
            f"models as in recipe {s.get('recipe', 'none')}; ratios to sape on fairseq's stock fused attention")


def _processes(s):
    return {"one": "one process, ", "fresh": "a fresh interpreter per measurement, "}.get(s.get("processes"), "")


def _memory_env(s):
    env = s.get("memory_env")
    return f" ({' '.join(f'{k}={v}' for k, v in env.items())})" if env else ""


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

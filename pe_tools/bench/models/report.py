"""The benchmark's outputs: a markdown table per size, a chart of the ratios, and the files of ``--out-dir``
(benchmark.json, .csv, .md, .png), ``--json`` and ``--csv``, all written at once (common.write_all_atomic)."""
import json
import sys
from pathlib import Path

from ...common import csv_text, png_bytes, pyplot, write_all_atomic
from ...naming import SUFFIX_OF_CLASS as SIZES
from .._timing import markdown_table

OUT_NAME = "benchmark"
MIB = 2 ** 20


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
        blocks.append(f"{size} size (arch transformer_<pe>_{SIZES[size]}): {settings_line(settings)}\n\n"
                      + markdown_table(headers, rows))
    legend = ("Columns: forward = total of the timed forward passes (eval, no_grad), fastest round; step = one "
              "training step (forward, cross-entropy, backward, Adam), fastest; cpu time = the step's process "
              "CPU time; peak = training peak memory; step mem = peak minus memory after building the model; "
              "every `x` column is the ratio to sape at the same size.")
    return "\n\n".join(blocks) + "\n\n" + legend + "\n"


def settings_line(s):
    """One line of the settings a table was measured under."""
    return (f"B={s['batch']}, T={s['length']}, vocab {s['vocab']}, device {s['device']} ({s['device_name']}), "
            f"memory {s['memory_kind']}{_memory_env(s)}, {s['threads']} threads, fastest of {s['steps']} steps and of "
            f"{s['forward_passes']}-pass forward blocks x {s['rounds']} round(s), warmup {s['warmup']}, "
            f"torch {s['torch']}; models as in recipe {s.get('recipe', 'none')}; ratios to sape on fairseq's stock "
            f"fused attention")


def _memory_env(s):
    env = s.get("memory_env")
    return f" ({' '.join(f'{k}={v}' for k, v in env.items())})" if env else ""


def chart(settings, results) -> bytes:
    """A PNG: one panel per size, grouped bars per encoding (forward, step, peak ratios), 1 = SAPE."""
    plt = pyplot()
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
    return png_bytes(fig, dpi=130)


def write_outputs(settings, results, text: str, out_dir=None, json_path=None, csv_path=None) -> None:
    """``text`` (the tables) and the results as files: with ``out_dir`` OUT_NAME.json, .csv, .md (the tables under
    a settings line) and .png; ``json_path``, ``csv_path``: one more JSON or CSV file each."""
    payload = json.dumps({"settings": settings, "results": results}, indent=2) + "\n"
    table = csv_text(results, skip={"rounds"})
    files = {}
    if out_dir:
        out, s = Path(out_dir), settings
        header = (f"# Model benchmark: ratios to SAPE\n\n{settings_line(s)}; sizes {' '.join(s['sizes'])}; "
                  f"load average {s['loadavg_start'][0]:.2f} at start, {s['loadavg_end'][0]:.2f} at end\n\n")
        files.update({out / f"{OUT_NAME}.json": payload, out / f"{OUT_NAME}.csv": table,
                      out / f"{OUT_NAME}.md": header + text, out / f"{OUT_NAME}.png": chart(settings, results)})
    if json_path:
        files[Path(json_path)] = payload
    if csv_path:
        files[Path(csv_path)] = table
    write_all_atomic(files)
    for path in files:
        print(f"wrote {path}", file=sys.stderr)

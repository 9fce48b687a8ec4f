"""pe-bench fill: real ``fairseq-train`` at splits of one tokens-per-update: words per second, peak memory and the
GPU's busy fraction, each row against SAPE's at the same split.

    pe-bench fill --data data-bin/wmt_shaped --rows sape@4096x8 sape@8192x4 sape@16384x2 sape@32768x1 stock@32768x1
    pe-bench fill --data data-bin/wmt_shaped --rows all rpe:triton sape/big          # every row @auto: the recipe's choice
    pe-bench fill --data DIR --size tiny --tokens-per-update 1024 --rows sape@256x4 sape@1024x1 --device cpu

A row is ``PE[:IMPL][/SIZE][@SPLIT]``: PE an encoding of the registry, ``stock`` (fairseq's own transformer) or
``all`` (every encoding and stock, registry order); IMPL a ``--pe-attention-impl`` (default: the plugin's, auto);
SIZE a size class (default ``--size``); SPLIT ``MAXTOKENSxUPDATEFREQ`` (their product must be
``--tokens-per-update``: tokens per update never change) or ``auto`` (default): what ``pe-train
--max-tokens-per-gpu auto`` chooses on this machine (pe_tools/recipes/batching.py).

Each row is one ``fairseq-train`` process (``pe-bench train-speed``'s flags: the recipe's flags for the encoding,
Adam, label-smoothed cross-entropy, no checkpoints, no validation; ``--fp16`` on CUDA) under
``python -m pe_tools.bench._busy_train``, which measures inside fairseq's own loop: after ``--warmup`` updates,
words per second over ``--timed`` updates, then the device's busy time over ``--profiled`` updates (torch.profiler:
the union of its kernels', copies' and memsets' intervals over that stretch's wall time), and the peak memory.
Ratios: words per second, time per update and peak memory to SAPE's row of the same size, split and IMPL auto; and
each row's words per second to the same encoding's first split (the 4x goal of 32,768 x 1 over 4,096 x 8).
``--processes one`` runs every row in the pe-bench process instead (``_busy_train.run_in_process``: fairseq's
import and CUDA's start once, each row's peak counters reset before it). Outputs are rewritten after every row; ``--resume`` and ``--time-budget`` (docs/benchmarks.md §Partial runs); a row
is not started when the budget left is shorter than the longest row so far.
"""
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from ..command_line import fail, int_at_least
from ..fairseq_plugin import plugin_digest
from ..naming import BASELINE, SUFFIX_OF_CLASS as SIZES
from ..recipes import batching, load_table
from ._partial_runs import Progress, ResumeError, add_args as add_progress_args, resolve_device
from ..tables import markdown_table
from .train_speed import add_run_args, output_json

NAME = "fill"
HELP = ("real fairseq-train at splits of one tokens-per-update: words/s, peak memory and the GPU's busy fraction "
        "(torch.profiler inside the training loop), ratios to SAPE")
GOALS = {"speedup": 4.0, "busy": 0.80, "step": 1.10, "peak": 1.05}  # issue 40's goals, checked in the report


def parse_row(spec: str, size: str, names) -> list:
    """``PE[:IMPL][/SIZE][@SPLIT]`` -> [(pe, impl, size, split)] (``all``: one per name). Raises ValueError."""
    from pe_plugin.models.pe_transformer import ATTENTION_IMPLS

    from .models.build import STOCK

    rest, _, split = spec.partition("@")
    rest, _, row_size = rest.partition("/")
    pe, _, impl = rest.partition(":")
    split, row_size, impl = split or "auto", row_size or size, impl or None
    if row_size not in SIZES:
        raise ValueError(f"row {spec!r}: size {row_size!r} is not one of {', '.join(SIZES)}")
    if impl is not None and impl not in ATTENTION_IMPLS:
        raise ValueError(f"row {spec!r}: impl {impl!r} is not one of {', '.join(ATTENTION_IMPLS)}")
    pes = list(names) if pe == "all" else [pe]
    for p in pes:
        if p not in names:
            raise ValueError(f"row {spec!r}: {p!r} is not one of {', '.join(names)} (or all)")
        if p == STOCK and impl is not None:
            raise ValueError(f"row {spec!r}: stock fairseq has no --pe-attention-impl")
    if split != "auto":
        try:
            m, f = (int(x) for x in split.lower().split("x"))
        except ValueError:
            raise ValueError(f"row {spec!r}: split {split!r} is not MAXTOKENSxUPDATEFREQ (e.g. 4096x8) or auto") from None
        split = (m, f)
    return [(p, impl, row_size, split) for p in pes]


def resolve_split(split, size: str, tokens_per_update: int, recipe: str, memory=batching.device_memory) -> tuple:
    """(max_tokens, update_freq, how) of a row's split; ``auto`` as pe-train chooses it on this machine."""
    if split != "auto":
        m, f = split
        if m * f != tokens_per_update:
            raise ValueError(f"split {m}x{f} is {m * f:,} tokens per update, not --tokens-per-update "
                             f"{tokens_per_update:,}")
        return m, f, "given"
    flags = load_table(recipe)["common"]["flags"] if recipe != "none" else ["--max-tokens", "4096"]
    recipe_max = batching.recipe_batch(flags).max_tokens
    plan, choice = batching.choose_plan(tokens_per_update, 1, "auto", size, recipe_max, memory=memory)
    return plan.max_tokens, plan.update_freq, f"auto ({choice.how}: {choice.note})"


def window(update_freq: int, args) -> tuple:
    """(warmup, timed, profiled) updates of a row: ``--profiled-micro-batches`` micro-batches profiled, at least
    two updates (the profiler's events grow with the micro-batches, not the updates)."""
    profiled = max(2, -(-args.profiled_micro_batches // update_freq))
    return args.warmup, args.timed, profiled


def run_one(row, args, device: str, fp16: bool, work: Path) -> dict:
    from .models.build import STOCK
    from .train_speed import train_argv

    pe, impl, size, (max_tokens, update_freq, how) = row
    warmup, timed, profiled = window(update_freq, args)
    extra = ["--update-freq", str(update_freq), *(["--pe-attention-impl", impl] if impl and pe != STOCK else []),
             *args.extra]
    ns = SimpleNamespace(data=args.data, recipe=args.recipe, share_all_embeddings=args.share_all_embeddings,
                         max_update=warmup + timed + profiled, max_tokens=max_tokens, log_interval=args.log_interval,
                         extra=extra)
    fairseq = train_argv(pe, size, ns, device, fp16)
    out = work / "window.json"
    out.unlink(missing_ok=True)
    activity = "cuda" if device == "cuda" else "cpu"
    if args.processes == "one":  # fairseq imported and CUDA started once for all rows (each row's startup saved)
        from ._busy_train import run_in_process

        t0 = time.perf_counter()
        record = run_in_process(out, warmup, timed, profiled, activity, fairseq)
        return dict(record, pe=pe, impl=impl or "auto", size=size, max_tokens=max_tokens, update_freq=update_freq,
                    split_how=how, process_s=round(time.perf_counter() - t0, 2), processes="one",
                    command="fairseq-train " + " ".join(fairseq))
    argv = [sys.executable, "-m", "pe_tools.bench._busy_train", "--json", str(out), "--warmup", str(warmup),
            "--timed", str(timed), "--profiled", str(profiled), "--activity", "cuda" if device == "cuda" else "cpu",
            "--", *fairseq]
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode != 0 or not out.is_file():
        raise RuntimeError(f"fairseq-train failed for {pe} ({proc.returncode}):\n{proc.stdout[-4000:]}")
    record = json.loads(out.read_text())
    return dict(record, pe=pe, impl=impl or "auto", size=size, max_tokens=max_tokens, update_freq=update_freq,
                split_how=how, process_s=round(wall, 2), processes="fresh", command="fairseq-train " + " ".join(fairseq))


def add_ratios(results) -> None:
    """Ratios to SAPE's row (same size and split, impl auto) and to the same row's first split."""
    first = {}
    for r in results:
        first.setdefault((r["pe"], r["impl"], r["size"]), r)
    for r in results:
        base = next((x for x in results if (x["pe"], x["impl"], x["size"], x["max_tokens"], x["update_freq"])
                     == (BASELINE, "auto", r["size"], r["max_tokens"], r["update_freq"])), None)
        r["wps_to_sape"] = r["wps"] / base["wps"] if base else None
        r["step_to_sape"] = base["ups"] / r["ups"] if base else None
        r["peak_to_sape"] = r["peak_bytes"] / base["peak_bytes"] if base else None
        f = first[r["pe"], r["impl"], r["size"]]
        r["first_split"] = f"{f['max_tokens']}x{f['update_freq']}"
        r["wps_to_first_split"] = r["wps"] / f["wps"]


def flatten(m: dict) -> dict:
    """A measurement as one result row (the window's nested figures lifted)."""
    t, p = m["timed"], m["profiled"]
    return {"pe": m["pe"], "impl": m["impl"], "size": m["size"], "max_tokens": m["max_tokens"],
            "update_freq": m["update_freq"], "split_how": m["split_how"], "wps": t["wps"], "ups": t["ups"],
            "tokens_per_update": t["tokens_per_update"], "step_s": 1 / t["ups"], "busy_fraction": p["busy_fraction"],
            "busy_fraction_unprofiled": p.get("busy_fraction_unprofiled"), "busy_per_update_s": p["busy_s"] / p["updates"],
            "kernels_per_update": p["kernels"] / p["updates"], "peak_bytes": m["peak_bytes"],
            "reserved_bytes": m.get("reserved_bytes"), "device_name": m.get("device_name"),
            "top_kernels": p["top_kernels"], "process_s": m["process_s"], "command": m["command"]}


def goal_lines(results, activity: str) -> list:
    """What the results say of issue 40's goals (only the pairs and rows that were measured)."""
    x = lambda v: "n/a" if v is None else f"{v:.2f}x"  # noqa: E731
    lines = []
    for r in results:
        if r["pe"] == BASELINE and r["impl"] == "auto" and r["update_freq"] == 1 and r["first_split"] != "{}x{}".format(
                r["max_tokens"], r["update_freq"]):
            lines.append(f"- {BASELINE} {r['size']} at {r['max_tokens']}x1: {x(r['wps_to_first_split'])} the words/s "
                         f"of {r['first_split']} (goal {GOALS['speedup']:g}x), busy {r['busy_fraction']:.0%} of the "
                         f"step (goal {GOALS['busy']:.0%}{'' if activity == 'cuda' else '; CPU operators, not a GPU'})")
    over = [f"{r['pe']}{'' if r['impl'] == 'auto' else ':' + r['impl']} ({r['size']}, {r['max_tokens']}x"
            f"{r['update_freq']}: step {x(r['step_to_sape'])}, peak {x(r['peak_to_sape'])})" for r in results
            if r["step_to_sape"] is not None and (r["step_to_sape"] > GOALS["step"] or r["peak_to_sape"] > GOALS["peak"])]
    if any(r["step_to_sape"] is not None and r["pe"] != BASELINE for r in results):
        lines.append(f"- over {GOALS['step']:.2f}x SAPE's time per update or {GOALS['peak']:.2f}x its peak: "
                     + (", ".join(over) if over else "none"))
    return lines


def add_args(parser):
    from pe_plugin.encodings import PE_REGISTRY

    parser.add_argument("--data", required=True, help="a fairseq-preprocess'd folder (pe-bench wmt-corpus writes one)")
    parser.add_argument("--rows", nargs="+", default=["all"], metavar="PE[:IMPL][/SIZE][@SPLIT]",
                        help="rows to measure (default: all, at the recipe's choice on this machine)")
    parser.add_argument("--size", choices=list(SIZES), default="base", help="the rows' default size (default: base)")
    parser.add_argument("--tokens-per-update", type=int_at_least(1), default=32768,
                        help="max_tokens x update_freq of every row (default: 32768, the WMT14 recipe's)")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                        help="auto: cuda when torch sees it (default)")
    half = parser.add_mutually_exclusive_group()
    half.add_argument("--fp16", dest="fp16", action="store_true", default=None, help="--fp16 (the default on CUDA)")
    half.add_argument("--no-fp16", dest="fp16", action="store_false", help="fp32 (the default on a CPU)")
    ints = [("--warmup", 0, 5, "updates before anything is measured"),
            ("--timed", 1, 20, "updates timed without the profiler (words per second)"),
            ("--profiled-micro-batches", 1, 16, "micro-batches under the profiler (at least 2 updates)"),
            ("--log-interval", 1, 10, "fairseq's --log-interval"),
            ("--threads", 0, 0, "OMP_NUM_THREADS of each run (0: unchanged)")]
    for flag, low, default, text in ints:
        parser.add_argument(flag, type=int_at_least(low), default=default, help=f"{text} (default: {default})")
    parser.add_argument("--processes", choices=["one", "fresh"], default="fresh",
                        help="fresh: one fairseq-train process a row (default); one: every row in this process "
                             "(fairseq's import and CUDA's start paid once; on a CPU each row's peak RSS is the "
                             "process's so far)")
    add_run_args(parser, "fill", "row",
                 "each encoding's flags, and auto's recipe --max-tokens, from this recipe (default: wmt14)")
    parser.set_defaults(registry=list(PE_REGISTRY))
    add_progress_args(parser)


def run(args) -> int:
    import torch

    from pe_plugin.encodings import PE_REGISTRY

    from .models.build import STOCK

    if not any(Path(args.data).glob("dict.*.txt")):
        return fail(f"--data {args.data}: no fairseq dictionary (dict.*.txt) there; pe-bench wmt-corpus --out DIR "
                    f"writes one")
    try:
        device = resolve_device(args.device)
        names = [*PE_REGISTRY, STOCK]
        specs = [row for spec in args.rows for row in parse_row(spec, args.size, names)]
        splits = {}
        for pe, impl, size, split in specs:
            if (size, split) not in splits:
                splits[size, split] = resolve_split(split, size, args.tokens_per_update, args.recipe)
    except ValueError as e:
        return fail(str(e))
    rows = list(dict.fromkeys((pe, impl, size, splits[size, split]) for pe, impl, size, split in specs))
    keys = [(pe, impl or "auto", size, m, f) for pe, impl, size, (m, f, _) in rows]
    fp16 = (device == "cuda") if args.fp16 is None else args.fp16
    settings = dict(data=str(args.data), rows=args.rows, size=args.size, tokens_per_update=args.tokens_per_update,
                    device=device, device_name=torch.cuda.get_device_name() if device == "cuda" else "cpu", fp16=fp16,
                    warmup=args.warmup, timed=args.timed, profiled_micro_batches=args.profiled_micro_batches,
                    recipe=args.recipe, extra=args.extra, processes=args.processes, torch=torch.__version__,
                    cuda=torch.version.cuda,
                    plugin_digest=plugin_digest())
    out_json = output_json(args, "fill")
    try:
        progress = Progress.for_args("pe-bench fill", keys, settings, out_json, args, what="rows")
    except ResumeError as e:
        return fail(str(e))
    first = progress.stored.get("settings", {}).get("started")
    started = time.time()
    settings.update(python=platform.python_version(), splits={f"{s}@{k if k == 'auto' else '%dx%d' % k}": list(v)
                                                              for (s, k), v in splits.items()},
                    started=first or time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)))
    activity = "cuda" if device == "cuda" else "cpu"

    def report():
        results = [flatten(m) for m in progress.measurements()]
        add_ratios(results)
        x = lambda v: "n/a" if v is None else f"{v:.3f}x"  # noqa: E731
        headers = ["pe", "impl", "size", "split", "words/s", "to sape", "ms/update", "to sape", "busy",
                   "busy, unprofiled", "peak GB", "to sape", "to first split"]
        table = [[r["pe"], r["impl"], r["size"], f"{r['max_tokens']}x{r['update_freq']}", f"{r['wps']:,.0f}",
                  x(r["wps_to_sape"]), f"{r['step_s'] * 1e3:.1f}", x(r["step_to_sape"]), f"{r['busy_fraction']:.1%}",
                  "n/a" if r["busy_fraction_unprofiled"] is None else f"{r['busy_fraction_unprofiled']:.1%}",
                  f"{r['peak_bytes'] / 1e9:.2f}", x(r["peak_to_sape"]), x(r["wps_to_first_split"])] for r in results]
        note = progress.partial_note()
        text = ((f"**{note}**\n\n" if note else "")
                + f"fairseq-train, {args.tokens_per_update:,} tokens per update, {'fp16' if fp16 else 'fp32'}, {device} "
                f"({settings['device_name']}), torch {torch.__version__}; words/s over {args.timed} updates after "
                f"{args.warmup}; busy = the union of the device's activity intervals over the wall time of "
                f"{args.profiled_micro_batches}+ profiled micro-batches ({'GPU kernels, copies, memsets' if activity == 'cuda' else 'CPU operators: a rehearsal, not a GPU figure'}); "
                f"splits: {', '.join(f'{k} = {v[0]}x{v[1]} ({v[2]})' for k, v in settings['splits'].items())}\n\n"
                + markdown_table(headers, table) + "\n\n" + "\n".join(goal_lines(results, activity)) + "\n")
        return results, text

    progress.write = progress.writer(args, settings, started, report, "fill",
                                     "Filling the GPU: fairseq-train at splits of one tokens-per-update", {"top_kernels"})
    longest = 0.0
    with tempfile.TemporaryDirectory() as work:
        for row, key in zip(rows, keys):
            if progress.has(key):
                continue
            left = None if args.time_budget is None else args.time_budget - (time.monotonic() - progress.started)
            if left is not None and longest and left < longest:
                print(f"pe-bench fill: {left:.0f} s of the budget left, less than the longest row so far "
                      f"({longest:.0f} s); stopping", file=sys.stderr, flush=True)
                break
            pe, impl, size, (m, f, _) = row
            print(f"[fill] {pe}{'' if impl is None else ':' + impl} {size} {m}x{f}", file=sys.stderr, flush=True)
            t0 = time.monotonic()
            progress.add(key, run_one(row, args, device, fp16, Path(work)))
            longest = max(longest, time.monotonic() - t0)
            if progress.stop_now():
                break
    print("\n" + report()[1])
    progress.finish()
    return 0

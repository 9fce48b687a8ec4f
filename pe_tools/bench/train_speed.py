"""pe-bench train-speed: real ``fairseq-train`` for a few hundred updates per encoding, one run at a time, on given
binarised data; words (target tokens) per second as ratios to stock fairseq's transformer and to SAPE.

    pe-bench train-speed --data data-bin/wmt14_en_de --device cuda --sizes base --max-update 300
    pe-bench train-speed --data data-bin/toy --device cpu --sizes tiny --max-update 40 --pe sape t5

Each row runs ``python -m fairseq_cli.train DATA --arch transformer_<pe>_<suffix>`` (stock: fairseq's own
``transformer_<suffix>`` without ``--user-dir``) with the ``--recipe``'s flags for the encoding, Adam with an inverse
square-root schedule, label-smoothed cross-entropy, ``--max-tokens``, no checkpoints and no validation, and
``--log-format json``. On CUDA it trains with ``--fp16`` as the WMT14 runs do (``--no-fp16`` for fp32); on a CPU
with ``--cpu`` in fp32 (``--fp16`` there adds ``--fp16-no-flatten-grads --fp16-init-scale 4``,
pe_tools.fairseq_plugin.CPU_FP16_FLAGS: docs/fairseq.md §fp16 and bf16 on CPU). The speed of a row is the median of
fairseq's own ``wps`` over its ``train_inner`` log records, the first record (warm-up: CUDA context, kernel
selection, allocator growth) left out; ``ups`` likewise. Rows run in registry order, round-robin over ``--rounds``;
the fastest round is kept. The outputs are rewritten after every run; ``--resume`` and ``--time-budget``:
docs/benchmarks.md §Partial runs.
"""
import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ..command_line import fail, int_at_least
from ..naming import BASELINE, SUFFIX_OF_CLASS as SIZES
from ..recipes import recipe_names, training_log
from ._partial_runs import Progress, ResumeError, add_args as add_progress_args, resolve_device
from ..tables import markdown_table

NAME = "train-speed"
HELP = "words per second of real fairseq-train runs, per encoding, as ratios to stock fairseq and to SAPE"


def inner_records(log: str) -> list:
    """The ``train_inner`` records of a ``fairseq-train --log-format json`` log, as dicts of numbers (read by the
    one reader of fairseq's log, pe_tools/recipes/training_log.py)."""
    return [r.stats for r in training_log.records(log, "train_inner")]


def speed(records: list) -> dict:
    """wps and ups: medians over ``records`` less the first (warm-up); with a single record, that one."""
    kept = records[1:] or records
    if not kept:
        raise ValueError("no train_inner record in the log: raise --max-update or lower --log-interval")
    return dict(wps=statistics.median(float(r["wps"]) for r in kept),
                ups=statistics.median(float(r["ups"]) for r in kept), records=len(kept),
                last_loss=float(records[-1]["loss"]), last_update=int(records[-1]["num_updates"]))


def train_argv(pe: str, size: str, args, device: str, fp16: bool) -> list:
    """The fairseq-train arguments of one row."""
    from ..fairseq_plugin import CPU_FP16_FLAGS, plugin_dir
    from .models.build import STOCK, model_arch, recipe_flags

    plugin = [] if pe == STOCK else ["--user-dir", plugin_dir()]
    place = ["--cpu"] if device == "cpu" else []
    half = (CPU_FP16_FLAGS if device == "cpu" else ["--fp16"]) if fp16 else []
    return [str(args.data), *plugin, "--arch", model_arch(pe, size), *recipe_flags(args.recipe, pe),
            *(["--share-all-embeddings"] if args.share_all_embeddings else []),
            "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", "5e-4", "--lr-scheduler", "inverse_sqrt",
            "--warmup-updates", str(min(4000, args.max_update)), "--clip-norm", "0.0",
            "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--dropout", "0.1",
            "--max-tokens", str(args.max_tokens), "--max-update", str(args.max_update), "--seed", "1",
            "--no-save", "--disable-validation", "--log-format", "json", "--log-interval", str(args.log_interval),
            "--num-workers", "0", "--no-progress-bar", *place, *half, *args.extra]


def add_run_args(parser, stem: str, each: str, recipe_help: str) -> None:
    """The options of the benchmarks that run fairseq-train (train-speed, fill), given last: the flags of each run
    (--recipe, --no-share-all-embeddings and --extra, read by ``train_argv``) and the outputs (--out-dir: STEM.json,
    .csv and .md, rewritten after every EACH; --json, read by ``output_json``)."""
    parser.add_argument("--recipe", choices=recipe_names("methods") + ["none"], default="wmt14", help=recipe_help)
    parser.add_argument("--no-share-all-embeddings", dest="share_all_embeddings", action="store_false",
                        help="the data has separate dictionaries: do not pass --share-all-embeddings")
    parser.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                        help="more fairseq-train arguments, after everything else (give it last)")
    parser.add_argument("--out-dir", help=f"write {stem}.json, .csv and .md here (rewritten after every {each})")
    parser.add_argument("--json", help="also write the JSON here (what --resume reads when given)")


def output_json(args, stem: str):
    """The JSON a run writes (and --resume reads): --json, else --out-dir/STEM.json, else None."""
    return Path(args.json) if args.json else Path(args.out_dir) / f"{stem}.json" if args.out_dir else None


def run_one(pe: str, size: str, args, device: str, fp16: bool) -> dict:
    argv = [sys.executable, "-m", "fairseq_cli.train", *train_argv(pe, size, args, device, fp16)]
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"fairseq-train failed for {pe} ({proc.returncode}):\n{proc.stdout[-4000:]}")
    return dict(speed(inner_records(proc.stdout)), wall_s=round(wall, 2), argv=argv[1:])


def add_args(parser):
    from pe_plugin.encodings import PE_REGISTRY

    from .models.build import STOCK

    names = list(PE_REGISTRY) + [STOCK]
    parser.add_argument("--data", required=True, help="a fairseq-preprocess'd folder (joined dictionary by default)")
    parser.add_argument("--sizes", nargs="+", choices=list(SIZES), default=["base"], metavar="SIZE",
                        help=f"model sizes from {', '.join(SIZES)} (default: base)")
    parser.add_argument("--pe", nargs="+", choices=names, metavar="PE",
                        help=f"rows from {', '.join(names)} (default: all; sape and {STOCK} are always added)")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                        help="auto: cuda when torch sees it (default)")
    half = parser.add_mutually_exclusive_group()
    half.add_argument("--fp16", dest="fp16", action="store_true", default=None,
                      help="train with --fp16 (the default on CUDA; on a CPU with --fp16-no-flatten-grads "
                           "--fp16-init-scale 4)")
    half.add_argument("--no-fp16", dest="fp16", action="store_false", help="train in fp32 (the default on a CPU)")
    ints = [("--max-update", 2, 300, "updates per run"), ("--max-tokens", 1, 4096, "fairseq's --max-tokens"),
            ("--log-interval", 1, 20, "updates per train_inner record (the first record is left out)"),
            ("--rounds", 1, 1, "round-robin repetitions; the fastest is kept"),
            ("--threads", 0, 0, "OMP_NUM_THREADS of each run (0: unchanged)")]
    for flag, low, default, text in ints:
        parser.add_argument(flag, type=int_at_least(low), default=default, help=f"{text} (default: {default})")
    add_run_args(parser, "train_speed", "run", "each encoding's flags from this recipe's methods.toml (default: wmt14)")
    add_progress_args(parser)


def run(args) -> int:
    import torch

    from pe_plugin.encodings import PE_REGISTRY

    from .models.build import STOCK

    if not any(Path(args.data).glob("dict.*.txt")):
        return fail(f"--data {args.data}: no fairseq dictionary (dict.*.txt) there; give a fairseq-preprocess'd folder")
    try:
        device = resolve_device(args.device)
    except ValueError as e:
        return fail(str(e))
    fp16 = (device == "cuda") if args.fp16 is None else args.fp16
    wanted = set(args.pe or [*PE_REGISTRY, STOCK]) | {BASELINE, STOCK}
    names = [pe for pe in [*PE_REGISTRY, STOCK] if pe in wanted]
    keys = [(size, pe) for size in dict.fromkeys(args.sizes) for pe in names]
    started = time.time()
    settings = dict(data=str(args.data), sizes=list(dict.fromkeys(args.sizes)), encodings=names, device=device,
                    device_name=torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu",
                    fp16=fp16, max_update=args.max_update, max_tokens=args.max_tokens, log_interval=args.log_interval,
                    rounds=args.rounds, recipe=args.recipe, extra=args.extra, torch=torch.__version__,
                    cuda=torch.version.cuda)
    order = [(size, pe, k + 1) for k in range(args.rounds) for size, pe in keys]
    out_json = output_json(args, "train_speed")
    try:
        progress = Progress.for_args("pe-bench train-speed", order, settings, out_json, args, what="runs")
    except ResumeError as e:
        return fail(str(e))
    first = progress.stored.get("settings", {}).get("started")
    settings.update(python=platform.python_version(),
                    started=first or time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)))

    def report():
        runs = {}
        for m in progress.measurements():
            runs.setdefault(tuple(m["key"][:2]), []).append(m)
        results = []
        for (size, pe) in keys:
            if (size, pe) not in runs:
                continue
            rs = runs[size, pe]
            best = max(rs, key=lambda r: r["wps"])
            results.append(dict(pe=pe, size=size, **{k: v for k, v in best.items() if k not in ("argv", "key")},
                                wps_rounds=[r["wps"] for r in rs], command="fairseq-train " + " ".join(best["argv"])))
        for r in results:
            for ref in (STOCK, BASELINE):
                base = next((x for x in results if x["size"] == r["size"] and x["pe"] == ref), None)
                r[f"wps_to_{ref}"] = r["wps"] / base["wps"] if base else None  # None: a partial run
        headers = ["pe", "size", "wps", "to stock", "to sape", "ups", "records", "last loss", "wall s"]
        ratio = lambda v: "n/a" if v is None else f"{v:.3f}x"  # noqa: E731
        rows = [[r["pe"], r["size"], f"{r['wps']:,.0f}", ratio(r["wps_to_stock"]), ratio(r["wps_to_sape"]),
                 f"{r['ups']:.2f}", str(r["records"]), f"{r['last_loss']:.3f}", f"{r['wall_s']:.1f}"] for r in results]
        note = progress.partial_note()
        text = ((f"**{note}**\n\n" if note else "")
                + f"fairseq-train, {args.max_update} updates, --max-tokens {args.max_tokens}, "
                f"{'fp16' if fp16 else 'fp32'}, {device} ({settings['device_name']}), torch {torch.__version__}; "
                f"wps = median of fairseq's train_inner wps (first record left out), fastest of {args.rounds} round(s)"
                f"\n\n" + markdown_table(headers, rows) + "\n")
        return results, text

    progress.write = progress.writer(args, settings, started, report, "train_speed",
                                     "Training speed: fairseq-train words per second", {"wps_rounds"})
    for size, pe, k in progress.missing():
        print(f"[train-speed round {k}/{args.rounds}] {size} {pe}", file=sys.stderr, flush=True)
        progress.add((size, pe, k), run_one(pe, size, args, device, fp16))
        if progress.stop_now():
            break
    print("\n" + report()[1])
    progress.finish()
    return 0

"""pe-bench models' arguments and run: every (size, encoding) measured in a fresh interpreter, round-robin, then
summarised, printed and written (docs/benchmarks.md §Model benchmark)."""
import argparse
import os
import platform
import sys
import time

from ...common import fail, int_at_least
from ...naming import BASELINE, SUFFIX_OF_CLASS as SIZES
from ...recipes import recipe_names
from .measure import CPU_MEMORY_ENV, add_ratios, measure_isolated, summarise
from .report import OUT_NAME, tables, write_outputs

NAME = "models"
HELP = "forward time, training-step time and peak memory of every registered encoding, as ratios to SAPE"


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
        parser.add_argument(flag, type=int_at_least(low), default=default, help=f"{text} (default: {default})")
    parser.add_argument("--recipe", choices=recipe_names("methods") + ["none"], default="wmt14",
                        help="build each encoding with its entry's flags in pe_tools/recipes/RECIPE/methods.toml, e.g. "
                             "PosNet's L_max (default: wmt14); none: the architectures' defaults")
    parser.add_argument("--out-dir", help=f"write {OUT_NAME}.json, .csv, .md and .png into this folder")
    parser.add_argument("--json", help="also write the JSON results to this file")
    parser.add_argument("--csv", help="also write the CSV results to this file")


def run(args) -> int:
    import torch

    from pe_plugin.encodings import PE_REGISTRY

    if args.device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif args.device == "cuda" and not torch.cuda.is_available():
        return fail("--device cuda: CUDA is not available to torch here")
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
    write_outputs(settings, results, text, args.out_dir, args.json, args.csv)
    return 0

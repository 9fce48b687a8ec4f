"""pe-bench models' arguments and run: every (size, length, encoding) measured in a fresh interpreter, round-robin,
then summarised, printed and written (docs/benchmarks.md §Model benchmark)."""
import argparse
import os
import sys
import time

from ...command_line import int_at_least
from ...fairseq_plugin import plugin_digest
from ...naming import SUFFIX_OF_CLASS
from .._common import add_counts, add_device_arg, add_ratios, machine, resolve_device
from .._partial_runs import Progress, add_args as add_output_args
from .build import add_model_args, rows_and_batches
from .measure import AGAINST_SAPE, CPU_MEMORY_ENV, RATIOS, measure_in_process, measure_isolated, summarise
from .report import chart, header, tables

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
        return s, results, tables(s, results, progress.partial_note())

    def headed():
        s, results, text = report()
        return s, results, header(s) + text

    progress.write = progress.writer(args, headed, "Model benchmark: ratios to SAPE", csv_skip={"rounds"}, chart=chart)
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

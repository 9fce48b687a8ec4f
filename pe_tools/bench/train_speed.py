"""pe-bench train-speed: the one training-speed harness. Real ``fairseq-train`` with the command ``pe-train`` builds
for each row (the recipe's flags, data loading, workers and fp16 as a user gets them), in rounds, measured update by
update inside fairseq's own loop (``Window``): words, wall time, the host's split, the update's own peak memory
(``PeakMeter``) and the device's busy time. Rows, rounds, ratios and goals: docs/benchmarks.md §Training speed.

    pe-bench train-speed --data data-bin/wmt_shaped --rows sape@4096x8 sape --rounds 3 --out-dir runs/speed
    pe-bench train-speed --data DIR --size tiny --tokens-per-update 1024 --rows sape@128x8 sape --device cpu
"""
import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from ..command_line import fail, int_at_least
from ..naming import BASELINE
from ..tables import markdown_table
from . import _common
from ._common import add_counts, add_device_arg, add_ratios, kernel_summary, machine, over_rounds, \
    profiler_events, resolve_device, rotated, spread_cell, verdict
from ._build import STOCK
from ._partial_runs import Progress, add_args as add_output_args
NAME = "train-speed"
HELP = ("real fairseq-train with pe-train's command, in rounds: words/s, time per update and its host split, "
        "per-update peak memory, the GPU's busy fraction; ratios to SAPE with their spread")
HOST = ("wait_s", "fwd_bwd_s", "optimizer_s", "bookkeeping_s")


# ------------------------------------------------------------------------------------------ the window
class PeakMeter:
    """One update's peak memory, whoever resets the counter: ``start()`` resets it; while ``open``, a call of
    ``owner.name`` (the reset fairseq makes: torch.cuda.reset_peak_memory_stats) first banks the peak so far;
    ``read()`` is the largest of the banked peaks and the peak now."""

    def __init__(self, read, owner, name: str):
        self.read_now, self.owner, self.name = read, owner, name
        self.reset = getattr(owner, name)
        self.banked = 0

    @classmethod
    def for_device(cls, cuda: bool) -> "PeakMeter":
        if cuda:
            import torch

            return cls(torch.cuda.max_memory_allocated, torch.cuda, "reset_peak_memory_stats")
        return cls(_common.peak_rss_bytes, _common, "reset_peak_rss")

    def open(self) -> None:
        def reset(*args, **kwargs):
            self.banked = max(self.banked, self.read_now())
            return self.reset(*args, **kwargs)

        setattr(self.owner, self.name, reset)

    def close(self) -> None:
        setattr(self.owner, self.name, self.reset)

    def start(self) -> None:
        self.banked = 0
        self.reset()

    def read(self) -> int:
        return max(self.banked, self.read_now())


SYNC_OPS = ("_local_scalar_dense", "nonzero", "is_nonzero", "item", "equal")  # ops that wait for the device


def sync_counter():
    """A dispatch mode counting, by op, the ATen ops that read a value back from the device (.item(), int(),
    bool(), nonzero, equal): each is a host sync on CUDA. Enter it around an update; ``.counts`` is a Counter."""
    from collections import Counter

    counts = Counter()
    mode = _common.op_mode(lambda func, *_: counts.update([func.overloadpacket.__name__] if
                                                          func.overloadpacket.__name__ in SYNC_OPS else []))
    mode.counts = counts
    return mode


class Window:
    """Measures the updates of one run (see the module): ``begin(trainer)`` and ``end(samples, out)`` around each
    ``Trainer.train_step``; ``wait``, ``fwd_bwd`` and ``optimizer`` accumulate the host's time of the update."""

    def __init__(self, warmup: int, timed: int, profiled: int, cuda: bool, count_syncs: bool = False,
                 compile_backend: str = None):
        self.warmup, self.timed, self.profiled, self.cuda = warmup, timed, profiled, cuda
        self.compile_backend = compile_backend
        self.syncs = sync_counter() if count_syncs else None
        self.meter = PeakMeter.for_device(cuda)
        self.updates, self.shape, self.events = [], {}, []
        self.last_end = self.t0 = None
        self.wait = self.fwd_bwd = self.optimizer = 0.0
        self.prof = None

    @property
    def done(self) -> bool:
        return len(self.updates) >= self.warmup + self.timed + self.profiled

    def phase(self, n: int) -> str:
        return "warmup" if n < self.warmup else "timed" if n < self.warmup + self.timed else "profiled"

    def begin(self, trainer) -> None:
        if not self.updates and not self.shape:
            cfg = trainer.cfg
            self.shape = {"max_tokens": cfg.dataset.max_tokens, "update_freq": list(cfg.optimization.update_freq),
                          "num_workers": cfg.dataset.num_workers, "fp16": bool(cfg.common.fp16),
                          "arch": getattr(cfg.model, "arch", None)}
            task = trainer.task
            for attr, slot in (("train_step", "fwd_bwd"), ("optimizer_step", "optimizer")):
                setattr(task, attr, self.timer(getattr(task, attr), slot))
            self.meter.open()
            if self.compile_backend:
                compile_layers(trainer.model, self.compile_backend)
        self.fwd_bwd = self.optimizer = 0.0
        if self.phase(len(self.updates)) == "profiled":
            from torch.profiler import ProfilerActivity, profile

            _common.sync(self.cuda)
            self.prof = profile(activities=[ProfilerActivity.CUDA if self.cuda else ProfilerActivity.CPU])
            self.prof.start()
        self.meter.start()
        if self.syncs is not None:
            self.syncs.counts.clear()
            self.syncs.__enter__()
        self.t0 = time.perf_counter()

    def timer(self, fn, slot: str):
        return _common.timing(fn, lambda seconds: setattr(self, slot, getattr(self, slot) + seconds))

    def end(self, samples, out) -> None:
        if self.syncs is not None:
            self.syncs.__exit__(None, None, None)
        _common.sync(self.cuda)
        end = time.perf_counter()
        peak = self.meter.read()
        wall = end - (self.last_end if self.last_end is not None else self.t0 - self.wait)
        rest = wall - self.wait - self.fwd_bwd - self.optimizer
        u = {"phase": self.phase(len(self.updates)), "words": sum(int(s.get("ntokens", 0)) for s in samples if s),
             "wall_s": wall, "wait_s": self.wait, "fwd_bwd_s": self.fwd_bwd, "optimizer_s": self.optimizer,
             "bookkeeping_s": rest, "peak_bytes": peak, "skipped": out is None,
             "loss": float(out["loss"]) if isinstance(out, dict) and "loss" in out else None}
        if self.syncs is not None:
            u["syncs"] = dict(self.syncs.counts)
        if self.prof is not None:
            self.prof.stop()
            events, self.prof = profiler_events(self.prof, self.cuda), None
            summary = kernel_summary(events)
            u.update(busy_s=summary["busy_s"], kernels=summary["kernels"])
            self.events += events
        self.updates.append(u)
        self.wait = 0.0
        if self.done:
            self.meter.close()
        self.last_end = time.perf_counter()  # the window's own work is charged to no update

    def record(self) -> dict:
        """The run's per-update records and their summary."""
        timed = [u for u in self.updates if u["phase"] == "timed"]
        prof = [u for u in self.updates if u["phase"] == "profiled"]
        words, wall = sum(u["words"] for u in timed), sum(u["wall_s"] for u in timed)
        med = lambda us, k: statistics.median(u[k] for u in us) if us else None  # noqa: E731
        step = med(timed, "wall_s")
        busy = med(prof, "busy_s")
        return {**self.shape, "activity": "cuda" if self.cuda else "cpu", "wps": words / wall if wall else None,
                "words_per_update": words / len(timed) if timed else None, "step_s": step,
                **{k: med(timed, k) for k in HOST}, "peak_bytes": max((u["peak_bytes"] for u in timed), default=None),
                "busy_s": busy, "kernels": med(prof, "kernels"),
                "syncs": statistics.median(sum(u["syncs"].values()) for u in timed) if timed and "syncs" in timed[0]
                else None,
                "busy_unprofiled": busy / step if busy is not None and step else None,
                "busy_profiled": busy / med(prof, "wall_s") if busy is not None else None,
                "top_kernels": kernel_summary(self.events)["top_kernels"], "updates": self.updates}


def compile_layers(model, backend: str) -> int:
    """Replace every encoder and decoder layer of ``model`` (fairseq's, or a wrapper's ``.module``) by
    ``torch.compile(layer, backend=backend, dynamic=True)`` (the same parameters); returns how many. Not a default:
    a benchmark option until a GPU measures it."""
    import torch

    model = getattr(model, "module", model)
    n = 0
    for side in (model.encoder, model.decoder):
        for i, layer in enumerate(side.layers):
            side.layers[i] = torch.compile(layer, backend=backend, dynamic=True)
            n += 1
    return n


_CURRENT = []  # the window of the run in progress (fairseq is patched once per process)


def install(window: Window) -> None:
    """Wrap fairseq's ``Trainer.train_step`` and ``GroupedIterator.__next__`` once per process (they measure for
    ``_CURRENT[0]`` when it is set), and make ``window`` the current one."""
    from fairseq import trainer as fairseq_trainer
    from fairseq.data import iterators

    first = not _CURRENT
    _CURRENT[:] = [window]
    if not first:
        return
    original, grouped_next = fairseq_trainer.Trainer.train_step, iterators.GroupedIterator.__next__

    def train_step(self, samples, raise_oom=False):
        w = _CURRENT[0]
        if w is None or w.done:
            return original(self, samples, raise_oom=raise_oom)
        w.begin(self)
        out = original(self, samples, raise_oom=raise_oom)
        w.end(samples, out)
        return out

    def waited(seconds):
        if _CURRENT[0] is not None:
            _CURRENT[0].wait += seconds

    fairseq_trainer.Trainer.train_step = train_step
    iterators.GroupedIterator.__next__ = _common.timing(grouped_next, waited)


def run_in_process(argv, warmup: int, timed: int, profiled: int, cuda: bool, count_syncs: bool = False,
                   compile_backend: str = None) -> dict:
    """One fairseq-train run (``argv``: its arguments) in this process under a Window; returns its record. Raises
    RuntimeError when training ends before the window closes."""
    import torch

    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    window = Window(warmup, timed, profiled, cuda, count_syncs, compile_backend)
    install(window)
    from fairseq_cli import train

    saved = sys.argv
    sys.argv = ["fairseq-train", *argv]
    try:
        train.cli_main()
    finally:
        sys.argv = saved
        _CURRENT[0] = None
        window.meter.close()
    if not window.done:
        raise RuntimeError(f"train-speed: training ended after {len(window.updates)} updates, before the window's "
                           f"{warmup + timed + profiled} (too little data for the split?)")
    return window.record()


# ------------------------------------------------------------------------------------------ rows and commands
def parse_row(spec: str, size: str, names, sizes) -> list:
    """``PE[:IMPL][/SIZE][@SPLIT]`` -> [(pe, impl, size, split)] (``all``: one per name). Raises ValueError."""
    from pe_plugin.models.pe_transformer import ATTENTION_IMPLS

    rest, _, split = spec.partition("@")
    rest, _, row_size = rest.partition("/")
    pe, _, impl = rest.partition(":")
    split, row_size, impl = split or "auto", row_size or size, impl or "auto"
    if row_size not in sizes:
        raise ValueError(f"row {spec!r}: size {row_size!r} is not one of {', '.join(sizes)}")
    if impl not in ATTENTION_IMPLS:
        raise ValueError(f"row {spec!r}: impl {impl!r} is not one of {', '.join(ATTENTION_IMPLS)}")
    pes = list(names) if pe == "all" else [pe]
    for p in pes:
        if p not in names:
            raise ValueError(f"row {spec!r}: {p!r} is not one of {', '.join(names)} (or all)")
        if p == STOCK and impl != "auto":
            raise ValueError(f"row {spec!r}: stock fairseq has no --pe-attention-impl")
    if split != "auto":
        m, x, f = split.lower().partition("x")
        if not (x and m.isdigit() and f.isdigit()):
            raise ValueError(f"row {spec!r}: split {split!r} is not MAXTOKENSxUPDATEFREQ (e.g. 4096x8) or auto")
        split = (int(m), int(f))
    return [(p, impl, row_size, split) for p in pes]


def resolve_split(split, size: str, tokens: int, recipe_max: int, device: str) -> tuple:
    """(max_tokens, update_freq, how) of a row's split; ``auto``: pe-train's choice on this machine."""
    from ..recipes import batching

    if split != "auto":
        m, f = split
        if m * f != tokens:
            raise ValueError(f"split {m}x{f} is {m * f:,} tokens per update, not {tokens:,}")
        return m, f, "given"
    memory = (lambda: batching.device_memory()) if device == "cuda" else (lambda: None)
    plan, choice = batching.choose_plan(tokens, 1, "auto", size, recipe_max, memory=memory)
    return plan.max_tokens, plan.update_freq, f"auto ({choice.how}: {choice.note})"


def train_argv(pe: str, size: str, args, device: str, fp16: bool, impl: str = "auto", split=None) -> list:
    """The fairseq-train arguments of one run: ``pe-train PE --recipe R --pair P --size S``'s (pe_tools/recipes/
    train.py, micro-batch ``split[0]``, default ``args.max_tokens`` or the recipe's), SAPE's with fairseq's
    ``transformer_<arch>`` for ``stock``, then only what a benchmark adds (see the module). ``args``: data, recipe,
    pair, max_update and extra (max_tokens, tokens_per_update optional)."""
    from ..fairseq_plugin import CPU_FP16_FLAGS
    from ..recipes import load_table
    from ..recipes import train as pe_train

    table, pair = load_table(args.recipe), getattr(args, "pair", "en-de")
    m = split[0] if split else getattr(args, "max_tokens", None)
    save = getattr(args, "save_dir", None) or tempfile.mkdtemp(prefix="pe_bench_")  # --no-save: it stays empty
    argv = pe_train.train_argv(table, BASELINE if pe == STOCK else pe, pair, size, 1, args.data, Path(save),
                               extra=["--cpu"] * (device == "cpu"), max_tokens=m)
    if pe == STOCK:  # fairseq's own transformer: no plugin
        k = argv.index("--user-dir")
        argv[k:k + 2] = []
        argv[argv.index("--arch") + 1] = "transformer_" + pe_train.size_entry(table, size)["arch"][pair]
    ours = ["--max-update", str(args.max_update), "--no-save", "--disable-validation"]
    if split:
        ours += ["--max-tokens", str(split[0]), "--update-freq", str(split[1])]
    if impl != "auto":
        ours += ["--pe-attention-impl", impl]
    half = (["--fp16"] if device == "cuda" else CPU_FP16_FLAGS) if fp16 else []
    flags = pe_train.merge_flags([a for a in argv[1:] if a != "--fp16"], ours, half)  # ours replace the recipe's
    return [argv[0], *flags, *args.extra]


def recipe_tokens(args, size: str) -> tuple:
    """(tokens per update, --max-tokens) of the recipe's command at ``size``."""
    from ..recipes import batching, load_table
    from ..recipes import train as pe_train

    table = load_table(args.recipe)
    entry = table["method"].get(BASELINE, {"flags": []})
    b = batching.recipe_batch(pe_train.merge_flags(table["common"]["flags"], pe_train.size_entry(table, size)["flags"],
                                                   entry["flags"]))
    return b.tokens_per_update, b.max_tokens


# ------------------------------------------------------------------------------------------ the report
def label(pe, impl, size, m, f) -> str:
    return f"{pe}{'' if impl == 'auto' else ':' + impl}/{size}@{m}x{f}"


def round_ratios(ms: list) -> list:
    """Per-run results with their ratios to SAPE (same size, split and round, impl auto) and to the same encoding's
    first split (same round)."""
    rows = [dict({k: v for k, v in m.items() if k not in ("updates", "key")}, round=m["key"][-1]) for m in ms]
    add_ratios(rows, {"step_s": "step_to_sape", "peak_bytes": "peak_to_sape", "wps": "wps_to_sape"},
               lambda r: (r["size"], r["max_tokens"], r["update_freq_n"], r["round"]),
               lambda r: r["pe"] == BASELINE and r["impl"] == "auto")
    firsts = firsts_of(rows)
    add_ratios(rows, {"wps": "wps_to_first_split"}, lambda r: (r["pe"], r["impl"], r["size"], r["round"]),
               lambda r: r["split"] == firsts[r["pe"], r["impl"], r["size"]])
    return rows


GOAL_FIGURES = {"speedup": ("wps_to_first_split", True), "busy": ("busy_unprofiled", True),
                "step": ("step_to_sape", False), "peak": ("peak_to_sape", False)}
FIGURES = ("wps", "step_s", *HOST, "peak_bytes", "busy_unprofiled", "kernels", "syncs", "step_to_sape", "peak_to_sape",
           "wps_to_sape", "wps_to_first_split")


def summarise(runs: list, goals: dict) -> list:
    """One result per row: the median and spread over its rounds of every figure and ratio, and the goals' verdicts
    (speedup for rows that are not their encoding's first split, busy for SAPE's rows, step and peak for the other
    encodings)."""
    results = []
    for res in over_rounds(runs, "row", ("row", "pe", "impl", "size", "split", "split_how", "device_name", "command",
                                         "num_workers", "fp16", "activity"), FIGURES):
        first = res.pop("_runs")[0]
        res["top_kernels"] = first["top_kernels"]
        checks = {"speedup": first["split"] != firsts_of(runs)[first["pe"], first["impl"], first["size"]],
                  "busy": first["pe"] == BASELINE and first["impl"] == "auto",
                  "step": first["pe"] != BASELINE or first["impl"] != "auto",
                  "peak": first["pe"] != BASELINE or first["impl"] != "auto"}
        res["goals"] = {g: {"figure": GOAL_FIGURES[g][0], "bound": b,
                            "verdict": verdict(res.get(GOAL_FIGURES[g][0], {}), b, GOAL_FIGURES[g][1])}
                        for g, b in goals.items() if checks.get(g) and GOAL_FIGURES[g][0] in res}
        results.append(res)
    return results


def firsts_of(runs):
    firsts = {}
    for r in sorted(runs, key=lambda r: r["order"]):
        firsts.setdefault((r["pe"], r["impl"], r["size"]), r["split"])
    return firsts


def report_text(results, settings) -> str:
    def med(r, k, fmt, scale=1.0):
        return spread_cell(r.get(k), fmt, scale)

    headers = ["row", "words/s", "ms/update", "wait/fwd+bwd/opt/rest ms", "peak GB", "busy", "kernels", "step/sape",
               "peak/sape", "words/s to first split", "goals"]
    rows = [[r["row"], med(r, "wps", "{:,.0f}"), med(r, "step_s", "{:.1f}", 1e3),
             "/".join(med(r, k, "{:.1f}", 1e3).split(" ")[0] for k in HOST), med(r, "peak_bytes", "{:.2f}", 1e-9),
             med(r, "busy_unprofiled", "{:.0%}"), med(r, "kernels", "{:,.0f}"), med(r, "step_to_sape", "{:.3f}x"),
             med(r, "peak_to_sape", "{:.3f}x"), med(r, "wps_to_first_split", "{:.2f}x"),
             "; ".join(f"{g} {v['verdict']}" for g, v in r["goals"].items()) or "-"] for r in results]
    s = settings
    return (f"fairseq-train as pe-train runs it (recipe {s['recipe']}, {s['tokens_per_update']:,} tokens per update), "
            f"{s['device']} ({s['device_name']}), torch {s['torch']}, {s['rounds']} round(s), order rotated each round; "
            f"{s['warmup']} warm-up, {s['timed']} timed and {s['profiled']} profiled updates a run. Each cell: the "
            "median over the rounds (lowest-highest); ratios are taken within a round. busy = the device's busy time "
            "per profiled update over the timed time per update"
            + ("" if s["device"] == "cuda" else " (CPU operators: a rehearsal, not a GPU figure)")
            + "; peak = the largest per-update peak of the timed updates (CUDA allocated, or the CPU's RSS high-water "
            "mark)." + (f" Goals: {json.dumps(s['goals'])}; within noise = the spread covers the bound." if s["goals"]
                        else "") + "\n\n" + markdown_table(headers, rows) + "\n")


# ------------------------------------------------------------------------------------------ the command
def add_args(parser):
    from ..recipes import recipe_names

    parser.add_argument("--data", required=True, help="a fairseq-preprocess'd folder (pe-bench wmt-corpus writes one)")
    parser.add_argument("--rows", nargs="+", default=["all"], metavar="PE[:IMPL][/SIZE][@SPLIT]",
                        help="rows (default: all, at the recipe's split on this machine)")
    parser.add_argument("--recipe", choices=recipe_names("methods"), default="wmt14",
                        help="the recipe whose pe-train command each row runs (default: wmt14)")
    parser.add_argument("--pair", default="en-de", help="the recipe's language pair (default: en-de)")
    parser.add_argument("--size", default="base", help="the rows' default size, one of the recipe's (default: base)")
    parser.add_argument("--tokens-per-update", type=int_at_least(1),
                        help="max_tokens x update_freq of every row (default: the recipe's)")
    add_device_arg(parser)
    parser.add_argument("--fp16", dest="fp16", action="store_true", default=None,
                        help="fp16 off CUDA too (with --fp16-no-flatten-grads --fp16-init-scale 4); on CUDA pe-train's "
                             "command has --fp16 already")
    add_counts(parser, [("--warmup", 0, 3, "updates before anything is measured"), ("--timed", 1, 8, "updates timed"),
                        ("--profiled", 1, 2, "updates under the profiler"), ("--rounds", 1, 3, "rounds")])
    parser.add_argument("--goals", help="a JSON of bounds (speedup, busy, step, peak) the report checks")
    parser.add_argument("--compile", nargs="?", const="inductor", metavar="BACKEND",
                        help="torch.compile every encoder and decoder layer (default backend: inductor); a "
                             "benchmark option, not the recipe's")
    parser.add_argument("--count-syncs", action="store_true",
                        help="count each update's host syncs by op (a dispatch mode: slows the step; not for timing)")
    parser.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                        help="more fairseq-train arguments, after everything else (give it last)")
    add_output_args(parser, "train_speed")


def run(args) -> int:
    with _common.quiet_fairseq():
        return measure(args)


def measure(args) -> int:
    from pe_plugin.encodings import PE_REGISTRY

    from ..recipes import load_table

    if not any(Path(args.data).glob("dict.*.txt")):
        return fail(f"--data {args.data}: no fairseq dictionary (dict.*.txt) there; pe-bench wmt-corpus --out DIR "
                    f"writes one")
    try:
        device = resolve_device(args.device)
        sizes = list(load_table(args.recipe)["size"])
        names = [*PE_REGISTRY, STOCK]
        specs = [row for spec in args.rows for row in parse_row(spec, args.size, names, sizes)]
        splits, rows = {}, []
        for pe, impl, size, split in specs:
            tokens, recipe_max = recipe_tokens(args, size)
            tokens = args.tokens_per_update or tokens
            if (size, split) not in splits:
                splits[size, split] = resolve_split(split, size, tokens, recipe_max, device)
            rows.append((pe, impl, size, splits[size, split]))
        goals = json.loads(Path(args.goals).read_text()) if args.goals else {}
    except (ValueError, OSError) as e:
        return fail(str(e))
    rows = list(dict.fromkeys(rows))
    labels = [label(pe, impl, size, m, f) for pe, impl, size, (m, f, _) in rows]
    by_label = dict(zip(labels, rows))
    fp16 = device == "cuda" if args.fp16 is None else args.fp16
    cuda = device == "cuda"
    env = machine(device)
    settings = dict(data=str(args.data), rows=args.rows, recipe=args.recipe, pair=args.pair, size=args.size,
                    tokens_per_update=args.tokens_per_update or recipe_tokens(args, args.size)[0], device=device,
                    device_name=env["device_name"], fp16=fp16, warmup=args.warmup, timed=args.timed,
                    profiled=args.profiled, rounds=args.rounds, goals=goals, extra=args.extra, torch=env["torch"],
                    cuda=env["cuda"])
    progress = Progress(args, "pe-bench train-speed", rotated(labels, args.rounds), settings, what="runs")
    started = time.time()
    settings.update(python=env["python"], started=progress.stored.get("settings", {}).get("started")
                    or time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)))

    def report():
        results = summarise(round_ratios(progress.measurements()), goals)
        return (dict(settings, seconds=round(time.time() - started, 1)), results,
                report_text(results, settings))

    progress.write = progress.writer(args, report, "Training speed: fairseq-train as pe-train runs it",
                                     csv_skip={"top_kernels"})
    longest = 0.0
    for key in progress.missing():
        row_label, k = key
        left = None if args.time_budget is None else args.time_budget - (time.monotonic() - progress.started)
        if left is not None and longest and left < longest:
            print(f"pe-bench train-speed: {left:.0f} s of the budget left, less than the longest run so far "
                  f"({longest:.0f} s); stopping", file=sys.stderr, flush=True)
            break
        pe, impl, size, (m, f, how) = by_label[row_label]
        print(f"[train-speed round {k}/{args.rounds}] {row_label}", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="pe_bench_") as save:
            ns = SimpleNamespace(data=args.data, recipe=args.recipe, pair=args.pair, extra=args.extra,
                                 max_update=args.warmup + args.timed + args.profiled, save_dir=save)
            argv = train_argv(pe, size, ns, device, fp16, impl, (m, f))
            try:
                record = run_in_process(argv, args.warmup, args.timed, args.profiled, cuda, args.count_syncs,
                                        args.compile)
            except RuntimeError as e:
                return fail(str(e))
        longest = max(longest, time.monotonic() - t0)
        progress.add(key, dict(record, row=row_label, pe=pe, impl=impl, size=size, split=f"{m}x{f}", split_how=how,
                               update_freq_n=f, order=labels.index(row_label), process_s=round(time.monotonic() - t0, 2),
                               device_name=settings["device_name"], command="fairseq-train " + " ".join(argv)))
        if progress.stop_now():
            break
    print("\n" + report()[2])
    progress.finish()
    return 0


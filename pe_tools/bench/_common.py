"""What every benchmark of pe-bench shares: the one timer (``timed``), the one runner of a measurement in a fresh
interpreter (``run_isolated``), memory on a CPU (the peak RSS and its reset), the one kernel summary
(``kernel_summary``), the one ratio function (``add_ratios``), the medians and spreads of rounds (``spread``,
``verdict``, ``rotated``) and the shared ``--device`` option. The one JSON writer is ``_partial_runs.write_outputs``.
"""
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Dict

_RESULT = "@@bench-result@@"
TOP = 12  # kernels kept by name in a kernel summary


class UsageError(ValueError):
    """A benchmark cannot run as asked (pe-bench prints the message and exits with status 2)."""


def sync(cuda: bool) -> None:
    if cuda:
        import torch

        torch.cuda.synchronize()


def timed(fn, cuda: bool = False):
    """(wall seconds, process CPU seconds, result) of one ``fn()``, CUDA synchronised at both ends with ``cuda``."""
    sync(cuda)
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    sync(cuda)
    return time.perf_counter() - t0, time.process_time() - c0, out


def timing(fn, add):
    """``fn`` wrapped so that the wall seconds of each call go to ``add(seconds)``, whether it returns or raises."""
    def wrapped(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            add(time.perf_counter() - t0)

    return wrapped


def op_mode(on_op):
    """A torch dispatch mode that runs every ATen op dispatched inside it, then calls ``on_op(func, args, kwargs,
    out)``: what counts a step's ops (cost) and its host syncs (train-speed)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            on_op(func, args, kwargs, out)
            return out

    return Ops()


QUIET_LOGGERS = ("fairseq", "fairseq_cli", "train", "pe_plugin")  # a model summary and config a run: noise here


@contextlib.contextmanager
def quiet_fairseq():
    """QUIET_LOGGERS at WARNING inside, their levels restored after: a benchmark may share its process with other
    work (the tests, the GPU window's steps), whose fairseq logging must stay as it was."""
    import logging

    levels = {name: logging.getLogger(name).level for name in QUIET_LOGGERS}
    try:
        for name in levels:
            logging.getLogger(name).setLevel(logging.WARNING)
        yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def current_rss_bytes() -> int:
    """Resident set size of this process now (Linux /proc; elsewhere the peak so far)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except OSError:
        return peak_rss_bytes()


def peak_rss_bytes() -> int:
    """Peak resident set size of this process since it started or since ``reset_peak_rss()``.

    Linux: VmHWM of /proc/self/status. Not ``ru_maxrss``: that one starts a child at its parent's RSS at
    fork time, so a child of a big parent would report the parent's size as its own peak."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB on Linux


def reset_peak_rss() -> bool:
    """Lower the peak RSS to the current RSS (Linux >= 4.0: "5" into /proc/self/clear_refs); False where that is
    not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def run_isolated(module: str, func: str, kwargs: Dict, timeout: float = None, env: Dict = None) -> Dict:
    """``module.func(**kwargs)`` in a fresh interpreter (``module`` an importable module, e.g.
    ``pe_tools.bench.models``), with ``env`` added to its environment; returns its JSON-serialisable result.
    Raises with the child's output on failure."""
    code = (f"import importlib, json, sys; r = getattr(importlib.import_module({module!r}), {func!r})"
            f"(**json.loads(sys.argv[1])); print({_RESULT!r} + json.dumps(r), flush=True)")
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(kwargs)], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout,
                          env=dict(os.environ, **env) if env else None)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(_RESULT):
            return json.loads(line[len(_RESULT):])
    raise RuntimeError(f"{module}.{func}({kwargs}) failed (exit {proc.returncode}):\n{proc.stdout[-4000:]}")


# ------------------------------------------------------------------------------------------ device activity
def union_seconds(intervals) -> float:
    """The length of the union of ``(start, end)`` intervals (any unit; seconds here)."""
    total, reached = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reached:
            total, reached = total + end - max(start, reached), end
    return total


def profiler_events(prof, device: bool) -> list:
    """(name, start_s, duration_s) of a torch.profiler's device activities (``device``: kernels, copies, memsets)
    or CPU operators."""
    from torch.autograd import DeviceType

    want = DeviceType.CUDA if device else DeviceType.CPU
    try:  # the raw kineto events: far cheaper than prof.events() for the ~10^4 activities of a step
        raw = prof.profiler.kineto_results.events()
        return [(e.name(), e.start_ns() / 1e9, e.duration_ns() / 1e9) for e in raw if e.device_type() == want]
    except AttributeError:
        return [(e.name, e.time_range.start / 1e6, e.time_range.elapsed_us() / 1e6) for e in prof.events()
                if e.device_type == want]


def kernel_summary(events, top: int = TOP) -> dict:
    """The figures of a profiled stretch from its ``events`` (name, start_s, duration_s): ``busy_s`` the length of
    the union of their intervals (the time the device was doing something; overlapping streams count once),
    ``kernel_s`` their summed durations, ``kernels`` their number, ``top_kernels`` [name, count, seconds] of the
    ``top`` longest in all by name (ties by name)."""
    total, count = {}, {}
    for name, _, d in events:
        total[name] = total.get(name, 0.0) + d
        count[name] = count.get(name, 0) + 1
    ranked = sorted(total, key=lambda n: (-total[n], n))[:top]
    return {"busy_s": union_seconds([(s, s + d) for _, s, d in events]), "kernel_s": sum(d for _, _, d in events),
            "kernels": len(events), "top_kernels": [[n, count[n], total[n]] for n in ranked]}


# ------------------------------------------------------------------------------------------ ratios and rounds
def add_ratios(results, figures: Dict[str, str], group, reference) -> None:
    """The one ratio function: for each result r and each ``figures`` item (figure -> ratio key), r[ratio key] =
    r[figure] / ref[figure], ref the first result of r's ``group(r)`` for which ``reference(ref)`` holds (None where
    it is absent, as in a partial run, or its figure is 0); a figure r lacks gets no ratio."""
    refs = {}
    for r in results:
        if reference(r):
            refs.setdefault(group(r), r)
    for r in results:
        ref = refs.get(group(r))
        for figure, ratio in figures.items():
            if figure in r:
                r[ratio] = r[figure] / ref[figure] if ref and ref.get(figure) else None


def times(v, digits: int = 2) -> str:
    """A ratio as a table cell: ``1.23x``, n/a for None."""
    return "n/a" if v is None else f"{v:.{digits}f}x"


def tables(settings, results, headers, row, note=lambda first: "") -> list:
    """One markdown table per size and length of ``settings`` that has results (a partial run may lack some), under
    a caption naming the architectures, the batch and ``note(first row)``."""
    from ..naming import SUFFIX_OF_CLASS
    from ..tables import markdown_table

    blocks = []
    for size in settings["sizes"]:
        for length in settings["lengths"]:
            group = [r for r in results if r["size"] == size and r["length"] == length]
            if group:
                first, suffix = group[0], SUFFIX_OF_CLASS[size]
                stock = f", stock = transformer_{suffix}" if "stock" in settings["encodings"] else ""
                blocks.append(f"{size} (transformer_<pe>_{suffix}{stock}), L={length}: B={first['batch']} sentences, "
                              f"{first['src_tokens']} source and {first['tokens']} target tokens{note(first)}\n\n"
                              + markdown_table(headers, [row(r) for r in group]))
    return blocks


def spread(values) -> dict:
    """Median, lowest and highest of the per-round ``values`` (None left out); {} when there is none."""
    values = [v for v in values if v is not None]
    if not values:
        return {}
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def over_rounds(runs, row: str, keep, figures) -> list:
    """One result per ``row`` value of the per-round ``runs``, in their order: the first run's ``keep`` fields, the
    number of ``rounds`` and the ``spread`` of each of ``figures`` that some run has; with ``_runs``, its runs."""
    by_row = {}
    for r in runs:
        by_row.setdefault(r[row], []).append(r)
    results = []
    for rs in by_row.values():
        res = {k: rs[0][k] for k in keep}
        res["rounds"] = len(rs)
        for fig in figures:
            s = spread(r.get(fig) for r in rs)
            if s:
                res[fig] = s
        results.append(dict(res, _runs=rs))
    return results


def spread_cell(s: dict, fmt: str, scale: float = 1.0) -> str:
    """A ``spread`` as a table cell: the median in ``fmt`` (times ``scale``), then (lowest-highest) over two or more
    rounds; n/a for none."""
    if not s:
        return "n/a"
    text = fmt.format(s["median"] * scale)
    return text if s["n"] < 2 else f"{text} ({fmt.format(s['min'] * scale)}-{fmt.format(s['max'] * scale)})"


def verdict(s: dict, bound: float, at_least: bool) -> str:
    """What a ratio's rounds say of a goal ``bound`` (``at_least``: the ratio must reach it, else stay under it):
    "meets" when every round does, "misses" when none does, "within noise" when the spread covers the bound."""
    if not s:
        return "n/a"
    ok = [v >= bound if at_least else v <= bound for v in (s["min"], s["max"])]
    return "meets" if all(ok) else "within noise" if any(ok) else "misses"


def rotated(keys: list, rounds: int) -> list:
    """(key, round) in the order the rounds run them: every key once a round, round k starting k keys later."""
    n = len(keys)
    return [(keys[(i + k) % n], k + 1) for k in range(rounds) for i in range(n)]


def add_device_arg(parser) -> None:
    """The shared ``--device`` option (``resolve_device`` reads it)."""
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                        help="where the models run (default: auto = cuda when torch sees it)")


def machine(device: str) -> dict:
    """What every benchmark's settings record of the machine: the device and its name (the GPU's, or the CPU
    model), torch, the CUDA torch was built with, Python and the platform."""
    import platform

    import torch

    from ..machine import cpu_name

    return dict(device=device, device_name=torch.cuda.get_device_name() if device == "cuda" else cpu_name(),
                torch=torch.__version__, cuda=torch.version.cuda, python=platform.python_version(),
                platform=platform.platform())


def add_counts(parser, counts) -> None:
    """Integer options from (flag, lowest, default, help) rows."""
    from ..command_line import int_at_least

    for flag, low, default, text in counts:
        parser.add_argument(flag, type=int_at_least(low), default=default, help=f"{text} (default: {default})")


def resolve_device(requested: str) -> str:
    """``--device auto|cpu|cuda`` as a torch device name: auto is cuda where torch sees one. Raises UsageError when
    cuda is asked for and torch has none."""
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: CUDA is not available to torch here")
    return requested

"""What every benchmark of pe-bench shares: the one timer (``timed``, ``time_calls``), the one runner of a
measurement in a fresh interpreter (``run_isolated``), memory on a CPU (the peak RSS and its reset), the one kernel
summary (``kernel_summary``), the one ratio function (``add_ratios``), the medians and spreads of rounds
(``spread``, ``verdict``, ``rotated``) and the shared ``--device`` option. The one JSON writer is
``_partial_runs.Progress.writer``.

Peak memory on CPU is the peak resident set size, which the kernel only ever raises (on Linux
``reset_peak_rss()`` lowers it to the current RSS). To compare candidates, measure each one in a fresh
interpreter with ``run_isolated``; inside it, ``current_rss_bytes()`` before the work and ``peak_rss_bytes()``
after it bound what the work added (``peak_memory_bytes`` does both).
"""
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Dict, List

_RESULT = "@@bench-result@@"
TOP = 12  # kernels kept by name in a kernel summary


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


def time_calls(fn, repeats: int = 10, warmup: int = 2, cuda: bool = None, cpu: list = None) -> List[float]:
    """Wall seconds of each of ``repeats`` runs of ``fn()`` after ``warmup`` runs (``timed``); ``cuda``: default
    when CUDA is available; ``cpu``: a list that receives each timed run's process CPU seconds."""
    if cuda is None:
        import torch

        cuda = torch.cuda.is_available()
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        wall, proc, _ = timed(fn, cuda)
        times.append(wall)
        if cpu is not None:
            cpu.append(proc)
    return times


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


def peak_memory_bytes(fn, cuda: bool = None) -> int:
    """Peak memory of one ``fn()``: with ``cuda`` (default: when CUDA is available) CUDA's peak allocation above
    what was allocated before, else the growth of the peak resident set of this process (a lower bound unless this
    process is fresh: see ``run_isolated``)."""
    import torch

    gc.collect()
    if torch.cuda.is_available() if cuda is None else cuda:
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fn()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base
    before = current_rss_bytes() if reset_peak_rss() else peak_rss_bytes()
    fn()
    return peak_rss_bytes() - before


def run_isolated(module: str, func: str, kwargs: Dict, timeout: float = None, env: Dict = None) -> Dict:
    """``module.func(**kwargs)`` in a fresh interpreter (``module`` an importable module, e.g.
    ``pe_tools.bench.models.measure``), with ``env`` added to its environment; returns its JSON-serialisable result.
    Raises with the child's output on failure."""
    code = (
        "import json, sys; import importlib; "
        f"r = getattr(importlib.import_module({module!r}), {func!r})(**json.loads(sys.argv[1])); "
        f"print({_RESULT!r} + json.dumps(r), flush=True)"
    )
    argv = [sys.executable, "-c", code, json.dumps(kwargs)]
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                          env=dict(os.environ, **env) if env else None)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(_RESULT):
            return json.loads(line[len(_RESULT):])
    raise RuntimeError(f"{module}.{func}({kwargs}) failed (exit {proc.returncode}):\n{proc.stdout[-4000:]}")


# ------------------------------------------------------------------------------------------ device activity
def union_seconds(intervals) -> float:
    """The length of the union of ``(start, end)`` intervals (any unit; seconds here)."""
    total, cur_start, cur_end = 0.0, None, None
    for start, end in sorted(intervals):
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        elif end > cur_end:
            cur_end = end
    if cur_end is not None:
        total += cur_end - cur_start
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
def add_ratios(results, figures: Dict[str, str], group, reference, suffix: str = "") -> None:
    """The one ratio function: for each result r and each ``figures`` item (figure -> ratio key), r[ratio key +
    suffix] = r[figure] / ref[figure], ref the result of r's ``group(r)`` for which ``reference(ref)`` holds (None
    where it is absent, as in a partial run, its figure is 0 or r lacks the figure)."""
    refs = {}
    for r in results:
        if reference(r):
            refs.setdefault(group(r), r)
    for r in results:
        ref = refs.get(group(r))
        for figure, ratio in figures.items():
            if figure in r:
                r[ratio + suffix] = r[figure] / ref[figure] if ref and ref.get(figure) else None


def spread(values) -> dict:
    """Median, lowest and highest of the per-round ``values`` (None left out); {} when there is none."""
    values = [v for v in values if v is not None]
    if not values:
        return {}
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def verdict(s: dict, bound: float, at_least: bool) -> str:
    """What a ratio's rounds say of a goal ``bound`` (``at_least``: the ratio must reach it, else stay under it):
    "meets" when every round does, "misses" when none does, "within noise" when the spread covers the bound."""
    if not s:
        return "n/a"
    ok = (lambda v: v >= bound) if at_least else (lambda v: v <= bound)
    if ok(s["min"]) and ok(s["max"]):
        return "meets"
    if not ok(s["min"]) and not ok(s["max"]):
        return "misses"
    return "within noise"


def rotated(keys: list, rounds: int) -> list:
    """(key, round) in the order the rounds run them: every key once a round, round k starting k keys later."""
    n = len(keys)
    return [(keys[(i + k) % n], k + 1) for k in range(rounds) for i in range(n)]


def add_device_arg(parser) -> None:
    """The shared ``--device`` option (``_partial_runs.resolve_device`` reads it)."""
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                        help="auto: cuda when torch sees it (default)")

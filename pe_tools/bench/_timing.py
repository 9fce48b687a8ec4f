"""Shared measurement helpers for the benchmarks: wall times of a callable, peak memory and isolated runs (their
markdown tables: pe_tools/tables.py).

Peak memory on CPU is the peak resident set size, which the kernel only ever raises (on Linux
``reset_peak_rss()`` lowers it to the current RSS). To compare candidates, measure each one in a fresh
interpreter with ``run_isolated``; inside it, ``current_rss_bytes()`` before the work and ``peak_rss_bytes()``
after it bound what the work added (``peak_memory_bytes`` does both).
"""
import gc
import json
import os
import resource
import subprocess
import sys
import time
from typing import Dict, List

import torch

_RESULT = "@@bench-result@@"


def time_calls(fn, repeats: int = 10, warmup: int = 2, cuda: bool = None) -> List[float]:
    """Seconds of each of ``repeats`` runs of ``fn()`` after ``warmup`` runs; ``cuda``: synchronise CUDA around
    each (default: when CUDA is available)."""
    cuda = torch.cuda.is_available() if cuda is None else cuda
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
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
    """Lower the peak RSS to the current RSS (Linux >= 4.0); False where that is not possible."""
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

"""Measuring one (size, encoding) in a fresh interpreter: training-step times, the training peak memory, forward
times; and the summary of its rounds, as ratios to SAPE (docs/benchmarks.md §Model benchmark)."""
import statistics
import time

from ...common import cpu_name
from ...naming import BASELINE, SUFFIX_OF_CLASS as SIZES, arch_name
from .._timing import current_rss_bytes, peak_rss_bytes, run_isolated
from .build import build_model, random_batch, recipe_flags

# the memory interpreter's environment on a CPU (docs/benchmarks.md §CPU memory): glibc only, ignored elsewhere
CPU_MEMORY_ENV = {"MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}
# raw figure -> its ratio to SAPE within the same size
RATIOS = {"forward_s": "forward_ratio", "forward_median_s": "forward_median_ratio",
          "step_s": "step_ratio", "step_median_s": "step_median_ratio", "step_cpu_s": "cpu_ratio",
          "peak_bytes": "peak_ratio", "step_bytes": "step_mem_ratio"}


def measure(pe: str, size: str, batch: int, length: int, vocab: int, steps: int, warmup: int, forward_passes: int,
            threads: int, device: str, recipe: str = "none", memory_only: bool = False):
    """One encoding at one size, in this (fresh) process: parameter counts, step and forward times, memory;
    ``memory_only``: the warm-up and one step, then only the memory figures."""
    import gc

    import torch
    import torch.nn.functional as F

    from pe_plugin.models.validation import pe_parameter_count

    if threads:
        torch.set_num_threads(threads)
    cuda = device == "cuda"
    model, args = build_model(pe, size, vocab, recipe, device)
    src, lengths, prev, target = random_batch(batch, length, vocab, device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    # 1. training steps; memory baseline taken first, after the model and batch exist
    def step():
        opt.zero_grad(set_to_none=True)
        logits, _ = model(src, lengths, prev)  # (B, T, V)
        F.cross_entropy(logits.view(-1, logits.size(-1)), target.view(-1)).backward()
        opt.step()

    model.train()
    gc.collect()
    if cuda:
        sync()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    else:
        before = current_rss_bytes()
    for _ in range(warmup):
        step()
    wall, cpu = [], []
    for _ in range(1 if memory_only else steps):
        sync()
        t0, c0 = time.perf_counter(), time.process_time()
        step()
        sync()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)

    # 2. the training peak, read before any forward pass could raise it
    peak = torch.cuda.max_memory_allocated() if cuda else peak_rss_bytes()
    if memory_only:
        return {"peak_bytes": peak, "step_bytes": peak - before}

    # 3. forward passes: total of forward_passes consecutive passes in eval mode, no autograd graph
    model.eval()
    with torch.no_grad():
        for _ in range(warmup):
            model(src, lengths, prev)
        sync()
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(forward_passes):
            model(src, lengths, prev)  # (B, T, V) logits, discarded
        sync()
        forward, forward_cpu = time.perf_counter() - t0, time.process_time() - c0

    return {
        "pe": pe, "size": size, "arch": arch_name(pe, SIZES[size]), "flags": recipe_flags(recipe, pe),
        "max_positions": [args.max_source_positions, args.max_target_positions],
        "params": sum(p.numel() for p in model.parameters()), "pe_params": pe_parameter_count(model),
        "step_wall_s": wall, "step_cpu_s": cpu, "forward_s": forward, "forward_cpu_s": forward_cpu,
        "peak_bytes": peak, "step_bytes": peak - before,
        "memory_kind": "cuda-allocated" if cuda else "cpu-rss", "device": device,
        "device_name": torch.cuda.get_device_name() if cuda else cpu_name(),
        "threads": torch.get_num_threads(), "torch": torch.__version__,
    }


def measure_isolated(pe: str, size: str, kwargs: dict) -> dict:
    """``measure`` in a fresh interpreter; on a CPU its memory figures come from a second one under
    ``CPU_MEMORY_ENV`` and its own (glibc's default allocator) are kept as ``malloc_default_*``."""
    result = run_isolated(__name__, "measure", dict(pe=pe, size=size, **kwargs))
    if result["memory_kind"] == "cpu-rss":
        memory = run_isolated(__name__, "measure", dict(pe=pe, size=size, **kwargs, memory_only=True),
                              env=CPU_MEMORY_ENV)
        result.update(malloc_default_peak_bytes=result["peak_bytes"], malloc_default_step_bytes=result["step_bytes"],
                      **memory)
    return result


def summarise(runs):
    """One result from the per-round measurements of one (size, encoding): fastest and median times, median
    memory; the raw per-round figures are kept under ``rounds``."""
    first = runs[0]
    r = {k: first[k] for k in ("pe", "size", "arch", "params", "pe_params", "memory_kind")}
    r["max_positions"] = first["max_positions"]  # (source, target): PosNet's and LAPE's L_max
    steps = [t for x in runs for t in x["step_wall_s"]]
    forwards = [x["forward_s"] for x in runs]
    r.update(
        forward_s=min(forwards), forward_median_s=statistics.median(forwards),
        forward_cpu_s=min(x["forward_cpu_s"] for x in runs),
        step_s=min(steps), step_median_s=statistics.median(steps),
        step_cpu_s=min(t for x in runs for t in x["step_cpu_s"]),
        peak_bytes=int(statistics.median(x["peak_bytes"] for x in runs)),
        step_bytes=int(statistics.median(x["step_bytes"] for x in runs)),
    )
    for key in ("malloc_default_peak_bytes", "malloc_default_step_bytes"):  # CPU only
        if key in first:
            r[key] = int(statistics.median(x[key] for x in runs))
    r["rounds"] = {k: [x[k] for x in runs] for k in ("forward_s", "step_wall_s", "peak_bytes", "step_bytes")}
    return r


def add_ratios(results):
    """ratio = figure / sape's figure, within each size (None where sape's figure is 0)."""
    for size in {r["size"] for r in results}:
        ref = next(r for r in results if r["size"] == size and r["pe"] == BASELINE)
        for r in results:
            if r["size"] == size:
                for key, ratio in RATIOS.items():
                    r[ratio] = r[key] / ref[key] if ref[key] else None

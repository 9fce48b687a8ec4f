"""Measuring one (size, length, encoding) in a fresh interpreter: training-step times, the training peak memory,
forward times; and the summary of its rounds, as ratios to SAPE (docs/benchmarks.md §Model benchmark)."""
import statistics

from ...machine import cpu_name
from ...naming import BASELINE
from .._common import current_rss_bytes, kernel_summary, peak_rss_bytes, profiler_events, run_isolated, spread, \
    sync as _sync, timed
from .build import PAD, build_model, build_optimizer, model_arch, padded_batch, pe_params, recipe_flags

# the memory interpreter's environment on a CPU (docs/benchmarks.md §CPU memory): glibc only, ignored elsewhere
CPU_MEMORY_ENV = {"MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}
# raw figure -> its ratio to SAPE within the same size and length
RATIOS = {"forward_s": "forward_ratio", "forward_median_s": "forward_median_ratio",
          "step_s": "step_ratio", "step_median_s": "step_median_ratio", "step_cpu_s": "cpu_ratio",
          "peak_bytes": "peak_ratio", "step_bytes": "step_mem_ratio",
          "kernel_s": "kernel_ratio", "kernels": "kernels_ratio"}  # the last two on CUDA only
# _common.add_ratios' group and reference: SAPE at the same size and length (older JSON without length: one length)
AGAINST_SAPE = (lambda r: (r["size"], r.get("length")), lambda r: r["pe"] == BASELINE)


def measure(pe: str, size: str, batch: int, length: int, vocab: int, steps: int, warmup: int, forward_passes: int,
            threads: int, device: str, recipe: str = "none", fp16: bool = False, memory_only: bool = False,
            built=None, impl: str = "auto"):
    """One encoding (or build.STOCK) at one size on one padded batch of ``batch`` sentences of at most ``length``
    tokens, in this (fresh) process: parameter counts, step and forward times, memory; ``memory_only``: the warm-up
    and one step, then only the memory figures. ``fp16``: the model in half precision and fairseq's fp16 step
    (build.build_optimizer; a step whose gradients overflow is skipped as fairseq's trainer skips it, and counted
    in ``fp16_overflows``). ``built``: (model on ``device``, its args) to measure instead of building one."""
    import gc

    import torch
    import torch.nn.functional as F

    if threads:
        torch.set_num_threads(threads)
    cuda = device == "cuda"
    model, args = built or build_model(pe, size, vocab, recipe, device, fp16=fp16, impl=impl)
    opt = build_optimizer(model, args, fp16)
    src, lengths, prev, target = padded_batch(batch, length, vocab, device)
    ntokens = int(target.ne(PAD).sum())
    overflows = 0

    def sync():
        _sync(cuda)

    # 1. training steps; memory baseline taken first, after the model, its optimizer and the batch exist
    def step():
        nonlocal overflows
        opt.zero_grad()  # torch's Adam: grads set to None; FP16Optimizer: fp16 grads None, fp32 ones zeroed
        logits, _ = model(src, lengths, prev)  # (B, T, V)
        # summed over the real target tokens, in fp32 (fairseq's criteria upcast the logits before log_softmax)
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), target.view(-1), ignore_index=PAD,
                               reduction="sum")
        if not fp16:
            (loss / ntokens).backward()
            opt.step()
            return
        try:  # fairseq's Trainer.train_step: backward of the scaled loss, grads / sample size, norm, step
            opt.backward(loss)
            opt.multiply_grads(1.0 / ntokens)
            opt.clip_grad_norm(0.0)  # no clipping; checks for overflow and updates the loss scale
            opt.step()
        except OverflowError:
            overflows += 1
            opt.zero_grad()

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
    wall, cpu, _ = zip(*[timed(step, cuda) for _ in range(1 if memory_only else steps)])

    # 2. the training peak, read before any forward pass could raise it
    peak = torch.cuda.max_memory_allocated() if cuda else peak_rss_bytes()
    if memory_only:
        return {"peak_bytes": peak, "step_bytes": peak - before}
    busy = device_activity(step) if cuda else {}

    # 3. forward passes: total of forward_passes consecutive passes in eval mode, no autograd graph
    model.eval()
    with torch.no_grad():
        for _ in range(warmup):
            model(src, lengths, prev)
        def forwards():
            for _ in range(forward_passes):
                model(src, lengths, prev)  # (B, T, V) logits, discarded

        forward, forward_cpu, _ = timed(forwards, cuda)

    master = getattr(opt, "fp32_params", [])  # fp16: a list, or on CUDA {device: one flat tensor}
    master = list(master.values()) if isinstance(master, dict) else list(master)
    return {
        "pe": pe, "size": size, "length": length, "batch": batch, "tokens": ntokens,
        "src_tokens": int(src.ne(PAD).sum()), "arch": model_arch(pe, size), "flags": recipe_flags(recipe, pe),
        "max_positions": [args.max_source_positions, args.max_target_positions],
        "params": sum(p.numel() for p in model.parameters()), "pe_params": pe_params(model, pe),
        "param_dtypes": sorted({str(p.dtype) for p in model.parameters()}),
        "master_dtypes": sorted({str(p.dtype) for p in master}), "fp16_overflows": overflows,
        "step_wall_s": list(wall), "step_cpu_s": list(cpu), "forward_s": forward, "forward_cpu_s": forward_cpu,
        "peak_bytes": peak, "step_bytes": peak - before, **busy,
        "memory_kind": "cuda-allocated" if cuda else "cpu-rss", "device": device,
        "device_name": torch.cuda.get_device_name() if cuda else cpu_name(),
        "threads": torch.get_num_threads(), "torch": torch.__version__, "cuda": torch.version.cuda,
    }


def device_activity(step) -> dict:
    """What the GPU itself did in one more training step, whatever the host's speed: ``kernel_s``, the summed
    durations of the device activities (kernels, copies, memsets) that torch.profiler (CUPTI) records, and
    ``kernels``, how many there were (each one a launch by the host). A base-size step of 4,096 tokens on an H100
    is host-bound (its wall time is several times its kernel time), so the wall time measures the host and these
    two measure the device. {} with ``kernel_error`` when the profiler cannot record the device."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        events = profiler_events(prof, device=True)
    except Exception as e:  # no CUPTI, or a profiler already running
        return {"kernel_error": f"{type(e).__name__}: {e}"}
    if not events:
        return {"kernel_error": "the profiler recorded no device activity"}
    k = kernel_summary(events)
    return {"kernel_s": k["kernel_s"], "kernels": k["kernels"], "top_kernels": k["top_kernels"]}


def measure_isolated(pe: str, size: str, kwargs: dict) -> dict:
    """``measure(pe, size, **kwargs)`` in a fresh interpreter; on a CPU its memory figures come from a second one
    under ``CPU_MEMORY_ENV`` and its own (glibc's default allocator) are kept as ``malloc_default_*``."""
    result = run_isolated(__name__, "measure", dict(pe=pe, size=size, **kwargs))
    if result["memory_kind"] == "cpu-rss":
        memory = run_isolated(__name__, "measure", dict(pe=pe, size=size, **kwargs, memory_only=True),
                              env=CPU_MEMORY_ENV)
        result.update(malloc_default_peak_bytes=result["peak_bytes"], malloc_default_step_bytes=result["step_bytes"],
                      **memory)
    return result


def measure_in_process(pe: str, size: str, kwargs: dict, cache: dict) -> dict:
    """``measure(pe, size, **kwargs)`` in this process (``--processes one``, the default on CUDA): the model is built
    once per (pe, size) and kept on the CPU in ``cache``; each measurement moves a copy of it to the device (fresh
    optimizer state, fp16 halving on the copy), so the device holds one model at a time. On CUDA the allocator's
    cache is emptied around each measurement, and the peak counter is reset inside ``measure``;
    ``leftover_bytes`` is what was still allocated before it (0 unless something of an earlier row survived)."""
    import copy
    import gc

    import torch

    device = kwargs["device"]
    if (pe, size) not in cache:
        model, args = build_model(pe, size, kwargs["vocab"], kwargs["recipe"], device, fp16=kwargs["fp16"],
                                  impl=kwargs.get("impl", "auto"))
        cache[pe, size] = (model.to("cpu"), args)
    model, args = cache[pe, size]
    gc.collect()
    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    leftover = torch.cuda.memory_allocated() if cuda else 0
    result = measure(pe, size, **kwargs, built=(copy.deepcopy(model).to(device), args))
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    result["leftover_bytes"] = leftover
    return result


def summarise(runs):
    """One result from the per-round measurements of one (size, length, encoding): fastest and median times,
    median memory; the raw per-round figures are kept under ``rounds``."""
    first = runs[0]
    r = {k: first[k] for k in ("pe", "size", "length", "batch", "tokens", "src_tokens", "arch", "params", "pe_params",
                               "memory_kind", "max_positions", "param_dtypes", "master_dtypes")}
    times = {"forward": [x["forward_s"] for x in runs], "step": [t for x in runs for t in x["step_wall_s"]]}
    for name, values in times.items():
        s = spread(values)
        r.update({f"{name}_s": s["min"], f"{name}_median_s": s["median"]})
    r.update(forward_cpu_s=min(x["forward_cpu_s"] for x in runs),
             step_cpu_s=min(t for x in runs for t in x["step_cpu_s"]))
    for key in ("peak_bytes", "step_bytes", "malloc_default_peak_bytes", "malloc_default_step_bytes"):  # CPU: malloc_*
        if key in first:
            r[key] = int(statistics.median(x[key] for x in runs))
    if all("kernel_s" in x for x in runs):  # CUDA: the device's own time, fastest round; launches, most of any round
        fastest = min(runs, key=lambda x: x["kernel_s"])
        r.update(kernel_s=fastest["kernel_s"], kernels=max(x["kernels"] for x in runs),
                 **{k: fastest[k] for k in ("top_kernels",) if k in fastest})  # (older results have none)
    if "leftover_bytes" in first:  # --processes one: allocated before the measurement began (0 expected)
        r["leftover_bytes"] = max(x["leftover_bytes"] for x in runs)
    r["fp16_overflows"] = sum(x["fp16_overflows"] for x in runs)  # skipped fp16 steps, warm-up ones included
    r["rounds"] = {k: [x[k] for x in runs] for k in ("forward_s", "step_wall_s", "peak_bytes", "step_bytes")}
    return r

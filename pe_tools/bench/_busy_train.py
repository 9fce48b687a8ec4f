"""Real ``fairseq-train`` with a measuring window: words per second, the GPU's busy fraction and peak memory.

    python -m pe_tools.bench._busy_train --json OUT.json --warmup 5 --timed 20 --profiled 4 -- FAIRSEQ-TRAIN ARGS

runs ``fairseq_cli.train`` in this process (its own command line, parser and training loop, untouched) with
``fairseq.trainer.Trainer.train_step`` wrapped to count updates. After ``--warmup`` updates (CUDA context, kernel
selection, the allocator's growth, the first loss-scale overflows):

- ``timed``: the next ``--timed`` updates without a profiler: their wall time (the device synchronised at both
  ends), target tokens (fairseq's ``ntokens``, its "words") and so words per second and updates per second;
- ``profiled``: the next ``--profiled`` updates under ``torch.profiler`` (CUPTI): the device's activities
  (kernels, copies, memsets) with their start and duration. ``busy_s`` is the length of the union of their
  intervals (time the device was doing something; overlapping streams count once), ``kernel_s`` their summed
  durations (as ``pe-bench models`` reports it), ``busy_fraction`` = busy_s / that stretch's wall time, and
  ``busy_fraction_unprofiled`` = busy_s per update / the timed stretch's wall time per update (the profiler's own
  cost to the host left out); ``top_kernels`` names where the time went.

It writes OUT.json (under a temporary name, renamed when whole) as soon as the window closes, with the peak memory
(``torch.cuda.max_memory_allocated`` and ``_reserved`` since the start; on a CPU the process's peak RSS) and the
update's shape as fairseq parsed it; training then goes on to ``--max-update`` (set it to warmup + timed +
profiled). ``--activity cpu`` profiles the CPU's operators instead (the CPU rehearsal: it exercises the same window
and arithmetic; its "busy fraction" is the operators' share of the host's time, not a GPU figure).
"""
import argparse
import json
import os
import sys
import time
from pathlib import Path

TOP = 12


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


def summarize(events, wall_s: float, updates: int, timed_wall_per_update=None, top: int = TOP) -> dict:
    """The figures of a profiled stretch from its device ``events``, each (name, start_s, duration_s)."""
    busy = union_seconds([(s, s + d) for _, s, d in events])
    total, count = {}, {}
    for name, _, d in events:
        total[name] = total.get(name, 0.0) + d
        count[name] = count.get(name, 0) + 1
    ranked = sorted(total, key=lambda n: (-total[n], n))[:top]
    out = {"updates": updates, "wall_s": wall_s, "busy_s": busy, "kernel_s": sum(d for _, _, d in events),
           "kernels": len(events), "busy_fraction": busy / wall_s if wall_s > 0 else None,
           "top_kernels": [[n, count[n], total[n]] for n in ranked]}
    if timed_wall_per_update:
        out["busy_fraction_unprofiled"] = busy / updates / timed_wall_per_update
    return out


def profiler_events(prof, device: bool) -> list:
    """(name, start_s, duration_s) of the profiler's device activities (``device``) or CPU operators."""
    from torch.autograd import DeviceType

    want = DeviceType.CUDA if device else DeviceType.CPU
    try:  # the raw kineto events: far cheaper than prof.events() for the ~10^5 activities of a stretch
        raw = prof.profiler.kineto_results.events()
        return [(e.name(), e.start_ns() / 1e9, e.duration_ns() / 1e9) for e in raw if e.device_type() == want]
    except AttributeError:
        return [(e.name, e.time_range.start / 1e6, e.time_range.elapsed_us() / 1e6) for e in prof.events()
                if e.device_type == want]


class Window:
    """Counts updates through the wrapped ``Trainer.train_step`` and measures the stretches (see the module)."""

    def __init__(self, out: Path, warmup: int, timed: int, profiled: int, activity: str):
        import torch

        self.out, self.warmup, self.timed, self.profiled = out, warmup, timed, profiled
        self.cuda = activity == "cuda"
        if self.cuda and not torch.cuda.is_available():
            raise SystemExit("--activity cuda: torch sees no CUDA device (use --activity cpu)")
        self.updates = 0
        self.tokens = 0
        self.marks = {}
        self.prof = None
        self.shape = {}
        self.written = False

    def sync(self):
        if self.cuda:
            import torch

            torch.cuda.synchronize()

    def before(self, trainer):
        n = self.updates  # updates done before this one
        if n == 0:
            cfg = trainer.cfg
            self.shape = {"max_tokens": cfg.dataset.max_tokens, "update_freq": list(cfg.optimization.update_freq),
                          "world_size": cfg.distributed_training.distributed_world_size,
                          "fp16": bool(cfg.common.fp16), "arch": getattr(cfg.model, "arch", None)}
        if n == self.warmup:
            self.sync()
            self.tokens = 0
            self.marks["timed"] = time.perf_counter()
        elif n == self.warmup + self.timed:
            from torch.profiler import ProfilerActivity, profile

            self.sync()
            self.marks["timed_end"] = time.perf_counter()
            self.marks["timed_tokens"] = self.tokens
            self.prof = profile(activities=[ProfilerActivity.CUDA if self.cuda else ProfilerActivity.CPU])
            self.prof.start()
            self.marks["profiled"] = time.perf_counter()

    def after(self, samples):
        self.tokens += sum(int(s.get("ntokens", 0)) for s in samples if s)
        self.updates += 1
        if self.updates == self.warmup + self.timed + self.profiled and not self.written:
            self.sync()
            end = time.perf_counter()
            self.prof.stop()
            self.write(end)

    def write(self, end: float):
        import torch

        from ..file_io import write_atomic

        timed_wall = self.marks["timed_end"] - self.marks["timed"]
        tokens = self.marks["timed_tokens"]
        events = profiler_events(self.prof, self.cuda)
        profiled = summarize(events, end - self.marks["profiled"], self.profiled, timed_wall / self.timed)
        record = {
            **self.shape, "warmup": self.warmup,
            "timed": {"updates": self.timed, "wall_s": timed_wall, "tokens": tokens, "wps": tokens / timed_wall,
                      "ups": self.timed / timed_wall, "tokens_per_update": tokens / self.timed},
            "profiled": profiled, "activity": "cuda" if self.cuda else "cpu",
        }
        if self.cuda:
            record.update(peak_bytes=torch.cuda.max_memory_allocated(), reserved_bytes=torch.cuda.max_memory_reserved(),
                          device_name=torch.cuda.get_device_name(), device_total_bytes=torch.cuda.mem_get_info()[1])
        else:
            import resource

            record.update(peak_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, device_name="cpu")
        write_atomic(self.out, json.dumps(record, indent=1))
        self.written = True
        print(f"busy window: {self.timed} updates {tokens / timed_wall:,.0f} words/s; busy "
              f"{profiled['busy_s'] * 1e3:.1f} ms of {profiled['wall_s'] * 1e3:.1f} ms "
              f"({profiled['busy_fraction']:.1%}) over {self.profiled} updates; wrote {self.out}", flush=True)


_CURRENT = []  # the window of the run in progress (train_step is wrapped once per process)


def install(window: Window) -> None:
    """Wrap ``fairseq.trainer.Trainer.train_step`` (one call per update) with ``window``'s hooks; a later call
    (the next run in the same process) only swaps the window."""
    from fairseq import trainer as fairseq_trainer

    first = not _CURRENT
    _CURRENT[:] = [window]
    if not first:
        return
    original = fairseq_trainer.Trainer.train_step

    def train_step(self, samples, raise_oom=False):
        _CURRENT[0].before(self)
        out = original(self, samples, raise_oom=raise_oom)
        _CURRENT[0].after(samples)
        return out

    fairseq_trainer.Trainer.train_step = train_step


def run_in_process(out: Path, warmup: int, timed: int, profiled: int, activity: str, fairseq_argv) -> dict:
    """One fairseq-train run in this process under a window; returns its record (also written to ``out``). The
    CUDA peak counters are reset and the cache emptied first, so a run's peak is its own (the previous run's
    trainer is gone by then: ``gc.collect``). Raises RuntimeError when training ends before the window closes."""
    import gc

    import torch

    gc.collect()
    if activity == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    window = Window(Path(out), warmup, timed, profiled, activity)
    install(window)
    from fairseq_cli import train

    saved = sys.argv
    sys.argv = ["fairseq-train", *fairseq_argv]
    try:
        train.cli_main()
    finally:
        sys.argv = saved
        _CURRENT[0] = None
    if not window.written:
        raise RuntimeError(f"busy window: training ended after {window.updates} updates, before the window's "
                           f"{warmup + timed + profiled}; raise --max-update")
    record = json.loads(Path(out).read_text())
    if activity != "cuda":
        record["peak_note"] = "the process's peak RSS since it started (earlier runs in it included)"
    return record


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                usage="%(prog)s --json OUT [--warmup N] [--timed N] [--profiled N] [--activity "
                                      "cuda|cpu] -- FAIRSEQ-TRAIN ARGS")
    p.add_argument("--json", required=True, type=Path)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--timed", type=int, default=20)
    p.add_argument("--profiled", type=int, default=4)
    p.add_argument("--activity", choices=["cuda", "cpu"], default="cuda")
    if "--" not in argv:
        p.error("give the fairseq-train arguments after --")
    k = argv.index("--")
    a = p.parse_args(argv[:k])
    if a.warmup < 0 or a.timed < 1 or a.profiled < 1:
        p.error("--timed and --profiled must be at least 1, --warmup at least 0")
    return a, argv[k + 1:]


def main(argv=None) -> int:
    a, rest = parse(list(sys.argv[1:] if argv is None else argv))
    try:
        run_in_process(a.json, a.warmup, a.timed, a.profiled, a.activity, rest)
    except RuntimeError as e:
        print(str(e), file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    sys.exit(main())

"""PosNet-Embed forward + backward: the batched matmul over positions against the released broadcast.

    pe-bench posnet_kernel                  # B=64, T=50, C=512, d_p=128, L_max=512
    pe-bench posnet_kernel --json out.json
    pe-bench posnet_kernel --device cuda --quick --json out.json --time-budget 60

Candidates, each h = x + ReLU((x W1) (x) phi) W2 on x (B,T,C), then backward of a fixed random gradient:
  released      ``(x W1).unsqueeze(2).matmul(phi[:T])`` (posnet/modules.py): torch.matmul broadcasts phi to a
                (B,T,d_p,d_p) copy, and the backward builds a phi gradient of that size before reducing it
  bmm           ``PosNetEmbedding.embed`` without padding: one bmm over positions, (T,B,d_p) x (T,d_p,d_p)
  bmm-leftpad   the same module with per-row positions made from a padding mask, as a model makes them
                (left-padded rows of random lengths, one full): each row rotated into a position-major
                buffer, bmm, rotated back
On ``--device cuda`` (the default where CUDA is available) the tensors live on the GPU; otherwise on the CPU.
Time: the candidates run round-robin in this process (``--rounds``); medians of wall and of process CPU time
(steadier on a shared machine), ratios to released.
Memory: each candidate runs once; on a CPU in a fresh interpreter, ``peak`` being the peak RSS during forward +
backward minus the RSS just before it, on CUDA the peak allocation above what was allocated before it, in this
process (inputs and parameters already allocated; ``_timing.peak_memory_bytes``), so it counts activations,
gradients and temporaries, including the phi gradient (L_max d_p^2, the same for all).
Every timed block (one candidate, one round) and every memory figure is written to ``--json`` as it is measured;
``--resume`` and ``--time-budget``: docs/benchmarks.md §Partial runs.
"""
import statistics
import sys
import time
from pathlib import Path

from ..command_line import fail
from ..file_io import dumps_json, write_all_atomic
from ._partial_runs import Progress, ResumeError, add_args as add_progress_args, resolve_device
from ..tables import markdown_table
from ._common import peak_memory_bytes, run_isolated, time_calls

NAME = "posnet_kernel"
HELP = "PosNet-Embed forward+backward: bmm over positions vs the released broadcast (time, peak memory)"
CANDIDATES = ["released", "bmm", "bmm-leftpad"]


ARGS = [("--batch", 64, "sentences B"), ("--length", 50, "length T"), ("--dim", 512, "model dim C"),
        ("--posnet-dim", 128, "kernel size d_p"), ("--lmax", 512, "kernel count L_max (released: 512)"),
        ("--repeats", 10, "timed runs per round"), ("--warmup", 2, "untimed runs per round"),
        ("--rounds", 3, "round-robin repetitions"), ("--threads", 0, "torch threads (0: torch's default)")]
QUICK = dict(repeats=5, warmup=1, rounds=2)  # --quick


def add_args(parser):
    for flag, default, text in ARGS:
        parser.add_argument(flag, type=int, default=default, help=f"{text} (default: {default})")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                        help="where the tensors live (default: auto = cuda when available); on CUDA the memory is "
                             "CUDA's peak allocation, measured in this process")
    parser.add_argument("--quick", action="store_true",
                        help=f"fewer runs: {', '.join(f'--{k} {v}' for k, v in QUICK.items())} (flags given "
                             "explicitly still win)")
    parser.add_argument("--json", help="also write the results to this JSON file (rewritten after every round)")
    add_progress_args(parser)


def setup(candidate, batch, length, dim, posnet_dim, lmax, seed=0, device="cpu"):
    """(step, forward, leaves) of one candidate: step() runs forward + backward into the leaves' .grad."""
    import torch
    import torch.nn.functional as F

    from pe_plugin.encoding_parts.base import Dims, Positions
    from pe_plugin.encodings.posnet_embedding import PosNetEmbedConfig, PosNetEmbedding

    torch.manual_seed(seed)
    dims = Dims(dim, 8, 6, lmax, 1, "encoder")
    pe = PosNetEmbedding.build(PosNetEmbedConfig(posnet_dim=posnet_dim, posnet_init="per-matrix",
                                                 posnet_max_positions=lmax), dims, {}).to(device)
    w1, w2, phi = (pe.kernels[k] for k in ("w1", "w2", "phi"))
    x = torch.randn(batch, length, dim).to(device).requires_grad_()
    grad = torch.randn(batch, length, dim).to(device)
    lengths = torch.randint(length // 2, length + 1, (batch,))
    lengths[0] = length
    nonpad = (torch.arange(length).unsqueeze(0) >= (length - lengths).unsqueeze(1)).to(device)  # (B,T) left padding
    pos = Positions.from_mask(nonpad, length, length, device)  # as a model makes them: the rotated product

    def forward():
        if candidate == "released":
            u = (x @ w1).unsqueeze(2).matmul(phi[:length]).squeeze(2)  # (B,T,1,d_p) @ (T,d_p,d_p), broadcast
            return x + F.relu(u) @ w2
        return pe.embed(x, Positions.for_tokens(x.new_zeros(batch, length).long(), 1) if candidate == "bmm" else pos)

    def step():
        for t in (x, w1, w2, phi):
            t.grad = None
        forward().backward(grad)

    return step, forward, (x, w1, w2, phi)


def measure_memory(candidate, threads, device="cpu", **shape):
    """Bytes the forward + backward adds to the peak: on a CPU, of the peak RSS, in a fresh interpreter (call it
    through run_isolated); on CUDA, of CUDA's peak allocation (in any process)."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    setup(candidate, 2, 4, 16, 8, 8, device=device)[0]()  # thread pools and kernels initialised on a tiny problem
    step = setup(candidate, **shape, device=device)[0]
    return {"peak_bytes": peak_memory_bytes(step, cuda=device == "cuda")}


def _cpu_timed(fn, out):
    t0 = time.process_time()
    fn()
    out.append(time.process_time() - t0)


def _time_block(step, repeats, warmup, cuda):
    """(wall seconds, process CPU seconds) of each of ``repeats`` runs of ``step`` after ``warmup`` ones."""
    cpu = []
    wall = time_calls(lambda: _cpu_timed(step, cpu), repeats=repeats, warmup=warmup, cuda=cuda)
    return wall, cpu[warmup:]


def run(args) -> int:
    import torch

    defaults = {flag.lstrip("-").replace("-", "_"): default for flag, default, _ in ARGS}
    for key, value in QUICK.items():  # --quick: its values for the flags left at their defaults
        if args.quick and getattr(args, key) == defaults[key]:
            setattr(args, key, value)
    try:
        device = resolve_device(args.device)
    except ValueError as e:
        return fail(str(e))
    if args.threads:
        torch.set_num_threads(args.threads)
    cuda = device == "cuda"
    shape = dict(batch=args.batch, length=args.length, dim=args.dim, posnet_dim=args.posnet_dim, lmax=args.lmax)
    fixed = dict(shape, device=device, device_name=torch.cuda.get_device_name() if cuda else _cpu(),
                 torch=torch.__version__, repeats=args.repeats, warmup=args.warmup, rounds=args.rounds,
                 threads_requested=args.threads)
    keys = [("time", c, k + 1) for k in range(args.rounds) for c in CANDIDATES] + [("memory", c) for c in CANDIDATES]
    out = Path(args.json) if args.json else None
    try:
        progress = Progress.for_args("pe-bench posnet_kernel", keys, fixed, out, args, what="blocks")
    except ResumeError as e:
        return fail(str(e))
    steps = {c: setup(c, **shape, device=device) for c in CANDIDATES}
    with torch.no_grad():
        ref = steps["released"][1]()
        diff = {c: (steps[c][1]() - ref).abs().max().item() for c in CANDIDATES if c != "bmm-leftpad"}
    settings = dict(fixed, threads=torch.get_num_threads())

    def summary():
        wall, cpu, memory = {}, {}, {}
        for m in progress.measurements():
            if m["key"][0] == "time":
                wall.setdefault(m["key"][1], []).extend(m["wall_s"])
                cpu.setdefault(m["key"][1], []).extend(m["cpu_s"])
            else:
                memory[m["key"][1]] = m["peak_bytes"]
        med = {c: statistics.median(wall[c]) for c in CANDIDATES if c in wall}
        med_cpu = {c: statistics.median(cpu[c]) for c in CANDIDATES if c in cpu}
        return med, med_cpu, memory

    def write(complete):
        if out:
            med, med_cpu, memory = summary()
            write_all_atomic({out: dumps_json({"settings": settings, "complete": complete, "median_wall_s": med,
                                               "median_cpu_s": med_cpu, "peak_bytes": memory, "max_abs_diff": diff,
                                               **progress.json_fields()}, indent=2)})

    progress.write = write
    for key in progress.missing():
        kind, c = key[0], key[1]
        if kind == "time":
            wall, cpu = _time_block(steps[c][0], args.repeats, args.warmup, cuda)
            progress.add(key, {"wall_s": wall, "cpu_s": cpu})
        elif cuda:
            progress.add(key, measure_memory(c, args.threads, device=device, **shape))
        else:
            progress.add(key, run_isolated("pe_tools.bench.posnet_kernel", "measure_memory",
                                           dict(candidate=c, threads=args.threads, **shape)))
        if progress.stop_now():
            break
    med, med_cpu, memory = summary()
    mb = 2 ** 20

    def ratio(d, c):
        return f"{d['released'] / max(d[c], 1e-30):.2f}x" if c in d and "released" in d else "n/a"

    def value(d, c, scale, fmt):
        return fmt.format(d[c] * scale) if c in d else "n/a"

    note = progress.partial_note()
    print(("\n" + note if note else "")
          + f"\nPosNet-Embed forward+backward, B={args.batch} T={args.length} C={args.dim} d_p={args.posnet_dim} "
          f"L_max={args.lmax}, {device} ({settings['device_name']}), {torch.get_num_threads()} threads, medians of "
          f"{args.repeats} x {args.rounds} runs (wall and process CPU time), memory: "
          f"{'CUDA peak allocation' if cuda else 'peak RSS of a fresh interpreter'}; "
          f"max |bmm - released| = {diff['bmm']:.1e}\n")
    rows = [[c, value(med, c, 1e3, "{:.2f}"), ratio(med, c), value(med_cpu, c, 1e3, "{:.2f}"), ratio(med_cpu, c),
             value(memory, c, 1 / mb, "{:.1f}"), ratio(memory, c)] for c in CANDIDATES]
    print(markdown_table(["candidate", "wall ms", "speed-up", "cpu ms", "cpu speed-up", "peak MiB",
                          "memory saving"], rows))
    progress.finish()
    return 0


def _cpu():
    from ..machine import cpu_name

    return cpu_name()

"""PosNet-Embed forward + backward: the batched matmul over positions against the released broadcast.

    pe-bench posnet_kernel                  # B=64, T=50, C=512, d_p=128, L_max=512
    pe-bench posnet_kernel --json out.json

Candidates, each h = x + ReLU((x W1) (x) phi) W2 on x (B,T,C), then backward of a fixed random gradient:
  released      ``(x W1).unsqueeze(2).matmul(phi[:T])`` (posnet/modules.py): torch.matmul broadcasts phi to a
                (B,T,d_p,d_p) copy, and the backward builds a phi gradient of that size before reducing it
  bmm           ``PosNetEmbedding.embed`` without padding: one bmm over positions, (T,B,d_p) x (T,d_p,d_p)
  bmm-leftpad   the same module with per-row positions made from a padding mask, as a model makes them
                (left-padded rows of random lengths, one full): each row rotated into a position-major
                buffer, bmm, rotated back
Time: the candidates run round-robin in this process (``--rounds``); medians of wall and of process CPU time
(steadier on a shared machine), ratios to released.
Memory: each candidate runs once in a fresh interpreter; ``peak`` is the peak RSS during forward + backward
minus the RSS just before it (inputs and parameters already allocated; ``_timing.peak_memory_bytes``), so it
counts activations, gradients and temporaries, including the phi gradient (L_max d_p^2, the same for all).
"""
import json
import statistics
import time
from pathlib import Path

from ._timing import markdown_table, peak_memory_bytes, run_isolated, time_calls

NAME = "posnet_kernel"
HELP = "PosNet-Embed forward+backward: bmm over positions vs the released broadcast (time, peak memory)"
CANDIDATES = ["released", "bmm", "bmm-leftpad"]


ARGS = [("--batch", 64, "sentences B"), ("--length", 50, "length T"), ("--dim", 512, "model dim C"),
        ("--posnet-dim", 128, "kernel size d_p"), ("--lmax", 512, "kernel count L_max (released: 512)"),
        ("--repeats", 10, "timed runs per round"), ("--warmup", 2, "untimed runs per round"),
        ("--rounds", 3, "round-robin repetitions"), ("--threads", 0, "torch threads (0: torch's default)")]


def add_args(parser):
    for flag, default, text in ARGS:
        parser.add_argument(flag, type=int, default=default, help=f"{text} (default: {default})")
    parser.add_argument("--json", help="also write the results to this JSON file")


def setup(candidate, batch, length, dim, posnet_dim, lmax, seed=0):
    """(step, forward, leaves) of one candidate: step() runs forward + backward into the leaves' .grad."""
    import torch
    import torch.nn.functional as F

    from pe_plugin.encodings.base import Dims, Positions
    from pe_plugin.encodings.posnet_embedding import PosNetEmbedConfig, PosNetEmbedding

    torch.manual_seed(seed)
    dims = Dims(dim, 8, 6, lmax, 1, "encoder")
    pe = PosNetEmbedding.build(PosNetEmbedConfig(posnet_dim=posnet_dim, posnet_init="per-matrix",
                                                 posnet_max_positions=lmax), dims, {})
    w1, w2, phi = (pe.kernels[k] for k in ("w1", "w2", "phi"))
    x = torch.randn(batch, length, dim, requires_grad=True)
    grad = torch.randn(batch, length, dim)
    lengths = torch.randint(length // 2, length + 1, (batch,))
    lengths[0] = length
    nonpad = torch.arange(length).unsqueeze(0) >= (length - lengths).unsqueeze(1)  # (B,T) left padding
    pos = Positions.from_mask(nonpad, length, length, "cpu")  # as a model makes them: the rotated product

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


def measure_memory(candidate, threads, **shape):
    """In a fresh interpreter: bytes the forward + backward adds to the peak RSS."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    setup(candidate, 2, 4, 16, 8, 8)[0]()  # thread pools and kernels initialised on a tiny problem
    step = setup(candidate, **shape)[0]
    return {"peak_bytes": peak_memory_bytes(step)}


def _cpu_timed(fn, out):
    t0 = time.process_time()
    fn()
    out.append(time.process_time() - t0)


def run(args) -> int:
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    shape = dict(batch=args.batch, length=args.length, dim=args.dim, posnet_dim=args.posnet_dim, lmax=args.lmax)
    steps = {c: setup(c, **shape) for c in CANDIDATES}
    with torch.no_grad():
        ref = steps["released"][1]()
        diff = {c: (steps[c][1]() - ref).abs().max().item() for c in CANDIDATES if c != "bmm-leftpad"}
    wall, cpu = {c: [] for c in CANDIDATES}, {c: [] for c in CANDIDATES}
    for _ in range(args.rounds):
        for c in CANDIDATES:
            n = len(cpu[c])
            wall[c] += time_calls(lambda: _cpu_timed(steps[c][0], cpu[c]), repeats=args.repeats, warmup=args.warmup)
            del cpu[c][n:n + args.warmup]
    memory = {c: run_isolated("pe_tools.bench.posnet_kernel", "measure_memory",
                              dict(candidate=c, threads=args.threads, **shape))["peak_bytes"] for c in CANDIDATES}
    med = {c: statistics.median(wall[c]) for c in CANDIDATES}
    med_cpu = {c: statistics.median(cpu[c]) for c in CANDIDATES}
    mb = 2 ** 20
    print(f"\nPosNet-Embed forward+backward, B={args.batch} T={args.length} C={args.dim} d_p={args.posnet_dim} "
          f"L_max={args.lmax}, {torch.get_num_threads()} threads, medians of {args.repeats} x {args.rounds} runs "
          f"(wall and process CPU time); max |bmm - released| = {diff['bmm']:.1e}\n")
    rows = [[c, f"{med[c] * 1e3:.1f}", f"{med['released'] / med[c]:.2f}x", f"{med_cpu[c] * 1e3:.1f}",
             f"{med_cpu['released'] / med_cpu[c]:.2f}x", f"{memory[c] / mb:.1f}",
             f"{memory['released'] / max(memory[c], 1):.2f}x"] for c in CANDIDATES]
    print(markdown_table(["candidate", "wall ms", "speed-up", "cpu ms", "cpu speed-up", "peak MiB",
                          "memory saving"], rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"settings": shape, "median_wall_s": med, "median_cpu_s": med_cpu,
                                               "peak_bytes": memory, "max_abs_diff": diff}, indent=2))
    return 0

"""FlexAttention against SDPA for the position biases (T5, ALiBi) when attention dropout is 0.

    pe-bench flex --device cuda                          # L = 20 50 100 200, B = 4096 // L, H = 8, d = 64, fp16
    pe-bench flex --device cpu --lengths 12              # CPU: forward only, float32 correctness check
    pe-bench flex --device cuda --quick --json flex.json --time-budget 90     # L = 50 200, 10 repeats

Both sides get the same attention: queries, keys and values (B,H,T,d) of a left-padded batch (row b has pad[b]
leading pads, lengths drawn from [0.7 T, T], the first row full), and a per-head bias of the relative distance
j - i: T5's bidirectional buckets (32 buckets, max distance 128) over a learned (H, 32) table, or ALiBi's
-slope_h |i - j| (symmetric, as the plugin's encoder uses it, slopes 2^(-8h/H)).
  sdpa  the bias built as a float (B,H,T,T) mask with -inf at the padded keys, handed to
        ``F.scaled_dot_product_attention`` (the plugin's fast path today)
  flex  ``flex_attention(q, k, v, score_mod, block_mask)``: score_mod adds the bias from the (H, buckets) table
        or the slopes, the block mask drops the padded keys; compiled with ``torch.compile`` on CUDA
On CUDA: forward + backward of a fixed gradient, median time over ``--repeats`` after warm-up and the peak memory
above the inputs, as ratios flex / sdpa, and the largest difference of outputs and gradients. On a CPU
FlexAttention has no backward (torch 2.13): the forward of each is compared in float32 and no time is reported.
Time on CUDA goes mostly to compiling: every (bias, length) compiles its own forward and backward kernels, so the
default 8 rows take minutes; ``--quick`` measures 4. Each row is written to ``--json`` as it is measured;
``--resume`` and ``--time-budget``: docs/benchmarks.md §Partial runs.
"""
import json
import math
import statistics
import sys

from ._partial_runs import Progress, ResumeError, add_args as add_progress_args
from ..tables import markdown_table

NAME = "flex"
HELP = "FlexAttention (score_mod + block mask) vs SDPA with a float mask for T5 and ALiBi biases (CUDA; CPU: check)"
BIASES = ("t5", "alibi")


def t5_buckets(T: int, num_buckets: int = 32, max_distance: int = 128):
    """(T, T) long: T5's bidirectional bucket of j - i (Raffel et al. 2020, mesh-tensorflow's formula)."""
    import torch

    rel = torch.arange(T)[None, :] - torch.arange(T)[:, None]  # j - i
    half = num_buckets // 2
    out = (rel > 0).long() * half
    n = rel.abs()
    exact = half // 2
    large = exact + (torch.log(n.float().clamp(min=1) / exact) / math.log(max_distance / exact)
                     * (half - exact)).long()
    return out + torch.where(n < exact, n, large.clamp(max=half - 1))


def problem(bias: str, B: int, H: int, T: int, d: int, device: str, dtype, grad: bool = True, seed: int = 0):
    """(q, k, v, params, pad, bias_of(h, i, j) on index tensors) for one comparison."""
    import torch

    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, T, d, generator=g).to(device, dtype).requires_grad_(grad) for _ in range(3))
    lengths = torch.randint(math.ceil(0.7 * T), T + 1, (B,), generator=g)
    lengths[0] = T
    pad = (T - lengths).to(device)  # (B,) leading pads of each row (sources are left-padded)
    if bias == "t5":
        table = (torch.randn(H, 32, generator=g) * 0.5).to(device, dtype).requires_grad_(grad)
        buckets = t5_buckets(T).to(device)
        return q, k, v, [table], pad, lambda h, i, j: table[h, buckets[i, j]]
    slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)], device=device, dtype=dtype)
    return q, k, v, [], pad, lambda h, i, j: -slopes[h] * (j - i).abs()


def sdpa_side(q, k, v, pad, bias_of):
    import torch
    import torch.nn.functional as F

    B, H, T, _ = q.shape
    h = torch.arange(H, device=q.device)[:, None, None]
    i = torch.arange(T, device=q.device)[None, :, None]
    j = torch.arange(T, device=q.device)[None, None, :]
    bias = bias_of(h, i, j).to(q.dtype)  # (H,T,T)
    keep = (torch.arange(T, device=q.device)[None, :] >= pad[:, None])[:, None, None, :]  # (B,1,1,T)
    mask = bias[None].masked_fill(~keep, float("-inf"))  # (B,H,T,T)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0 / math.sqrt(q.size(-1)))


def flex_side(q, k, v, pad, bias_of, attend, kernel_options=None):
    from torch.nn.attention.flex_attention import create_block_mask

    B, H, T, _ = q.shape

    def score_mod(score, b, h, i, j):
        return score + bias_of(h, i, j).to(score.dtype)

    def mask_mod(b, h, i, j):
        return j >= pad[b]

    block = create_block_mask(mask_mod, B, None, T, T, device=str(q.device))
    return attend(q, k, v, score_mod=score_mod, block_mask=block, scale=1.0 / math.sqrt(q.size(-1)),
                  kernel_options=kernel_options)


# the kernel options tried in turn on CUDA: inductor's own choice first; smaller tiles and fewer pipeline stages
# when its choice needs more shared memory than the GPU has ("out of resource", seen with torch 2.11 on an H100)
KERNEL_OPTIONS = (None, {"BLOCK_M": 64, "BLOCK_N": 64, "num_stages": 2,
                         "BLOCK_M1": 32, "BLOCK_N1": 64, "BLOCK_M2": 64, "BLOCK_N2": 32})


def compare(bias: str, B: int, H: int, T: int, d: int, device: str, repeats: int) -> dict:
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    cuda = device == "cuda"
    dtype = torch.float16 if cuda else torch.float32
    q, k, v, params, pad, bias_of = problem(bias, B, H, T, d, device, dtype, grad=cuda)
    attend = torch.compile(flex_attention, dynamic=False) if cuda else flex_attention
    inputs = [q, k, v, *params]
    row = dict(bias=bias, B=B, H=H, T=T, d=d, device=device, dtype=str(dtype).replace("torch.", ""),
               real_keys=int((T - pad).sum()))
    if not cuda:  # no backward for flex on a CPU: forward only, no grad
        ref, got = sdpa_side(q, k, v, pad, bias_of), flex_side(q, k, v, pad, bias_of, attend)
        row["max_abs_diff_out"] = float((ref - got).abs().max())
        return row
    grad = torch.randn_like(q)
    outs = {}
    for name, fn in (("sdpa", lambda opts: sdpa_side(q, k, v, pad, bias_of)),
                     ("flex", lambda opts: flex_side(q, k, v, pad, bias_of, attend, opts))):
        options = KERNEL_OPTIONS if name == "flex" else (None,)
        for n, opts in enumerate(options):
            def step():
                out = fn(opts)
                return out, torch.autograd.grad(out, inputs, grad)

            try:
                for _ in range(3):  # warm-up (compilation)
                    step()
                break
            except Exception as e:  # inductor's InductorError; the last option's failure is the row's
                if n + 1 == len(options) or "out of resource" not in str(e):
                    raise
                print(f"[flex] kernel options {opts} failed (out of resource); trying {options[n + 1]}",
                      file=sys.stderr, flush=True)
                torch._dynamo.reset()
        if name == "flex":
            row["kernel_options"] = opts
        torch.cuda.synchronize()
        times = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        outs[name] = step()
        torch.cuda.synchronize()
        row[f"{name}_s"] = statistics.median(times)
        row[f"{name}_peak_bytes"] = torch.cuda.max_memory_allocated() - base
    row["time_ratio"] = row["flex_s"] / row["sdpa_s"]
    row["memory_ratio"] = row["flex_peak_bytes"] / row["sdpa_peak_bytes"] if row["sdpa_peak_bytes"] else None
    (o1, g1), (o2, g2) = outs["sdpa"], outs["flex"]
    row["max_abs_diff_out"] = float((o1 - o2).abs().max())
    row["max_abs_diff_grad"] = max(float((a - b).abs().max()) for a, b in zip(g1, g2))
    return row


QUICK = dict(lengths=[50, 200], repeats=10)  # --quick: two lengths, so four compilations instead of eight


def add_args(parser):
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--lengths", nargs="+", type=int, default=None,
                        help="batch lengths T (default: 20 50 100 200; --quick: 50 200)")
    parser.add_argument("--max-tokens", type=int, default=4096, help="B = max_tokens // L (default: 4096)")
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--biases", nargs="+", choices=BIASES, default=list(BIASES))
    parser.add_argument("--repeats", type=int, default=None,
                        help="timed forward+backward steps (CUDA; default: 20, --quick: 10)")
    parser.add_argument("--quick", action="store_true",
                        help="lengths 50 200 and 10 repeats: on CUDA each (bias, length) compiles its own "
                             "FlexAttention kernels (forward and backward, some 10-20 s each), which is most of the "
                             "run's time")
    parser.add_argument("--json", help="write the settings and rows here (rewritten after every row)")
    add_progress_args(parser)


def run(args) -> int:
    import torch

    from ..command_line import fail
    from ..file_io import dump_json
    from ..machine import cpu_name

    lengths = args.lengths or (QUICK["lengths"] if args.quick else [20, 50, 100, 200])
    repeats = args.repeats or (QUICK["repeats"] if args.quick else 20)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    if device == "cuda" and not torch.cuda.is_available():
        print("pe-bench flex: --device cuda but CUDA is not available to torch here; nothing measured",
              file=sys.stderr)
        return 2
    if device == "cpu":
        print("pe-bench flex: no CUDA here, so no times: FlexAttention has no backward on a CPU; checking the "
              "forward against SDPA in float32 only", file=sys.stderr)
    settings = dict(device=device, device_name=torch.cuda.get_device_name() if device == "cuda" else cpu_name(),
                    torch=torch.__version__, cuda=torch.version.cuda, heads=args.heads, head_dim=args.head_dim,
                    max_tokens=args.max_tokens, repeats=repeats, lengths=lengths, biases=args.biases)
    keys = [(bias, T) for T in lengths for bias in args.biases]
    out = args.json
    try:
        progress = Progress.for_args("pe-bench flex", keys, settings, out, args, what="rows")
    except ResumeError as e:
        return fail(str(e))

    def write(complete):
        if out:
            rows = [{k: v for k, v in m.items() if k != "key"} for m in progress.measurements()]
            dump_json(out, {"settings": settings, "complete": complete, "results": rows, **progress.json_fields()})

    progress.write = write
    for bias, T in progress.missing():
        print(f"[flex] {bias} T={T}", file=sys.stderr, flush=True)
        progress.add((bias, T), compare(bias, max(1, args.max_tokens // T), args.heads, T, args.head_dim, device,
                                        repeats))
        if progress.stop_now():
            break
    rows = progress.measurements()
    if device == "cuda":
        headers = ["bias", "T", "B", "sdpa ms", "flex ms", "flex/sdpa time", "sdpa MiB", "flex MiB", "flex/sdpa mem",
                   "max |d out|", "max |d grad|"]
        table = [[r["bias"], str(r["T"]), str(r["B"]), f"{r['sdpa_s'] * 1e3:.3f}", f"{r['flex_s'] * 1e3:.3f}",
                  f"{r['time_ratio']:.2f}x", f"{r['sdpa_peak_bytes'] / 2 ** 20:.1f}",
                  f"{r['flex_peak_bytes'] / 2 ** 20:.1f}",
                  "n/a" if r["memory_ratio"] is None else f"{r['memory_ratio']:.2f}x",
                  f"{r['max_abs_diff_out']:.2e}", f"{r['max_abs_diff_grad']:.2e}"] for r in rows]
    else:
        headers = ["bias", "T", "B", "max |d out| (float32 forward)"]
        table = [[r["bias"], str(r["T"]), str(r["B"]), f"{r['max_abs_diff_out']:.2e}"] for r in rows]
    note = progress.partial_note()
    print((note + "\n\n" if note else "")
          + f"FlexAttention vs SDPA, {settings['device_name']}, torch {torch.__version__}, H={args.heads}, "
          f"d={args.head_dim}, B = {args.max_tokens} // T, left-padded keys; forward + backward, median of "
          f"{repeats}\n\n" + markdown_table(headers, table))
    progress.finish()
    return 0

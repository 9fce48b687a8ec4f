"""Training-step time and peak memory of every registered encoding, as ratios to SAPE.

    python scripts/benchmark.py models                      # base size (transformer_<pe>_wmt_en_de), B=32, T=30
    python scripts/benchmark.py models --size tiny --json out.json --csv out.csv

Each encoding runs in its own fresh interpreter (peak RSS is monotonic, so sharing a process would hide
every peak but the first): it builds ``transformer_<pe>_<size>`` through fairseq's parser with a dummy
joined dictionary (``--vocab`` symbols, ``--share-all-embeddings``), then times full training steps
(forward, cross-entropy, backward, Adam step) on one fixed random batch in training mode. SAPE runs on
fairseq's stock fused attention, so every ratio includes the cost of leaving it. The encodings run
round-robin ``--rounds`` times and the fastest step of each is kept (wall and process CPU time): on a
shared machine other processes only ever add time, so the minimum is the least disturbed figure; the
median wall time is reported beside it.
Memory: ``peak`` is the process's peak RSS (interpreter, model, Adam state, activations); ``step`` is the
peak minus the RSS after the model was built, i.e. gradients, Adam state and activations.
"""
import csv
import json
import statistics
import tempfile
import time
from pathlib import Path

from ._timing import current_rss_bytes, markdown_table, peak_rss_bytes, run_isolated, time_calls

NAME = "models"
HELP = "training-step time and peak memory of every registered encoding, as ratios to SAPE"
RATIOS = {"wall_s": "wall_ratio", "cpu_s": "cpu_ratio", "wall_median_s": "wall_median_ratio",
          "peak_bytes": "peak_ratio", "step_bytes": "step_ratio"}
SIZES = {"tiny": "tiny", "base": "wmt_en_de", "big": "wmt_en_de_big"}


def add_args(parser):
    parser.add_argument("--size", choices=sorted(SIZES), default="base", help="model size (default: base)")
    parser.add_argument("--pe", nargs="+", help="encodings to measure (default: every registered one)")
    parser.add_argument("--batch", type=int, default=32, help="sentences per batch (default: 32)")
    parser.add_argument("--length", type=int, default=30, help="source and target length (default: 30)")
    parser.add_argument("--vocab", type=int, default=40000, help="joined dictionary size (default: 40000)")
    parser.add_argument("--steps", type=int, default=3, help="timed training steps per round (default: 3)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed training steps first (default: 1)")
    parser.add_argument("--rounds", type=int, default=3, help="round-robin repetitions (default: 3)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.add_argument("--csv", help="also write the results to this CSV file")


def measure(pe: str, size: str, batch: int, length: int, vocab: int, steps: int, warmup: int, threads: int):
    """One encoding, in this (fresh) process: parameter counts, step times and memory."""
    import torch
    import torch.nn.functional as F
    from fairseq import options, tasks

    if threads:
        torch.set_num_threads(threads)
    plugin = Path(__file__).resolve().parents[2] / "pe_plugin"
    with tempfile.TemporaryDirectory() as data:
        for lang in ("src", "tgt"):  # fairseq's Dictionary has 4 special symbols
            Path(data, f"dict.{lang}.txt").write_text("".join(f"w{i} 1\n" for i in range(vocab - 4)))
        argv = [data, "--user-dir", str(plugin), "--arch", f"transformer_{pe}_{SIZES[size]}", "--task", "translation",
                "-s", "src", "-t", "tgt", "--share-all-embeddings", "--cpu"]
        args = options.parse_args_and_arch(options.get_training_parser(), argv)
        torch.manual_seed(1)
        task = tasks.setup_task(args)
        model = task.build_model(args)
    from pe_plugin.models.validation import pe_parameter_count

    model.train()
    src = torch.randint(4, vocab, (batch, length))
    prev = torch.randint(4, vocab, (batch, length))
    target = torch.randint(4, vocab, (batch, length))
    lengths = torch.full((batch,), length)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)

    def step():
        opt.zero_grad(set_to_none=True)
        logits, _ = model(src, lengths, prev)  # (B, T, V)
        F.cross_entropy(logits.view(-1, logits.size(-1)), target.view(-1)).backward()
        opt.step()

    cpu = []

    def timed_step():
        t0 = time.process_time()
        step()
        cpu.append(time.process_time() - t0)

    before = current_rss_bytes()
    wall = time_calls(timed_step, repeats=steps, warmup=warmup)
    peak = peak_rss_bytes()
    return {
        "pe": pe, "params": sum(p.numel() for p in model.parameters()), "pe_params": pe_parameter_count(model),
        "wall_s": wall, "cpu_s": cpu[warmup:], "peak_bytes": peak, "step_bytes": peak - before,
        "threads": torch.get_num_threads(),
    }


def run(args) -> int:
    from pe_plugin.encodings import PE_REGISTRY

    names = args.pe or list(PE_REGISTRY)
    if "sape" not in names:
        names = ["sape", *names]
    kwargs = dict(size=args.size, batch=args.batch, length=args.length, vocab=args.vocab, steps=args.steps,
                  warmup=args.warmup, threads=args.threads)
    runs = {pe: [] for pe in names}
    for _ in range(args.rounds):
        for pe in names:
            runs[pe].append(run_isolated("bench.models", "measure", dict(pe=pe, **kwargs)))
    results = []
    for pe in names:
        r = {k: v for k, v in runs[pe][0].items() if k not in ("wall_s", "cpu_s")}
        # the fastest step is the one least disturbed by other processes; memory: median over rounds
        r["wall_s"] = min(t for x in runs[pe] for t in x["wall_s"])
        r["cpu_s"] = min(t for x in runs[pe] for t in x["cpu_s"])
        r["wall_median_s"] = statistics.median(t for x in runs[pe] for t in x["wall_s"])
        for key in ("peak_bytes", "step_bytes"):
            r[key] = int(statistics.median(x[key] for x in runs[pe]))
        results.append(r)
    ref = next(r for r in results if r["pe"] == "sape")
    for r in results:
        for key, ratio in RATIOS.items():
            r[ratio] = r[key] / ref[key]
    mb = 2 ** 20
    print(f"\n{args.size} size (arch transformer_<pe>_{SIZES[args.size]}), B={args.batch}, T={args.length}, "
          f"vocab {args.vocab}, {ref['threads']} threads, fastest of {args.steps} steps x {args.rounds} round(s) "
          f"(wall and process CPU time); ratios to sape on fairseq's stock fused attention\n")
    rows = [[r["pe"], f"{r['params'] / 1e6:.2f}M", f"{r['pe_params']:,}", f"{r['wall_s'] * 1e3:.0f}",
             f"{r['wall_ratio']:.2f}x", f"{r['cpu_ratio']:.2f}x", f"{r['wall_median_ratio']:.2f}x",
             f"{r['peak_bytes'] / mb:.0f}", f"{r['peak_ratio']:.2f}x", f"{r['step_bytes'] / mb:.0f}",
             f"{r['step_ratio']:.2f}x"] for r in results]
    headers = ["pe", "params", "pe params", "step ms", "time", "cpu time", "median time", "peak MiB", "peak",
               "step MiB", "step mem"]
    print(markdown_table(headers, rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"settings": kwargs, "results": results}, indent=2))
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(results[0]))
            writer.writeheader()
            writer.writerows(results)
    return 0

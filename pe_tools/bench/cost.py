"""pe-bench cost: the device-independent cost of one training step (forward in training mode, the cross-entropy over
the real target tokens, backward; no optimizer step) on ``pe-bench models``' padded batch, in float32 on the CPU,
counted exactly for every registered encoding and stock fairseq's transformer, as ratios to SAPE and to stock:
bytes saved for backward, ATen ops, FLOPs and bytes of (B,H,Tq,Tk)-sized tensors (docs/benchmarks.md §Cost counts).

    pe-bench cost --sizes tiny --lengths 6 10 --max-tokens 40 --vocab 100 --out-dir runs/cost
"""
import gc
import json
import shlex
import sys
import time
from collections import Counter
from pathlib import Path

from ..command_line import fail
from ..fairseq_plugin import plugin_digest
from ..naming import BASELINE
from . import _common
from ._build import PAD, STOCK, add_model_args, batch_size, build_model, model_arch, padded_batch, \
    rows_and_batches, summed_loss
from ._common import add_ratios, machine, times
from ._partial_runs import add_args as add_output_args, write_outputs

NAME = "cost"
HELP = "bytes saved for backward, ATen ops, FLOPs and (B,H,T,T) bytes of one training step, as ratios to SAPE/stock"
DEFAULT_LENGTHS = [20, 50, 100, 200]
FIGURES = ("saved_bytes", "ops", "flops", "attn_bytes")  # the counts that get ratios (and the guard's keys)
GUARDED = FIGURES + ("ops_forward", "ops_backward", "saved_storages", "attn_tensors")
MIB = 2 ** 20


def _round8(n: int) -> int:
    return -(-n // 8) * 8


class StepCounter:
    """Counts one training step: enter, run forward and the loss, call ``backward_started()``, run backward, exit.

    ``params``: the tensors whose storages are not counted as saved. ``batch``, ``heads``, ``lengths`` (the
    source and target widths): what makes an output (B,H,Tq,Tk)-sized."""

    def __init__(self, params=(), batch: int = 0, heads: int = 0, lengths=()):
        import torch
        from torch.utils.flop_counter import FlopCounterMode

        self.param_storages = {p.untyped_storage().data_ptr() for p in params}
        self.saved = {}  # data_ptr -> storage (held, so that no freed storage's address is reused and missed)
        self.forward_ops, self.backward_ops = Counter(), Counter()
        self.attn_bytes = self.attn_tensors = 0
        self.attn_ops = Counter()  # op -> bytes of the (B,H,Tq,Tk)-sized outputs it allocated
        self.in_backward = False
        self.batch_heads, self.queries = batch * heads, set(lengths)
        self.keys = range(min(lengths), _round8(max(lengths)) + 1) if lengths else range(0)

        self.flop_mode = FlopCounterMode(display=False)
        registry = self.flop_mode.flop_registry  # CPU SDPA has no formula of its own: count it as flash
        aten = torch.ops.aten
        registry[aten._scaled_dot_product_flash_attention_for_cpu] = registry[aten._scaled_dot_product_flash_attention]
        registry[aten._scaled_dot_product_flash_attention_for_cpu_backward] = \
            registry[aten._scaled_dot_product_flash_attention_backward]
        self.ops_mode = _common.op_mode(self._op)
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)

    def _op(self, func, args, kwargs, out):
        import torch
        from torch.utils._pytree import tree_flatten

        name = str(func.overloadpacket)
        (self.backward_ops if self.in_backward else self.forward_ops)[name] += 1
        if any(r.alias_info is not None for r in func._schema.returns):  # a view or in place
            return
        inputs = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0]
                  if isinstance(t, torch.Tensor)}  # _unsafe_view returns its input's storage unannotated
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            if (isinstance(t, torch.Tensor) and t.dim() >= 3 and t.shape[-2] in self.queries and t.shape[-1] in
                    self.keys and t.untyped_storage().data_ptr() not in inputs
                    and t.numel() >= self.batch_heads * t.shape[-2] * t.shape[-1]):
                self.attn_bytes += t.numel() * t.element_size()
                self.attn_tensors += 1
                self.attn_ops[name] += t.numel() * t.element_size()

    def _pack(self, t):
        if not self.in_backward:
            storage = t.untyped_storage()
            if storage.nbytes() and storage.data_ptr() not in self.param_storages:
                self.saved.setdefault(storage.data_ptr(), storage)
        return t

    def __enter__(self):
        self.flop_mode.__enter__()
        self.ops_mode.__enter__()
        self.hooks.__enter__()
        return self

    def backward_started(self):
        self.in_backward = True

    def __exit__(self, *exc):
        self.hooks.__exit__(*exc)
        self.ops_mode.__exit__(*exc)
        self.flop_mode.__exit__(*exc)

    def counts(self) -> dict:
        return dict(saved_bytes=sum(s.nbytes() for s in self.saved.values()), saved_storages=len(self.saved),
                    ops_forward=sum(self.forward_ops.values()), ops_backward=sum(self.backward_ops.values()),
                    ops=sum(self.forward_ops.values()) + sum(self.backward_ops.values()),
                    flops=self.flop_mode.get_total_flops(), attn_bytes=self.attn_bytes, attn_tensors=self.attn_tensors,
                    op_counts=dict(sorted((self.forward_ops + self.backward_ops).items())),
                    attn_op_bytes=dict(sorted(self.attn_ops.items())))


def count_step(model, src, lengths, prev, target, heads: int) -> dict:
    """The counts of one training step of ``model`` (a fairseq encoder-decoder) on one padded batch."""
    model.train()
    model.zero_grad(set_to_none=True)
    ntokens = int(target.ne(PAD).sum())
    counter = StepCounter(list(model.parameters()), batch=src.size(0), heads=heads,
                          lengths=(src.size(1), prev.size(1)))
    with counter:
        loss = summed_loss(model, src, lengths, prev, target) / ntokens
        counter.backward_started()
        loss.backward()
    try:
        return counter.counts()
    finally:  # the held storages (and the mode's reference cycle) would keep each row's ~GBs alive into the next
        counter.saved.clear()


def measure(pe: str, size: str, length: int, batch: int, vocab: int, recipe: str, change=None) -> dict:
    """One row: ``pe`` (or STOCK) at ``size`` on the padded batch of ``batch`` sentences of at most
    ``length`` tokens, in float32 on the CPU. ``change(model)``, if given, alters the built model first (the tests'
    negative control)."""
    import torch

    model, args = build_model(pe, size, vocab, recipe, "cpu")
    if change is not None:
        change(model)
    src, lengths, prev, target = padded_batch(batch, length, vocab, "cpu")
    torch.manual_seed(1)  # dropout masks (their bytes do not depend on them; the seed only pins the values)
    heads = min(args.encoder_attention_heads, args.decoder_attention_heads)
    row = dict(pe=pe, size=size, arch=model_arch(pe, size), length=length, batch=batch, heads=heads,
               src_tokens=int(src.ne(PAD).sum()), tokens=int(target.ne(PAD).sum()),
               params=sum(p.numel() for p in model.parameters()))
    row.update(count_step(model, src, lengths, prev, target, heads))
    return row


def over_recorded(results, recorded) -> list:
    """The (pe, size, length, count, measured, recorded) where a measured count exceeds its recorded one; rows
    absent from ``recorded`` are listed with recorded None (a new encoding must be recorded)."""
    book = {(r["pe"], r["size"], r["length"]): r for r in recorded}
    worse = []
    for r in results:
        ref = book.get((r["pe"], r["size"], r["length"]))
        for key in GUARDED:
            if ref is None or r[key] > ref[key]:
                worse.append((r["pe"], r["size"], r["length"], key, r[key], None if ref is None else ref[key]))
                if ref is None:
                    break
    return worse


def tables(settings, results) -> str:
    headers = ["pe", "saved MiB", "saved/sape", "saved/stock", "ops (fwd+bwd)", "ops/sape", "ops/stock", "GFLOP",
               "flops/sape", "flops/stock", "BHTT MiB", "BHTT/sape", "BHTT/stock"]

    def row(r):
        cells = [f"{r['saved_bytes'] / MIB:,.1f}", f"{r['ops']:,} ({r['ops_forward']:,}+{r['ops_backward']:,})",
                 f"{r['flops'] / 1e9:,.1f}", f"{r['attn_bytes'] / MIB:,.1f}"]
        return [r["pe"]] + [c for f, cell in zip(FIGURES, cells)
                            for c in (cell, times(r[f"{f}_to_sape"], 3), times(r[f"{f}_to_{STOCK}"], 3))]

    blocks = _common.tables(settings, results, headers, row, lambda first: f", H={first['heads']}")
    legend = ("One training step in float32 on the CPU: forward (training mode), cross-entropy over the real target "
              "tokens, backward; no optimizer step. saved = bytes autograd keeps for backward (distinct storages, "
              "parameters excluded); ops = ATen ops dispatched (forward + backward); GFLOP = torch.utils.flop_counter "
              "(CPU SDPA counted as SDPA); BHTT = bytes of the (B,H,Tq,Tk)-sized tensors allocated (not views); "
              "n/a: the reference's count is 0. Every `x` column is the ratio to sape or to stock at the same size "
              "and length.")
    return "\n\n".join(blocks) + "\n\n" + legend + "\n"


def settings_line(s) -> str:
    return (f"max tokens {s['max_tokens']}, padded batches (sources left-padded, targets right-padded), vocab "
            f"{s['vocab']}, fp32, CPU, recipe {s['recipe']}, torch {s['torch']}, fairseq {s['fairseq']}, "
            f"python {s['python']}")


def add_args(parser):
    add_model_args(parser, ["base"], DEFAULT_LENGTHS, 1, always=(BASELINE, STOCK))
    parser.add_argument("--check", metavar="JSON",
                        help="a recorded STEM.json: exit 1 when any count exceeds its recorded one (a regression guard)")
    parser.add_argument("--merge", nargs="+", metavar="JSON",
                        help="measure nothing: write one table of these runs' rows (e.g. lengths measured in separate "
                             "processes, `--lengths 20 200 --stem a` and `--lengths 50 100 --stem b`); they must share "
                             "their settings and pe_plugin sources")
    add_output_args(parser, "cost", resume=False)


def run(args) -> int:
    import torch

    if args.merge:
        try:
            merged, results = merge(args.merge)
        except (OSError, ValueError, KeyError) as e:
            return fail(str(e))
        return write_results(args, results, time.time(), merged)
    if args.threads:
        torch.set_num_threads(args.threads)
    names, sizes, batches = rows_and_batches(args, always=(BASELINE, STOCK))
    started, results = time.time(), []
    for size in sizes:
        for length, batch in batches.items():
            for pe in names:
                print(f"[cost] {size} L={length} {pe}", file=sys.stderr, flush=True)
                results.append(measure(pe, size, length, batch, args.vocab, args.recipe))
                gc.collect()  # one row's model, batch and saved tensors are gone before the next is built
    return write_results(args, results, started)


# what runs merged into one table must share (pe-bench cost --merge)
SAME_IN_MERGE = ("max_tokens", "vocab", "recipe", "dtype", "device", "torch", "fairseq", "pe_plugin_sources")


def merge(paths) -> tuple:
    """(settings of each run, every row) of several ``pe-bench cost`` JSON outputs, e.g. the lengths of one table
    measured in separate processes; raises ValueError naming a setting they do not share or a row twice."""
    loaded = [json.loads(Path(p).read_text()) for p in paths]
    for key in SAME_IN_MERGE:
        values = {json.dumps(d["settings"].get(key)) for d in loaded}
        if len(values) > 1:
            raise ValueError(f"--merge: the runs differ in {key} ({', '.join(sorted(values))}); merge only runs of "
                             f"the same settings and pe_plugin sources")
    rows = [r for d in loaded for r in d["results"]]
    keys = [(r["pe"], r["size"], r["length"]) for r in rows]
    if len(set(keys)) < len(keys):
        raise ValueError(f"--merge: a row is in two runs: {sorted(k for k in set(keys) if keys.count(k) > 1)[0]}")
    return [d["settings"] for d in loaded], rows


def write_results(args, results, started: float, merged=None) -> int:
    """Ratios, tables and files of ``results`` (every row of one run, or of the ``merged`` runs' settings)."""
    import fairseq
    import torch

    lengths = sorted({r["length"] for r in results})
    for ref in (BASELINE, STOCK):
        add_ratios(results, {k: f"{k}_to_{ref}" for k in FIGURES}, lambda r: (r["size"], r["length"]),
                   lambda r, ref=ref: r["pe"] == ref)
    settings = dict(sizes=list(dict.fromkeys(r["size"] for r in results)), lengths=lengths,
                    encodings=list(dict.fromkeys(r["pe"] for r in results)), max_tokens=args.max_tokens,
                    vocab=args.vocab, recipe=args.recipe, dtype="float32", **machine("cpu"),
                    threads=torch.get_num_threads(), batches={str(n): batch_size(args.max_tokens, n) for n in lengths},
                    fairseq=fairseq.__version__, pe_plugin_sources=plugin_digest(),
                    command=shlex.join(["pe-bench", *getattr(args, "argv", [NAME, *sys.argv[1:]])]),
                    started=time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
                    seconds=round(time.time() - started, 1))
    if merged:  # the measuring runs' own settings and commands
        settings.update({k: merged[0][k] for k in SAME_IN_MERGE}, threads=merged[0]["threads"],
                        parts=[m["command"] for m in merged], seconds=sum(m["seconds"] for m in merged),
                        started=merged[0]["started"])
    text = tables(settings, results)
    print("\n" + text)
    header = (f"# Cost of one training step: ratios to SAPE and to stock\n\n`{settings['command']}`\n\n"
              f"{settings_line(settings)}\n\n")
    for path in write_outputs(args, {"settings": settings, "results": results}, header + text,
                              csv_skip={"op_counts", "attn_op_bytes"}):
        print(f"wrote {path}", file=sys.stderr)
    if args.check:
        worse = over_recorded(results, json.loads(Path(args.check).read_text())["results"])
        for pe, size, length, key, got, ref in worse:
            print(f"over recorded: {pe} {size} L={length} {key} {got:,} > {ref if ref is None else f'{ref:,}'}",
                  file=sys.stderr)
        return 1 if worse else 0
    return 0

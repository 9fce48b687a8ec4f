"""pe-bench fp16: every encoding's fast attention path in half precision against the same model (same weights, seed
1, no dropout) in float32 on the reference path, on ``pe-bench models``' padded batch: the largest difference of the
log-probabilities over the real target tokens, the share of argmax tokens that agree and the relative difference
of the gradient of the summed log-likelihood. fp16's unit roundoff is 2^-11 and a 6-layer model accumulates it, so
an encoding passes within ``--tolerance`` (log-probabilities) and 5 % (gradients). Meant for a GPU.

    pe-bench fp16 --device cuda --size base --json fp16_check.json      (or: python scripts/check_fp16.py ...)
"""
import sys

from ..naming import SUFFIX_OF_CLASS
from . import _common
from ._build import PAD, build_model, padded_batch, shortest_length
from ._common import add_device_arg, machine, resolve_device
from ._partial_runs import Progress, add_args as add_output_args

NAME = "fp16"
HELP = "fp16 against the fp32 reference: every encoding's fast attention path in half precision"
SETTINGS = ("device", "size", "batch", "length", "vocab", "tolerance", "methods", "impl")  # the JSON's settings
HEADER = "| pe | max abs log-prob diff | argmax agreement | gradient rel. diff | ok |\n|---|---|---|---|---|\n"


def compare(pe: str, size: str, batch: int, length: int, vocab: int, device: str, impl: str = "auto") -> dict:
    import torch

    src, lengths, prev, target = padded_batch(batch, length, vocab, device)  # as fairseq batches them
    real = target.ne(PAD)  # (B,T) real target tokens
    out = {}
    for name, dtype, run_impl in (("fp32", torch.float32, "reference"), ("fp16", torch.float16, impl)):
        model, _ = build_model(pe, size, vocab, "none", device)
        for module in (model.encoder.pe, model.decoder.pe):
            module.attention_impl = run_impl
        model = model.to(dtype).train()
        for m in model.modules():  # no dropout: the two runs must see the same function
            if isinstance(m, torch.nn.Dropout) or hasattr(m, "apply_during_inference"):
                m.p = 0.0
        logits, _ = model(src, lengths, prev)
        lprobs = torch.log_softmax(logits.float(), dim=-1)  # (B,T,V)
        loss = -(lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1) * real).sum()
        loss.backward()
        grad = torch.cat([p.grad.float().flatten() for p in model.parameters() if p.grad is not None])
        out[name] = (lprobs.detach(), grad)
    (ref, gref), (half, ghalf) = out["fp32"], out["fp16"]
    diff = (half - ref).abs()[real]  # (N real tokens, V)
    agree = (half.argmax(-1) == ref.argmax(-1))[real].float().mean()
    return {"pe": pe, "max_abs_lprob_diff": float(diff.max()), "argmax_agreement": float(agree),
            "grad_rel_diff": float((ghalf - gref).norm() / gref.norm())}


def line(r) -> str:
    return (f"| {r['pe']} | {r['max_abs_lprob_diff']:.4f} | {r['argmax_agreement']:.4f} | {r['grad_rel_diff']:.4f} | "
            f"{'yes' if r['ok'] else 'NO'} |\n")


def add_args(parser):
    from pe_plugin.encodings import PE_REGISTRY
    from pe_plugin.models.pe_transformer import ATTENTION_IMPLS

    add_device_arg(parser)
    parser.add_argument("--size", default="base", choices=sorted(SUFFIX_OF_CLASS), help="size class of the models")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=50)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--tolerance", type=float, default=0.05, help="largest log-probability difference allowed")
    parser.add_argument("--methods", nargs="+", default=None, choices=list(PE_REGISTRY), metavar="PE")
    parser.add_argument("--impl", default="auto", choices=[i for i in ATTENTION_IMPLS if i != "reference"],
                        help="the fp16 run's --pe-attention-impl (default: auto; triton: Shaw's fused kernels)")
    add_output_args(parser, "fp16_check")


def run(args) -> int:
    with _common.quiet_fairseq():  # one model summary per build is noise here
        return check(args)


def check(args) -> int:
    from pe_plugin.encodings import PE_REGISTRY

    args.device = resolve_device(args.device)
    fixed = dict({k: v for k, v in vars(args).items() if k in SETTINGS}, methods=list(args.methods or PE_REGISTRY),
                 **{k: machine(args.device)[k] for k in ("torch", "device_name")})
    progress = Progress(args, "pe-bench fp16", [(pe,) for pe in fixed["methods"]], fixed, what="encodings")

    def report():
        rows = [{k: v for k, v in m.items() if k != "key"} for m in progress.measurements()]
        return dict(fixed, json=args.json), rows, HEADER + "".join(line(r) for r in rows)

    progress.write = progress.writer(args, report, "fp16 against the fp32 reference", rows="rows")
    print(f"fp16 ({args.impl}) vs fp32 (reference): device {args.device} "
          f"({fixed['device_name']}), torch {fixed['torch']}, "
          f"size {args.size}, batch {args.batch}, lengths {shortest_length(args.length)}-{args.length}, vocab {args.vocab}")
    print(HEADER + "".join(line(r) for r in progress.measurements()), end="")  # those a --resume keeps
    for (pe,) in progress.missing():
        row = compare(pe, args.size, args.batch, args.length, args.vocab, args.device, args.impl)
        row["ok"] = row["max_abs_lprob_diff"] <= args.tolerance and row["grad_rel_diff"] <= 0.05
        progress.add((pe,), row)
        print(line(row), end="", flush=True)
        if progress.stop_now():
            break
    failed = [m["pe"] for m in progress.measurements() if not m["ok"]]
    progress.finish()
    if failed:
        print(f"fp16 differs from fp32 beyond the tolerance for: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


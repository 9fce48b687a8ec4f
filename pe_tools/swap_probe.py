"""Word-swap probe of a translation checkpoint: how much do local and global word-order changes of the source
change the translation?

    pe-swap-probe CHECKPOINT --data DATA_BIN [--subset test] [--max-sentences N] [--out DIR]
    (python scripts/swap_probe.py from a checkout)

For each source sentence x of --subset (binarised, BPE words kept whole) and its beam output y = T(x):
local swap (a window of 3-5 words permuted), global swap (two distant spans of 1-3 words exchanged) and a
random full shuffle (control). Reported per perturbation: Δout = 100 - chrF++(T(x'), y) (corpus level, also
BLEU and the sentence mean), ΔNLL = (NLL(y|x') - NLL(y|x)) / |y| by forced decoding, the share of changed
outputs, examples, and the global / local sensitivity ratio. Details: pe_plugin/analysis/swap.py.

Output: --out/swap_probe.json (default: swap/ beside the checkpoint), written atomically, with the model's
encoding signature. Sentences longer than the model's source positions (LAPE's and PosNet's L_max, or
--max-source-positions) are left out of the probe, named in a warning and in the JSON (``left_out``), rather
than stopping it half-way.
"""
import argparse
import sys

from pe_plugin.analysis import model_io, swap
from pe_plugin.models.validation import pe_signature

from .file_io import dump_json


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    model_io.add_checkpoint_args(p, "binarised data directory")
    p.add_argument("--subset", default="test", help="split whose source sentences are perturbed")
    p.add_argument("--max-sentences", type=int, help="use the first N sentences of the split")
    p.add_argument("--kinds", nargs="+", default=list(swap.PERTURBATIONS), choices=list(swap.PERTURBATIONS))
    p.add_argument("--seed", type=int, default=1, help="seed of the perturbations")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--max-len-a", type=float, default=0.0, help="max output length a*|x|+b (fairseq's defaults)")
    p.add_argument("--max-len-b", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=32, help="sentences per forward pass")
    model_io.add_output_args(p, "swap")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    model, task, out = model_io.open_checkpoint(args, "swap")
    task.load_dataset(args.subset)
    ds = task.dataset(args.subset)
    n = len(ds) if args.max_sentences is None else min(args.max_sentences, len(ds))
    srcs = [ds.src[i] for i in range(n)]
    limit = model.encoder.max_positions()  # tokens, end of sentence included (pe_plugin/encoding_parts/limits.py)
    left_out = [i for i, src in enumerate(srcs) if len(src) > limit]
    if left_out:
        shown = ", ".join(f"{i} ({len(srcs[i])} tokens)" for i in left_out[:20])
        print(f"warning: {len(left_out)} of {n} {args.subset} sentences are longer than the model's {limit} source "
              f"positions and are left out of the probe: sentence ids {shown}"
              + (f" and {len(left_out) - 20} more" if len(left_out) > 20 else ""), file=sys.stderr)
        srcs = [src for i, src in enumerate(srcs) if len(src) <= limit]
    report = swap.swap_probe(model, task, srcs, args.kinds, args.seed, args.beam, args.max_len_a, args.max_len_b,
                             args.batch_size)
    report = {"pe_signature": pe_signature(model), "checkpoint": str(args.checkpoint), "data": str(args.data),
              "subset": args.subset, "left_out": left_out,
              "settings": {k: v for k, v in vars(args).items() if k not in ("checkpoint", "data")},
              **report}
    dump_json(out / "swap_probe.json", report)
    for kind, r in report["perturbations"].items():
        r = {k: round(v, 9) + 0.0 if isinstance(v, float) else v for k, v in r.items()}  # no "-0.000"
        if r["n"]:
            print(f"{kind:8s} n={r['n']:5d}  Δout(chrF++) {r['delta_out_chrf']:7.3f}  "
                  f"Δout(BLEU) {r['delta_out_bleu']:7.3f}  "
                  f"ΔNLL/token {r['delta_nll_per_token']:+.5f}  changed {100 * r['changed_outputs']:5.1f}%")
    print(f"wrote {out / 'swap_probe.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

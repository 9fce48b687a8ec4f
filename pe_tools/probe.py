"""Identical-word probing of a checkpoint's encoder and decoder self-attention (Wang et al. 2021; Chen et al. 2023).

    pe-probe CHECKPOINT --data DATA_BIN [--length 64] [--words 100] [--out DIR]
    (python scripts/probe.py from a checkout)

Each probe word w gives the encoder [w] x L + [EOS] and the decoder [EOS] + [w'] x (L-1); the maps are averaged
over heads and words, per layer and over all layers. Words: whole-word, alphabetic dictionary entries of
length >= 2 among the --max-rank most frequent (relaxed step by step for tiny dictionaries; the report says
which rule was used); with a joined dictionary, encoder words are those seen more often on the source side
of --word-split, decoder words those seen more often on the target side.

Outputs in --out (default: probe/ beside the checkpoint), each written atomically:
  probe.json          indicators per side, variant (with / without EOS) and layer (+ mean), the settings and the
                      model's encoding signature; NaN is written as null, +inf as "inf"
  probe_maps.npz      the averaged maps: encoder (N, L+1, L+1) with EOS last, decoder (N, L, L) with EOS first
  probe_encoder.png, probe_decoder.png   heatmaps without EOS, one panel per layer and the mean, under a one-line
                      title (encoding, side, L); the encoding signature is in the PNG's Description field

Indicators (pe_plugin/analysis/indicators.py): Locality, Sym_code, Sym_abs (Chen); AIV, OPR (tie = 0 and tie
= 0.5; all offsets and the first --first-k), SD, DB (Wang; DB = preceding / succeeding within --db-range).
Decoder maps are causal: AIV and OPR use j <= i, symmetry is undefined (null) and DB is inf.
"""
import argparse
import io
import sys
from typing import Dict, Tuple

import numpy as np

from pe_plugin.analysis import model_io, probing
from pe_plugin.models.validation import pe_signature

from .figures import png_bytes, pyplot


# the heatmaps: inches per panel, figure height and resolution (3 panels: 1,305 x 480 pixels)
from .file_io import dump_json, write_atomic
PANEL_INCHES, HEIGHT_INCHES, DPI = 2.7, 3.2, 150


def heatmap_png(stacked: np.ndarray, names, title: str, description: str = "") -> bytes:
    """One panel per layer map (N+1, T, T) under a one-line ``title``; colour scale from 0 to the panel maximum, so
    that a uniform map shows as one flat colour rather than as its rounding noise. ``description`` (the encoding
    signature) goes into the PNG's Description field, not onto the figure."""
    plt = pyplot()
    n = len(stacked)
    fig, axes = plt.subplots(1, n, figsize=(PANEL_INCHES * n + 0.6, HEIGHT_INCHES), squeeze=False,
                             layout="constrained")
    for ax, m, name in zip(axes[0], stacked, names):
        im = ax.imshow(m, cmap="viridis", interpolation="nearest", vmin=0.0, vmax=max(float(m.max()), 1e-12))
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("key", fontsize=9)
        ax.tick_params(labelsize=8)
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.02).ax.tick_params(labelsize=7)
    axes[0][0].set_ylabel("query", fontsize=9)
    fig.suptitle(title, fontsize=11)
    return png_bytes(fig, dpi=DPI, metadata={"Title": title, "Description": description})


def npz_bytes(arrays: Dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def probe(model, task, data: str, args) -> Tuple[Dict[str, object], Dict[str, np.ndarray]]:
    """Probe ``model``: the report (the CLI's JSON) and the averaged maps of ``identical_word_maps``."""
    src_pref, tgt_pref = model_io.language_masks(task, data, args.word_split)
    src_words, src_info = probing.probe_words(task.source_dictionary, args.words, args.max_rank, args.seed, src_pref)
    tgt_words, tgt_info = probing.probe_words(task.target_dictionary, args.words, args.max_rank, args.seed, tgt_pref)
    if not src_words or not tgt_words:
        raise SystemExit("error: the dictionary has no entries to probe with (only special symbols)")
    maps = probing.identical_word_maps(model, src_words, tgt_words, args.length, task.source_dictionary.eos(),
                                       args.batch_size)
    report = {
        "pe_signature": pe_signature(model),
        "checkpoint": str(args.checkpoint),
        "data": str(data),
        "settings": {"length": args.length, "words": args.words, "max_rank": args.max_rank, "seed": args.seed,
                     "db_range": args.db_range, "first_k": args.first_k, "word_split": args.word_split},
        "words": {"encoder": src_info, "decoder": tgt_info},
        "conventions": {
            "encoder_input": "[w] x L + [EOS]; with_special keeps the EOS (last row/column)",
            "decoder_input": "[EOS] + [w'] x (L-1), causal; with_special keeps the EOS (first row/column)",
            "without_special": "EOS row and column dropped, rows re-normalised",
            "averaging": "heads and words averaged; 'mean' = mean of the layer maps",
            "db": "preceding / succeeding within db_range (Wang et al.'s text); > 1 = attends more to preceding",
            "opr": "ties count 0 (Wang) in 'opr', 0.5 in 'opr_tie_half'; sequences of length 1 excluded",
            "aiv": "population variances; null when var(A) < 1e-12",
            "causal": "decoder: AIV/OPR over j <= i, symmetry indicators null, DB inf",
            "json": "NaN written as null, infinity as the string 'inf'",
        },
        "indicators": probing.indicator_table(maps, args.db_range, args.first_k),
    }
    return report, maps


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    model_io.add_checkpoint_args(p, "binarised data directory (dictionaries)")
    p.add_argument("--length", type=int, default=64, help="probe length L (indicators depend on L; keep it fixed)")
    p.add_argument("--words", type=int, default=100, help="number of probe words")
    p.add_argument("--max-rank", type=int, default=5000, help="draw words among the N most frequent entries")
    p.add_argument("--seed", type=int, default=1, help="seed of the word sample")
    p.add_argument("--word-split", default="train", help="split whose token counts tell source from target words")
    p.add_argument("--db-range", type=int, default=20, help="offset range l of direction balance")
    p.add_argument("--first-k", type=int, default=20, help="sequence length of the first-k OPR variant")
    p.add_argument("--batch-size", type=int, default=25, help="probe words per forward pass")
    model_io.add_output_args(p, "probe")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.length < 3 or args.words < 1:
        raise SystemExit("error: --length must be >= 3 and --words >= 1")
    model, task, out = model_io.open_checkpoint(args, "probe")
    report, maps = probe(model, task, args.data, args)
    for side, layer_maps in maps.items():
        stacked = probing.variants(side, layer_maps)["without_special"]
        pe = getattr(model, side).pe
        title = f"{pe.name}, {side} self-attention: identical-word probe, L={args.length}"
        write_atomic(out / f"probe_{side}.png", heatmap_png(stacked, probing.layer_names(len(layer_maps)), title,
                                                             description=pe.signature()))
    write_atomic(out / "probe_maps.npz", npz_bytes(maps))
    dump_json(out / "probe.json", report)
    for side in probing.SIDES:
        row = report["indicators"][side]["without_special"]["mean"]
        print(f"{side:8s} (mean of layers, w/o EOS): " + "  ".join(
            f"{k} {v:.4f}" for k, v in row.items() if isinstance(v, float)))
    print(f"wrote {out / 'probe.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Gather what pe-probe, pe-swap-probe and pe-evaluate wrote for the annealed Multi30k En-De models into one CSV
and four figures (examples/multi30k/analysis/README.md says which commands made the inputs).

    python -m devtools.collect_analysis --probes DIR --evaluate DIR [--out examples/multi30k/analysis]

--probes DIR holds one folder per encoding (DIR/METHOD/probe.json, probe_maps.npz, swap_probe.json); --evaluate
DIR is pe-evaluate's --out-dir (results.csv, results_length.csv, prefix "results"), run on every encoding of
METHODS. Writes into --out:

  analysis.csv   one row per encoding, side, variant and layer of the identical-word probe (kind "probe": the
                 indicators exactly as probe.json holds them, NaN and inf as the JSON has them: empty and "inf"),
                 and one row per encoding of kind "model": whole-test sacreBLEU / chrF++, sacreBLEU and chrF++ per
                 source-length bucket, and the word-swap probe (Δout chrF++ and BLEU, ΔNLL per token, share of
                 changed outputs, global / local ratio)
  summary.md     the tables docs/analysis.md shows, rendered from analysis.csv as written (``render_summary``)
  probe_maps.csv the encoder maps the probe figure shows (L = --figure-length, the mean of the layers, EOS dropped):
                 one row per encoding and query position, one column per key position
  probe_maps.png, probe_indicators.png, swap_probe.png, bleu_by_length.png

Adding a model to the recorded analysis: an encoding of METHODS without a folder in --probes keeps what --out
already records of it: its probe rows and word-swap columns from --out/analysis.csv, its map from
--out/probe_maps.csv. Its BLEU and chrF++ columns come from --evaluate like every encoding's, and must be the
recorded ones to the last digit (else the recorded probes belong to other translations, and the run stops). The
other three figures are drawn from the CSV rows; probe_maps.png only where the maps of every encoding are at hand,
else the one in --out is left as it was (the run says whose maps it lacks).

The probes ran at two lengths (--length 20 and the default 64, in DIR/METHOD/len20/ and DIR/METHOD/): the CSV's
``length`` column tells them apart; the figures of the probe show L = 20 unless --figure-length says otherwise.
"""
import argparse
import csv
import io
import json
import math
import sys
from pathlib import Path

import numpy as np

from pe_plugin.analysis import probing

from pe_tools.figures import png_bytes, pyplot
from pe_tools.file_io import csv_text, write_all_atomic
from pe_tools.tables import markdown_table

# the models analysed: the encodings of the recorded annealed runs (examples/multi30k/results), in table order
METHODS = ["nope", "sape", "lape", "rpe", "t5", "at5", "posnet_embed", "posnet_attn", "rope", "alibi", "kerple"]
INDICATORS = ["locality", "sym_code", "sym_abs", "aiv", "opr", "opr_tie_half", "opr_first20", "opr_first20_tie_half",
              "sd", "db20"]
PROBE_COLUMNS = ["pe", "kind", "side", "variant", "layer", "length", "words", *INDICATORS]
KINDS = ["local", "global", "shuffle"]
SWAP = {"delta_out_chrf": "dout_chrf", "delta_out_bleu": "dout_bleu", "delta_nll_per_token": "dnll",
        "changed_outputs": "changed"}
SWAP_PREFIXES = ("swap_sentences", *(f"{name}_" for name in SWAP.values()), "ratio_")  # the word-swap columns
DEFAULT_OUT = Path("examples") / "multi30k" / "analysis"
DPI = 150


def cell(x):
    """A JSON value as a CSV cell: None (NaN in the JSON) empty, the rest as written."""
    return "" if x is None else x


def probe_rows(method: str, report: dict) -> list:
    rows = []
    for side, by_variant in report["indicators"].items():
        for variant, by_layer in by_variant.items():
            for layer, values in by_layer.items():
                rows.append({"pe": method, "kind": "probe", "side": side, "variant": variant,
                             "layer": layer.replace("layer", ""), "length": report["settings"]["length"],
                             "words": report["words"][side]["used"],
                             **{k: cell(values[k]) for k in INDICATORS}})
    return rows


def bucket_key(label: str) -> str:
    """'≤9' -> 'le9', '10-12' -> '10_12', '≥20' -> 'ge20'."""
    return label.replace("≤", "le").replace("≥", "ge").replace("-", "_")


def swap_columns(swap: dict) -> dict:
    """The word-swap columns of a model row, from pe-swap-probe's swap_probe.json."""
    row = {"swap_sentences": swap["n_sentences"]}
    for kind in KINDS:
        r = swap["perturbations"][kind]
        for key, name in SWAP.items():
            row[f"{name}_{kind}"] = r[key]
    ratio = swap["sensitivity_ratio_global_over_local"]
    for key, name in SWAP.items():
        if key in ratio:
            row[f"ratio_{name}"] = cell(ratio[key])
    return row


def model_row(method: str, whole: dict, buckets: list, swap: dict) -> dict:
    """A model row: the scores of pe-evaluate's rows, then the word-swap columns (``swap_columns``)."""
    row = {"pe": method, "kind": "model", "bleu": float(whole["bleu"]), "chrf": float(whole["chrf"])}
    for b in buckets:
        row[f"bleu_{bucket_key(b['bucket'])}"] = float(b["bleu"])
    for b in buckets:
        row[f"chrf_{bucket_key(b['bucket'])}"] = float(b["chrf"])
    return {**row, **swap}


def read_csv(path: Path) -> list:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def probe_folders(probes: Path, method: str) -> list:
    """The folders of one encoding's probes: DIR/METHOD and DIR/METHOD/len*/ (other lengths)."""
    return [probes / method, *sorted(p.parent for p in (probes / method).glob("len*/probe.json"))]


def read_maps(path: Path, length: int) -> dict:
    """The maps of probe_maps.csv at this length, {pe: (L, L) array}; none where the file is absent."""
    maps = {}
    for r in read_csv(path) if path.is_file() else []:
        if int(r["length"]) == length:
            maps.setdefault(r["pe"], []).append([float(r[f"key{k + 1}"]) for k in range(length)])
    return {m: np.array(a) for m, a in maps.items()}


def maps_csv(maps: dict, length: int) -> str:
    """probe_maps.csv: one row per encoding (in METHODS order) and query position, one column per key position."""
    return csv_text([{"pe": m, "length": length, "query": q + 1,
                      **{f"key{k + 1}": repr(float(maps[m][q, k])) for k in range(length)}}
                     for m in METHODS if m in maps for q in range(length)])


def gather(probes: Path, evaluate: Path, figure_length: int, recorded: Path):
    """(rows, maps, kept): the CSV rows, the encoder maps at ``figure_length`` and the encodings whose probes were
    kept from ``recorded`` (the folder of the recorded analysis.csv and probe_maps.csv) for want of a folder in
    ``probes``."""
    whole = {r["system"]: r for r in read_csv(evaluate / "results.csv")}
    length = read_csv(evaluate / "results_length.csv")
    missing = [m for m in METHODS if m not in whole]
    if missing:
        raise SystemExit(f"{evaluate / 'results.csv'} has no scores of {', '.join(missing)}: pe-evaluate scores "
                         "every encoding (--baseline sape, --system for each other)")
    kept = [m for m in METHODS if not (probes / m).is_dir()]
    old = read_csv(recorded / "analysis.csv") if kept and (recorded / "analysis.csv").is_file() else []
    maps = read_maps(recorded / "probe_maps.csv", figure_length)
    rows, models = [], []
    for m in METHODS:
        buckets = [b for b in length if b["system"] == m]
        if m in kept:
            old_probes = [{k: r[k] for k in PROBE_COLUMNS} for r in old if r["pe"] == m and r["kind"] == "probe"]
            old_model = [r for r in old if r["pe"] == m and r["kind"] == "model"]
            if not old_probes or len(old_model) != 1:
                raise SystemExit(f"no folder {probes / m} and no rows of {m} in {recorded / 'analysis.csv'}")
            swap = {k: v for k, v in old_model[0].items() if k.startswith(SWAP_PREFIXES)}
            row = model_row(m, whole[m], buckets, swap)
            changed = [k for k in row if k.startswith(("bleu", "chrf")) and str(row[k]) != old_model[0].get(k)]
            if changed:
                raise SystemExit(f"{m}: pe-evaluate's {', '.join(changed)} differ from {recorded / 'analysis.csv'}: "
                                 f"the recorded probes of {m} belong to other translations; probe it again "
                                 f"({probes / m})")
            rows += old_probes
            models.append(row)
            continue
        for folder in probe_folders(probes, m):
            report = json.loads((folder / "probe.json").read_text())
            rows += probe_rows(m, report)
            if report["settings"]["length"] == figure_length:
                with np.load(folder / "probe_maps.npz") as z:
                    maps[m] = probing.variants("encoder", z["encoder"])["without_special"][-1]  # mean of layers
        swap = json.loads((probes / m / "swap_probe.json").read_text())
        models.append(model_row(m, whole[m], buckets, swap_columns(swap)))
    rows.sort(key=lambda r: (METHODS.index(r["pe"]), int(r["length"])))  # stable: probe.json's order within
    # the model rows carry the probe columns empty, the probe rows the model columns empty
    header = list(rows[0]) + [k for k in models[0] if k not in rows[0]]
    return [{k: r.get(k, "") for k in header} for r in rows + models], maps, kept


# ---- the tables of docs/analysis.md, from the CSV as written -----------------------------------------------

def fmt(value: str, digits: int) -> str:
    """A CSV cell with ``digits`` decimals; an empty cell (NaN) as '–'."""
    return "–" if value == "" else f"{round(float(value), digits) + 0.0:.{digits}f}"  # + 0.0: no "-0.000"


def render_summary(rows: list) -> str:
    """Markdown tables from the CSV rows as read back (strings): the identical-word probe at the shorter length
    (the map of the mean of the layers, EOS dropped; Locality and AIV also at the longer length, DB_20 also of
    layer 1), then the word-swap probe and sacreBLEU (whole test set, shortest and longest bucket)."""
    layered = [r for r in rows if r["kind"] == "probe" and r["variant"] == "without_special"]
    lengths = sorted({int(r["length"]) for r in layered})
    short, long_ = lengths[0], lengths[-1]

    def get(m, side, length, key, layer="mean"):
        return next(r[key] for r in layered if r["pe"] == m and r["side"] == side and int(r["length"]) == length
                    and r["layer"] == layer)

    out = [f"Identical-word probe (pe-probe, 100 words): encoder self-attention unless the column says decoder, map "
           f"of the mean of the 3 layers, EOS dropped; L = {short} unless the column says L = {long_}:", ""]
    head = ["pe", "Locality", f"Locality L = {long_}", "Sym_code", "Sym_abs", "AIV", f"AIV L = {long_}", "OPR", "SD",
            "DB_20", "DB_20 layer 1", "decoder Locality", "decoder OPR"]
    table = []
    for m in METHODS:
        cells = [fmt(get(m, "encoder", short, "locality"), 3), fmt(get(m, "encoder", long_, "locality"), 3),
                 fmt(get(m, "encoder", short, "sym_code"), 3), fmt(get(m, "encoder", short, "sym_abs"), 3),
                 fmt(get(m, "encoder", short, "aiv"), 3), fmt(get(m, "encoder", long_, "aiv"), 3),
                 *(fmt(get(m, "encoder", short, k), 3) for k in ("opr", "sd", "db20")),
                 fmt(get(m, "encoder", short, "db20", "1"), 3),
                 *(fmt(get(m, "decoder", short, k), 3) for k in ("locality", "opr"))]
        table.append([m, *cells])
    out.append(markdown_table(head, table, "l" + "r" * (len(head) - 1), compact_rule=True))
    models = {r["pe"]: r for r in rows if r["kind"] == "model"}
    buckets = [k[len("bleu_"):] for k in rows[0] if k.startswith("bleu_")]
    first, last = buckets[0], buckets[-1]
    n = models["sape"]["swap_sentences"]
    out += ["", f"Word-swap probe (pe-swap-probe, the first {n} test sources): Δout = 100 - chrF++(T(x'), T(x)), "
                f"ΔNLL = forced-decoding NLL change of T(x) per token; sacreBLEU of the recorded average-of-5 "
                f"translations (pe-evaluate), whole test set and source-length buckets {label(first)} and "
                f"{label(last)} words:", ""]
    head = ["pe", "Δout local", "Δout global", "Δout shuffle", "ΔNLL local", "ΔNLL global", "ΔNLL shuffle",
            "ΔNLL global / local", "BLEU", f"BLEU {label(first)}", f"BLEU {label(last)}"]
    table = []
    for m in METHODS:
        r = models[m]
        cells = [*(fmt(r[f"dout_chrf_{k}"], 2) for k in KINDS), *(fmt(r[f"dnll_{k}"], 3) for k in KINDS),
                 fmt(r["ratio_dnll"], 2), fmt(r["bleu"], 2), fmt(r[f"bleu_{first}"], 2), fmt(r[f"bleu_{last}"], 2)]
        table.append([m, *cells])
    out.append(markdown_table(head, table, "l" + "r" * (len(head) - 1), compact_rule=True))
    return "\n".join(out) + "\n"


def label(key: str) -> str:
    """'le9' -> '≤9', '10_12' -> '10-12', 'ge20' -> '≥20' (bucket_key's inverse)."""
    return key.replace("le", "≤").replace("ge", "≥").replace("_", "-")


# ---- figures ---------------------------------------------------------------------------------------------

def probe_maps_png(maps: dict, length: int) -> bytes:
    plt = pyplot()
    cols = math.ceil(len(maps) / 2)
    fig, axes = plt.subplots(2, cols, figsize=(2.6 * cols, 5.8), layout="constrained")
    for ax in axes.flat[len(maps):]:
        ax.set_axis_off()
    for ax, (m, a) in zip(axes.flat, maps.items()):
        im = ax.imshow(a, cmap="viridis", interpolation="nearest", vmin=0.0, vmax=max(float(a.max()), 1e-12))
        ax.set_title(m + (" (uniform)" if float(a.max() - a.min()) < 1e-9 else ""), fontsize=11)
        ax.set_xlabel("key position", fontsize=9)
        ax.set_ylabel("query position", fontsize=9)
        ax.tick_params(labelsize=8)
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.02).ax.tick_params(labelsize=7)
    fig.suptitle(f"Encoder self-attention on a repeated word (L={length}, mean of 3 layers and 4 heads, "
                 "100 words, EOS dropped)", fontsize=12)
    return png_bytes(fig, dpi=DPI)


def probe_indicators_png(rows: list, length: int) -> bytes:
    plt = pyplot()
    shown = [("locality", "Locality (Chen; higher = more local)"), ("sym_abs", "Sym_abs (1 = symmetric rows)"),
             ("opr", "OPR (Wang; 0 = falls with distance)"), ("db20", "DB_20 (Wang; preceding / succeeding)")]
    enc = [r for r in rows if r["kind"] == "probe" and r["side"] == "encoder" and r["variant"] == "without_special"
           and int(r["length"]) == length]
    fig, axes = plt.subplots(2, 2, figsize=(12, 7), layout="constrained")
    x = np.arange(len(METHODS))
    for ax, (key, title) in zip(axes.flat, shown):
        for k, layer in enumerate(["1", "2", "3"]):
            vals = [next(r[key] for r in enc if r["pe"] == m and r["layer"] == layer) for m in METHODS]
            vals = [np.nan if v == "" else float(v) for v in vals]
            ax.bar(x + (k - 1) * 0.27, vals, 0.27, label=f"layer {layer}")
        ax.set_xticks(x, METHODS, rotation=35, ha="right", fontsize=9)
        ax.set_title(title, fontsize=11)
        ax.set_ylabel(key, fontsize=9)
        if key == "locality":
            uniform = next(float(r[key]) for r in enc if r["pe"] == "nope" and r["layer"] == "mean")
            ax.axhline(uniform, color="grey", ls="--", lw=1, label="uniform map")
        if key == "db20":
            ax.axhline(1.0, color="grey", ls="--", lw=1)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"Encoder identical-word probe indicators per layer (L={length}, EOS dropped)", fontsize=12)
    return png_bytes(fig, dpi=DPI)


def swap_png(models: list) -> bytes:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), layout="constrained")
    x = np.arange(len(METHODS))
    for ax, (name, title, ylabel) in zip(axes, [
            ("dout_chrf", "Output change", "Δout = 100 - chrF++(T(x'), T(x))"),
            ("dnll", "Likelihood change of T(x)", "ΔNLL per token (nats)")]):
        for k, kind in enumerate(KINDS):
            ax.bar(x + (k - 1) * 0.27, [float(r[f"{name}_{kind}"]) for r in models], 0.27, label=kind)
        ax.set_xticks(x, METHODS, rotation=35, ha="right", fontsize=9)
        ax.set_title(title, fontsize=11)
        ax.set_ylabel(ylabel, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(title="perturbation", fontsize=8)
    fig.suptitle(f"Word-swap probe, first {models[0]['swap_sentences']} test sources", fontsize=12)
    return png_bytes(fig, dpi=DPI)


def bleu_by_length_png(models: list, labels: list) -> bytes:
    plt = pyplot()
    keys = [f"bleu_{bucket_key(b)}" for b in labels]
    base = next(r for r in models if r["pe"] == "sape")
    grid = np.array([[float(r[k]) for k in keys] for r in models])
    delta = grid - np.array([float(base[k]) for k in keys])
    fig, ax = plt.subplots(figsize=(7.5, 5.5), layout="constrained")
    lim = float(np.abs(delta).max())
    im = ax.imshow(delta, cmap="RdBu", vmin=-lim, vmax=lim, aspect="auto")
    for i in range(grid.shape[0]):
        for j in range(grid.shape[1]):
            ax.text(j, i, f"{grid[i, j]:.1f}", ha="center", va="center", fontsize=9)
    ax.set_xticks(range(len(labels)), labels)
    ax.set_yticks(range(len(models)), [r["pe"] for r in models])
    ax.set_xlabel("source length (Moses-tokenised words)", fontsize=10)
    ax.set_ylabel("encoding", fontsize=10)
    fig.colorbar(im, ax=ax, label="sacreBLEU minus SAPE's in the bucket")
    ax.set_title("sacreBLEU by source length (cell: BLEU; colour: vs SAPE)", fontsize=11)
    return png_bytes(fig, dpi=DPI)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--probes", required=True, type=Path,
                   help="folder of METHOD/probe.json, probe_maps.npz, swap_probe.json; an encoding without a folder "
                        "here keeps its probe rows, word-swap columns and map from --out's analysis.csv and "
                        "probe_maps.csv")
    p.add_argument("--evaluate", required=True, type=Path, help="pe-evaluate's --out-dir (prefix 'results'), with "
                                                                "the scores of every encoding")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the folder of the analysis, read (the recorded "
                                                                 "rows of encodings without a probe folder) and "
                                                                 "written (default: %(default)s)")
    p.add_argument("--figure-length", type=int, default=20, help="probe length L of the probe figures")
    args = p.parse_args(argv)
    table, maps, kept = gather(args.probes, args.evaluate, args.figure_length, args.out)
    text = csv_text(table)
    rows = list(csv.DictReader(io.StringIO(text)))  # the figures and tables are drawn from the CSV as written
    models = [r for r in rows if r["kind"] == "model"]
    labels = [label(k[len("bleu_"):]) for k in models[0] if k.startswith("bleu_")]
    outputs = {
        args.out / "analysis.csv": text,
        args.out / "summary.md": render_summary(rows),
        args.out / "probe_maps.csv": maps_csv(maps, args.figure_length),
        args.out / "probe_indicators.png": probe_indicators_png(rows, args.figure_length),
        args.out / "swap_probe.png": swap_png(models),
        args.out / "bleu_by_length.png": bleu_by_length_png(models, labels),
    }
    lacking = [m for m in METHODS if m not in maps]
    if not lacking:
        outputs[args.out / "probe_maps.png"] = probe_maps_png({m: maps[m] for m in METHODS}, args.figure_length)
    write_all_atomic(outputs)
    figures = sum(path.suffix == ".png" for path in outputs)
    print(f"wrote {args.out / 'analysis.csv'} ({len(table)} rows), summary.md, probe_maps.csv and {figures} figures")
    if kept:
        print(f"kept the recorded probe rows and word-swap columns of {', '.join(kept)} (no folder in {args.probes}); "
              f"their BLEU and chrF++ from {args.evaluate} are the recorded ones")
    if lacking:
        print(f"left probe_maps.png as it was: no L = {args.figure_length} map of {', '.join(lacking)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Validation curves of recorded runs: the validation loss fairseq-train logged against updates, one line per run,
one panel per size and training length (a size's runs of another --max-update or with flags changed after pe-train's
``--`` get a panel of their own, titled with their updates and changed flags), so that a reader sees where each
curve flattens (and whether it had, when training stopped).

    python -m pe_tools.recipes.curves [--results examples/multi30k/results] [--pair en-de] [--seed 1]
                                      [--sizes small annealed] --out FILE.png [--csv FILE.csv]

Reads each recorded run's train.log (pe-record keeps fairseq's logger lines) and command.json; the y axis is
fairseq's ``nll_loss`` on the validation set (cross-entropy in bits per target token, without label smoothing).
Standard library except for the plot (matplotlib).
"""
import argparse
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from ..command_line import fail
from ..figures import png_bytes, pyplot
from ..file_io import csv_text, write_atomic
from ..runs.identity import changes, max_update_of
from ..runs.run_dir import read_command, records
from ..scoring.style import system_style
from . import load_table, training_log

def valid_curve(log_text: str) -> List[Dict[str, float]]:
    """[{updates, loss, nll_loss}] of every validation in a training log, by update (a resumed run's repeated
    validations keep the last)."""
    return [{"updates": v.updates, "loss": v.get("loss"), "nll_loss": v.get("nll_loss")}
            for v in training_log.validations(log_text)]


def curves(results: Path, pair: str, seed: Optional[int], sizes: Optional[List[str]],
           methods: Optional[List[str]] = None) -> List[Dict]:
    """One row per validation of every recorded run of ``pair`` (and ``seed``, ``sizes``, ``methods`` when
    given)."""
    rows = []
    for folder in records(results):
        c = read_command(folder)
        if c.pair != pair or (seed is not None and int(c.seed) != seed) or (sizes and c.size not in sizes) \
                or (methods and c.method not in methods):
            continue
        log = folder / "train.log"
        for p in valid_curve(log.read_text(encoding="utf-8") if log.is_file() else ""):
            rows.append({"run": folder.name, "method": c.method, "size": c.size, "seed": int(c.seed),
                         "max_update": max_update_of(c.argv), "changes": " ".join(changes(c.record)), **p})
    return rows


def panel(row: Dict) -> Tuple[str, Optional[int], str]:
    """The panel a row is drawn in: its run's size, --max-update and changed flags."""
    return row["size"], row.get("max_update"), row.get("changes", "")


def panel_title(key: Tuple[str, Optional[int], str]) -> str:
    """``small, 1500 updates``; ``small, 200 updates`` and the changed flags on a second line for a changed run."""
    size, updates, changed = key
    return (f"{size}, {updates} updates" if updates is not None else size) + (f"\n(flags: {changed})" if changed else "")


def plot(rows: List[Dict], sizes: List[str], methods: List[str]) -> bytes:
    plt = pyplot()
    panels = [key for size in sizes for key in dict.fromkeys(panel(r) for r in rows) if key[0] == size]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.0), sharey=True, squeeze=False)
    for ax, key in zip(axes[0], panels):
        for i, method in enumerate(methods):
            pts = [(r["updates"], r["nll_loss"]) for r in rows if panel(r) == key and r["method"] == method]
            if pts:
                ax.plot(*zip(*pts), markersize=2.5, linewidth=1.1, label=method, **system_style(i))
        ax.set(title=panel_title(key), xlabel="updates", ylabel="validation nll (bits/token)")
        ax.grid(alpha=0.3)
    top = max(r["nll_loss"] for r in rows if r["updates"] >= 500) if any(r["updates"] >= 500 for r in rows) else None
    if top:
        axes[0][0].set_ylim(top=top * 1.05)  # the first updates (nll 8-10) would squash the part that matters
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.tight_layout()
    return png_bytes(fig, dpi=110, bbox_inches="tight")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m pe_tools.recipes.curves", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", type=Path, default=Path(load_table("multi30k")["results_dir"]),
                   help="recorded runs (default: the multi30k recipe's results_dir, where pe-record puts them)")
    p.add_argument("--pair", default="en-de")
    p.add_argument("--seed", type=int, default=None, help="only this seed (default: every seed)")
    p.add_argument("--sizes", nargs="+", help="the sizes, in this order (default: every size recorded); a panel for "
                                              "each size and training length")
    p.add_argument("--methods", nargs="+", help="only these methods, in this order (default: every one recorded)")
    p.add_argument("--rename", action="append", default=[], metavar="OLD=NEW",
                   help="plot method OLD as NEW (one encoding recorded under two names, e.g. "
                        "posnet_embed_lmax256=posnet_embed); repeatable")
    p.add_argument("--out", type=Path, required=True, help="the PNG to write")
    p.add_argument("--csv", type=Path, help="also write every point here")
    a = p.parse_args(argv)
    if bad := [r for r in a.rename if r.count("=") != 1 or not all(r.split("="))]:
        p.error(f"--rename {bad[0]!r}: expected OLD=NEW")
    rename = dict(r.split("=") for r in a.rename)
    rows = curves(a.results, a.pair, a.seed, a.sizes, a.methods and [*a.methods, *rename])
    for r in rows:
        r["method"] = rename.get(r["method"], r["method"])
    if not rows:
        return fail(f"no recorded run of {a.pair}" + (f" seed {a.seed}" if a.seed else "") + f" with validation "
                    f"lines in {a.results}/*/train.log; record runs with pe-record or pe-queue")
    sizes = a.sizes or list(dict.fromkeys(r["size"] for r in rows))
    methods = a.methods or list(dict.fromkeys(r["method"] for r in sorted(rows, key=lambda r: r["method"] != "sape")))
    write_atomic(a.out, plot(rows, sizes, methods))
    if a.csv:
        write_atomic(a.csv, csv_text(rows))
    print(f"wrote {a.out}" + (f" and {a.csv}" if a.csv else "") + f": {len({r['run'] for r in rows})} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Scores by source length: BLEU and chrF++ on the segments of each length bucket, each bucket tested against
the baseline with the same test, samples and seed as the whole set."""
import argparse
import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..figures import png_bytes, pyplot
from ..tables import markdown_table
from .inputs import InputError, Inputs, System
from .metrics import METRICS, MetricSpec
from .report import summary_columns
from .significance import score_systems, summarise
from .style import system_style

LENGTH_METRICS: Tuple[MetricSpec, ...] = tuple(spec for spec in METRICS if spec.key in ("bleu", "chrf"))
LENGTH_UNIT = "words (whitespace-separated tokens of the source line as given, before any tokenisation)"


def source_length(line: str) -> int:
    return len(line.split())


@dataclass(frozen=True)
class Bucket:
    lo: int  # fewest words, inclusive
    hi: Optional[int]  # most words, inclusive; None: no upper limit

    @property
    def label(self) -> str:
        if self.hi is None:
            return f"≥{self.lo}"
        if self.lo == 0:
            return f"≤{self.hi}"
        return str(self.lo) if self.lo == self.hi else f"{self.lo}-{self.hi}"

    def holds(self, n: int) -> bool:
        return self.lo <= n and (self.hi is None or n <= self.hi)


def parse_edges(value: str) -> List[int]:
    """``--length-buckets 10,20,30`` -> [10, 20, 30]: increasing whole numbers >= 0."""
    try:
        edges = [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        edges = []
    if not edges or any(e < 0 for e in edges) or any(a >= b for a, b in zip(edges, edges[1:])):
        raise InputError(f"--length-buckets {value!r}: expected increasing whole numbers >= 0, e.g. 10,20,30 "
                         "(buckets <=10, 11-20, 21-30, >=31 source words)")
    return edges


def quantile_edges(lengths: Sequence[int], q: int) -> List[int]:
    """Edges of ``q`` quantile buckets: for k = 1..q-1 the smallest length that at least k/q of the segments do
    not exceed (nearest rank); repeated edges and the longest length itself are dropped, so no bucket is empty."""
    ranked = sorted(lengths)
    n = len(ranked)
    return sorted({ranked[-(-k * n // q) - 1] for k in range(1, q)} - {ranked[-1]})


def length_buckets(lengths: Sequence[int], args: argparse.Namespace) -> List[Bucket]:
    edges = parse_edges(args.length_buckets) if args.length_buckets else quantile_edges(lengths, args.length_quantiles)
    los = [0] + [e + 1 for e in edges]
    return [Bucket(lo, hi) for lo, hi in zip(los, [*edges, None])]


def check_length_options(args: argparse.Namespace) -> None:
    if args.length_buckets and args.length_quantiles:
        raise InputError("--length-buckets and --length-quantiles: give one of them")
    wanted = args.length_buckets or args.length_quantiles is not None
    if wanted and not args.source:
        raise InputError("--length-buckets/--length-quantiles need the source file: pass --source FILE "
                         "(line-aligned with --ref)")
    if args.source and not wanted:
        raise InputError(f"--source {args.source}: pass --length-buckets EDGES or --length-quantiles N as well")
    if args.length_buckets:
        parse_edges(args.length_buckets)
    if args.length_quantiles is not None and args.length_quantiles < 2:
        raise InputError(f"--length-quantiles {args.length_quantiles}: at least 2 buckets")


def subset(inputs: Inputs, index: Sequence[int]) -> Inputs:
    """The inputs restricted to the segments ``index`` (reference, every run of every system)."""
    def pick(lines: List[str]) -> List[str]:
        return [lines[i] for i in index]

    def cut(s: System) -> System:
        return System(s.name, s.files, [pick(run) for run in s.runs], s.meta, s.run_meta)

    return Inputs(inputs.ref_file, pick(inputs.ref), cut(inputs.baseline), [cut(s) for s in inputs.systems],
                  inputs.source_file, pick(inputs.source) if inputs.source is not None else None)


def score_length_buckets(inputs: Inputs, args: argparse.Namespace) -> Dict[str, Any]:
    """Every bucket's segments scored and tested against the baseline exactly as the whole test set is
    (``score_systems`` on the subset, same test, samples and seed); empty buckets are kept, without scores."""
    lengths = [source_length(line) for line in inputs.source]
    buckets = []
    for b in length_buckets(lengths, args):
        index = [i for i, n in enumerate(lengths) if b.holds(n)]
        entry: Dict[str, Any] = {"label": b.label, "min_words": b.lo, "max_words": b.hi, "segments": len(index)}
        if index:
            sub = subset(inputs, index)
            scored = score_systems(sub, args, LENGTH_METRICS)
            entry["signatures"] = scored["signatures"]
            entry["systems"] = []
            for s in [sub.baseline] + sub.systems:
                runs = [scored["results"][(s.name, r)] for r in range(len(s.runs))]
                entry["systems"].append({
                    "name": s.name, "baseline": s is sub.baseline, "runs": runs,
                    "summary": {spec.key: summarise([run[spec.key] for run in runs], s is sub.baseline)
                                for spec in LENGTH_METRICS}})
        buckets.append(entry)
    filled = [b for b in buckets if b["segments"]]
    how = (f"--length-buckets {args.length_buckets}" if args.length_buckets
           else f"{args.length_quantiles} quantiles of the source lengths (nearest rank)")
    return {"source": inputs.source_file, "unit": LENGTH_UNIT, "buckets_from": how,
            "edges": [b["max_words"] for b in buckets[:-1]],
            "metrics": {spec.key: {"label": spec.label, "signature": filled[0]["signatures"][spec.key]}
                        for spec in LENGTH_METRICS},
            "empty": [b["label"] for b in buckets if not b["segments"]], "buckets": buckets}


def length_rows(report: Dict[str, Any]) -> List[Dict[str, Any]]:
    """One CSV row per (bucket, system); an empty bucket has one row with no system and no scores."""
    lb, rows = report["length_buckets"], []
    for b in lb["buckets"]:
        head = {"bucket": b["label"], "min_words": b["min_words"], "max_words": b["max_words"],
                "segments": b["segments"]}
        if not b["segments"]:
            blank = {k: None for spec in LENGTH_METRICS for k in summary_columns(spec.key, None)}
            rows.append({**head, "system": "", "baseline": "", "runs": 0, **blank})
        for s in b.get("systems", []):
            row = {**head, "system": s["name"], "baseline": s["baseline"], "runs": len(s["runs"])}
            for spec in LENGTH_METRICS:
                row.update(summary_columns(spec.key, {**s["summary"][spec.key],
                                                      "signature": b["signatures"][spec.key]}))
            rows.append(row)
    return rows


def render_length_markdown(report: Dict[str, Any], width: int) -> str:
    lb, t = report["length_buckets"], report["test"]
    buckets = lb["buckets"]
    names = [s["name"] for s in report["systems"]]
    lines = [f"Scores by source length in {lb['unit']} of `{lb['source']}`; buckets from {lb['buckets_from']}."]
    for spec in LENGTH_METRICS:
        head = [spec.label] + [f"{b['label']} ({b['segments']})" for b in buckets]
        rows = []
        for name in names:
            row = [name + (" (baseline)" if name == report["baseline"] else "")]
            for b in buckets:
                s = next((x for x in b.get("systems", []) if x["name"] == name), None)
                m = s["summary"][spec.key] if s else None
                row.append("–" if m is None else f"{m['mean']:.{width}f}{m.get('mark', '')}")
            rows.append(row)
        lines += ["", markdown_table(head, rows, "l" + "r" * len(buckets), compact_rule=True)]
    lines += ["", f"Column heads: bucket (segments). Each bucket is tested on its own segments: {t['name']} against "
              f"{report['baseline']} ({t['n_samples']} samples, seed {t['seed']}); `++`/`+` better at p < 0.05 / "
              "p < 0.10, `--`/`-` worse. p-values, CIs and per-run scores: the CSV and JSON files."]
    if lb["empty"]:
        lines += ["", "Empty buckets (no source segment of that length; no scores): " + ", ".join(lb["empty"]) + "."]
    lines += ["", "Signatures:"] + [f"- {m['label']}: `{m['signature']}`" for m in lb["metrics"].values()]
    return "\n".join(lines) + "\n"


def plot_length_buckets(report: Dict[str, Any]) -> bytes:
    """Score per bucket, one line per system, the significance marks beside the points; the sacrebleu
    signatures below the panels and in the PNG's Description text."""
    plt = pyplot()
    lb = report["length_buckets"]
    buckets = lb["buckets"]  # an empty bucket keeps its place on the axis, without points
    fig, axes = plt.subplots(1, len(LENGTH_METRICS), figsize=(5.2 * len(LENGTH_METRICS), 4.0), squeeze=False)
    for ax, spec in zip(axes[0], LENGTH_METRICS):
        for n, s in enumerate(report["systems"]):
            pts = [next((x["summary"][spec.key] for x in b.get("systems", []) if x["name"] == s["name"]), None)
                   for b in buckets]
            line, = ax.plot(range(len(buckets)), [math.nan if m is None else m["mean"] for m in pts],
                            markersize=3, label=s["name"] + (" (baseline)" if s["baseline"] else ""),
                            linestyle="--" if s["baseline"] else "-", **system_style(n))
            for i, m in enumerate(pts):
                if m is not None and m.get("mark"):
                    ax.annotate(m["mark"], (i, m["mean"]), textcoords="offset points", xytext=(3, 2), fontsize=7,
                                color=line.get_color())
        ax.set_xticks(range(len(buckets)), [f"{b['label']}\n({b['segments']})" for b in buckets], fontsize=8)
        ax.set(title=spec.label, xlabel="source length in words (segments)", ylabel=spec.label)
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))  # beside the panels, off the lines
    t = report["test"]
    signatures = [f"{m['label']}: {m['signature']}" for m in lb["metrics"].values()]
    footer = [f"{t['name']} against {report['baseline']} in each bucket: ++/+ better at p < 0.05 / 0.10, "
              "--/- worse", *signatures]
    fig.text(0.01, 0.01, "\n".join(footer), fontsize=6, family="monospace", va="bottom")
    fig.tight_layout(rect=(0, 0.03 * len(footer) + 0.02, 1, 1))
    return png_bytes(fig, dpi=120, bbox_inches="tight", metadata={"Description": "\n".join(signatures)})

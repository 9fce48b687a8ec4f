#!/usr/bin/env python
"""Score translations against one reference and test them against a baseline (a Table-1 style report).

Metrics, each with a sacrebleu signature:
  * sacreBLEU: BLEU on detokenised text, 13a tokenisation (Post, 2018).
  * chrF++: chrF with character order 6, word order 2, beta 2 (Popovic, 2017).
  * compound-split BLEU: the tokenised BLEU of Vaswani et al. (2017) and Ott et al. (2018). Hypothesis and
    reference are Moses-tokenised (sacremoses, aggressive dash splitting, escaping), every ``(\\S)-(\\S)``
    becomes ``\\1 ##AT##-##AT## \\2`` (fairseq ``scripts/compound_split_bleu.sh``), and BLEU-4 is computed
    with ``tokenize='none'``.
Significance: sacrebleu's paired bootstrap resampling (Koehn, 2004; default) or paired approximate
randomisation (Riezler and Maxwell, 2005; Clark et al., 2011), run once per metric. The 95% confidence
intervals come from bootstrap resampling (sacrebleu's ``estimate_ci``).
Figure-4 analysis (``--ngram-analysis``): system minus baseline as the n-gram order grows, in three sweeps
as in the paper: chrF with character order n = 1..30 and word order 2 (chrF++ is n = 6), chrF with word
order n = 1..8 and character order 6, and BLEU of order n = 1..8.

Several runs (seeds) per system: ``--system NAME=run1.txt,run2.txt``. Run i of a system is tested against
run i of the baseline, or against the baseline's only run when the baseline has one. The table shows the
mean and sample standard deviation over runs; its mark is the one every run earns (the largest p-value).

Scores by source length (``--source FILE`` with ``--length-buckets 10,20,30`` or ``--length-quantiles 4``):
BLEU and chrF++ of every system on the segments of each bucket, each bucket tested against the baseline with
the same test, samples and seed as the whole set. Length = words of the source line (whitespace-separated
tokens, before any tokenisation); edges 10,20,30 give the buckets <=10, 11-20, 21-30, >=31 words. Quantile
edges are nearest-rank quantiles of the source lengths, repeated edges merged. An empty bucket is reported
(table, CSV, a warning), not scored.

Outputs in --out-dir (PREFIX defaults to ``results``): PREFIX.md, PREFIX.csv (one row per system),
PREFIX_runs.csv (one row per run), PREFIX.json (everything), with --ngram-analysis PREFIX_ngram.csv
and PREFIX_ngram.png, and with --source PREFIX_length.md, PREFIX_length.csv (one row per bucket and system)
and PREFIX_length.png (the signatures below the plot and in its PNG Description). Each file is written
under a temporary name and renamed; nothing is written when an input is invalid (exit code 2).

PE settings: ``--meta NAME=settings.json``, or a file ``HYPOTHESIS.meta.json`` beside a hypothesis file,
is copied into the outputs. Its ``pe_signature`` entry, if any, fills the table's PE column.

sacrebleu quirks handled here (see tests/test_evaluate.py):
  * numpy 2 float32 values in paired-test results are not JSON serialisable: converted in ``to_jsonable``.
  * ``SACREBLEU_SEED=0`` silently unseeds the paired tests: seed 0 is rejected.
  * ``PairedTest`` keys results by ``Score.name``, so two BLEU variants collide: one test per metric.
  * ``BLEU(max_ngram_order=n)`` leaves n out of its signature: added as ``ngram:n``.
"""
import argparse
import contextlib
import csv
import functools
import io
import json
import math
import os
import re
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.metrics.base import Metric
from sacrebleu.significance import PairedTest

DEFAULT_SEED = 12345
DEFAULT_SAMPLES = {"bs": 1000, "ar": 10000}  # sacrebleu's CLI defaults
AR_CI_SAMPLES = 1000  # bootstrap resamples for the CIs that accompany an AR test
TEST_NAMES = {"bs": "paired bootstrap resampling", "ar": "paired approximate randomisation"}
AT_SPLIT = re.compile(r"(\S)-(\S)")


class InputError(Exception):
    """Invalid input; reported as one line, and nothing is written."""


# ------------------------------------------------------------------------------------------------
# Metrics: the single list of what the report scores.


@dataclass(frozen=True)
class MetricSpec:
    key: str  # column prefix in CSV/JSON
    label: str  # column title in the markdown table
    build: Callable[[str, List[List[str]]], Metric]  # (target language, [reference lines]) -> metric
    tokenised: bool  # True: scored on compound-split tokens, not on the raw lines


METRICS: Tuple[MetricSpec, ...] = (
    MetricSpec("bleu", "sacreBLEU", lambda lang, refs: BLEU(trg_lang=lang, references=refs), False),
    MetricSpec("chrf", "chrF++", lambda lang, refs: CHRF(word_order=2, references=refs), False),
    MetricSpec("bleu_cs", "BLEU (compound split)",
               lambda lang, refs: BLEU(tokenize="none", force=True, references=refs), True),
)


@functools.lru_cache(maxsize=None)
def moses_tokenizer(lang: str) -> Any:
    from sacremoses import MosesTokenizer

    return MosesTokenizer(lang=lang)  # building one takes about a second: build it once


def compound_split(lines: Sequence[str], lang: str, aggressive: bool = True) -> List[str]:
    """Moses-tokenise (like ``tokenizer.perl [-a] -l LANG``), then split ``a-b`` as ``a ##AT##-##AT## b``."""
    tok = moses_tokenizer(lang)
    return [
        AT_SPLIT.sub(r"\1 ##AT##-##AT## \2",
                     tok.tokenize(line, aggressive_dash_splits=aggressive, escape=True, return_str=True))
        for line in lines
    ]


def compound_split_tag(lang: str, aggressive: bool) -> str:
    return f"moses-{lang}{'-a' if aggressive else ''}+compound-split"


# ------------------------------------------------------------------------------------------------
# Inputs


@dataclass
class System:
    name: str
    files: List[str]
    runs: List[List[str]] = field(default_factory=list)  # runs[r][i]: line i of run r
    meta: Dict[str, Any] = field(default_factory=dict)  # PE settings for the whole system
    run_meta: List[Optional[dict]] = field(default_factory=list)  # HYP.meta.json of each run, if any


@dataclass
class Inputs:
    ref_file: str
    ref: List[str]
    baseline: System
    systems: List[System]  # without the baseline
    source_file: Optional[str] = None  # --source: line-aligned with the reference, for the length buckets
    source: Optional[List[str]] = None

    def paired_baseline_run(self, run: int) -> int:
        return run if len(self.baseline.runs) > 1 else 0


def read_lines(path: str) -> List[str]:
    """Lines as sacrebleu's CLI reads them: split on '\\n' only, trailing whitespace stripped."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: file not found") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise InputError(
            f"{path}: not valid UTF-8 (byte 0x{data[e.start]:02x} on line {line}, offset {e.start})"
        ) from None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    if not lines:
        raise InputError(f"{path}: file is empty (0 lines)")
    return [line.rstrip() for line in lines]


def parse_named(value: str, option: str) -> Tuple[str, List[str]]:
    """``NAME=FILE[,FILE...]`` -> (NAME, [FILE, ...])."""
    name, sep, files = value.partition("=")
    paths = [f for f in files.split(",") if f]
    if not sep or not name or not paths:
        raise InputError(f"{option} {value!r}: expected NAME=FILE (several runs: NAME=FILE1,FILE2)")
    return name, paths


def read_meta(path: str) -> Dict[str, Any]:
    try:
        meta = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: metadata file not found") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{path}: not a valid UTF-8 JSON file ({e})") from None
    if not isinstance(meta, dict):
        raise InputError(f"{path}: metadata must be a JSON object, got {type(meta).__name__}")
    return meta


def load_system(value: str, option: str, n_ref: int, ref_file: str) -> System:
    name, files = parse_named(value, option)
    system = System(name, files)
    for path in files:
        lines = read_lines(path)
        if len(lines) != n_ref:
            raise InputError(
                f"line counts differ: {path} has {len(lines)} lines, reference {ref_file} has {n_ref} lines"
            )
        system.runs.append(lines)
        sidecar = Path(path + ".meta.json")
        system.run_meta.append(read_meta(str(sidecar)) if sidecar.is_file() else None)
    system.meta = next((m for m in system.run_meta if m is not None), {})
    return system


def check_options(args: argparse.Namespace) -> None:
    if args.seed <= 0:
        raise InputError(
            f"--seed {args.seed}: use a positive seed (sacrebleu treats seed 0 as 'unseeded' and negative "
            "seeds are invalid for numpy)"
        )
    if args.n_samples is not None and args.n_samples < 1:
        raise InputError(f"--n-samples {args.n_samples}: must be at least 1")
    if args.jobs < 1:
        raise InputError(f"--jobs {args.jobs}: must be at least 1")
    if Path(args.prefix).name != args.prefix or args.prefix in ("", ".", ".."):
        raise InputError(f"--prefix {args.prefix!r}: must be a plain file name, without a folder")
    if Path(args.out_dir).exists() and not Path(args.out_dir).is_dir():
        raise InputError(f"--out-dir {args.out_dir}: exists and is not a folder")
    if not args.baseline:
        raise InputError("no baseline system: pass --baseline NAME=FILE[,FILE...]")
    if not args.system:
        raise InputError("no system to compare with the baseline: pass --system NAME=FILE[,FILE...]")
    check_length_options(args)


def load_inputs(args: argparse.Namespace) -> Inputs:
    """Read and validate every input file; raise InputError before anything is computed or written."""
    check_options(args)
    ref = read_lines(args.ref)
    baseline = load_system(args.baseline, "--baseline", len(ref), args.ref)
    systems = [load_system(v, "--system", len(ref), args.ref) for v in args.system]
    names = [baseline.name] + [s.name for s in systems]
    for name in set(names):
        if names.count(name) > 1:
            raise InputError(f"system name {name!r} is used {names.count(name)} times")
    n_base = len(baseline.runs)
    for s in systems:
        if n_base > 1 and len(s.runs) != n_base:
            raise InputError(
                f"{s.name} has {len(s.runs)} runs but the baseline {baseline.name} has {n_base}: give the "
                "baseline one run or as many runs as each system"
            )
    by_name = {s.name: s for s in [baseline] + systems}
    for value in args.meta:
        name, _, path = value.partition("=")
        if name not in by_name or not path:
            raise InputError(f"--meta {value!r}: expected NAME=FILE.json with NAME one of {', '.join(names)}")
        by_name[name].meta = read_meta(path)
    source = read_lines(args.source) if args.source else None
    if source is not None and len(source) != len(ref):
        raise InputError(f"line counts differ: source {args.source} has {len(source)} lines, reference {args.ref} "
                         f"has {len(ref)} lines (--source must be line-aligned with --ref)")
    return Inputs(args.ref, ref, baseline, systems, args.source, source)


# ------------------------------------------------------------------------------------------------
# Significance


@contextlib.contextmanager
def sacrebleu_seed(seed: int) -> Iterator[None]:
    """sacrebleu reads its seed from the environment only; set it for the duration, then restore."""
    old = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        yield
    finally:
        if old is None:
            del os.environ["SACREBLEU_SEED"]
        else:
            os.environ["SACREBLEU_SEED"] = old


def mark(delta: float, p: Optional[float]) -> str:
    """'++'/'+': better than the baseline at p < 0.05 / p < 0.10; '--'/'-': worse."""
    if p is None or delta == 0 or p >= 0.10:
        return ""
    sign = "+" if delta > 0 else "-"
    return sign * 2 if p < 0.05 else sign


def paired_test(
    metric: Metric, named: List[Tuple[str, List[str]]], test: str, n_samples: int, seed: int, jobs: int = 1,
) -> Tuple[Any, list]:
    """One sacrebleu PairedTest for a single metric built with its references (results are keyed by
    Score.name, so never mix two variants of one metric). named[0] is the baseline.
    Returns (Signature, [Result, ...]) in the order of ``named``."""
    with sacrebleu_seed(seed):
        test_ = PairedTest(named, {"m": metric}, references=None, test_type=test, n_samples=n_samples,
                           n_ar_confidence=AR_CI_SAMPLES if test == "ar" else -1, n_jobs=jobs)
        sigs, scores = test_()
    (name,) = sigs  # exactly one metric per test
    return sigs[name], scores[name]


def score_systems(inputs: Inputs, args: argparse.Namespace,
                  metrics: Sequence[MetricSpec] = METRICS) -> Dict[str, Any]:
    """Per metric: a signature, and for every (system, run) a score, bootstrap mean, CI, p-value and mark."""
    n_samples = args.n_samples or DEFAULT_SAMPLES[args.paired]
    aggressive = not args.no_aggressive_dash
    base, systems = inputs.baseline, inputs.systems
    # Group the comparisons by the baseline run they are paired with: one PairedTest per group and metric.
    groups: Dict[int, List[Tuple[System, int]]] = {}
    for s in systems:
        for r in range(len(s.runs)):
            groups.setdefault(inputs.paired_baseline_run(r), []).append((s, r))

    def text(lines: List[str], spec: MetricSpec) -> List[str]:  # each list reaches here once per metric
        return compound_split(lines, args.trg_lang, aggressive) if spec.tokenised else lines

    out: Dict[str, Any] = {"signatures": {}, "results": {}}  # results[(system, run)][metric key]
    for spec in metrics:
        ref = text(inputs.ref, spec)
        for b, members in sorted(groups.items()):
            named = [(f"{base.name}#{b + 1}", text(base.runs[b], spec))]
            named += [(f"{s.name}#{r + 1}", text(s.runs[r], spec)) for s, r in members]
            sig, results = paired_test(spec.build(args.trg_lang, [ref]), named, args.paired, n_samples,
                                       args.seed, args.jobs)
            if spec.tokenised:
                sig.update("pre", compound_split_tag(args.trg_lang, aggressive))
            out["signatures"][spec.key] = sig.format()
            base_res = results[0]
            out["results"].setdefault((base.name, b), {})[spec.key] = result_dict(base_res, None, None)
            for (s, r), res in zip(members, results[1:]):
                out["results"].setdefault((s.name, r), {})[spec.key] = result_dict(res, base_res.score, b)
    return out


def result_dict(res: Any, base_score: Optional[float], base_run: Optional[int]) -> Dict[str, Any]:
    d = {"score": float(res.score), "mu": to_float(res.mean), "ci95": to_float(res.ci), "p": to_float(res.p_value)}
    if base_score is not None:
        d["delta"] = float(res.score) - float(base_score)
        d["mark"] = mark(d["delta"], d["p"])
        d["baseline_run"] = base_run + 1
    return d


def to_float(x: Any) -> Optional[float]:
    return None if x is None else float(x)


def summarise(runs: List[Dict[str, Any]], is_baseline: bool) -> Dict[str, Any]:
    """Mean and sample standard deviation over runs; the mark that every run earns; the largest p."""
    scores = [r["score"] for r in runs]
    s: Dict[str, Any] = {"n_runs": len(runs), "mean": statistics.fmean(scores),
                         "sd": statistics.stdev(scores) if len(runs) > 1 else None}
    if len(runs) == 1:
        s.update(mu=runs[0]["mu"], ci95=runs[0]["ci95"])
    if not is_baseline:
        s["delta"] = statistics.fmean(r["delta"] for r in runs)
        s["p_max"] = max(r["p"] for r in runs)
        marks = [r["mark"] for r in runs]
        signs = {m[:1] for m in marks}  # '' (not significant), '+' or '-'
        s["mark"] = min(marks, key=len) if len(signs) == 1 else ""  # the weakest mark, if all runs agree
    return s


# ------------------------------------------------------------------------------------------------
# Scores by source length: BLEU and chrF++ on the segments of each length bucket, tested as above

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
        lines += ["", "| " + " | ".join(head) + " |", "|---|" + "---:|" * len(buckets)]
        for name in names:
            row = [name + (" (baseline)" if name == report["baseline"] else "")]
            for b in buckets:
                s = next((x for x in b.get("systems", []) if x["name"] == name), None)
                m = s["summary"][spec.key] if s else None
                row.append("–" if m is None else f"{m['mean']:.{width}f}{m.get('mark', '')}")
            lines.append("| " + " | ".join(row) + " |")
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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lb = report["length_buckets"]
    buckets = lb["buckets"]  # an empty bucket keeps its place on the axis, without points
    fig, axes = plt.subplots(1, len(LENGTH_METRICS), figsize=(5.2 * len(LENGTH_METRICS), 4.0), squeeze=False)
    for ax, spec in zip(axes[0], LENGTH_METRICS):
        for s in report["systems"]:
            pts = [next((x["summary"][spec.key] for x in b.get("systems", []) if x["name"] == s["name"]), None)
                   for b in buckets]
            line, = ax.plot(range(len(buckets)), [math.nan if m is None else m["mean"] for m in pts], marker="o",
                            markersize=3, label=s["name"] + (" (baseline)" if s["baseline"] else ""),
                            linestyle="--" if s["baseline"] else "-")
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
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight", metadata={"Description": "\n".join(signatures)})
    plt.close(fig)
    return buf.getvalue()


# ------------------------------------------------------------------------------------------------
# Figure 4: the gap to the baseline as the n-gram order grows


@dataclass(frozen=True)
class Sweep:
    key: str
    title: str
    orders: range
    build: Callable[[int, str, Optional[List[List[str]]]], Metric]  # (order, language, refs) -> metric
    select: Callable[[List[float], int], List[float]]  # corpus statistics of the top order -> those of order n


def _bleu_stats(stats: List[float], n: int) -> List[float]:
    top = (len(stats) - 2) // 2  # [hyp_len, ref_len, correct_1..top, total_1..top]
    return stats[:2 + n] + stats[2 + top: 2 + top + n]


NGRAM_SWEEPS: Tuple[Sweep, ...] = (
    # the paper's "n-gram character F2 and 2-gram word F2": character order n plus word 1- and 2-grams
    Sweep("chrf_char", "chrF, character order n (word order 2)", range(1, 31),
          lambda n, lang, refs: CHRF(char_order=n, word_order=2, references=refs),
          # [hyp, ref, match] per character order 1..30, then per word order 1..2 (the last 6 values)
          lambda stats, n: stats[:3 * n] + stats[-6:]),
    Sweep("chrf_word", "chrF, word order n (character order 6)", range(1, 9),
          lambda n, lang, refs: CHRF(char_order=6, word_order=n, references=refs),
          lambda stats, n: stats[:3 * (6 + n)]),  # the 6 character orders, then the word orders
    Sweep("bleu", "sacreBLEU, n-gram order n", range(1, 9),
          lambda n, lang, refs: BLEU(max_ngram_order=n, trg_lang=lang, references=refs), _bleu_stats),
)


def ngram_gaps(inputs: Inputs, lang: str) -> List[Dict[str, Any]]:
    """For every sweep, order and system: mean score over runs, mean of the paired baseline runs, gap.

    Statistics are extracted once per run at the top order of a sweep; the score of order n is computed
    from the slice of them that order n uses. With one reference this equals scoring at order n directly
    (tests/test_evaluate.py checks every order)."""
    rows = []
    for sweep in NGRAM_SWEEPS:
        top = sweep.build(sweep.orders[-1], lang, [inputs.ref])

        def corpus_stats(run: List[str]) -> List[float]:
            return [sum(col) for col in zip(*top._extract_corpus_statistics(run, None))]

        base_stats = [corpus_stats(run) for run in inputs.baseline.runs]
        sys_stats = {s.name: [corpus_stats(run) for run in s.runs] for s in inputs.systems}
        for n in sweep.orders:
            metric = sweep.build(n, lang, None)
            metric.num_refs = top.num_refs  # what passing the references would have set, for the signature
            sig = metric.get_signature()
            if isinstance(metric, BLEU):
                sig.update("ngram", n)  # sacrebleu leaves max_ngram_order out of the signature
            base_scores = [metric._compute_score_from_stats(sweep.select(st, n)).score for st in base_stats]
            for s in inputs.systems:
                scores = [metric._compute_score_from_stats(sweep.select(st, n)).score for st in sys_stats[s.name]]
                paired = [base_scores[inputs.paired_baseline_run(r)] for r in range(len(s.runs))]
                rows.append({
                    "analysis": sweep.key, "order": n, "system": s.name, "baseline": inputs.baseline.name,
                    "runs": len(s.runs), "system_score": statistics.fmean(scores),
                    "baseline_score": statistics.fmean(paired),
                    "gap": statistics.fmean(a - b for a, b in zip(scores, paired)),
                    "signature": sig.format(),
                })
    return rows


def plot_ngram_gaps(rows: List[Dict[str, Any]], baseline: str) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(NGRAM_SWEEPS), figsize=(4.2 * len(NGRAM_SWEEPS), 3.6))
    for ax, sweep in zip(axes, NGRAM_SWEEPS):
        mine = [r for r in rows if r["analysis"] == sweep.key]
        for name in dict.fromkeys(r["system"] for r in mine):
            pts = [(r["order"], r["gap"]) for r in mine if r["system"] == name]
            ax.plot(*zip(*pts), marker="o", markersize=3, label=name)
        ax.axhline(0.0, color="grey", linewidth=0.8)
        ax.set(title=sweep.title, xlabel="n", ylabel=f"score - {baseline}")
        ax.title.set_fontsize(9)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    return buf.getvalue()


# ------------------------------------------------------------------------------------------------
# Report


def build_report(inputs: Inputs, scored: Dict[str, Any], args: argparse.Namespace) -> Dict[str, Any]:
    n_samples = args.n_samples or DEFAULT_SAMPLES[args.paired]
    systems = []
    for s in [inputs.baseline] + inputs.systems:
        is_base = s is inputs.baseline
        runs = [
            {"run": r + 1, "file": f, "meta": m, "scores": scored["results"][(s.name, r)]}
            for r, (f, m) in enumerate(zip(s.files, s.run_meta))
        ]
        summary = {spec.key: summarise([run["scores"][spec.key] for run in runs], is_base) for spec in METRICS}
        for spec in METRICS:
            summary[spec.key]["signature"] = scored["signatures"][spec.key]
        systems.append({"name": s.name, "baseline": is_base, "files": s.files, "meta": s.meta,
                        "pe_signature": pe_signature(s.meta), "runs": runs, "summary": summary})
    return {
        "reference": inputs.ref_file, "segments": len(inputs.ref), "target_language": args.trg_lang,
        "baseline": inputs.baseline.name,
        "test": {"type": args.paired, "name": TEST_NAMES[args.paired], "n_samples": n_samples,
                 "seed": args.seed, "ci": "95% bootstrap percentile interval, half-width around the "
                 f"bootstrap mean ({n_samples if args.paired == 'bs' else AR_CI_SAMPLES} resamples)",
                 "marks": "++/+: better than the baseline at p<0.05/p<0.10; --/-: worse; two-sided test"},
        "metrics": {spec.key: {"label": spec.label, "signature": scored["signatures"][spec.key]}
                    for spec in METRICS},
        "versions": {"sacrebleu": version("sacrebleu"), "sacremoses": version("sacremoses")},
        "systems": systems,
    }


def pe_signature(meta: Dict[str, Any]) -> str:
    if not meta:
        return ""
    sig = meta.get("pe_signature")
    return sig if isinstance(sig, str) else json.dumps(meta, sort_keys=True, separators=(",", ":"))


def cell(summary: Dict[str, Any], width: int) -> str:
    f = lambda x: f"{x:.{width}f}"  # noqa: E731
    text = f(summary["mean"]) + summary.get("mark", "")
    if summary["n_runs"] == 1:
        extra = f"{f(summary['mu'])} ± {f(summary['ci95'])}"
        if "p_max" in summary:
            extra += f"; p = {summary['p_max']:.4f}"
    else:
        extra = f"sd {f(summary['sd'])}, {summary['n_runs']} runs"
        if "p_max" in summary:
            extra += f"; max p = {summary['p_max']:.4f}"
    return f"{text} ({extra})"


def render_markdown(report: Dict[str, Any], width: int) -> str:
    with_pe = any(s["pe_signature"] for s in report["systems"])
    head = ["System"] + [report["metrics"][spec.key]["label"] for spec in METRICS] + (["PE"] if with_pe else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in report["systems"]:
        row = [s["name"] + (" (baseline)" if s["baseline"] else "")]
        row += [cell(s["summary"][spec.key], width) for spec in METRICS]
        pe = s["pe_signature"].replace("|", "\\|")  # a bare '|' would end the cell, even inside backticks
        row += [f"`{pe}`" if pe else ""] if with_pe else []
        lines.append("| " + " | ".join(row) + " |")
    t = report["test"]
    n_runs = {s["summary"][METRICS[0].key]["n_runs"] for s in report["systems"]}
    notes = [f"{report['segments']} segments of `{report['reference']}`; {t['name']} against {report['baseline']} "
             f"({t['n_samples']} samples, seed {t['seed']}): `++`/`+` better at p < 0.05 / p < 0.10, "
             "`--`/`-` worse."]
    if 1 in n_runs:
        notes.append("One run: score (bootstrap mean ± 95% CI; p-value).")
    if n_runs - {1}:
        notes.append("Several runs: mean over runs (sample standard deviation; largest p-value of the per-run "
                     "tests, run i against baseline run i or the baseline's only run); the mark holds for every run.")
    lines += [
        "",
        " ".join(notes),
        "",
        "Signatures:",
    ]
    lines += [f"- {m['label']}: `{m['signature']}`" for m in report["metrics"].values()]
    return "\n".join(lines) + "\n"


def csv_text(rows: List[Dict[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: "" if v is None else v for k, v in row.items()} for row in rows)
    return buf.getvalue()


def table_rows(report: Dict[str, Any]) -> List[Dict[str, Any]]:
    rows = []
    for s in report["systems"]:
        row = {"system": s["name"], "baseline": s["baseline"], "runs": len(s["runs"]),
               "files": ",".join(s["files"]), "pe_signature": s["pe_signature"]}
        for spec in METRICS:
            row.update(summary_columns(spec.key, s["summary"][spec.key]))
        rows.append(row)
    return rows


def summary_columns(key: str, m: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """CSV columns of one metric's summary (``summarise`` plus its signature); None: the columns, empty."""
    m = m or {}
    return {key: m.get("mean"), f"{key}_sd": m.get("sd"), f"{key}_mu": m.get("mu"), f"{key}_ci95": m.get("ci95"),
            f"{key}_p": m.get("p_max"), f"{key}_delta": m.get("delta"), f"{key}_mark": m.get("mark", ""),
            f"{key}_signature": m.get("signature")}


def run_rows(report: Dict[str, Any]) -> List[Dict[str, Any]]:
    rows = []
    for s in report["systems"]:
        for run in s["runs"]:
            row = {"system": s["name"], "baseline": s["baseline"], "run": run["run"], "file": run["file"]}
            for spec in METRICS:
                m = run["scores"][spec.key]
                row.update({spec.key: m["score"], f"{spec.key}_mu": m["mu"], f"{spec.key}_ci95": m["ci95"],
                            f"{spec.key}_p": m["p"], f"{spec.key}_delta": m.get("delta"),
                            f"{spec.key}_mark": m.get("mark", ""),
                            f"{spec.key}_baseline_run": m.get("baseline_run")})
            row["meta"] = json.dumps(run["meta"], sort_keys=True) if run["meta"] else ""
            rows.append(row)
    return rows


def to_jsonable(obj: Any) -> Any:
    """Plain Python values for json: numpy scalars (float32 under numpy 2) and arrays become floats/lists."""
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if hasattr(obj, "tolist") and type(obj).__module__ == "numpy":  # np.generic and np.ndarray
        return to_jsonable(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def write_atomic(outputs: Dict[Path, bytes]) -> None:
    """Write every file under a temporary name in its folder first, then rename them all."""
    umask = os.umask(0)
    os.umask(umask)
    staged = []
    try:
        for path, data in outputs.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            staged.append((tmp, path))
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the usual permissions
        for tmp, path in staged:
            os.replace(tmp, path)
    finally:
        for tmp, _ in staged:
            if os.path.exists(tmp):
                os.unlink(tmp)


def render_outputs(inputs: Inputs, report: Dict[str, Any], args: argparse.Namespace) -> Dict[Path, bytes]:
    out, prefix = Path(args.out_dir), args.prefix
    files = {
        out / f"{prefix}.md": render_markdown(report, args.width).encode(),
        out / f"{prefix}.csv": csv_text(table_rows(report)).encode(),
        out / f"{prefix}_runs.csv": csv_text(run_rows(report)).encode(),
    }
    if args.ngram_analysis:
        rows = ngram_gaps(inputs, args.trg_lang)
        report["ngram_analysis"] = rows
        files[out / f"{prefix}_ngram.csv"] = csv_text(rows).encode()
        files[out / f"{prefix}_ngram.png"] = plot_ngram_gaps(rows, inputs.baseline.name)
    if inputs.source is not None:
        report["length_buckets"] = score_length_buckets(inputs, args)
        files[out / f"{prefix}_length.md"] = render_length_markdown(report, args.width).encode()
        files[out / f"{prefix}_length.csv"] = csv_text(length_rows(report)).encode()
        files[out / f"{prefix}_length.png"] = plot_length_buckets(report)
    files[out / f"{prefix}.json"] = (json.dumps(to_jsonable(report), indent=2, ensure_ascii=False) + "\n").encode()
    return files


# ------------------------------------------------------------------------------------------------
# Command line


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog="See the module docstring for the details.")
    p.add_argument("--ref", required=True, help="reference file, one detokenised segment per line")
    p.add_argument("--baseline", metavar="NAME=FILE[,FILE...]", help="the baseline system (several runs: commas)")
    p.add_argument("--system", action="append", default=[], metavar="NAME=FILE[,FILE...]",
                   help="a system to compare with the baseline; repeat for more systems")
    p.add_argument("--meta", action="append", default=[], metavar="NAME=FILE.json",
                   help="PE settings of a system (default: HYPOTHESIS.meta.json when it exists)")
    p.add_argument("--trg-lang", required=True, help="target language, for the Moses tokeniser and sacreBLEU")
    p.add_argument("--out-dir", required=True, help="folder for the report files (created if missing)")
    p.add_argument("--prefix", default="results", help="output file names (default: %(default)s)")
    p.add_argument("--paired", choices=sorted(TEST_NAMES), default="bs",
                   help="bs: paired bootstrap (default); ar: paired approximate randomisation")
    p.add_argument("--n-samples", type=int, default=None,
                   help="resamples (bs) or trials (ar); default: 1000 (bs), 10000 (ar)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="random seed, > 0 (default: %(default)s)")
    p.add_argument("--jobs", type=int, default=1, help="worker processes per paired test (default: 1)")
    p.add_argument("--ngram-analysis", action="store_true", help="also write the Figure-4 n-gram gap CSV and PNG")
    p.add_argument("--source", metavar="FILE",
                   help="source file, line-aligned with --ref: BLEU and chrF++ per source-length bucket")
    p.add_argument("--length-buckets", metavar="EDGES",
                   help="bucket edges in source words, e.g. 10,20,30: buckets <=10, 11-20, 21-30, >=31")
    p.add_argument("--length-quantiles", type=int, metavar="N",
                   help="N buckets of about equal size, from the quantiles of the source lengths")
    p.add_argument("--no-aggressive-dash", action="store_true",
                   help="compound split without Moses -a (tensor2tensor's get_ende_bleu.sh variant)")
    p.add_argument("--width", type=int, default=2, help="decimals in the markdown table (default: 2)")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        inputs = load_inputs(args)
    except InputError as e:
        print(f"evaluate.py: error: {e}", file=sys.stderr)
        return 2
    report = build_report(inputs, score_systems(inputs, args), args)
    files = render_outputs(inputs, report, args)
    write_atomic(files)
    print(files[Path(args.out_dir) / f"{args.prefix}.md"].decode(), end="")
    if inputs.source is not None:
        for label in report["length_buckets"]["empty"]:
            print(f"evaluate.py: warning: length bucket {label} holds no segment of {args.source}; it is reported "
                  "empty", file=sys.stderr)
        print("\n" + files[Path(args.out_dir) / f"{args.prefix}_length.md"].decode(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Significance against the baseline: sacrebleu's paired bootstrap resampling (Koehn, 2004) or paired
approximate randomisation (Riezler and Maxwell, 2005), one PairedTest per metric; the marks and the summary
over runs."""
import argparse
import contextlib
import os
import statistics
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
from sacrebleu.metrics.base import Metric
from sacrebleu.significance import PairedTest, Result, _compute_p_value, estimate_ci

from .inputs import Inputs, System
from .metrics import METRICS, MetricSpec, compound_split, compound_split_tag

DEFAULT_SEED = 12345
DEFAULT_SAMPLES = {"bs": 1000, "ar": 10000}  # sacrebleu's CLI defaults
AR_CI_SAMPLES = 1000  # bootstrap resamples for the CIs that accompany an AR test
TEST_NAMES = {"bs": "paired bootstrap resampling", "ar": "paired approximate randomisation"}


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
    """One paired test for a single metric built with its references (sacrebleu keys results by Score.name, so
    never mix two variants of one metric). named[0] is the baseline.
    Returns (Signature, [Result, ...]) in the order of ``named``: sacrebleu's PairedTest's, bit for bit; the paired
    bootstrap through ``paired_bootstrap`` where it gives the same figures faster."""
    if test == "bs" and seed:  # sacrebleu seeds a system's bootstrap with None where the seed is 0
        results = paired_bootstrap(metric, [lines for _, lines in named], n_samples, seed)
        if results is not None:
            sig = metric.get_signature()
            sig.update("seed", str(seed).lower())
            sig.update("bs", n_samples)
            return sig, results
    with sacrebleu_seed(seed):
        test_ = PairedTest(named, {"m": metric}, references=None, test_type=test, n_samples=n_samples,
                           n_ar_confidence=AR_CI_SAMPLES if test == "ar" else -1, n_jobs=jobs)
        sigs, scores = test_()
    (name,) = sigs  # exactly one metric per test
    return sigs[name], scores[name]


# float32, sacrebleu's type for summed statistics, holds every integer below 2**24 exactly
FLOAT32_EXACT = 2 ** 24


def paired_bootstrap(metric: Metric, systems: List[List[str]], n_samples: int, seed: int) -> Optional[List[Result]]:
    """sacrebleu's paired bootstrap resampling (Koehn, 2004; significance._paired_bs_test and the baseline's CI in
    PairedTest), computed once per sample instead of once per sample and system. ``systems[0]`` is the baseline.

    Every comparison draws the same resamples: ``idxs`` (S x N segment indices) from numpy's default_rng(seed).
    A resample's statistics are the sum of its segments' rows, so for all S at once, with C[s, i] the number of
    times segment i is drawn in resample s:

        sums (S x K) = C (S x N) @ stats (N x K)

    sacrebleu sums float32 rows; where every statistic is an integer and no sum reaches 2**24, both sums are exact,
    so the scores, means, CIs and p-values are sacrebleu's to the bit. Otherwise (None) the caller runs sacrebleu."""
    raw = [metric._extract_corpus_statistics(lines, None) for lines in systems]
    scores = [metric._aggregate_and_compute(r).score for r in raw]  # each system's score, as sacrebleu computes it
    stats = [np.array(r, dtype=np.float64) for r in raw]
    n = len(systems[0])
    if any(s.shape != stats[0].shape for s in stats) or not all(
            np.array_equal(s, np.round(s)) and (s.min(initial=0) >= 0) and s.max(initial=0) * n < FLOAT32_EXACT
            for s in stats):
        return None
    idxs = np.random.default_rng(seed).choice(n, size=(n_samples, n), replace=True)
    # C: row s counts segment i's draws; bincount over the indices shifted by s * N
    counts = np.bincount((idxs + n * np.arange(n_samples)[:, None]).ravel(), minlength=n_samples * n)
    counts = counts.reshape(n_samples, n).astype(np.float64)

    def resampled(s: np.ndarray) -> np.ndarray:
        sums = (counts @ s).astype(np.float32)  # S x K, exact (see above)
        return np.array([metric._compute_score_from_stats(row).score for row in sums])

    base_score, base_samples = scores[0], resampled(stats[0])
    results = [Result(base_score, None, *estimate_ci(base_samples))]
    for s, score in zip(stats[1:], scores[1:]):
        samples = resampled(s)
        mean, ci = estimate_ci(samples)
        diffs = np.abs(samples - base_samples)
        results.append(Result(score, _compute_p_value(diffs - diffs.mean(), abs(base_score - score)), mean, ci))
    return results


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
            for (s, r), res, (_, lines) in zip(members, results[1:], named[1:]):
                d = result_dict(res, base_res.score, b)
                if lines == named[0][1]:  # the baseline's very output: MultEval's 1/(N+1) would read as a difference
                    d.update(p=1.0, mark="", identical=True)
                out["results"].setdefault((s.name, r), {})[spec.key] = d
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

"""How far two rankings of the encodings agree: Kendall's tau-b and Spearman's rho over the encodings both rank,
with two-sided p-values: Kendall's exact (without ties scipy's exact distribution; with ties, up to
``EXACT_KENDALL_MAX_N`` systems, every ordering counted), else scipy's normal approximation; Spearman's exact (every
ordering counted) without ties up to ``EXACT_SPEARMAN_MAX_N`` systems, else scipy's t approximation.

    python -m pe_tools.scoring.agreement REPORT.json                    seed i against seed j, within one report
    python -m pe_tools.scoring.agreement A.json B.json                  report A's means against report B's

REPORT is a pe-evaluate / pe-report JSON report (results.json, results_seeds.json). Within one report, every
pair of runs (seeds) that several systems share is compared: does the ranking survive a change of seed? Across
two reports (two language pairs, two training lengths), the systems' means are compared. The baseline is
ranked like any other system. With few systems nothing is significant: the p-values say so.

    tau_b = (C - D) / sqrt((C + D + T_a)(C + D + T_b))      C, D: concordant / discordant pairs; T: ties
    rho   = Pearson correlation of the ranks (mid-ranks for ties)
    exact p(rho) = #{orderings of n ranks with |rho| >= |rho observed|} / n!      (no ties)
    exact p(tau) = #{orderings of one side's n scores with |tau_b| >= |tau_b observed|} / n!   (ties kept: the
                   permutation distribution given them; without ties scipy's exact distribution, the same)
"""
import argparse
import itertools
import json
import sys
from typing import Dict, List, Optional

import numpy as np

from ..command_line import fail
from ..file_io import dump_json, write_atomic
from ..tables import markdown_table


# n! orderings: 9! = 362,880 rows of 9 ranks, enumerated at once; the t approximation serves larger n, where it
# is close, but not small n: at rho = 1 it gives p -> 0 where the exact p is 2 / n! (0.0167 for five systems)
EXACT_SPEARMAN_MAX_N = 9
EXACT_KENDALL_MAX_N = 9  # with ties (without, scipy's exact distribution serves any n)


def exact_spearman_p(x, y) -> Optional[float]:
    """Two-sided exact p of Spearman's rho for scores without ties and at most EXACT_SPEARMAN_MAX_N of them: the
    share of the n! orderings of one side's ranks whose |rho| reaches the observed one. None where it does not apply."""
    n = len(x)
    if n > EXACT_SPEARMAN_MAX_N or len(set(x)) < n or len(set(y)) < n:
        return None
    rank = lambda v: np.argsort(np.argsort(v))  # noqa: E731  0..n-1, no ties
    observed = int(((rank(x) - rank(y)) ** 2).sum())
    orderings = np.array(list(itertools.permutations(range(n))))  # (n!, n)
    d2 = ((orderings - np.arange(n)) ** 2).sum(axis=1)  # sum d^2 of every ordering against the identity
    # |rho| >= |rho_obs| with rho = 1 - 6 sum d^2 / (n (n^2 - 1)): |c - d2| >= |c - observed|, c = n (n^2 - 1) / 6
    c2 = n * (n * n - 1) // 3  # 2c, an integer: compare in integers, no rounding
    return float(np.mean(np.abs(c2 - 2 * d2) >= abs(c2 - 2 * observed)))


def exact_kendall_p(x, y) -> Optional[float]:
    """Two-sided exact p of Kendall's tau-b for at most EXACT_KENDALL_MAX_N scores, with ties or without: the share of
    the n! orderings of ``y`` whose |tau_b| reaches the observed one. A reordering keeps both sides' ties, so tau_b's
    denominator is the same in every ordering and |C - D| decides, compared in integers. None beyond the limit."""
    n = len(x)
    if n > EXACT_KENDALL_MAX_N or n < 2:
        return None
    i, j = np.triu_indices(n, 1)
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    sx = np.sign(x[i] - x[j]).astype(np.int64)  # (pairs,): +1, -1, 0 (a tie)
    observed = abs(int(sx @ np.sign(y[i] - y[j]).astype(np.int64)))  # |C - D|
    orderings = y[np.array(list(itertools.permutations(range(n))))]  # (n!, n)
    c_minus_d = np.sign(orderings[:, i] - orderings[:, j]).astype(np.int64) @ sx
    return float(np.mean(np.abs(c_minus_d) >= observed))


def kendall(x, y):
    """(tau_b, p, p exact?): scipy's exact p without ties, the enumerated one with ties up to EXACT_KENDALL_MAX_N
    systems, else scipy's normal approximation."""
    from scipy import stats

    ties = len(set(x)) < len(x) or len(set(y)) < len(y)
    tau = stats.kendalltau(x, y, method="asymptotic" if ties else "exact")
    exact = exact_kendall_p(x, y) if ties else float(tau.pvalue)
    return float(tau.statistic), float(tau.pvalue) if exact is None else exact, exact is not None


def rank_agreement(a: Dict[str, float], b: Dict[str, float]) -> Dict[str, object]:
    """Kendall's tau-b and Spearman's rho between two scorings of the same systems (their common keys)."""
    from scipy import stats

    common = sorted(set(a) & set(b))
    if len(common) < 3:
        raise ValueError(f"rank agreement needs at least 3 systems scored by both sides, got {len(common)}: {common}")
    x, y = [a[k] for k in common], [b[k] for k in common]
    tau, tau_p, tau_exact = kendall(x, y)
    rho = stats.spearmanr(x, y)
    exact = exact_spearman_p(x, y)
    return {"n": len(common), "systems": common, "kendall_tau": tau, "kendall_p": tau_p, "kendall_p_exact": tau_exact,
            "spearman_rho": float(rho.statistic), "spearman_p": float(rho.pvalue) if exact is None else exact,
            "spearman_p_exact": exact is not None}


def run_scores(report: dict, metric: str) -> Dict[int, Dict[str, float]]:
    """{run number: {system: score}} of a pe-evaluate report."""
    out: Dict[int, Dict[str, float]] = {}
    for system in report["systems"]:
        for run in system["runs"]:
            out.setdefault(run["run"], {})[system["name"]] = run["scores"][metric]["score"]
    return out


def mean_scores(report: dict, metric: str) -> Dict[str, float]:
    """{system: mean score over its runs} of a pe-evaluate report."""
    return {s["name"]: s["summary"][metric]["mean"] for s in report["systems"]}


def _load(path: str, metric: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            report = json.load(f)
    except (OSError, ValueError) as e:  # missing, half-written, not UTF-8 (UnicodeDecodeError is a ValueError)
        raise ValueError(f"{path}: not a readable pe-evaluate JSON report ({e})") from None
    if not isinstance(report, dict):
        raise ValueError(f"{path}: not a pe-evaluate JSON report (not a JSON object)")
    if metric not in report.get("metrics", {}):
        raise ValueError(f"{path}: no metric {metric!r}; the report has {', '.join(report.get('metrics', {}))}")
    try:  # the fields run_scores and mean_scores read
        for system in report["systems"]:
            system["name"], system["summary"][metric]["mean"]
            for run in system["runs"]:
                run["run"], run["scores"][metric]["score"]
    except (KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a pe-evaluate JSON report (a system lacks the field {e})") from None
    return report


def rows(reports: List[dict], names: List[str], metric: str,
         rename: Optional[Dict[str, str]] = None) -> List[Dict[str, object]]:
    """The agreements to print: every pair of runs of one report, or the means of two reports (the first's systems
    renamed by ``rename``, old name -> new, so that one encoding under two names is compared with itself)."""
    if len(reports) == 2:
        first = {(rename or {}).get(k, k): v for k, v in mean_scores(reports[0], metric).items()}
        result = rank_agreement(first, mean_scores(reports[1], metric))
        return [{"compared": f"{names[0]} vs {names[1]} (means)", **result}]
    by_run = run_scores(reports[0], metric)
    return [{"compared": f"run {i} vs run {j}", **rank_agreement(by_run[i], by_run[j])}
            for i, j in itertools.combinations(sorted(by_run), 2)]


def markdown(results: List[Dict[str, object]], metric: str, label: str) -> str:
    rows = [[str(r["compared"]), str(r["n"]), f"{r['kendall_tau']:.3f}", f"{r['kendall_p']:.3g}",
             f"{r['spearman_rho']:.3f}", f"{r['spearman_p']:.3g}"] for r in results]
    lines = [f"Rank agreement of the systems by {label}", "",
             markdown_table(["compared", "systems", "Kendall tau-b", "p", "Spearman rho", "p"], rows, "llllll",
                            compact_rule=True)]
    if any(r.get("spearman_p_exact") for r in results):
        lines += ["", f"Spearman's p exact (every ordering of the ranks counted; no ties, at most "
                      f"{EXACT_SPEARMAN_MAX_N} systems), else scipy's t approximation."]
    return "\n".join(lines) + "\n"


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pe_tools.scoring.agreement", description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", metavar="REPORT.json", help="one report (its runs) or two (their means)")
    parser.add_argument("--metric", default="bleu", help="a metric key of the reports (bleu, chrf, bleu_cs)")
    parser.add_argument("--rename", action="append", default=[], metavar="OLD=NEW",
                        help="with two reports: the first report's system OLD is the second's NEW (e.g. "
                             "posnet_embed_lmax256=posnet_embed); repeatable")
    parser.add_argument("--out", default=None, help="also write the markdown table (and OUT.json) here")
    args = parser.parse_args(argv)
    if len(args.reports) > 2:
        parser.error(f"give one report (its runs are compared) or two (their means), not {len(args.reports)}")
    if args.rename and len(args.reports) != 2:
        parser.error("--rename maps the first report's names onto the second's: give two reports")
    if bad := [r for r in args.rename if r.count("=") != 1 or not all(r.split("="))]:
        parser.error(f"--rename {bad[0]!r}: expected OLD=NEW")
    try:
        reports = [_load(p, args.metric) for p in args.reports]
        results = rows(reports, args.reports, args.metric, dict(r.split("=") for r in args.rename))
    except (ValueError, KeyError) as e:
        return fail(str(e))
    text = markdown(results, args.metric, reports[0]["metrics"][args.metric]["label"])
    print(text, end="")
    if args.out:
        write_atomic(args.out, text)
        dump_json(args.out + ".json", {"metric": args.metric, "reports": args.reports, "rename": args.rename,
                                       "rows": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())

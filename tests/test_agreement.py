"""Rank agreement of encodings (pe_tools.scoring.agreement) against hand-worked statistics and exact
permutation p-values."""
import itertools
import json

import pytest

from pe_tools.scoring.agreement import main, rank_agreement
from pe_tools.scoring import report
import numpy as np

A = {"nope": 1.0, "sape": 2.0, "lape": 3.0, "rpe": 4.0, "rope": 5.0}
B = {"nope": 2.0, "sape": 1.0, "lape": 4.0, "rpe": 3.0, "rope": 5.0, "alibi": 9.0}  # two adjacent swaps


def _exact_p(stat, x, y):
    """Two-sided permutation p-value of ``stat`` over all orderings of y (5! = 120)."""
    observed = abs(stat(x, y))
    perms = list(itertools.permutations(y))
    return sum(abs(stat(x, list(p))) >= observed - 1e-12 for p in perms) / len(perms)


def _tau(x, y):  # no ties: (concordant - discordant) / pairs
    pairs = list(itertools.combinations(range(len(x)), 2))
    return sum((x[i] - x[j]) * (y[i] - y[j]) > 0 for i, j in pairs) / len(pairs) * 2 - 1


def _rho(x, y):  # no ties: 1 - 6 sum d^2 / (n (n^2 - 1)) on ranks
    n = len(x)
    rank = lambda v: [sorted(v).index(e) for e in v]  # noqa: E731
    return 1 - 6 * sum((a - b) ** 2 for a, b in zip(rank(x), rank(y))) / (n * (n * n - 1))


def test_statistics_equal_hand_worked_values_and_exact_p():
    r = rank_agreement(A, B)
    assert r["n"] == 5 and "alibi" not in r["systems"]  # only the systems both rank
    # 10 pairs, 2 discordant (the two swaps): tau = (8 - 2) / 10; sum d^2 = 4: rho = 1 - 6*4/(5*24)
    assert r["kendall_tau"] == pytest.approx(0.6) and r["spearman_rho"] == pytest.approx(0.8)
    x, y = [A[k] for k in r["systems"]], [B[k] for k in r["systems"]]
    assert r["kendall_p"] == pytest.approx(_exact_p(_tau, x, y))  # 0.2333: exact for small n without ties
    assert r["spearman_p"] == pytest.approx(_exact_p(_rho, x, y)) == pytest.approx(16 / 120)  # exact: n = 5, no ties
    assert r["spearman_p_exact"]


def test_spearman_p_exact_at_full_agreement_and_scipys_beyond_nine_systems():
    """Five systems in one order: only that order and its reverse reach |rho| = 1, so p = 2 / 5! (Kendall's exact p
    is the same), where scipy's t approximation gives p -> 0. Ten systems: scipy's p, marked as not exact."""
    from scipy import stats

    same = {k: float(i) for i, k in enumerate("abcde")}
    r = rank_agreement(same, same)
    assert r["spearman_rho"] == pytest.approx(1.0) and r["spearman_p"] == pytest.approx(2 / 120)
    assert r["kendall_p"] == pytest.approx(2 / 120)
    x = {f"s{i}": float(i) for i in range(10)}
    y = {f"s{i}": float((3 * i) % 10) for i in range(10)}
    r = rank_agreement(x, y)
    keys = sorted(x)
    assert not r["spearman_p_exact"]
    assert r["spearman_p"] == pytest.approx(stats.spearmanr([x[k] for k in keys], [y[k] for k in keys]).pvalue)


def test_too_few_common_systems_is_refused():
    with pytest.raises(ValueError, match="at least 3 systems"):
        rank_agreement({"a": 1, "b": 2}, {"a": 1, "b": 2, "c": 3})


def _report(path, runs_by_system):
    systems = [{"name": name, "summary": {"bleu": {"mean": sum(runs) / len(runs)}},
                "runs": [{"run": i + 1, "scores": {"bleu": {"score": s}}} for i, s in enumerate(runs)]}
               for name, runs in runs_by_system.items()]
    path.write_text(json.dumps({"metrics": {"bleu": {"label": "sacreBLEU"}}, "systems": systems}))
    return str(path)


def test_cli_compares_runs_of_one_report_and_means_of_two(tmp_path, capsys):
    one = _report(tmp_path / "a.json", {"s1": [1, 2], "s2": [2, 1], "s3": [3, 3], "s4": [4, 4]})
    out = tmp_path / "agree.md"
    assert main([one, "--out", str(out)]) == 0
    assert "| run 1 vs run 2 | 4 | 0.667 |" in out.read_text()  # one swap among 6 pairs: (5 - 1) / 6
    two = _report(tmp_path / "b.json", {"s1": [4], "s2": [3], "s3": [2], "s4": [1]})
    assert main([one, two]) == 0
    # means 1.5, 1.5, 3, 4 against 4, 3, 2, 1: 5 discordant pairs, 1 tied in x: tau_b = -5 / sqrt((5 + 1) 5)
    assert "(means) | 4 | -0.913 |" in capsys.readouterr().out
    assert main([one, "--metric", "chrf"]) == 2
    assert "no metric 'chrf'" in capsys.readouterr().err


def test_markdown_file_and_stdout_end_with_a_newline(tmp_path, capsys):
    """The table is a text file: every line, the last one included, ends with a newline (POSIX), on stdout too."""
    one = _report(tmp_path / "a.json", {"s1": [1, 2], "s2": [2, 1], "s3": [3, 3]})
    out = tmp_path / "agree.md"
    assert main([one, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed == out.read_text()
    lines = printed.split("\n")
    # title, blank line, header, rule, one row for the one pair of runs, blank line, the note on Spearman's exact p
    # (3 systems), then the final newline's empty tail
    assert len(lines) == 8 and lines[-1] == "" and lines[4].startswith("| run 1 vs run 2 | 3 |")
    assert lines[-2].startswith("Spearman's p exact")


def test_help_describes_the_tool_with_the_docstrings_first_sentence(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse re-wraps the description
    assert "How far two rankings of the encodings agree: Kendall's tau-b and Spearman's rho" in text
    assert "seed i against seed j" not in text  # the docstring's second paragraph (the usage lines) is not it


def test_rename_maps_the_first_reports_system_onto_the_seconds(tmp_path, capsys):
    a = _report(tmp_path / "a.json", {"lape_lmax256": [1], "s2": [2], "s3": [3], "s4": [4]})
    b = _report(tmp_path / "b.json", {"lape": [1], "s2": [2], "s3": [4], "s4": [3]})
    assert main([a, b, "--rename", "lape_lmax256=lape"]) == 0
    # 4 common systems, 6 pairs, one discordant (s3, s4), no ties: tau = (5 - 1) / 6
    assert "(means) | 4 | 0.667 |" in capsys.readouterr().out
    assert main([a, b]) == 0  # without it only s2, s3, s4 are common
    assert "(means) | 3 | 0.333 |" in capsys.readouterr().out  # 3 pairs, one discordant: (2 - 1) / 3
    for bad in ("lape_lmax256", "a=b=c", "=lape"):
        with pytest.raises(SystemExit) as e:
            main([a, b, "--rename", bad])
        assert e.value.code == 2 and f"--rename {bad!r}: expected OLD=NEW" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------
# Kendall's exact p (issue 59: five systems at two training budgets)

def _tau_b_brute(x, y):
    pairs = list(itertools.combinations(range(len(x)), 2))
    sign = lambda v: (v > 0) - (v < 0)  # noqa: E731
    s = sum(sign(x[i] - x[j]) * sign(y[i] - y[j]) for i, j in pairs)
    tx = sum(x[i] == x[j] for i, j in pairs)
    ty = sum(y[i] == y[j] for i, j in pairs)
    return s / ((len(pairs) - tx) * (len(pairs) - ty)) ** 0.5


def test_kendall_exact_p_is_scipys_exact_p_for_every_ordering_of_five_without_ties():
    """Five systems without ties, every one of the 5! orderings of one side: tau and its exact p are scipy's
    (kendalltau, method="exact"), from p = 2/120 at full agreement to 1 at tau = 0."""
    from scipy import stats

    from pe_tools.scoring.agreement import exact_kendall_p, kendall

    x = [37.6, 38.8, 37.8, 37.2, 37.1]
    seen = set()
    for order in itertools.permutations(range(5)):
        y = [float(o) for o in order]
        expected = stats.kendalltau(x, y, method="exact")
        tau, p, exact = kendall(x, y)
        assert exact and tau == pytest.approx(expected.statistic) and p == pytest.approx(expected.pvalue)
        assert exact_kendall_p(x, y) == pytest.approx(expected.pvalue)  # the enumeration agrees with scipy's
        seen.add(p)
    assert min(seen) == pytest.approx(2 / 120) and max(seen) == pytest.approx(1.0)


def test_kendall_exact_p_with_ties_counts_every_ordering():
    """With a tie scipy has no exact p (it refuses method="exact"); ours counts the 5! orderings of one side, the
    tie kept, whose |tau_b| reaches the observed one, and rank_agreement reports it as exact."""
    from scipy import stats

    x, y = [1.0, 2.0, 3.0, 4.0, 5.0], [2.0, 1.0, 4.0, 4.0, 5.0]
    with pytest.raises(ValueError, match="Ties"):
        stats.kendalltau(x, y, method="exact")
    observed = abs(_tau_b_brute(x, y))
    orderings = list(itertools.permutations(y))
    brute = sum(abs(_tau_b_brute(x, list(o))) >= observed - 1e-12 for o in orderings) / len(orderings)
    r = rank_agreement(dict(zip("abcde", x)), dict(zip("abcde", y)))
    assert r["kendall_tau"] == pytest.approx(stats.kendalltau(x, y).statistic) == pytest.approx(_tau_b_brute(x, y))
    assert r["kendall_p"] == pytest.approx(brute) and r["kendall_p_exact"]
    assert r["kendall_p"] != pytest.approx(stats.kendalltau(x, y).pvalue)  # not the normal approximation


def test_kendall_p_beyond_the_enumeration():
    """Ten systems: without ties scipy's exact p (exact); with a tie its normal approximation, marked not exact."""
    from scipy import stats

    x = [float(i) for i in range(10)]
    y = [float((3 * i) % 10) for i in range(10)]
    r = rank_agreement(dict(enumerate(x)), dict(enumerate(y)))
    assert r["kendall_p_exact"] and r["kendall_p"] == pytest.approx(stats.kendalltau(x, y, method="exact").pvalue)
    y[0] = y[1]
    r = rank_agreement(dict(enumerate(x)), dict(enumerate(y)))
    assert not r["kendall_p_exact"] and r["kendall_p"] == pytest.approx(stats.kendalltau(x, y).pvalue)


def test_two_reports_compare_their_means_without_a_rename():
    """pe_tools/scoring/agreement.rows with two reports and no rename (survivor: ``rename or {}`` -> ``rename``):
    the means of the first report against the second's, as rank_agreement of the two mean scorings."""
    from pe_tools.scoring.agreement import rank_agreement, rows

    def report(means):
        return {"systems": [{"name": name, "summary": {"bleu": {"mean": m}}, "runs": []} for name, m in means.items()]}

    a, b = {"x": 30.0, "y": 20.0, "z": 10.0, "w": 5.0}, {"x": 31.0, "y": 9.0, "z": 19.0, "w": 4.0}
    (row,) = rows([report(a), report(b)], ["A", "B"], "bleu")
    assert row == {"compared": "A vs B (means)", **rank_agreement(a, b)}


def _enumerated_kendall_p(x, y):
    """The reference: the share of the n! orderings of ``y`` whose |tau_b| (scipy's, of the scores as floats)
    reaches the observed one."""
    from scipy import stats

    x, y = [float(v) for v in x], [float(v) for v in y]
    observed = abs(stats.kendalltau(x, y).statistic)
    orderings = list(itertools.permutations(y))
    return sum(abs(stats.kendalltau(x, list(o)).statistic) >= observed - 1e-12 for o in orderings) / len(orderings)


@pytest.mark.parametrize("x,y,p", [
    ([1.0], [2.0], None),  # one system: no pair, no tau, no p
    ([1.0, 2.0], [1.0, 2.0], 1.0),  # two: the two orderings give tau_b = +1 and -1, both reach |1|
    ([1.0, 2.0], [2.0, 1.0], 1.0),
    ([1.0, 1.0], [1.0, 2.0], 1.0),  # a tie: C - D = 0 in both orderings, and 0 >= 0
])
def test_the_exact_kendall_p_exists_from_two_systems_on(x, y, p):
    """The enumerated p of Kendall's tau-b is given from two systems on, not for one: with two systems both
    orderings of one side reach the observed |tau_b|, so p = 2/2 = 1 (scipy's exact p of two untied systems
    is 1 too)."""
    from scipy import stats

    from pe_tools.scoring.agreement import exact_kendall_p

    assert exact_kendall_p(x, y) == p
    if p is not None and len(set(x)) == len(set(y)) == len(x):
        assert stats.kendalltau(x, y, method="exact").pvalue == pytest.approx(p)


@pytest.mark.parametrize("scores", [
    [True, False, True, True, False],  # pass / fail
    np.array([1, 2, 3, 5, 4], dtype=np.uint8),  # unsigned counts: a difference below zero must not wrap
    np.array([4, 0, 2, 2, 7], dtype=np.uint32),
])
@pytest.mark.parametrize("side", ["x", "y"])
def test_the_exact_kendall_p_reads_scores_of_any_real_type_as_their_values(scores, side):
    """Scores handed as booleans or unsigned integers, on either side, give the exact p of their values (their
    float copies), from exact_kendall_p and from kendall (a tie on the other side: the enumerated p), against
    every ordering's tau_b computed by scipy."""
    from pe_tools.scoring.agreement import exact_kendall_p, kendall

    other = [1.0, 2.0, 2.0, 3.0, 5.0]
    x, y = (scores, other) if side == "x" else (other, scores)
    want = _enumerated_kendall_p(x, y)
    assert exact_kendall_p([float(v) for v in x], [float(v) for v in y]) == pytest.approx(want)
    assert exact_kendall_p(x, y) == pytest.approx(want)
    tau, p, exact = kendall(x, y)
    assert exact and p == pytest.approx(want)


@pytest.mark.parametrize("content, says", [
    (None, "not a readable pe-evaluate JSON report"),  # missing
    ('{"metrics": {"bleu": ', "not a readable pe-evaluate JSON report"),  # cut short while written
    (b"\xff\xfe{}", "not a readable pe-evaluate JSON report"),  # not UTF-8
    ("[1, 2]", "not a pe-evaluate JSON report (not a JSON object)"),
    ('{"metrics": {"bleu": {"label": "sacreBLEU"}}, "systems": [{"name": "s1"}]}',
     "not a pe-evaluate JSON report (a system lacks the field 'summary')"),
])
def test_a_report_that_cannot_be_read_is_refused_naming_it(content, says, tmp_path, capsys):
    """A report that is missing, half-written, not UTF-8, not a JSON object or without the fields of a pe-evaluate
    report is refused (exit 2) with a message naming it, never a traceback; the good report beside it is not the
    one named."""
    good = _report(tmp_path / "good.json", {"s1": [1], "s2": [2], "s3": [3]})
    bad = tmp_path / "bad.json"
    if isinstance(content, bytes):
        bad.write_bytes(content)
    elif content is not None:
        bad.write_text(content)
    assert main([good, str(bad)]) == 2
    err = capsys.readouterr().err
    assert says in err and f"{bad}: " in err and "good.json" not in err

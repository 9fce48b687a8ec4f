"""Behaviours of pe_tools (scoring and the recipes' launch) at edges where a plausible slip passes the ordinary
tests: a limit compared with `<=` for `<`, a default dropped from an `or`, a conversion left out. Each test feeds
the edge, both sides of it where there are two, against a reference worked out here (a closed form, scipy's
statistic over every ordering, the seconds of a clock the test sets)."""
import itertools
import json

import numpy as np
import pytest

# ---- the exact p of Kendall's tau-b (pe_tools/scoring/agreement.py) -----------------------------------------


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


# ---- pe-train's progress note from the launch on (pe_tools/recipes/train.py) --------------------------------
@pytest.mark.parametrize("checkpoint,pace", [
    (None, 10.0),  # a fresh run: no checkpoint_last.pt, the pace is measured from update 0
    (b"cut short", 10.0),  # a checkpoint that cannot be read counts as none
    (2, 30.0),  # resumed at update 2: one update since
])
def test_pe_trains_first_progress_note_paces_from_the_checkpoints_update_or_zero(checkpoint, pace, tmp_path,
                                                                                 monkeypatch, capsys):
    """pe-train's note after fairseq-train's first progress line (update 3 of 4, 30 s after the launch) paces
    from the update checkpoint_last.pt holds, or from update 0 when there is none or it cannot be read: 10 s an
    update for a fresh run, 30 s for one resumed at update 2."""
    from test_results import stand_in_checkpoint

    from pe_tools.recipes import launch, run_state, train

    data = tmp_path / "data"
    data.mkdir()
    (data / "dict.en.txt").write_text("")
    run = tmp_path / "runs" / "sape.en-de.small.seed1"
    if checkpoint is not None:
        run.mkdir(parents=True)
        if isinstance(checkpoint, int):
            stand_in_checkpoint(run / "checkpoint_last.pt", checkpoint)
        else:
            (run / "checkpoint_last.pt").write_bytes(checkpoint)
    now = [1_000_000.0]
    real = train.Progress
    monkeypatch.setattr(train, "Progress", lambda top, start: real(top, start, clock=lambda: now[0]))

    def tee(cmd, log, on_line, **kw):  # fairseq-train: 30 s, then its first progress line
        now[0] += 30
        on_line("2026-01-01 10:00:30 | INFO | train_inner | epoch 001:  3 / 9 loss=5.0, num_updates=3, wall=0")
        return 0

    monkeypatch.setattr(run_state, "LOCK_TRIES", 1)
    monkeypatch.setattr(train, "tee", tee)
    rc = launch.main(["train", "sape", "--recipe", "multi30k", "--data", str(data), "--runs-dir",
                      str(tmp_path / "runs"), "--", "--max-update", "4", "--cpu"])
    assert rc == 0
    (note,) = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("[pe-train] ")]
    assert note.startswith(f"[pe-train] update 3 of 4 (75%), {pace:.2f} s/update, finish ~ "), note
    assert json.loads((run / "command.json").read_text())["method"] == "sape"


# ---- pe-evaluate's options (pe_tools/scoring/cli.py) --------------------------------------------------------
@pytest.mark.parametrize("n_samples,refused", [(None, False), (2, False), (1, False), (0, True), (-1, True)])
def test_pe_evaluate_takes_one_resample_or_more(n_samples, refused, tmp_path, capsys):
    """pe-evaluate --n-samples N: N = 1 is the least it takes (one resample or trial); 0 and below are refused
    before any file is read, with status 2 and the option named; without the option, the test's default."""
    from pe_tools.scoring import cli
    from pe_tools.scoring.inputs import InputError

    argv = ["--ref", str(tmp_path / "missing.ref"), "--baseline", "base=b.de", "--system", "sys=s.de",
            "--trg-lang", "de", "--out-dir", str(tmp_path / "out")]
    if n_samples is not None:
        argv += ["--n-samples", str(n_samples)]
    args = cli.build_parser().parse_args(argv)
    if refused:
        with pytest.raises(InputError, match=f"^--n-samples {n_samples}: must be at least 1$"):
            cli.check_options(args)
        assert cli.main(argv) == 2
        assert f"error: --n-samples {n_samples}: must be at least 1" in capsys.readouterr().err
    else:
        assert cli.check_options(args) is None


@pytest.mark.parametrize("paired,signature", [("bs", "|bs:1|"), ("ar", "|ar:1|")])
def test_pe_evaluate_scores_with_a_single_resample(paired, signature, tmp_path, capsys):
    """The least --n-samples taken, 1, runs through: pe-evaluate writes its report, whose signatures name one
    resample (bs) or one trial (ar)."""
    from pe_tools.scoring import cli

    ref = [f"die katze {i} ist sehr klein und der hund ist gross" for i in range(12)]
    (tmp_path / "ref.de").write_text("\n".join(ref) + "\n")
    for name, drop in (("b", "klein"), ("s", "gross")):
        (tmp_path / f"{name}.de").write_text("\n".join(r.replace(drop, "x") for r in ref) + "\n")
    out = tmp_path / "out"
    assert cli.main(["--ref", str(tmp_path / "ref.de"), "--trg-lang", "de", "--out-dir", str(out), "--baseline",
                     f"b={tmp_path / 'b.de'}", "--system", f"s={tmp_path / 's.de'}", "--paired", paired,
                     "--n-samples", "1", "--no-language-check"]) == 0
    assert signature in capsys.readouterr().out
    assert json.loads((out / "results.json").read_text())["test"]["n_samples"] == 1

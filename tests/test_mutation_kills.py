"""Scoring tests written for the survivors of the mutation check (scripts/mutation_check.py, docs/testing.md,
examples/mutation/summary.md): each checks a behaviour of pe_tools/scoring that a recorded mutant changed while the
other tests passed, against an independent reference."""
import pytest

from pe_tools.scoring import report, style


def test_system_styles_are_distinct_for_forty_systems():
    """matplotlib's default cycle has 10 colours (C0..C9): system i takes colour i mod 10 and the marker of its
    group of ten, so 40 systems get 40 distinct (colour, marker) pairs, and systems 10 apart share a colour only."""
    styles = [style.system_style(i) for i in range(40)]
    assert [s["color"] for s in styles] == [f"C{i % 10}" for i in range(40)]
    assert len({(s["color"], s["marker"]) for s in styles}) == 40
    assert [s["marker"] for s in styles[::10]] == list(style.MARKERS)  # a new marker every ten systems


def test_training_columns_are_the_mean_wall_time_in_minutes():
    runs = [{"meta": {"training": {"train_seconds": 120.0, "params": 1_500_000, "device": "cpu", "threads": 2}}},
            {"meta": {"training": {"train_seconds": 240.0, "device": "cpu", "threads": 2}}},
            {"meta": None}]
    t = report.training({"runs": runs})
    assert t["train_minutes"] == pytest.approx((120 + 240) / 2 / 60)  # 3 minutes
    assert t["params"] == 1_500_000 and t["where"] == ["cpu, 2 thread(s)"]
    assert report.training({"runs": [{"meta": {}}]}) == {"params": None, "train_minutes": None, "where": []}

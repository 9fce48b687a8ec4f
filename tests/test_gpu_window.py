"""pe-bench gpu-window (pe_tools/bench/gpu_window.py; scripts/gpu_benchmarks.sh): the order of issue 40's steps,
their budgets, what is dropped when time runs short, resuming and killing, with a fake pe-bench that only sleeps
and writes each step's JSON. The whole window on the CPU is `scripts/gpu_benchmarks.sh OUT --rehearse` (minutes;
docs/benchmarks.md §GPU run)."""
import json
import sys
from types import SimpleNamespace

import pytest

from pe_tools.bench import gpu_window

FAKE = r'''
import json, os, sys, time
argv = sys.argv[1:]
plan = json.loads(os.environ["FAKE_PLAN"])
with open(os.environ["FAKE_CALLS"], "a") as f:
    f.write(json.dumps(argv) + "\n")
if argv[0] == "wmt-corpus":
    sys.exit(0)
out = argv[argv.index("--json") + 1]
name = os.path.basename(out)[:-len(".json")]
step = plan.get(name, {})
time.sleep(step.get("sleep", 0))
body = {"rows": [{"pe": "rpe", "ok": step.get("ok", True)}]} if name == "fp16_triton" else {"complete": step.get("complete", True)}
open(out, "w").write(json.dumps(body))
sys.exit(step.get("rc", 0))
'''


def window(tmp_path, monkeypatch, plan, budget=540, grace=45):
    fake = tmp_path / "fake_bench.py"
    fake.write_text(FAKE)
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setattr(gpu_window, "BENCH", [sys.executable, str(fake)])
    monkeypatch.setattr(gpu_window, "GRACE", grace)
    monkeypatch.setattr(gpu_window, "PROBE", [sys.executable, "-c", "print('{}')"])
    monkeypatch.setenv("FAKE_PLAN", json.dumps(plan))
    monkeypatch.setenv("FAKE_CALLS", str(calls))
    out = tmp_path / "out"
    args = SimpleNamespace(out=str(out), budget=budget, started_at=None, data=str(tmp_path / "data"), rehearse=True)
    rc = gpu_window.run(args)
    made = [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []
    return rc, made, (out / "log.txt").read_text()


def steps_of(calls):
    return [c[c.index("--json") + 1].rsplit("/", 1)[1][:-5] for c in calls if "--json" in c]


def flag(call, name):
    return call[call.index(name) + 1] if name in call else None


def test_the_steps_run_in_the_issues_order_each_with_its_budget(tmp_path, monkeypatch):
    rc, calls, log = window(tmp_path, monkeypatch, {})
    assert rc == 0 and calls[0][0] == "wmt-corpus"
    assert steps_of(calls) == ["fill_splits", "fill_recipe", "fp16_triton", "fill_more", "models"]
    budgets = {s: float(flag(c, "--time-budget")) for s, c in zip(steps_of(calls), calls[1:])}
    assert budgets["fill_splits"] == 180 and budgets["fill_recipe"] == 170 and budgets["fp16_triton"] == 30
    assert 540 - 15 - 30 < budgets["models"] <= 540 - 15  # what is left: here the fake steps took no time
    fill_splits, fill_recipe, _, fill_more, _ = calls[1:]
    rows = fill_splits[fill_splits.index("--rows") + 1:fill_splits.index("--warmup")]
    assert rows == ["sape@128x8", "sape@256x4", "sape@512x2", "sape@1024x1", "stock@1024x1"]  # a: SAPE's splits, stock
    assert fill_recipe[fill_recipe.index("--rows") + 1] == "all"  # b: every encoding at the recipe's choice
    assert fill_more[fill_more.index("--rows") + 1:fill_more.index("--rows") + 3] == ["rpe:triton", "sape/tiny"]
    assert all(flag(c, "--time-budget") and c.index("--time-budget") < (c.index("--extra") if "--extra" in c else 99)
               for c in calls[1:])  # before --extra, which takes the rest
    assert "dropped first: c (models) first, then fill_more" in log
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "fill_more.json", "fill_recipe.json", "fill_splits.json", "fp16_triton.json", "log.txt", "models.json",
        "other.tar.gz"]  # at most 8 files come back from a device call


def test_no_triton_row_unless_fp16_agrees(tmp_path, monkeypatch):
    rc, calls, _ = window(tmp_path, monkeypatch, {"fp16_triton": {"ok": False}})
    more = calls[4]
    assert "rpe:triton" not in more and "sape/tiny" in more


@pytest.mark.slow
def test_short_of_time_c_is_dropped_first_and_a_rerun_resumes(tmp_path, monkeypatch):
    # the budget runs out during b: fill_more and models are dropped, fill_recipe stays partial
    plan = {"fill_splits": {"sleep": 1}, "fill_recipe": {"sleep": 9, "complete": False}}
    rc, calls, log = window(tmp_path, monkeypatch, plan, budget=33)  # 18 s after the reserve: 7 left after b1
    assert steps_of(calls)[:2] == ["fill_splits", "fill_recipe"]
    assert "=== models (c): DROPPED" in log
    assert "incomplete: " in log and "run the same command again" in log
    # the same command again: the complete step is skipped, the partial one resumed, the rest run
    (tmp_path / "calls.jsonl").unlink()
    rc, calls, log = window(tmp_path, monkeypatch, {}, budget=540)
    assert steps_of(calls)[0] == "fill_recipe" and "--resume" in calls[1]
    assert "fill_splits.json is complete; skipped" in log and "models" in steps_of(calls)


@pytest.mark.slow
def test_a_step_that_overruns_is_killed_and_the_next_runs(tmp_path, monkeypatch):
    monkeypatch.setitem(gpu_window.BUDGETS, "fill_splits", 10)
    rc, calls, log = window(tmp_path, monkeypatch, {"fill_splits": {"sleep": 60}}, grace=1)
    assert "killed after 11 s" in log and steps_of(calls)[1] == "fill_recipe"
    assert "incomplete: fill_splits" in log


def test_a_failing_step_is_reported_and_the_others_still_run(tmp_path, monkeypatch):
    rc, calls, log = window(tmp_path, monkeypatch, {"fill_recipe": {"rc": 1}})
    assert rc == 1 and "failed: fill_recipe" in log and steps_of(calls)[-1] == "models"


@pytest.mark.parametrize("text, expected", [('{"complete": false}', "partial"), ('{"complete": true}', "complete"),
                                            ('{"rows": []}', "complete"), ("{", "absent")])
def test_state(tmp_path, text, expected):
    (tmp_path / "x.json").write_text(text)
    assert gpu_window.state(tmp_path / "x.json") == expected
    assert gpu_window.state(tmp_path / "missing.json") == "absent"

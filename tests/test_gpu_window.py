"""The GPU window (scripts/gpu_window.py; scripts/gpu_benchmarks.sh): the order of its steps, their budgets, what is
dropped when time runs short, resuming and killing, with a fake pe-bench that only sleeps and writes each step's
JSON; and the CPU rehearsal of its first step, for real (the whole rehearsal: scripts/gpu_benchmarks.sh OUT
--rehearse, minutes)."""
import importlib.util
import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from pe_testing import REPO

spec = importlib.util.spec_from_file_location("gpu_window", REPO / "scripts" / "gpu_window.py")
gpu_window = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_window)

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


def window(tmp_path, monkeypatch, plan, budget=450, grace=30, steps=None):
    fake = tmp_path / "fake_bench.py"
    fake.write_text(FAKE)
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setattr(gpu_window, "BENCH", [sys.executable, str(fake)])
    monkeypatch.setattr(gpu_window, "GRACE", grace)
    monkeypatch.setattr(gpu_window, "PROBE", [sys.executable, "-c", "print('{}')"])
    monkeypatch.setenv("FAKE_PLAN", json.dumps(plan))
    monkeypatch.setenv("FAKE_CALLS", str(calls))
    out = tmp_path / "out"
    args = SimpleNamespace(out=str(out), budget=budget, started_at=None, data=str(tmp_path / "data"), rehearse=True,
                           steps=steps)
    rc = gpu_window.run(args)
    made = [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []
    return rc, made, (out / "log.txt").read_text()


def steps_of(calls):
    return [c[c.index("--json") + 1].rsplit("/", 1)[1][:-5] for c in calls if "--json" in c]


def flag(call, name):
    return call[call.index(name) + 1] if name in call else None


def rows(call):
    k = call.index("--rows") + 1
    return call[k:k + next(i for i, w in enumerate(call[k:]) if w.startswith("--"))]


def test_the_steps_run_in_order_each_with_its_budget(tmp_path, monkeypatch):
    rc, calls, log = window(tmp_path, monkeypatch, {})
    assert rc == 0 and calls[0][0] == "wmt-corpus"
    assert steps_of(calls) == ["speed_splits", "speed_all", "fp16_triton", "speed_triton"]
    budgets = {s: float(flag(c, "--time-budget")) for s, c in zip(steps_of(calls), calls[1:])}
    assert budgets["speed_splits"] == 110 and budgets["speed_all"] == 220 and budgets["fp16_triton"] == 30
    assert 450 - 10 - 30 < budgets["speed_triton"] <= 450 - 10  # what is left: here the fake steps took no time
    splits, every, _, triton = calls[1:]
    assert rows(splits) == ["sape@128x8", "sape"] and rows(every) == ["all"] and rows(triton) == ["rpe", "rpe:triton"]
    for call in (splits, every, triton):  # three interleaved rounds, train-speed, the recipe's own command
        assert call[0] == "train-speed" and flag(call, "--rounds") == "3" and "--num-workers" not in call
    assert flag(every, "--goals").endswith("examples/benchmarks/gpu/goals.json") and flag(splits, "--goals")
    assert all(c.index("--time-budget") < (c.index("--extra") if "--extra" in c else 99) for c in calls[1:])
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "fp16_triton.json", "log.txt", "other.tar.gz", "speed_all.json", "speed_splits.json", "speed_triton.json"]


def test_no_triton_speed_unless_fp16_agrees(tmp_path, monkeypatch):
    rc, calls, log = window(tmp_path, monkeypatch, {"fp16_triton": {"ok": False}})
    assert steps_of(calls)[-1] == "fp16_triton" and "speed_triton (c): skipped" in log


@pytest.mark.slow
def test_short_of_time_the_last_steps_are_dropped_and_a_rerun_resumes(tmp_path, monkeypatch):
    plan = {"speed_splits": {"sleep": 1}, "speed_all": {"sleep": 9, "complete": False}}
    rc, calls, log = window(tmp_path, monkeypatch, plan, budget=28)  # 18 s after the reserve: 8 left after b
    assert steps_of(calls) == ["speed_splits", "speed_all"]
    assert "=== fp16_triton (c): DROPPED" in log and "=== speed_triton (c): DROPPED" not in log  # no fp16 verdict
    assert "incomplete: speed_all, fp16_triton" in log and "run the same command again" in log
    (tmp_path / "calls.jsonl").unlink()
    rc, calls, log = window(tmp_path, monkeypatch, {}, budget=450)
    assert steps_of(calls)[0] == "speed_all" and "--resume" in calls[1]
    assert "speed_splits.json is complete; skipped" in log and steps_of(calls)[-1] == "speed_triton"


@pytest.mark.slow
def test_a_step_that_overruns_is_killed_and_the_next_runs(tmp_path, monkeypatch):
    monkeypatch.setitem(gpu_window.BUDGETS, "speed_splits", 10)
    rc, calls, log = window(tmp_path, monkeypatch, {"speed_splits": {"sleep": 60}}, grace=1)
    assert "killed after 11 s" in log and steps_of(calls)[1] == "speed_all"
    assert "incomplete: speed_splits" in log


def test_a_failing_step_is_reported_and_the_others_still_run(tmp_path, monkeypatch):
    rc, calls, log = window(tmp_path, monkeypatch, {"speed_all": {"rc": 1}})
    assert rc == 1 and "failed: speed_all" in log and steps_of(calls)[-1] == "speed_triton"


def test_steps_picks_some(tmp_path, monkeypatch):
    rc, calls, log = window(tmp_path, monkeypatch, {}, steps=["speed_all"])
    assert steps_of(calls) == ["speed_all"]


@pytest.mark.parametrize("text, expected", [('{"complete": false}', "partial"), ('{"complete": true}', "complete"),
                                            ('{"rows": []}', "complete"), ("{", "absent")])
def test_state(tmp_path, text, expected):
    (tmp_path / "x.json").write_text(text)
    assert gpu_window.state(tmp_path / "x.json") == expected
    assert gpu_window.state(tmp_path / "missing.json") == "absent"


@pytest.mark.slow
def test_the_rehearsal_of_step_a_on_the_cpu(tmp_path):
    """The window's first step for real, on the CPU at tiny size: the wrapper, the corpus, three interleaved rounds
    of SAPE at 128 x 8 and at the recipe's choice, every run's per-update records, the log and the packed tables."""
    out = tmp_path / "out"
    proc = subprocess.run(["bash", str(REPO / "scripts" / "gpu_benchmarks.sh"), str(out), "--rehearse", "--steps",
                           "speed_splits", "--data", str(tmp_path / "data")], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((out / "speed_splits.json").read_text())
    assert data["complete"] and [m["key"] for m in data["measurements"]] == [
        ["sape/tiny@128x8", 1], ["sape/tiny@1024x1", 1], ["sape/tiny@1024x1", 2], ["sape/tiny@128x8", 2],
        ["sape/tiny@128x8", 3], ["sape/tiny@1024x1", 3]]
    fast = next(r for r in data["results"] if r["split"] == "1024x1")
    assert fast["rounds"] == 3 and fast["wps_to_first_split"]["n"] == 3 and fast["num_workers"] == 1
    assert "incomplete: none" in (out / "log.txt").read_text()
    assert sorted(p.name for p in out.iterdir()) == ["log.txt", "other.tar.gz", "speed_splits.json"]

"""pe-bench writes its results as it goes (docs/benchmarks.md §Partial runs): a `pe-bench models` run killed
(SIGKILL) after some measurements leaves a JSON that loads, says complete: false and holds them; --resume completes
it to the same (size, length, pe, round) keys as an uninterrupted run, keeping the killed run's measurements as they
were; --resume with another setting is refused naming it; --time-budget 0 writes one measurement and the command
that completes the run. The same for train-speed at tiny sizes on the CPU."""
import json
import os
import signal
import subprocess
import sys

import pytest

from pe_testing import REPO, call_main

MODELS = ["models", "--sizes", "tiny", "--pe", "sape", "nope", "--rounds", "2", "--steps", "1", "--warmup", "0",
          "--forward-passes", "1", "--vocab", "100", "--lengths", "6", "10", "--max-tokens", "40", "--threads", "1",
          "--device", "cpu", "--processes", "one"]
KEYS = {("tiny", n, pe, k) for n in (6, 10) for pe in ("sape", "nope") for k in (1, 2)}
ENV = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
# runs pe-bench in this interpreter, and SIGKILLs it when measure_in_process is called for the (N+1)th time: after
# the discarded warm-up measurement and N - 1 kept ones, each written before the next begins
KILLER = """
import os, signal, sys
from pe_tools.bench import models as cli
real, calls = cli.measure_in_process, [0]
def measure(*args, **kwargs):
    calls[0] += 1
    if calls[0] > int(os.environ["KILL_AFTER"]):
        os.kill(os.getpid(), signal.SIGKILL)
    return real(*args, **kwargs)
cli.measure_in_process = measure
from pe_tools.bench.cli import main
sys.exit(main(sys.argv[1:]))
"""


def bench(*args, killer=None):
    code = ["-c", KILLER] if killer else [str(REPO / "scripts" / "benchmark.py")]
    env = dict(ENV, KILL_AFTER=str(killer)) if killer else ENV
    return subprocess.run([sys.executable, *code, *map(str, args)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)


def bench_here(*args):
    """``bench(*args)`` called in this interpreter (pe_tools.bench.cli.main): for the argument errors, and for the
    resumed runs, whose state is all on disk (the first part of each run goes through scripts/benchmark.py in a
    new interpreter, or is killed there)."""
    from pe_tools.bench import cli

    return call_main(cli.main, args, prog="benchmark.py", cwd=REPO)


def keys(data):
    return {tuple(m["key"]) for m in data["measurements"]}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("whole")
    proc = bench(*MODELS, "--out-dir", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((out / "benchmark.json").read_text())


@pytest.mark.slow
@pytest.mark.mutation
def test_an_uninterrupted_run_is_complete(uninterrupted):
    assert uninterrupted["complete"] is True and keys(uninterrupted) == KEYS and uninterrupted["missing"] == []
    assert [(r["pe"], r["length"], len(r["rounds"]["step_wall_s"])) for r in uninterrupted["results"]] == [
        (pe, n, 2) for n in (6, 10) for pe in ("nope", "sape")]


@pytest.mark.slow
@pytest.mark.mutation
def test_a_killed_run_leaves_its_measurements_and_resume_completes_it(tmp_path, uninterrupted):
    proc = bench(*MODELS, "--out-dir", tmp_path, killer=4)  # warm-up + 3 measurements, killed in the 4th
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    killed = json.loads((tmp_path / "benchmark.json").read_text())
    assert killed["complete"] is False and (killed["measured"], killed["total"]) == (3, 8)
    assert keys(killed) == {("tiny", 6, "nope", 1), ("tiny", 6, "sape", 1), ("tiny", 10, "nope", 1)}
    assert {tuple(k) for k in killed["missing"]} == KEYS - keys(killed)
    assert not (tmp_path / "benchmark.png").exists()  # the chart waits for a whole run
    md = (tmp_path / "benchmark.md").read_text()
    assert "(PARTIAL)" in md and "PARTIAL RESULT: 3 of 8 measurements" in md and "--resume" in md
    assert [(r["pe"], r["length"]) for r in killed["results"]] == [("nope", 6), ("sape", 6), ("nope", 10)]
    nope10 = killed["results"][2]
    assert nope10["forward_ratio"] is None  # sape not measured at L=10 yet
    assert killed["results"][0]["forward_ratio"] == pytest.approx(
        killed["results"][0]["forward_s"] / killed["results"][1]["forward_s"])

    proc = bench_here(*MODELS, "--out-dir", tmp_path, "--resume")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "3 of 8 measurements kept" in proc.stderr and proc.stderr.count("[round ") == 5
    whole = json.loads((tmp_path / "benchmark.json").read_text())
    assert whole["complete"] is True and keys(whole) == keys(uninterrupted) == KEYS
    assert [(r["pe"], r["length"], len(r["rounds"]["step_wall_s"])) for r in whole["results"]] == [
        (r["pe"], r["length"], 2) for r in uninterrupted["results"]]
    before = {tuple(m["key"]): m for m in killed["measurements"]}
    assert all(m == before[tuple(m["key"])] for m in whole["measurements"] if tuple(m["key"]) in before)  # kept
    assert (tmp_path / "benchmark.png").read_bytes()[:4] == b"\x89PNG" and "PARTIAL" not in (
        tmp_path / "benchmark.md").read_text()
    assert len(whole["settings"]["resumed"]) == 1  # the killed part's start


@pytest.mark.parametrize("flag, value, name", [("--vocab", 200, "vocab"), ("--lengths", 6, "lengths"),
                                               ("--rounds", 3, "rounds")])
@pytest.mark.slow
@pytest.mark.mutation
def test_resume_with_another_setting_is_refused_naming_it(uninterrupted, tmp_path, flag, value, name):
    (tmp_path / "benchmark.json").write_text(json.dumps(uninterrupted))
    args = list(MODELS)
    i = args.index(flag)
    args[i + 1:i + 1 + (2 if flag == "--lengths" else 1)] = [str(value)]
    proc = bench_here(*args, "--out-dir", tmp_path, "--resume")
    assert proc.returncode == 2 and f"measured with {name} = " in proc.stderr, proc.stderr[-2000:]
    assert json.loads((tmp_path / "benchmark.json").read_text()) == uninterrupted  # left as it was


@pytest.mark.slow
@pytest.mark.mutation
def test_time_budget_zero_writes_one_measurement_and_the_resume_command(tmp_path):
    out = tmp_path / "b.json"
    proc = bench(*MODELS, "--json", out, "--time-budget", 0)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["complete"] is False and keys(data) == {("tiny", 6, "nope", 1)}
    line = next(line for line in proc.stdout.splitlines() if line.startswith("pe-bench models: incomplete"))
    assert "1 of 8 measurements done, 7 missing" in line
    hint = line.split("Complete it with: ")[1]
    assert hint.startswith("pe-bench models --resume ") and f"--json {out}" in hint and "--time-budget" not in hint
    proc = bench_here(*hint.split()[1:])  # the hint, as printed, completes the run
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert keys(json.loads(out.read_text())) == KEYS and json.loads(out.read_text())["complete"] is True


def test_resume_needs_an_output(tmp_path):
    proc = bench_here(*MODELS, "--resume")
    assert proc.returncode == 2 and "--resume needs the output" in proc.stderr


def test_train_speed_writes_each_run_and_resumes(tmp_path, monkeypatch):
    """train-speed's rounds with fairseq-train replaced by a stand-in (its real runs: test_benchmark_train_speed)."""
    from pe_tools.bench import train_speed
    from pe_tools.bench.cli import main

    (tmp_path / "dict.en.txt").write_text("a 1\n")
    ran = []

    def fake(argv, warmup, timed, profiled, cuda, count_syncs=False, compile_backend=None):
        ran.append(argv[argv.index("--arch") + 1])
        return dict(max_tokens=512, wps=100.0 * len(ran), step_s=1.0 / len(ran), peak_bytes=10, top_kernels=[],
                    num_workers=1, fp16=False, activity="cpu", updates=[])

    monkeypatch.setattr(train_speed, "run_in_process", fake)
    args = ["train-speed", "--data", str(tmp_path), "--size", "tiny", "--tokens-per-update", "1024", "--rows",
            "sape@512x2", "t5@512x2", "--device", "cpu", "--rounds", "2", "--out-dir", str(tmp_path / "out")]
    assert main([*args, "--time-budget", "0"]) == 0
    data = json.loads((tmp_path / "out" / "train_speed.json").read_text())
    assert data["complete"] is False and keys(data) == {("sape/tiny@512x2", 1)} and ran == ["transformer_sape_tiny"]
    assert "(PARTIAL)" in (tmp_path / "out" / "train_speed.md").read_text()
    assert main([*args, "--resume"]) == 0
    data = json.loads((tmp_path / "out" / "train_speed.json").read_text())
    assert data["complete"] is True and [a.split("_")[1] for a in ran] == ["sape", "t5", "t5", "sape"]  # rotated
    t5 = next(r for r in data["results"] if r["pe"] == "t5")
    assert t5["step_to_sape"] == pytest.approx({"median": 11 / 12, "min": 0.5, "max": 4 / 3, "n": 2})  # (1/2)/1, (1/3)/(1/4)


@pytest.mark.parametrize("content", ['{"measurements": []}', '{"settings": {}, "measure', '[1, 2]',
                                     '{"settings": [], "measurements": []}'])
def test_resume_from_a_json_that_is_not_a_runs_is_refused_naming_it(content, tmp_path):
    """--resume from an output that is not a pe-bench run's JSON (no settings, cut short, not an object, settings
    not an object) is refused naming the file, and the file is left as it was."""
    out = tmp_path / "b.json"
    out.write_text(content)
    proc = bench_here(*MODELS, "--json", out, "--resume")
    assert proc.returncode == 2 and f"--resume: {out} is not the JSON of a pe-bench models run" in proc.stderr, proc.stderr
    assert out.read_text() == content

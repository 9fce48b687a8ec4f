"""Issue 59's GPU window (devtools/gpu_queue.py, scripts/gpu_queue.sh): the queue files of the 6,000-update runs are
the generated ones and parse with pe-queue's own parser; the window's time estimate comes from the recorded
3,000-update GPU runs; with a fake pe-queue, a window cut short by its budget brings back only whole records and
the next window trains the rest; the offline install is one script both GPU windows call. The real window on the
CPU at tiny size (`scripts/gpu_queue.sh QUEUE OUT --rehearse`, the queue's own rehearsal of each run) takes minutes
on 2 cores."""
import json
import os
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from pe_testing import REPO

from pe_plugin.encodings import PE_REGISTRY
from devtools import gpu_queue
from pe_tools.recipes import load_table
from pe_tools.recipes.queue import parse_queue, rehearse
from pe_tools.recipes.results import max_update_of
from pe_tools.recipes.train import size_entry

PAIRS = ("en-de", "en-fr")


def queue_path(pair):
    return REPO / "examples" / "multi30k" / f"queue_6k_{pair.replace('-', '_')}.txt"


# ------------------------------------------------------------------------------------------------ the queue files
@pytest.mark.parametrize("pair", PAIRS)
def test_queue_files_are_generated_from_the_recipe_and_parse(pair):
    """Each queue file is `python -m devtools.gpu_queue queue PAIR`'s output: the encodings of the recorded
    3,000-update En-Fr table, in the recipe's order, at annealed6k, seed 1, into results_6k; pe-queue parses it."""
    path = queue_path(pair)
    assert path.read_text() == gpu_queue.queue_text(pair), f"regenerate: python -m devtools.gpu_queue queue {pair}"
    runs = parse_queue(path, data=False)
    table = load_table("multi30k")
    recorded = sorted(p.name.split(".")[0] for p in (REPO / gpu_queue.REFERENCE_RUNS).glob("*.en-fr.annealed.seed1"))
    assert sorted(r.method for r in runs) == recorded and len(runs) == 5  # the five encodings
    assert [r.method for r in runs] == [m for m in table["method"] if m in recorded] and runs[0].method == "sape"
    assert all(r.method in PE_REGISTRY and "pe" not in table["method"][r.method] for r in runs)  # registry names
    assert {(r.recipe, r.pair, r.size, r.seed, str(r.into)) for r in runs} == {
        ("multi30k", pair, "annealed6k", 1, "examples/multi30k/results_6k")}
    text = path.read_text()
    assert f"scripts/gpu_queue.sh examples/multi30k/{path.name} OUTDIR" in text  # the window's command
    if pair == "en-de":  # SAPE's earlier 6,000-update run: another GPU kind
        assert "H100" in text and "sape.en-de.annealed6k.seed1" in text
        meta = REPO / "examples/multi30k/results/sape.en-de.annealed6k.seed1/hyp.detok.de.meta.json"
        assert "H100" in json.loads(meta.read_text())["training"]["device"]


def test_annealed6k_is_annealed_at_twice_the_updates():
    table = load_table("multi30k")
    six, three = size_entry(table, "annealed6k"), size_entry(table, "annealed")
    assert max_update_of(six["flags"]) == 2 * max_update_of(three["flags"]) == 6000
    budget = {"--max-update", "--total-num-update"}
    pairs = lambda flags: [(f, v) for f, v in zip(flags, flags[1:] + [""]) if f.startswith("--") and f not in budget]  # noqa: E731
    assert pairs(six["flags"]) == pairs(three["flags"]) and six["arch"] == three["arch"]


# ------------------------------------------------------------------------------------------------ the estimate
def test_the_estimate_is_read_from_the_recorded_gpu_runs():
    """The slowest of the six 3,000-update runs that trained side by side on the H200 (209 s, posnet_embed En-Fr):
    6,000 updates take twice its time, and with the allowances the window fits a device call of 600 s."""
    metas = [json.loads(p.read_text())["training"] for p in
             (REPO / gpu_queue.REFERENCE_RUNS).glob("*.annealed.seed1/hyp.detok.fr.meta.json")]
    ref = gpu_queue.seconds_per_update()
    assert ref["per_update"] == max(t["train_seconds"] / t["updates"] for t in metas)
    assert ref["device"] == "NVIDIA H200" and ref["run"] == "posnet_embed.en-fr.annealed.seed1"
    est = gpu_queue.estimate(6000, install_s=30)
    assert est["train_s"] == round(6000 * ref["per_update"]) == 418
    assert est["total_s"] == est["train_s"] + gpu_queue.STARTUP_S + gpu_queue.DECODE_S + 30 < 570


# ------------------------------------------------------------------------------------------------ the window
FAKE_QUEUE = r'''
import json, os, shlex, sys, time
from pathlib import Path
plan = json.loads(os.environ["FAKE_PLAN"])
calls = Path(os.environ["FAKE_CALLS"])
n = len(calls.read_text().splitlines()) if calls.exists() else 0
with open(calls, "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\n")
rc = 0
for line in Path(sys.argv[2]).read_text().splitlines():
    if line.startswith("#"):
        continue
    words = shlex.split(line)
    opts = dict(w.split("=", 1) for w in words if "=" in w)
    recipe, method, pair, size, seed = [w for w in words if "=" not in w]
    name = f"{method}.{pair}.{size}.seed{seed}"
    if method in plan.get("fail_first", []) and n == 0:
        print(f"[queue] {name}: failed: pe-train exited 250", flush=True)
        rc = 1
        continue
    if method in plan.get("half", []):  # pe-record's temporary folder, as a kill leaves it
        (Path(opts["into"]) / f".{name}.tmp{os.getpid()}").mkdir(parents=True)
        continue
    if method not in plan.get("record", [method]):
        continue
    rec = Path(opts["into"]) / name
    if (rec / "command.json").is_file():  # recorded by an earlier pass: pe-queue skips it
        continue
    (rec / "last").mkdir(parents=True)
    (rec / "command.json").write_text(json.dumps({"method": method}))
    (rec / "hyp.detok.fr").write_text("une phrase\n")
    (rec / "hyp.detok.fr.meta.json").write_text(json.dumps({"training": {"train_seconds": 400}}))
    (rec / "last" / "hyp.detok.fr").write_text("une phrase\n")
    print(f"[queue] {name}: recorded in {rec}", flush=True)
time.sleep(plan.get("sleep", 0))
sys.exit(rc)
'''
PROBE = [sys.executable, "-c", "import json; print(json.dumps(dict(cuda=True, device='FAKE GPU')))"]


def window(tmp_path, monkeypatch, plan, budget=570, out="out", work="work", rehearse=False):
    """run_window on issue 59's En-Fr queue file with a fake pe-queue, from ``tmp_path`` (the checkout's records go
    to tmp_path/examples/multi30k/results_6k); returns (status, OUTDIR, the fake's calls)."""
    fake, calls = tmp_path / "fake_queue.py", tmp_path / "calls.jsonl"
    fake.write_text(FAKE_QUEUE)
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "COMMIT").write_text("abc\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(gpu_queue, "QUEUE_CMD", [sys.executable, str(fake)])
    monkeypatch.setattr(gpu_queue, "PROBE", PROBE)
    monkeypatch.setattr(gpu_queue, "pinned_code", lambda commit, work, say: code)
    monkeypatch.setenv("FAKE_PLAN", json.dumps(plan))
    monkeypatch.setenv("FAKE_CALLS", str(calls))
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    for lang in ("en", "fr"):
        (data / f"dict.{lang}.txt").write_text("")
    args = SimpleNamespace(queue=str(queue_path("en-fr")), out=str(tmp_path / out), data=str(data), budget=budget,
                           started_at=None, reserve=2, jobs=None, commit=None, work=str(tmp_path / work),
                           rehearse=rehearse)
    rc = gpu_queue.run_window(args)
    made = [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []
    return rc, tmp_path / out, made


@pytest.mark.slow  # the first window waits for its budget (6 s)
def test_a_window_cut_short_brings_back_only_whole_records_and_the_next_trains_the_rest(tmp_path, monkeypatch):
    # window 1: SAPE and RoPE recorded, RPE's record half-written when the budget ends; the queue is stopped
    rc, out, calls = window(tmp_path, monkeypatch, {"record": ["sape", "rope"], "half": ["rpe"], "sleep": 60},
                            budget=8)
    assert rc == 3 and len(calls) == 1
    assert calls[0][:1] == ["run"] and calls[0][2:] == ["-j", "5", "--code", str(tmp_path / "code")]
    assert sorted(p.name for p in out.iterdir()) == ["log.txt", "rope.en-fr.annealed6k.seed1.tar.gz",
                                                     "sape.en-fr.annealed6k.seed1.tar.gz", "window.json"]
    state = json.loads((out / "window.json").read_text())
    assert state["cut_short"] and state["environment"]["device"] == "FAKE GPU"
    assert [n for n, s in state["runs"].items() if s == "recorded"] == ["sape.en-fr.annealed6k.seed1",
                                                                       "rope.en-fr.annealed6k.seed1"]
    assert not list((tmp_path / "work" / "records").rglob(".*"))  # RPE's half record removed
    log = (out / "log.txt").read_text()
    assert "the queue is stopped" in log and "removed a half-written record" in log
    copy = (tmp_path / "work" / "queue.txt").read_text()
    assert f"data={tmp_path / 'data'}" in copy and f"into={tmp_path / 'work/records/examples/multi30k/results_6k'}" in copy
    with tarfile.open(out / "sape.en-fr.annealed6k.seed1.tar.gz") as tar:
        assert "examples/multi30k/results_6k/sape.en-fr.annealed6k.seed1/last/hyp.detok.fr" in tar.getnames()

    # back here: the two records into the checkout (here tmp_path), then the next window on a fresh machine
    gpu_queue.unpack(out, tmp_path)
    results = tmp_path / "examples/multi30k/results_6k"
    assert sorted(p.name for p in results.iterdir()) == ["rope.en-fr.annealed6k.seed1", "sape.en-fr.annealed6k.seed1"]
    rc, out2, calls = window(tmp_path, monkeypatch, {}, out="out2", work="work2")
    assert rc == 0
    copy = (tmp_path / "work2" / "queue.txt").read_text()
    assert [shlex.split(line)[1] for line in copy.splitlines()[1:]] == ["rpe", "posnet_embed", "kerple"]
    assert sorted(p.name for p in out2.glob("*.tar.gz")) == [f"{m}.en-fr.annealed6k.seed1.tar.gz"
                                                             for m in ("kerple", "posnet_embed", "rpe")]
    assert "sape.en-fr.annealed6k.seed1: recorded in examples/multi30k/results_6k already; skipped" in \
        (out2 / "log.txt").read_text()
    assert len(gpu_queue.unpack(out2, tmp_path)) == 3 and len(list(results.iterdir())) == 5
    assert gpu_queue.unpack(out2, tmp_path) == []  # a record already there is kept


def test_a_failed_pass_is_followed_by_another_while_time_is_left(tmp_path, monkeypatch):
    rc, out, calls = window(tmp_path, monkeypatch, {"fail_first": ["kerple"]})
    assert rc == 0 and len(calls) == 2
    assert len(list(out.glob("*.tar.gz"))) == 5 and "pe-queue exited 1 with runs unrecorded" in (out / "log.txt").read_text()


def test_a_rehearsed_window_trains_the_queues_own_rehearsal_of_each_run(tmp_path, monkeypatch):
    """--rehearse: the window's copy of the queue holds pe-queue run --rehearse's line for each run (its recipe,
    method, pair and seed at size tiny-cpu, on a synthetic corpus of its pair made in WORK/data, not the carried
    --data), its runs and records under WORK as a real window's; the multi30k recipe's tiny-cpu is fairseq's tiny
    model on the CPU, a few dozen updates. The corpus is a stand-in here (the queue's tests make real ones)."""
    made = []
    monkeypatch.setattr(rehearse, "synthetic_data", lambda pair, dest, log=print: made.append((pair, dest)) or dest)
    rc, out, calls = window(tmp_path, monkeypatch, {}, rehearse=True)
    work = tmp_path / "work"
    corpus = work / "data" / "synthetic_en_fr"
    assert rc == 0 and len(calls) == 1 and set(made) == {("en-fr", corpus)}
    lines = [shlex.split(line) for line in (work / "queue.txt").read_text().splitlines()[1:]]
    methods = [r.method for r in parse_queue(queue_path("en-fr"), data=False)]
    assert [words[:5] for words in lines] == [["multi30k", m, "en-fr", "tiny-cpu", "1"] for m in methods]
    assert all(words[5:] == [f"data={corpus}", f"runs-dir={work / 'runs'}",
                             f"into={work / 'records/examples/multi30k/results_6k'}"] for words in lines), lines
    assert sorted(p.name for p in out.glob("*.tar.gz")) == sorted(f"{m}.en-fr.tiny-cpu.seed1.tar.gz" for m in methods)
    size = size_entry(load_table("multi30k"), "tiny-cpu")
    assert "--cpu" in size["flags"] and size["arch"] == {"en-de": "tiny", "en-fr": "tiny"}
    assert max_update_of(size["flags"]) <= 50


def test_no_cuda_is_refused_unless_rehearsed(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_queue, "PROBE", [sys.executable, "-c", "print('{\"cuda\": false, \"device\": \"cpu\"}')"])
    args = SimpleNamespace(queue=str(queue_path("en-de")), out=str(tmp_path / "out"), data=None, budget=60,
                           started_at=None, reserve=2, jobs=None, commit=None, work=str(tmp_path / "w"), rehearse=False)
    assert gpu_queue.run_window(args) == 1
    assert "no CUDA device visible to torch" in (tmp_path / "out" / "log.txt").read_text()


def test_without_git_the_runs_train_from_a_copy_naming_the_commit(tmp_path, monkeypatch):
    checkout = tmp_path / "checkout"
    for pkg in ("pe_plugin", "pe_tools"):
        (checkout / pkg / "__pycache__").mkdir(parents=True)
        (checkout / pkg / "__init__.py").write_text(f"# {pkg}\n")
    monkeypatch.setattr(gpu_queue, "CHECKOUT", checkout)
    said = []
    code = gpu_queue.pinned_code("0123abc", tmp_path / "work", said.append)
    assert (code / "COMMIT").read_text() == "0123abc\n" and (code / "pe_tools" / "__init__.py").is_file()
    assert not (code / "pe_tools" / "__pycache__").exists() and "no git commit to export" in said[0]


def test_unpack_refuses_a_tarball_that_is_not_one_record(tmp_path):
    bad = tmp_path / "x.tar.gz"
    (tmp_path / "f").write_text("x")
    with tarfile.open(bad, "w:gz") as tar:
        tar.add(tmp_path / "f", arcname="../x/f")
    with pytest.raises(ValueError, match="not one record folder"):
        gpu_queue.unpack(tmp_path, tmp_path / "root")
    (tmp_path / ".y.tar.gz.tmp").write_text("a cut packing")  # skipped: not *.tar.gz
    bad.unlink()
    assert gpu_queue.unpack(tmp_path, tmp_path / "root") == []


# ------------------------------------------------------------------------------------------------ the install
FAKE_PYTHON = """#!/usr/bin/env bash
echo "$*" >> "$FAKE_LOG"
if [ "$1" = -c ]; then [ -f "$FAKE_LOG.installed" ]; exit $?; fi
touch "$FAKE_LOG.installed"
"""


@pytest.mark.parametrize("kind", ["gathered", "chosen", "installed"])
def test_the_offline_install_is_one_script_both_windows_call(tmp_path, kind):
    for script in ("gpu_benchmarks.sh", "gpu_queue.sh"):
        text = (REPO / "scripts" / script).read_text()
        assert "scripts/gpu_node.sh" in text and "pip install" not in text, script
    assert "scripts/install_wheels.sh" in (REPO / "scripts" / "gpu_node.sh").read_text()
    py, log, wheels = tmp_path / "python", tmp_path / "log", tmp_path / "wheels"
    py.write_text(FAKE_PYTHON)
    py.chmod(0o755)
    wheels.mkdir()
    (wheels / "a-1-py3-none-any.whl").write_text("")
    if kind == "gathered":
        (wheels / "requirements.txt").write_text("pe_plugin\n")
    if kind == "installed":
        Path(f"{log}.installed").touch()
    env = dict(os.environ, PYTHON=str(py), FAKE_LOG=str(log))
    proc = subprocess.run(["bash", REPO / "scripts" / "install_wheels.sh", wheels, "fairseq", "sacremoses"], env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    pips = [line for line in log.read_text().splitlines() if line.startswith("-m pip")]
    assert log.read_text().splitlines()[0] == "-c import fairseq"  # then "import sacremoses", the same -c
    if kind == "gathered":  # docs/benchmarks.md §Offline install's two commands
        assert pips == [f"-m pip install -q --no-index --find-links {wheels} -r {wheels}/requirements.txt",
                        f"-m pip install -q --no-index --find-links {wheels} --no-deps ve-fairseq==0.12.3"]
    elif kind == "chosen":
        assert pips == [f"-m pip install -q --no-index --no-deps {wheels}/a-1-py3-none-any.whl"]
    else:
        assert pips == []


@pytest.mark.parametrize("installed", [True, False])
def test_both_windows_start_the_same_way(tmp_path, installed):
    """scripts/gpu_node.sh, which both window scripts exec: `--wheels DIR` taken out of the arguments wherever it
    stands, the wheels installed only when a module does not import, this checkout first on PYTHONPATH, and the
    command run with the other arguments in their order."""
    py, log, wheels = tmp_path / "python", tmp_path / "log", tmp_path / "wheels"
    py.write_text(FAKE_PYTHON)
    py.chmod(0o755)
    wheels.mkdir()
    (wheels / "a-1-py3-none-any.whl").write_text("")
    if installed:
        Path(f"{log}.installed").touch()
    env = dict(os.environ, PYTHON=str(py), FAKE_LOG=str(log), PYTHONPATH="/elsewhere")
    show = 'printf "%s\\n" "$PYTHONPATH" "$@"'
    proc = subprocess.run(["bash", REPO / "scripts" / "gpu_node.sh", "fairseq sacremoses", "bash", "-c", show, "_",
                           "a b", "--wheels", wheels, "--budget", "5"], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"{REPO}:/elsewhere", "a b", "--budget", "5"]
    pips = [line for line in log.read_text().splitlines() if line.startswith("-m pip")]
    assert log.read_text().splitlines()[0] == "-c import fairseq"
    assert pips == ([] if installed else [f"-m pip install -q --no-index --no-deps {wheels}/a-1-py3-none-any.whl"])


def test_the_window_script_states_its_usage():
    proc = subprocess.run(["bash", REPO / "scripts" / "gpu_queue.sh"], capture_output=True, text=True)
    assert proc.returncode == 2 and "usage:" in proc.stderr and "QUEUE OUTDIR" in proc.stderr


def test_only_whole_records_are_packed_never_a_folder_pe_record_is_still_writing(tmp_path):
    """What the window packs (``whole_records``): the record folders holding command.json, under any depth of the
    queue's into= folders, but none inside a hidden folder: pe-record writes a record under a hidden name
    (INTO/.pe-record/NAME.PID/, or .NAME.tmpPID/ beside the records in older versions) and moves a replaced one
    aside (.NAME.oldPID/) before renaming, so a hidden folder holding command.json is a record being written or
    replaced, never one to bring back."""
    records = tmp_path / "records"
    whole = [records / "examples/multi30k/results_6k" / name for name in ("rope.en-fr.annealed6k.seed1",
                                                                           "sape.en-fr.annealed6k.seed1")]
    hidden = [records / "examples/multi30k/results_6k" / sub for sub in (
        ".pe-record/rpe.en-fr.annealed6k.seed1.4242", ".rpe.en-fr.annealed6k.seed1.tmp4242",
        ".sape.en-fr.annealed6k.seed1.old4242")] + [records / ".cache/examples/x/kerple.en-fr.annealed6k.seed1"]
    for folder in whole + hidden:
        folder.mkdir(parents=True)
        (folder / "command.json").write_text("{}\n")
        (folder / "last").mkdir()
        (folder / "last" / "hyp.detok.fr").write_text("une phrase\n")
    assert gpu_queue.whole_records(records) == whole

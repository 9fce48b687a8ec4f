#!/usr/bin/env python
"""The GPU measurements in one call of at most 8 minutes: every step a `pe-bench` command with its own time budget,
every output written as it goes, and the same command resuming what a cut window left.

    scripts/gpu_benchmarks.sh OUTDIR [--wheels DIR] [--budget 450]     # on a GPU node (installs DIR first)
    python scripts/gpu_window.py OUTDIR --budget 450                    # the same, fairseq already installed
    python scripts/gpu_window.py OUTDIR --rehearse                      # the CPU rehearsal at tiny size

Steps, in this order (budgets in seconds; ``--budget`` counts from ``--started-at``, the wrapper's start, so the
wheels' install is inside it):

  a  speed_splits  110  SAPE base at 4,096 x 8 and at the recipe's choice on this GPU (pe-train's auto), three
                        interleaved rounds in one run: the words/s of 32,768-token updates against 4,096 x 8
  b  speed_all     220  every encoding and stock fairseq at the recipe's choice, three rounds, against the goals of
                        examples/benchmarks/gpu/goals.json
  c  fp16_triton    30  Shaw RPE with --pe-attention-impl triton against the fp32 reference in fp16
  c  speed_triton  rest Shaw RPE triton against auto, three rounds (only when fp16_triton agrees)

Each is ``pe-bench train-speed`` (fairseq-train as pe-train runs it, measured update by update: docs/benchmarks.md
§Training speed) or ``pe-bench fp16``. A step gets ``min(its budget, the time left less a reserve)``; one that
overruns its budget by GRACE seconds is killed, keeping the runs its JSON holds. Every step writes OUTDIR/STEP.json
after each run (complete: false until done); run the same command again with the same OUTDIR and every partial JSON
is resumed, complete ones are skipped. OUTDIR receives at most 6 files: log.txt, the four JSONs and other.tar.gz
(the steps' markdown and CSV). The corpus is ``pe-bench wmt-corpus`` (100,000 pairs, 40,000 joined types), written
into ``--data`` (default ``$TMPDIR/pe_wmt_shaped``) in seconds and reused.

``--rehearse`` runs the same steps on the CPU at tiny size (2,000 pairs of 1,000 types, 1,024 tokens an update at
128 x 8 and the recipe's choice, one update of each kind a run, fp16 and Triton in Triton's interpreter), so that
nothing in the window fails for a reason a CPU would have shown; ``--steps`` runs some steps only.
"""
import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GOALS = REPO / "examples" / "benchmarks" / "gpu" / "goals.json"
RESERVE = 10  # seconds kept back at the end: packing the outputs
GRACE = 30  # seconds a step may overrun its budget (its last run) before it is killed
BENCH = [sys.executable, "-m", "pe_tools.bench.cli"]  # how a step runs pe-bench (the tests put a fake here)
PROBE = [sys.executable, "-c", "import torch, fairseq, platform, json; print(json.dumps(dict(python=platform."
         "python_version(), torch=torch.__version__, cuda=torch.version.cuda, fairseq=fairseq.__version__, device="
         "torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu')))"]  # the environment, logged first
BUDGETS = {"speed_splits": 110, "speed_all": 220, "fp16_triton": 30, "speed_triton": None}
WINDOW = ["--warmup", "2", "--timed", "5", "--profiled", "1", "--rounds", "3"]
GPU = {"size": ["--size", "base"], "split": "4096x8", "window": WINDOW, "device": "cuda",
       "corpus": ["--sentences", "100000", "--vocab", "40000"], "fp16": ["--size", "base"], "triton": []}
REHEARSE = {
    "size": ["--size", "tiny", "--tokens-per-update", "1024"], "split": "128x8", "device": "cpu",
    "window": ["--warmup", "1", "--timed", "1", "--profiled", "1", "--rounds", "3"],
    "corpus": ["--sentences", "2000", "--vocab", "1000", "--valid", "50"],
    "fp16": ["--size", "tiny", "--batch", "2", "--length", "6"],
    # Triton's interpreter takes minutes for one update of 1,024 tokens: its rows rehearse at 64 tokens (the
    # sentences over 60 tokens left out), the same flags otherwise
    "triton": ["--tokens-per-update", "64", "--extra", "--max-source-positions", "60", "--max-target-positions", "60"],
}


def steps(out: Path, work: Path, data: Path, p: dict) -> list:
    """(name, issue step, pe-bench argv) of every step, in order."""
    speed = ["train-speed", "--data", str(data), "--device", p["device"], *p["size"], *p["window"]]

    def outputs(name):
        return ["--out-dir", str(work / name), "--json", str(out / f"{name}.json")]

    return [
        ("speed_splits", "a", [*speed, "--rows", f"sape@{p['split']}", "sape", "--goals", str(GOALS),
                               *outputs("speed_splits")]),
        ("speed_all", "b", [*speed, "--rows", "all", "--goals", str(GOALS), *outputs("speed_all")]),
        ("fp16_triton", "c", ["fp16", "--device", p["device"], *p["fp16"], "--methods", "rpe", "--impl", "triton",
                              *outputs("fp16_triton")]),
        ("speed_triton", "c", [*speed, "--rows", "rpe", "rpe:triton", "--goals", str(GOALS), *outputs("speed_triton"),
                               *p["triton"]]),
    ]


def state(path: Path) -> str:
    """"absent", "partial" or "complete" for a step's JSON (pe-bench fp16's: complete unless it says otherwise)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return "absent"
    return "complete" if data.get("complete", True) else "partial"


def triton_agrees(path: Path) -> bool:
    try:
        rows = json.loads(path.read_text()).get("rows", [])
    except (OSError, ValueError):
        return False
    return bool(rows) and all(r.get("ok") for r in rows)


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="the folder of the outputs (resumed when it holds partial ones)")
    parser.add_argument("--budget", type=float, default=450, help="seconds for everything (default: 450)")
    parser.add_argument("--started-at", type=float, help="the wrapper's start (time.time()); default: now")
    parser.add_argument("--data", help="the corpus folder (default: $TMPDIR/pe_wmt_shaped[_tiny])")
    parser.add_argument("--rehearse", action="store_true", help="the CPU rehearsal at tiny size")
    parser.add_argument("--steps", nargs="+", choices=list(BUDGETS), help="run these steps only (default: all)")
    return parser.parse_args(argv)


def run(args) -> int:
    started = args.started_at or time.time()
    deadline = started + args.budget
    p = REHEARSE if args.rehearse else GPU
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    log = out / "log.txt"
    data = Path(args.data or Path(tempfile.gettempdir()) / ("pe_wmt_shaped_tiny" if args.rehearse else "pe_wmt_shaped"))
    env = dict(os.environ, PYTHONWARNINGS="ignore", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(x for x in (str(REPO), env.get("PYTHONPATH")) if x)  # this checkout's code
    if args.rehearse:
        env["TRITON_INTERPRET"] = "1"  # Shaw's Triton kernels in Triton's interpreter on the CPU

    def say(text):
        line = f"[{time.strftime('%H:%M:%S')} +{time.time() - started:.0f}s] {text}"
        print(line, flush=True)
        with open(log, "a", encoding="utf-8") as f:
            f.write(line + "\n")

    def call(argv, budget=None):
        """Run a pe-bench step; past its budget plus GRACE (a run that overruns: --time-budget is only read between
        runs) its process group is killed, keeping the runs its JSON already holds."""
        cmd = [*BENCH, argv[0], *([] if budget is None else ["--time-budget", f"{budget:.0f}"]), *argv[1:]]
        say("$ pe-bench " + shlex.join(cmd[len(BENCH):]))
        with open(log, "a", encoding="utf-8") as f:
            proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
            try:
                return proc.wait(timeout=None if budget is None else budget + GRACE)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                say(f"killed after {budget + GRACE:.0f} s (budget {budget:.0f} s + {GRACE} s): a run overran")
                return "killed"

    say(f"=== gpu window {'(rehearsal, CPU, tiny) ' if args.rehearse else ''}into {out}: {args.budget:.0f} s in "
        f"all; budgets {', '.join(f'{k} {v} s' for k, v in BUDGETS.items() if v)}, speed_triton what is left")
    probe = subprocess.run(PROBE, capture_output=True, text=True, env=env)
    say(f"environment: {probe.stdout.strip() or probe.stderr.strip()[-500:]}")
    if not args.rehearse and '"device": "cpu"' in probe.stdout:
        say("no CUDA device visible to torch: run with --rehearse on a CPU")
        return 1
    if call(["wmt-corpus", "--out", str(data), *p["corpus"]]) != 0:
        say("the corpus could not be written; stopping")
        return 1
    failed, left_over = [], []
    with tempfile.TemporaryDirectory() as work_dir:
        work = Path(work_dir)
        for name, issue_step, argv in steps(out, work, data, p):
            path = out / f"{name}.json"
            how = state(path)
            if args.steps and name not in args.steps:
                continue
            if how == "complete":
                say(f"=== {name} ({issue_step}): {path.name} is complete; skipped")
                continue
            if name == "speed_triton" and not triton_agrees(out / "fp16_triton.json"):
                say(f"=== {name} ({issue_step}): skipped, fp16_triton did not agree with the reference")
                continue
            left = deadline - time.time() - RESERVE
            budget = left if BUDGETS[name] is None else min(BUDGETS[name], left)
            if budget < 10:
                say(f"=== {name} ({issue_step}): DROPPED, {left:.0f} s left")
                left_over.append(name)
                continue
            t0 = time.time()
            say(f"=== {name} ({issue_step}): {'resumed, ' if how == 'partial' else ''}budget {budget:.0f} s")
            rc = call([argv[0], *(["--resume"] if how == "partial" else []), *argv[1:]], budget)
            say(f"=== {name}: exit {rc} after {time.time() - t0:.0f} s; {state(path)}")
            if rc == "killed" or (rc == 0 and state(path) != "complete"):
                left_over.append(name)
            elif rc != 0:
                failed.append(name)
        with tarfile.open(out / "other.tar.gz.tmp", "w:gz") as tar:
            for f in sorted(work.rglob("*")):
                if f.is_file() and f.suffix in (".md", ".csv"):
                    tar.add(f, arcname=str(f.relative_to(work)))
        os.replace(out / "other.tar.gz.tmp", out / "other.tar.gz")
    say(f"=== done in {time.time() - started:.0f} s; failed: {', '.join(failed) or 'none'}; "
        f"incomplete: {', '.join(left_over) or 'none'}"
        + ("; run the same command again with the same OUTDIR to resume them" if left_over else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(run(parse()))

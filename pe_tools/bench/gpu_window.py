"""pe-bench gpu-window: issue 40's measurements in one GPU window of 9 minutes of commands (at most two device
calls), each step with its own time budget, every output written as it goes and resumed by the same command.

    scripts/gpu_benchmarks.sh OUTDIR [--wheels DIR] [--budget 540]    # on the GPU machine (installs DIR first)
    pe-bench gpu-window OUTDIR --budget 540                            # the same, fairseq already installed
    pe-bench gpu-window OUTDIR --rehearse                              # the CPU rehearsal: tiny, about 3 minutes

Steps, in this order (budgets in seconds; ``--budget`` counts from ``--started-at``, the wrapper's start, so the
wheels' install is inside it):

  a  fill_splits  180  SAPE base in real fairseq-train --fp16 at 4096x8, 8192x4, 16384x2 and 32768x1 tokens per
                       micro-batch x update-freq, stock fairseq at 32768x1: words/s, peak memory, busy fraction
  b  fill_recipe  170  every encoding and stock at the split pe-train chooses on this GPU (``@auto``)
  b  fp16_triton   30  pe-bench fp16 --impl triton --methods rpe: Shaw's Triton kernels against the fp32 reference
  b  fill_more     50  rpe:triton at the chosen split (only when fp16_triton agrees), and SAPE big's peak there
  c  models       the rest  pe-bench models --pe rpe t5 kerple, L = 20 50 100 200, --max-tokens 4096 (one process)

A step gets ``min(its budget, the time left less a reserve)``; when time runs short, c is dropped first (it only
has what is left), then fill_more, then fill_recipe's last rows. Every step writes OUTDIR/STEP.json after each row
(complete: false until done); run the same command again with the same OUTDIR and every partial JSON is resumed
(``--resume``), complete ones are skipped. OUTDIR receives at most 7 files: log.txt, the five JSONs and
other.tar.gz (each step's markdown and CSV). The corpus is ``pe-bench wmt-corpus`` (100,000 pairs, 40,000 joined
types), generated into ``--data`` (default ``$TMPDIR/pe_wmt_shaped``) in seconds and reused.

``--rehearse`` runs every step on the CPU at tiny size (a 2,000-pair corpus of 1,000 types, 1,024 tokens per
update at 128x8 ... 1024x1, a few updates each, fp16 with Triton's interpreter), so that nothing in the window fails
for a reason a CPU would have shown.
"""
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

NAME = "gpu-window"
HELP = "one GPU session's measurements in order: fill the GPU (splits, every encoding at the chosen split, Triton), then models"
RESERVE = 15  # seconds kept back at the end: packing the outputs
BENCH = [sys.executable, "-m", "pe_tools.bench.cli"]  # how a step runs pe-bench (the tests put a fake here)
PROBE = [sys.executable, "-c", "import torch, fairseq, platform, json; print(json.dumps(dict(python=platform."
         "python_version(), torch=torch.__version__, cuda=torch.version.cuda, fairseq=fairseq.__version__, device="
         "torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu')))"]  # the environment, logged first
GRACE = 45  # seconds a step may overrun its budget (its last row) before it is killed

GPU = {
    "splits": ["4096x8", "8192x4", "16384x2", "32768x1"], "tokens": 32768, "size": "base", "big": "big",
    "window": ["--warmup", "5", "--timed", "20", "--profiled-micro-batches", "16"],
    "window_b": ["--warmup", "3", "--timed", "12", "--profiled-micro-batches", "8"],
    "corpus": ["--sentences", "100000", "--vocab", "40000"], "device": "cuda",
    "models": ["--sizes", "base", "--lengths", "20", "50", "100", "200", "--max-tokens", "4096", "--rounds", "2",
               "--steps", "10", "--warmup", "3", "--fp16"],
    "fp16": ["--size", "base"], "fill_more": [],
}
REHEARSE = {
    "splits": ["128x8", "256x4", "512x2", "1024x1"], "tokens": 1024, "size": "tiny", "big": "tiny",
    "window": ["--warmup", "1", "--timed", "2", "--profiled-micro-batches", "2"],
    "window_b": ["--warmup", "1", "--timed", "1", "--profiled-micro-batches", "1"],
    "corpus": ["--sentences", "2000", "--vocab", "1000", "--valid", "50"], "device": "cpu",
    "models": ["--sizes", "tiny", "--lengths", "5", "10", "--max-tokens", "64", "--vocab", "100", "--rounds", "1",
               "--steps", "1", "--warmup", "1", "--forward-passes", "1"],
    "fp16": ["--size", "tiny", "--batch", "2", "--length", "6"],
    # Triton's interpreter takes minutes for one tiny update of 1,024 tokens: its row rehearses at 64 (one split, the
    # sentences over 60 tokens left out), the same flags otherwise
    "fill_more": ["--tokens-per-update", "64", "--extra", "--max-source-positions", "60", "--max-target-positions", "60"],
}
BUDGETS = {"fill_splits": 180, "fill_recipe": 170, "fp16_triton": 30, "fill_more": 50, "models": None}
DROPPED_FIRST = "c (models) first, then fill_more (rpe:triton, sape big), then fill_recipe's last rows"


def steps(out: Path, work: Path, data: Path, p: dict, triton_ok) -> list:
    """(name, issue step, pe-bench argv) of every step; ``triton_ok()`` is asked when fill_more starts."""
    fill = ["fill", "--data", str(data), "--tokens-per-update", str(p["tokens"]), "--size", p["size"],
            "--device", p["device"], "--processes", "one"]
    splits = [f"sape@{s}" for s in p["splits"]] + [f"stock@{p['splits'][-1]}"]
    more = lambda: ((["rpe:triton"] if triton_ok() else []) + [f"sape/{p['big']}"])  # noqa: E731
    return [
        ("fill_splits", "a", lambda: [*fill, "--rows", *splits, *p["window"], "--out-dir", str(work / "fill_splits"),
                                      "--json", str(out / "fill_splits.json")]),
        ("fill_recipe", "b", lambda: [*fill, "--rows", "all", *p["window_b"], "--out-dir", str(work / "fill_recipe"),
                                      "--json", str(out / "fill_recipe.json")]),
        ("fp16_triton", "b", lambda: ["fp16", "--device", p["device"], *p["fp16"], "--methods", "rpe", "--impl",
                                      "triton", "--json", str(out / "fp16_triton.json")]),
        ("fill_more", "b", lambda: [*fill, "--rows", *more(), *p["window_b"], "--out-dir", str(work / "fill_more"),
                                    "--json", str(out / "fill_more.json"), *p["fill_more"]]),
        ("models", "c", lambda: ["models", "--device", p["device"], *p["models"], "--pe", "rpe", "t5", "kerple",
                                 "--processes", "one", "--out-dir", str(work / "models"),
                                 "--json", str(out / "models.json")]),
    ]


def state(path: Path) -> str:
    """"absent", "partial" or "complete" for a step's JSON (pe-bench fp16's has no ``complete``: its rows)."""
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


def add_args(parser):
    parser.add_argument("out", help="the folder of the outputs (resumed when it holds partial ones)")
    parser.add_argument("--budget", type=float, default=540, help="seconds for everything (default: 540)")
    parser.add_argument("--started-at", type=float, help="the wrapper's start (time.time()); default: now")
    parser.add_argument("--data", help="the corpus folder (default: $TMPDIR/pe_wmt_shaped[_tiny])")
    parser.add_argument("--rehearse", action="store_true", help="the CPU rehearsal at tiny size")


def run(args) -> int:
    started = args.started_at or time.time()
    deadline = started + args.budget
    p = REHEARSE if args.rehearse else GPU
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    log = out / "log.txt"
    data = Path(args.data or Path(tempfile.gettempdir()) / ("pe_wmt_shaped_tiny" if args.rehearse else "pe_wmt_shaped"))
    env = dict(os.environ, PYTHONWARNINGS="ignore", PYTHONUNBUFFERED="1")
    if args.rehearse:
        env["TRITON_INTERPRET"] = "1"  # Shaw's Triton kernels in Triton's interpreter on the CPU
    bench = list(BENCH)

    def say(text):
        line = f"[{time.strftime('%H:%M:%S')} +{time.time() - started:.0f}s] {text}"
        print(line, flush=True)
        with open(log, "a", encoding="utf-8") as f:
            f.write(line + "\n")

    def call(argv, budget=None):
        """Run a pe-bench step; past its budget plus GRACE (a row that overruns: its --time-budget is only read
        between rows) its process group is killed, keeping the rows its JSON already holds."""
        budget_flags = [] if budget is None else ["--time-budget", f"{budget:.0f}"]
        cmd = [*bench, argv[0], *budget_flags, *argv[1:]]  # before a trailing --extra, which takes the rest
        say("$ " + shlex.join(cmd[2:]))
        with open(log, "a", encoding="utf-8") as f:
            proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
            try:
                return proc.wait(timeout=None if budget is None else budget + GRACE)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                say(f"killed after {budget + GRACE:.0f} s (budget {budget:.0f} s + {GRACE} s): a row overran")
                return "killed"

    say(f"=== gpu-window {'(rehearsal, CPU, tiny) ' if args.rehearse else ''}into {out}: {args.budget:.0f} s in all; "
        f"budgets {', '.join(f'{k} {v} s' for k, v in BUDGETS.items() if v)}, models what is left; "
        f"short of time, dropped first: {DROPPED_FIRST}")
    env_line = subprocess.run(PROBE, capture_output=True, text=True, env=env)
    say(f"environment: {env_line.stdout.strip() or env_line.stderr.strip()[-500:]}")
    if not args.rehearse and '"device": "cpu"' in env_line.stdout:
        say("no CUDA device visible to torch: run with --rehearse on a CPU")
        return 1
    if call(["wmt-corpus", "--out", str(data), *p["corpus"]]) != 0:
        say("the corpus could not be written; stopping")
        return 1
    failed, left_over = [], []
    with tempfile.TemporaryDirectory() as work_dir:
        work = Path(work_dir)
        for name, issue_step, argv in steps(out, work, data, p, lambda: triton_agrees(out / "fp16_triton.json")):
            path = out / f"{name}.json"
            how = state(path)
            if how == "complete":
                say(f"=== {name} ({issue_step}): {path.name} is complete; skipped")
                continue
            left = deadline - time.time() - RESERVE
            budget = left if BUDGETS[name] is None else min(BUDGETS[name], left)
            if budget < 10:
                say(f"=== {name} ({issue_step}): DROPPED, {left:.0f} s left")
                left_over.append(name)
                continue
            t0 = time.time()
            say(f"=== {name} ({issue_step}): {'resumed, ' if how == 'partial' else ''}budget {budget:.0f} s")
            words = argv()
            rc = call([words[0], *(["--resume"] if how == "partial" else []), *words[1:]], budget)
            say(f"=== {name}: exit {rc} after {time.time() - t0:.0f} s; {state(path)}")
            if rc == "killed":
                left_over.append(name)
            elif rc != 0:
                failed.append(name)
            elif state(path) != "complete":
                left_over.append(name)
        with tarfile.open(out / "other.tar.gz.tmp", "w:gz") as tar:
            for f in sorted(work.rglob("*")):
                if f.is_file() and f.suffix in (".md", ".csv"):
                    tar.add(f, arcname=str(f.relative_to(work)))
        os.replace(out / "other.tar.gz.tmp", out / "other.tar.gz")
    say(f"=== done in {time.time() - started:.0f} s; failed: {', '.join(failed) or 'none'}; "
        f"incomplete: {', '.join(left_over) or 'none'}"
        + (f"; run the same command again with the same OUTDIR to resume them" if left_over else ""))
    return 1 if failed else 0

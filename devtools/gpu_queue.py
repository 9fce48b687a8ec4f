"""One GPU window trains one queue file: a language pair's runs side by side, each decoded twice and
recorded by pe-queue, the records packed for the way back, all within the window's time; a window that ends early
leaves no half record, and the next one trains the unrecorded runs again from scratch.

    scripts/gpu_queue.sh QUEUE OUTDIR [--wheels DIR] [--data DIR] [--budget S] [--commit REV] [--rehearse]
    python -m devtools.gpu_queue run QUEUE OUTDIR [--data DIR] [--budget S] [--commit REV] [--rehearse] ...
    python -m devtools.gpu_queue unpack FOLDER          here: the window's RUN.tar.gz into the checkout
    python -m devtools.gpu_queue data PAIR --raw-dir D  here: the data folder a window carries
    python -m devtools.gpu_queue wheels                 here: the wheels a window carries (what the GPU image lacks)
    python -m devtools.gpu_queue queue PAIR             the 6,000-update queue file of PAIR (queue_6k_*.txt)
    python -m devtools.gpu_queue estimate QUEUE         the window's time, from the recorded 3,000-update GPU runs

``run`` (on the GPU machine, from the checkout's root; scripts/gpu_queue.sh installs the wheels first):
  1. every run of QUEUE already recorded in the checkout (its ``into=`` folder holds RUN/command.json) is skipped;
  2. the others go into a copy of the queue file under WORK (default runs/gpu_queue, ignored by git): their run
     directories in WORK/runs, their records in WORK/records/INTO, the data folder --data on every line;
  3. ``pe-queue run COPY -j N`` (N: the runs left) trains them side by side from the pinned code (``--commit REV``
     or HEAD, exported by git; without git, a copy of the checkout's pe_plugin and pe_tools whose COMMIT file
     names REV), decodes each with the average of its last 5 checkpoints and its last one, and records it;
  4. while it runs, each whole record (pe-record writes a record under a temporary name and renames it when whole)
     is packed into OUTDIR/RUN.tar.gz (written under a temporary name, renamed when whole), its paths relative to
     the checkout's root: INTO/RUN/...;
  5. at ``--budget`` seconds after ``--started-at`` less ``--reserve``, the queue is stopped (SIGTERM, then SIGKILL
     to every training it started) and the records left half-written are removed. The checkpoints stay in WORK
     (a second call on the same machine resumes them); nothing of them goes to OUTDIR.
OUTDIR gets at most 8 files (what a device call brings back): log.txt, window.json (the device, each run's state
and fairseq-train seconds) and one RUN.tar.gz per recorded run. Exit status 0 when every run is recorded, 3 when
the budget cut the window short, 1 when a run failed.

``--rehearse`` is the same on the CPU at tiny size: each run of QUEUE as pe-queue run --rehearse trains it
(pe_tools/recipes/queue/rehearse.py: its recipe's size tiny-cpu, a synthetic corpus of its pair made in WORK/data;
--data is not read), so that the window's steps (the pinning, the queue, the decodes, the records, the packing, the
stop at the budget) run as they will on the GPU.
"""
import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

from pe_tools.command_line import fail, int_at_least
from pe_tools.recipes import load_table
from pe_tools.recipes import queue as pe_queue
from pe_tools.recipes.queue.rehearse import REHEARSAL_SIZE, rehearsal_line
from pe_tools.recipes.results import max_update_of
from pe_tools.recipes.train import size_entry
from pe_tools.runs.run_dir import COMMAND, recorded as is_recorded

CHECKOUT = Path(__file__).resolve().parents[1]
PASSES = 3  # pe-queue passes at most, while runs are left unrecorded and time is left
MAX_RUNS = 6  # a device call brings back 8 files: log.txt, window.json and one tarball a run
RESERVE = 25  # seconds before the budget's end at which the queue is stopped: its end, the last packing
# the recorded 3,000-update GPU runs the window's time is estimated from: En-Fr's five and KERPLE En-De, six side by
# side on one NVIDIA H200 (queue_gpu.txt); their meta files hold fairseq-train's seconds
REFERENCE_RUNS = "examples/multi30k/results_en_fr"
REFERENCE_SIZE = "annealed"
# not measured on a GPU (no decode time is recorded): per run, fairseq-train's start before its first logged line,
# the two decodes (pe-generate: average, then last; 1,000 sentences, beam 4) and pe-record, five runs side by side
STARTUP_S, DECODE_S = 15, 60
# the ranking at twice the budget: the five encodings of the 3,000-update En-Fr table, seed 1, into one folder
SIZE_6K, SEED, RESULTS_6K = "annealed6k", 1, "examples/multi30k/results_6k"


# ------------------------------------------------------------------------------------------------ the queues
def headline_methods(results: Path = CHECKOUT / REFERENCE_RUNS) -> List[str]:
    """The encodings of the 3,000-update En-Fr table: the methods recorded in ``results`` at size annealed, seed 1,
    in the recipe table's method order (SAPE, the baseline, first)."""
    table = load_table("multi30k")
    recorded = {p.name.split(".")[0] for p in Path(results).glob(f"*.en-fr.{REFERENCE_SIZE}.seed{SEED}")
                if is_recorded(p.parent, p.name)}
    return [m for m in table["method"] if m in recorded]


QUEUE_HEADER = {
    "en-de": """\
# En-De at twice the budget: the encodings of the 3,000-update En-Fr table (examples/multi30k/results_en_fr) at
# the recipe's budget check `annealed6k` (6,000 updates, the same 1,000 warm-up updates, linear decay to 0), seed
# 1, trained in fp16 side by side on one GPU (pe-train adds --fp16 where CUDA is), each decoded with the average
# of its last 5 checkpoints and with its last one, and recorded in results_6k, which holds this pair's runs from
# one window: one device and precision. SAPE's earlier annealed6k record
# (examples/multi30k/results/sape.en-de.annealed6k.seed1) trained on an NVIDIA H100; SAPE is trained again here
# whenever the window's GPU is of another kind, so that the baseline of every paired test shares the others'
# GPU. Side by side, a fifth run costs the window no time, so the line stays even on an
# H100.
""",
    "en-fr": """\
# En-Fr at twice the budget: the encodings of the 3,000-update En-Fr table (examples/multi30k/results_en_fr) at
# the recipe's budget check `annealed6k` (6,000 updates, the same 1,000 warm-up updates, linear decay to 0), seed
# 1, trained in fp16 side by side on one GPU (pe-train adds --fp16 where CUDA is), each decoded with the average
# of its last 5 checkpoints and with its last one, and recorded in results_6k, which holds this pair's runs from
# one window: one device and precision.
""",
}


def queue_text(pair: str) -> str:
    """The 6,000-update queue file of ``pair`` (examples/multi30k/queue_6k_SRC_TGT.txt is this text)."""
    name = f"examples/multi30k/queue_6k_{pair.replace('-', '_')}.txt"
    src, tgt = pair.split("-")
    return (QUEUE_HEADER[pair]
            + f"# Written by `python -m devtools.gpu_queue queue {pair}`. One GPU window trains it (docs/results.md"
              f"#6000-updates):\n"
            + f"#   scripts/gpu_queue.sh {name} OUTDIR --wheels build/gpu_queue_wheels "
              f"--data data-bin/gpu/multi30k_{src}_{tgt} --budget 570 --commit COMMIT\n"
            + "".join(f"multi30k {m} {pair} {SIZE_6K} {SEED} into={RESULTS_6K}\n" for m in headline_methods()))


# ------------------------------------------------------------------------------------------------ the estimate
def seconds_per_update(results: Path = CHECKOUT / REFERENCE_RUNS) -> Dict[str, object]:
    """The slowest recorded reference run: fairseq-train's seconds per update, its name and device."""
    worst = None
    for meta in sorted(Path(results).glob(f"*.{REFERENCE_SIZE}.seed{SEED}/hyp.detok.*.meta.json")):
        t = json.loads(meta.read_text(encoding="utf-8"))["training"]
        row = {"run": meta.parent.name, "seconds": t["train_seconds"], "updates": t["updates"],
               "device": t.get("device"), "per_update": t["train_seconds"] / t["updates"]}
        if worst is None or row["per_update"] > worst["per_update"]:
            worst = row
    if worst is None:
        raise ValueError(f"no recorded {REFERENCE_SIZE} run in {results}")
    return worst


def estimate(max_update: int, install_s: float = 0) -> Dict[str, object]:
    """The window's seconds for runs of ``max_update`` updates side by side: the slowest reference run's seconds
    per update times ``max_update``, plus the start, decodes and record allowance and the wheels' install."""
    ref = seconds_per_update()
    train = ref["per_update"] * max_update
    return {"train_s": round(train), "startup_s": STARTUP_S, "decode_record_s": DECODE_S,
            "install_s": round(install_s), "total_s": round(train + STARTUP_S + DECODE_S + install_s),
            "source": f"{ref['run']}: {ref['seconds']} s of fairseq-train for {ref['updates']} updates on "
                      f"{ref['device']}, six runs side by side ({REFERENCE_RUNS})"}


# ------------------------------------------------------------------------------------------------ the window
class Log:
    def __init__(self, path: Path, started: float):
        self.path, self.started, self.lock = path, started, threading.Lock()

    def __call__(self, text: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')} +{time.time() - self.started:.0f}s] {text}"
        with self.lock:
            print(line, flush=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line + "\n")


def pinned_code(commit: Optional[str], work: Path, say) -> Path:
    """The code the runs train from: commit ``commit`` (default HEAD) exported by git (pe-queue --pin), or without
    git a copy of the checkout's pe_plugin and pe_tools whose COMMIT file names ``commit``."""
    try:
        return pe_queue.pin_code(commit or "HEAD", CHECKOUT)
    except (pe_queue.QueueError, OSError, subprocess.CalledProcessError) as e:
        name = commit or "unknown-working-tree"
        say(f"no git commit to export ({str(e).splitlines()[0][:160]}); the runs train from a copy of this "
            f"checkout's code, recorded as commit {name}")
    dest = work / "code" / name
    if not (dest / "COMMIT").is_file():
        tmp = dest.with_name(f".{name}.tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        for pkg in ("pe_plugin", "pe_tools"):
            shutil.copytree(CHECKOUT / pkg, tmp / pkg, ignore=shutil.ignore_patterns("__pycache__"))
        (tmp / "COMMIT").write_text(name + "\n")
        shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)
    return dest


def whole_records(records: Path) -> List[Path]:
    """The record folders under ``records`` that pe-record finished (renamed from its temporary name)."""
    return sorted(c.parent for c in records.rglob(COMMAND)
                  if not any(part.startswith(".") for part in c.parent.relative_to(records).parts))


def remove_half_records(records: Path, say) -> None:
    """pe-record's temporary folders (.RUN.tmpPID) left by a kill are removed; a record it had moved aside to replace
    it (.RUN.oldPID) goes back where it was."""
    for d in sorted(records.rglob(".*")) if records.is_dir() else []:
        if not d.is_dir() or not d.name.startswith("."):
            continue
        name, _, kind = d.name[1:].rpartition(".")
        if kind.startswith("old") and not (d.parent / name).exists():
            d.rename(d.parent / name)
            say(f"{name}: the record moved aside by a cut pe-record is back")
        elif kind.startswith(("tmp", "old")):
            shutil.rmtree(d, ignore_errors=True)
            say(f"removed a half-written record: {d}")


def pack(record: Path, records: Path, out: Path) -> Path:
    """OUTDIR/RUN.tar.gz of one record, its paths INTO/RUN/... relative to ``records``; written under a temporary
    name and renamed when whole."""
    dest = out / f"{record.name}.tar.gz"
    tmp = out / f".{record.name}.tar.gz.tmp"
    with tarfile.open(tmp, "w:gz") as tar:
        tar.add(record, arcname=str(record.relative_to(records)))
    os.replace(tmp, dest)
    return dest


def stop(proc: subprocess.Popen, copy: Path, say) -> None:
    """End pe-queue (SIGTERM: it ends its steps' process groups) and, after 10 s, whatever of it and its trainings
    is left (SIGKILL), as a restarted pe-queue ends a killed one's (QUEUE.pids)."""
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass
    pe_queue.Queue(copy, [], copy.parent, 1, 1, log=lambda t: say(t.replace("[queue] ", ""))).end_orphans()


QUEUE_CMD = [sys.executable, "-m", "pe_tools.recipes.queue_cli"]  # pe-queue (the tests put a fake here)
PROBE = [sys.executable, "-c", "import json, platform, torch, fairseq, sacremoses; print(json.dumps(dict(python="
         "platform.python_version(), torch=torch.__version__, fairseq=fairseq.__version__, cuda=torch.cuda."
         "is_available(), device=torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu')))"]


def run_window(a) -> int:
    started = a.started_at or time.time()
    deadline = started + a.budget
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = Path(a.work or ("runs/gpu_queue_rehearse" if a.rehearse else "runs/gpu_queue")).resolve()
    say = Log(out / "log.txt", started)
    state = {"queue": str(a.queue), "rehearse": a.rehearse, "budget_s": a.budget, "runs": {}}

    def save_state():
        (out / ".window.json.tmp").write_text(json.dumps(state, indent=1) + "\n")
        os.replace(out / ".window.json.tmp", out / "window.json")

    try:
        runs = pe_queue.parse_queue(Path(a.queue), data=False)
    except pe_queue.QueueError as e:
        say(f"error: {e}")
        return 2
    say(f"=== gpu-queue {'(rehearsal: CPU, tiny) ' if a.rehearse else ''}{a.queue}: {len(runs)} runs, into "
        f"{out}, {a.budget:.0f} s in all (until {time.strftime('%H:%M:%S', time.localtime(deadline))})")
    probe = subprocess.run(PROBE, capture_output=True, text=True)
    if probe.returncode:
        say(f"error: torch, fairseq or sacremoses does not import (--wheels DIR installs them): "
            f"{probe.stderr.strip()[-600:]}")
        return 1
    env_info = json.loads(probe.stdout.strip().splitlines()[-1])
    state["environment"] = env_info
    say(f"environment: {json.dumps(env_info)}")
    if not a.rehearse and not env_info["cuda"]:
        say("error: no CUDA device visible to torch; on a CPU, run with --rehearse")
        return 1

    size_of = lambda run: REHEARSAL_SIZE if a.rehearse else run.size  # noqa: E731
    name_of = lambda run: f"{run.method}.{run.pair}.{size_of(run)}.seed{run.seed}"  # noqa: E731  its record's name
    todo = []
    for run in runs:
        if is_recorded(run.into, name_of(run)):
            say(f"{name_of(run)}: recorded in {run.into} already; skipped")
            state["runs"][name_of(run)] = "recorded before"
        else:
            todo.append(run)
    if not todo:
        say("=== nothing to train: every run of the queue is recorded")
        save_state()
        return 0
    if len(todo) > MAX_RUNS:
        say(f"error: {len(todo)} runs to train; a window brings back one tarball a run, at most {MAX_RUNS}")
        return 2
    data = Path(a.data).resolve() if a.data else None
    for run in [] if a.rehearse else todo:  # a rehearsal trains on a synthetic corpus
        folder = data or run.data
        if missing := [f"dict.{lang}.txt" for lang in run.pair.split("-") if not (folder / f"dict.{lang}.txt").is_file()]:
            say(f"error: data folder {folder} has no {' and no '.join(missing)} for {run.name}; build it with "
                f"python -m devtools.gpu_queue data {run.pair} --raw-dir DIR, and carry it")
            return 2
    sizes = {run.size for run in todo}
    if not a.rehearse:
        top = max(max_update_of(size_entry(run.table, run.size)["flags"]) or 0 for run in todo)
        est = estimate(top, install_s=time.time() - started)
        left = deadline - time.time()
        state["estimate"] = est
        say(f"estimate: {est['total_s']} s in all ({est['train_s']} s training {top} updates, from {est['source']}; "
            f"{est['startup_s'] + est['decode_record_s']} s for start, decodes and records, not measured); "
            f"{left:.0f} s left" + ("" if est["total_s"] - est["install_s"] <= left else
                                    ": the runs may not finish; what is not recorded trains again next window"))

    # the window's copy of the queue: its runs, decodes and records under WORK, the carried data on every line (a
    # rehearsal's: its synthetic corpus)
    work.mkdir(parents=True, exist_ok=True)
    records = work / "records"
    copy = work / "queue.txt"
    lines = [f"# the window's copy of {a.queue} (devtools.gpu_queue)"]
    for run in todo:
        into = Path(os.path.relpath(run.into.resolve(), Path.cwd()))
        into = into if not into.is_absolute() and ".." not in into.parts else Path(run.into.name)
        opts = {"runs-dir": str(work / "runs"), "into": str(records / into)}
        if a.rehearse:  # the queue's own rehearsal of the run (pe-queue run --rehearse)
            try:
                lines.append(rehearsal_line(a.queue, run, work, opts, log=say))
            except pe_queue.QueueError as e:
                say(f"error: {e}")
                return 2
        else:
            opts = {"data": str(data or run.data.resolve()), **opts}
            lines.append(shlex.join([run.recipe, run.method, run.pair, run.size, str(run.seed)]
                                    + [f"{k}={v}" for k, v in opts.items()]))
        state["runs"][name_of(run)] = "not recorded"
    copy.write_text("\n".join(lines) + "\n")
    code = pinned_code(a.commit, work, say)
    say(f"code: {pe_queue.code_commit(code)} ({code}); runs: {', '.join(name_of(r) for r in todo)}"
        + (f" (the queue's {', '.join(sorted(sizes))} rehearsed at size {REHEARSAL_SIZE})" if a.rehearse else ""))

    jobs = a.jobs or len(todo)
    cmd = [*QUEUE_CMD, "run", str(copy), "-j", str(jobs), "--code", str(code)]
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONSAFEPATH="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(code), os.environ.get("PYTHONPATH")) if p))
    packed: Dict[str, Path] = {}

    def pack_new():
        for record in whole_records(records):
            if record.name not in packed:
                packed[record.name] = pack(record, records, out)
                state["runs"][record.name] = "recorded"
                say(f"{record.name}: recorded, packed into {packed[record.name].name}")
                save_state()

    cut = False
    save_state()
    # a pass that leaves a run unrecorded (a step that failed, e.g. a trainer aborting at exit after its last update)
    # is followed by another while time is left: pe-queue resumes, and a finished training is not trained again
    for attempt in range(1, PASSES + 1):
        say("$ " + shlex.join(["pe-queue", *cmd[len(QUEUE_CMD):]]) + (f"   (pass {attempt})" if attempt > 1 else ""))
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                start_new_session=True)
        reader = threading.Thread(target=lambda: [say("  " + line.rstrip()) for line in proc.stdout], daemon=True)
        reader.start()
        while proc.poll() is None:
            pack_new()
            if time.time() >= deadline - a.reserve:
                say(f"=== budget: {deadline - time.time():.0f} s left; the queue is stopped, its trainings killed")
                stop(proc, copy, say)
                cut = True
                break
            time.sleep(1)
        reader.join(timeout=5)
        pack_new()
        if cut or proc.returncode == 0 or all(s != "not recorded" for s in state["runs"].values()):
            break
        if attempt < PASSES:
            say(f"pe-queue exited {proc.returncode} with runs unrecorded; once more (it resumes them)")
    reader.join(timeout=5)
    remove_half_records(records, say)
    pack_new()
    for record in whole_records(records):  # fairseq-train's seconds, the next window's estimate
        for meta in record.glob("hyp.detok.*.meta.json"):
            training = json.loads(meta.read_text(encoding="utf-8"))["training"]
            state.setdefault("train_seconds", {})[record.name] = training.get("train_seconds")
    left_over = [name for name, s in state["runs"].items() if s == "not recorded"]
    state["cut_short"], state["seconds"] = cut, round(time.time() - started)
    save_state()
    say(f"=== done in {time.time() - started:.0f} s: {len(packed)} recorded and packed"
        + (f"; not recorded: {', '.join(left_over)}" if left_over else "")
        + ("; the budget cut the window short: unpack the tarballs, commit them, and the same command in the next "
           "window trains the rest from scratch" if cut else ""))
    if cut:
        return 3
    return 1 if left_over else 0


# ------------------------------------------------------------------------------------------------ back here
def unpack(folder: Path, root: Path, replace: bool = False, say=print) -> List[Path]:
    """Each whole OUTDIR/RUN.tar.gz of ``folder`` (names starting with "." are a cut packing: skipped) extracted into
    ``root`` as INTO/RUN/, whole or not at all; an existing record is kept unless ``replace``. Returns the records."""
    done = []
    for tar_path in sorted(Path(folder).glob("*.tar.gz")):
        run = tar_path.name[:-len(".tar.gz")]
        with tarfile.open(tar_path) as tar:
            names = tar.getnames()
            record = next((Path(n) for n in names if Path(n).name == run), None)
            if (record is None or record.is_absolute() or ".." in record.parts
                    or not all(n == str(record) or n.startswith(f"{record}/") for n in names)):
                raise ValueError(f"{tar_path}: not one record folder INTO/{run}/ (members {names[:3]}...)")
            dest = Path(root) / record
            if dest.exists() and not replace:
                say(f"{run}: {dest} exists; kept (--replace to overwrite)")
                continue
            tmp = dest.with_name(f".{run}.unpack{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            try:
                tar.extractall(tmp, filter="data")  # Python >= 3.11.4: no links or devices out of the record
            except TypeError:  # an older 3.11: the member names are checked above
                tar.extractall(tmp)
        if dest.exists():
            shutil.rmtree(dest)
        (tmp / record).rename(dest)
        shutil.rmtree(tmp, ignore_errors=True)
        say(f"{run}: {dest}")
        done.append(dest)
    return done


def prepare_data(pair: str, raw_dir: Optional[str], out: Path, prepared: Optional[Path], say=print) -> Path:
    """The folder a window carries for ``pair``: pe-prepare's Multi30k data (``prepared``, default the recipe's
    data-bin/multi30k_SRC_TGT, prepared first where absent) less its text: the dictionaries, the binarised train,
    valid and test splits, and the untokenised test references work/raw.test.*."""
    src, tgt = pair.split("-")
    prepared = Path(prepared or f"data-bin/multi30k_{src}_{tgt}")
    if not (prepared / f"test.{pair}.{tgt}.idx").is_file():
        cmd = [sys.executable, "-m", "pe_tools.data.cli", pair, "--recipe", "multi30k", "--out", str(prepared)]
        subprocess.run(cmd + (["--raw-dir", str(raw_dir)] if raw_dir else []), check=True)
    files = [f"dict.{lang}.txt" for lang in (src, tgt)]
    files += [f"{split}.{pair}.{lang}.{ext}" for split in ("train", "valid", "test") for lang in (src, tgt)
              for ext in ("bin", "idx")]
    files += [f"work/raw.test.{lang}" for lang in (src, tgt)]
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    for f in files:
        (tmp / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(prepared / f, tmp / f)
    shutil.rmtree(out, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp.rename(out)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    say(f"{out}: {len(files)} files, {size / 2 ** 20:.1f} MiB, from {prepared}")
    return out


# what the GPU machine's image lacks of fairseq's and pe-generate's requirements (its torch, numpy, scipy, sacrebleu,
# regex, tqdm, PyYAML, scikit-learn are there: docs/benchmarks.md §Offline install and the device's package list)
IMAGE_LACKS = ("antlr4_python3_runtime", "bitarray", "cffi", "pycparser", "hydra_core", "omegaconf", "ve_fairseq",
               "sacremoses")


def gather_wheels(out: Path, gathered: Path, pyver: str = "3.12", say=print) -> Path:
    """OUT: the wheels of IMAGE_LACKS, taken from scripts/gather_wheels.sh's folder ``gathered`` (gathered first
    where absent; it needs PyPI). scripts/install_wheels.sh installs such a folder with --no-deps."""
    if not (gathered / "requirements.txt").is_file():
        subprocess.run(["bash", str(CHECKOUT / "scripts" / "gather_wheels.sh"), pyver, str(gathered)], check=True,
                       env=dict(os.environ, PYTHON=os.environ.get("PYTHON", sys.executable)))
    chosen = {name: sorted(gathered.glob(f"{name}-*.whl")) for name in IMAGE_LACKS}
    if missing := [name for name, found in chosen.items() if len(found) != 1]:
        raise ValueError(f"{gathered}: not one wheel of each of {', '.join(missing)}")
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.whl"):
        old.unlink()
    for (found,) in chosen.values():
        shutil.copyfile(found, out / found.name)
    size = sum(p.stat().st_size for p in out.glob("*.whl"))
    say(f"{out}: {len(chosen)} wheels, {size / 2 ** 20:.1f} MiB, from {gathered}")
    return out


# ------------------------------------------------------------------------------------------------ command line
def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m devtools.gpu_queue", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="train, decode, record and pack one queue file's runs within a budget")
    r.add_argument("queue", help="the queue file (pe-queue's format)")
    r.add_argument("out", help="the folder that comes back: log.txt, window.json, RUN.tar.gz")
    r.add_argument("--data", help="the data folder of every run (python -m devtools.gpu_queue data)")
    r.add_argument("--budget", type=float, default=570, help="seconds for everything, from --started-at (570)")
    r.add_argument("--started-at", type=float, help="the wrapper's start (seconds since the epoch); default: now")
    r.add_argument("--reserve", type=float, default=RESERVE, help=f"seconds kept for the stop ({RESERVE})")
    r.add_argument("--jobs", "-j", type=int_at_least(1), help="runs at a time (default: every run left)")
    r.add_argument("--commit", help="the commit the runs train from (default HEAD; without git, the COMMIT "
                                    "recorded for a copy of this checkout's code)")
    r.add_argument("--work", help="runs, records and code (default runs/gpu_queue, runs/gpu_queue_rehearse)")
    r.add_argument("--rehearse", action="store_true", help="on the CPU at tiny size")
    u = sub.add_parser("unpack", help="the window's RUN.tar.gz into the checkout (INTO/RUN/)")
    u.add_argument("folder")
    u.add_argument("--root", default=".", help="the checkout's root (default: here)")
    u.add_argument("--replace", action="store_true", help="overwrite an existing record")
    d = sub.add_parser("data", help="the data folder a window carries for PAIR")
    d.add_argument("pair", choices=["en-de", "en-fr"])
    d.add_argument("--raw-dir", help="the Multi30k archives (pe-prepare --raw-dir); default: download")
    d.add_argument("--prepared", help="pe-prepare's folder (default data-bin/multi30k_SRC_TGT)")
    d.add_argument("--out", help="default data-bin/gpu/multi30k_SRC_TGT")
    w = sub.add_parser("wheels", help="the wheels a window carries: what the GPU image lacks")
    w.add_argument("--out", default="build/gpu_queue_wheels", help="default build/gpu_queue_wheels")
    w.add_argument("--gathered", default="build/wheels-py312", help="scripts/gather_wheels.sh's folder "
                                                                    "(default build/wheels-py312; gathered if absent)")
    q = sub.add_parser("queue", help="the 6,000-update queue file of PAIR")
    q.add_argument("pair", choices=sorted(QUEUE_HEADER))
    e = sub.add_parser("estimate", help="the window's time for QUEUE's runs")
    e.add_argument("queue")
    a = p.parse_args(argv)
    try:
        if a.cmd == "run":
            return run_window(a)
        if a.cmd == "unpack":
            unpack(Path(a.folder), Path(a.root), a.replace)
            return 0
        if a.cmd == "data":
            src, tgt = a.pair.split("-")
            prepare_data(a.pair, a.raw_dir, Path(a.out or f"data-bin/gpu/multi30k_{src}_{tgt}"),
                         Path(a.prepared) if a.prepared else None)
            return 0
        if a.cmd == "wheels":
            gather_wheels(Path(a.out), Path(a.gathered))
            return 0
        if a.cmd == "queue":
            print(queue_text(a.pair), end="")
            return 0
        runs = pe_queue.parse_queue(Path(a.queue), data=False)
        top = max(max_update_of(size_entry(run.table, run.size)["flags"]) or 0 for run in runs)
        print(json.dumps(estimate(top), indent=1))
        return 0
    except (ValueError, OSError, pe_queue.QueueError, subprocess.CalledProcessError) as e:
        return fail(str(e))


if __name__ == "__main__":
    sys.exit(main())

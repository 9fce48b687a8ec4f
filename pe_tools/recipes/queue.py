"""pe-queue: a list of trainings that survives interruption. Each run is trained (pe-train), decoded twice (the
average of the last checkpoints and the last checkpoint alone, pe-generate) and recorded (pe-record) when it has
reached its last update; up to ``-j`` runs at a time.

    pe-queue run QUEUE [-j N] [--threads 1] [--pin REV | --code DIR]
    pe-queue run QUEUE --slurm [--partition P] [--account A] [--time LIMIT] [--gpus N] [--cpus N] [--nodes N]
                               [--sbatch ARG] [--signal-seconds S] [--dry-run]     (docs/cluster.md)
    pe-queue run QUEUE --rehearse DIR [--slurm ...]   (each run at size tiny-cpu on a synthetic corpus: a rehearsal)
    pe-queue status QUEUE
    pe-queue check QUEUE [--no-data]
    pe-queue cancel QUEUE

``status``: one row per run (updates, validation loss, time per update, finish); under the table, each run whose
last step failed, with the log to read (on SLURM, each FAILED or DIED job's reason, docs/cluster.md).

QUEUE is a plain text file, one run a line: ``RECIPE METHOD PAIR SIZE SEED`` and optionally ``data=DIR``,
``runs-dir=DIR`` and ``into=DIR`` (pe-train's --data and --runs-dir, pe-record's --into), a value with spaces
quoted; ``#`` outside quotes starts a comment.
Every line is checked before anything starts (the recipe, method, pair, size, seed and the prepared data: both
languages' dict.LANG.txt), and the error names every bad line and its fix.

Interruption: the queue can be killed at any moment, SIGKILL included, and restarted with the same command. On
start it ends the trainings a killed queue left running (their process groups are listed in QUEUE.pids), repairs
each run directory (fairseq copies checkpoint_last.pt from the newest numbered checkpoint by a plain copy, so a kill
during that copy leaves it truncated: it is replaced by the newest numbered checkpoint that reads whole) and resumes
each unfinished run from its checkpoint_last.pt; at most the updates since the last checkpoint are lost. A run is
decoded and recorded only once it has reached its --max-update, and every file a later step reads is written under a
temporary name and renamed when whole.

Pinned code: the runs train from a copy of one commit (``--pin REV``, default HEAD, exported with git archive
outside the working tree, under $PE_QUEUE_CODE_ROOT or ~/.cache/pe_plugin/code/COMMIT), or from ``--code DIR`` (a
copy made beforehand; its COMMIT file names the commit). Changes to the working tree while the queue runs do not
reach its runs. The commit goes into each run's command.json, and a run begun by other code is refused, not
resumed: a run's recorded commit is the code that trained all of it.
"""
import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

from ..checkpoint_files import PATTERNS, numbered_checkpoints, updates_of
from ..file_io import write_atomic
from ..locks import PAUSE, Busy, handed_on
from ..runs.run_dir import RunDir, command_of, recorded
from . import is_recipe, load_table, recipe_names, results, training_log
from .train import check_pair, data_dir, finished, size_entry

# the decodes of a finished run: (pe-generate --name, --checkpoints); None is the default decode (RUN/gen/)
DECODES = ((None, 5), ("last", 1))
COUNTS = ("gpus", "cpus", "nodes")  # what one run asks of a cluster (pe-queue run --slurm; gpus= also locally)
OPTIONS = ("data", "runs-dir", "into") + COUNTS
COMMIT_ENV = "PE_QUEUE_COMMIT"  # pe-train copies it into command.json (results.machine)
CHECKOUT = Path(__file__).resolve().parents[2]  # the git checkout --pin reads (this pe_tools' own)
CHAIN_WAIT = 200 * PAUSE  # seconds a run's chain waits for its writer lock: a killed predecessor's steps to exit


class QueueError(ValueError):
    """A queue file or run that cannot be run; the message names the line or run and the fix."""


@dataclass
class Run:
    line: int
    recipe: str
    method: str
    pair: str
    size: str
    seed: int
    options: Dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.method}.{self.pair}.{self.size}.seed{self.seed}"

    @property
    def table(self) -> dict:
        return load_table(self.recipe)

    @property
    def run_dir(self) -> Path:
        return Path(self.options.get("runs-dir") or self.table.get("runs_dir", "runs")) / self.name

    @property
    def into(self) -> Path:
        return Path(self.options.get("into") or self.table.get("results_dir", "results"))

    @property
    def recorded(self) -> Path:
        return self.into / self.name

    def is_recorded(self) -> bool:
        """RECORDED holds the record of this run directory: a whole record (``records``) whose command.json is the
        run's own. A record of the same name made from another run directory (a committed one of examples/, which a
        queue records into by default) is not this queue's."""
        if not recorded(self.into, self.name):
            return False
        mine, theirs = command_of(self.run_dir), command_of(self.recorded)
        return mine is not None and theirs is not None and mine.record == theirs.record

    @property
    def data(self) -> Path:
        return Path(self.options.get("data") or data_dir(self.table, self.recipe, self.pair))

    def train_args(self) -> List[str]:
        args = ["train", self.method, "--recipe", self.recipe, "--pair", self.pair, "--size", self.size,
                "--seed", str(self.seed)]
        if "data" in self.options:
            args += ["--data", self.options["data"]]
        if "runs-dir" in self.options:
            args += ["--runs-dir", self.options["runs-dir"]]
        if "gpus" in self.options:
            args += ["--gpus", self.options["gpus"]]
        return args


# ------------------------------------------------------------------------------------------ the queue file
def parse_queue(path: Path, data: bool = True) -> List[Run]:
    """The runs of a queue file, each checked (without ``data``, all but the prepared data); raises QueueError
    naming the line and the fix."""
    path = Path(path)
    if not path.is_file():
        raise QueueError(f"queue file {path} not found; write one run a line: RECIPE METHOD PAIR SIZE SEED")
    runs, names, bad = [], {}, []

    def check_line(n: int, text: str) -> Run:
        where = f"{path}:{n}: {text!r}"
        try:  # a path with spaces is quoted: runs-dir='my runs'; a # outside quotes starts a comment
            fields = shlex.split(text, comments=True)
        except ValueError as e:
            raise QueueError(f"{where}: {e}; quote a value with spaces as in data='my data'") from None
        words = [w for w in fields if "=" not in w]
        opts = dict(w.split("=", 1) for w in fields if "=" in w)
        if len(words) != 5:
            raise QueueError(f"{where}: {len(words)} fields; a run is RECIPE METHOD PAIR SIZE SEED "
                             f"(e.g. multi30k sape en-de annealed 1), options as data=DIR runs-dir=DIR into=DIR")
        if unknown := sorted(set(opts) - set(OPTIONS)):
            raise QueueError(f"{where}: unknown option {', '.join(unknown)}; options: "
                             f"{', '.join(o + ('=N' if o in COUNTS else '=DIR') for o in OPTIONS)}")
        if bad_counts := [f"{k}={v}" for k, v in opts.items() if k in COUNTS and not (v.isdigit() and int(v) >= 1)]:
            raise QueueError(f"{where}: {', '.join(bad_counts)}: give a whole number >= 1")
        recipe, method, pair, size, seed = words
        if not is_recipe(recipe):
            raise QueueError(f"{where}: unknown recipe {recipe!r}; recipes: {', '.join(recipe_names())}, or the "
                             f"path of a methods .toml file")
        table = load_table(recipe)
        if method not in table["method"]:
            raise QueueError(f"{where}: unknown method {method!r} of recipe {recipe}; methods: "
                             f"{', '.join(table['method'])} (pe-train --help)")
        try:
            check_pair(table, pair)
            if size not in table["size"] or pair not in size_entry(table, size)["arch"]:
                raise ValueError(f"no size {size!r} for pair {pair}; sizes: {', '.join(table['size'])}")
        except ValueError as e:
            raise QueueError(f"{where}: {e}") from None
        if not seed.isdigit() or int(seed) < 1:
            raise QueueError(f"{where}: seed {seed!r} is not a whole number >= 1")
        run = Run(n, recipe, method, pair, size, int(seed), opts)
        missing = missing_dicts(run)
        if missing and data:
            raise QueueError(f"{where}: data folder {run.data} has no {' and no '.join(missing)} (pair {pair}); "
                             f"prepare it with pe-prepare {pair} --recipe {recipe}, or give data=DIR on the line")
        if (run.run_dir, run.recorded) in names:
            raise QueueError(f"{where}: the same run as line {names[run.run_dir, run.recorded]}; remove one")
        names[run.run_dir, run.recorded] = n
        return run

    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        text = raw.strip()
        if text and not text.startswith("#"):
            try:
                runs.append(check_line(n, text))
            except QueueError as e:  # every bad line is named, not only the first
                bad.append(str(e))
    if bad:
        raise QueueError("\n".join(bad) + (f"\n{len(bad)} bad lines in {path}" if len(bad) > 1 else ""))
    if not runs:
        raise QueueError(f"queue file {path} holds no run; write one run a line: RECIPE METHOD PAIR SIZE SEED")
    return runs


def missing_dicts(run: Run) -> List[str]:
    """The dictionaries of the run's pair its data folder lacks: both sides', since a folder prepared for another
    pair may share the source's."""
    return [f"dict.{lang}.txt" for lang in run.pair.split("-") if not (run.data / f"dict.{lang}.txt").is_file()]


def data_needed(runs: List[Run]) -> Optional[str]:
    """A warning naming each data folder the runs need that is not prepared yet (its lines, its missing files and
    the command that prepares it), or None."""
    need: Dict[Path, List[Run]] = {}
    for run in runs:
        if missing_dicts(run):
            need.setdefault(run.data, []).append(run)
    if not need:
        return None
    return (f"warning: {sum(map(len, need.values()))} run(s) need data that is not prepared yet; submitting them "
            f"is refused until it is (on storage every node mounts): "
            + "; ".join(f"{data} (no {' and no '.join(missing_dicts(rs[0]))}; lines "
                        f"{','.join(str(r.line) for r in rs)}): pe-prepare {rs[0].pair} --recipe {rs[0].recipe}"
                        for data, rs in need.items()))


# --------------------------------------------------------------------------------------------- rehearsal
REHEARSAL_SIZE = "tiny-cpu"  # the size a rehearsal trains: a recipe's tiny model on CPU, a few dozen updates
REHEARSAL_CORPUS = {"n_train": 2000, "n_valid": 60, "n_test": 40}  # pe_tools.synthetic.toy's sentences per split
REHEARSE_ENV = "PE_QUEUE_REHEARSE"  # set in a rehearsal's SLURM jobs: each requeues itself after its first checkpoint


def synthetic_data(pair: str, dest: Path, log=print) -> Path:
    """A synthetic parallel corpus of ``pair`` (pe_tools.synthetic.toy: the target is the source reversed and
    upper-cased), binarised by fairseq-preprocess into ``dest``, once."""
    src, tgt = pair.split("-")
    dest = Path(dest)
    if all((dest / f"dict.{lang}.txt").is_file() for lang in (src, tgt)):
        return dest
    from ..data.pipeline import fairseq_preprocess
    from ..synthetic.toy import write_corpus

    text = dest / "text"
    raw = write_corpus(dest / f"raw.tmp{os.getpid()}", **REHEARSAL_CORPUS)
    text.mkdir(parents=True, exist_ok=True)
    for split in ("train", "valid", "test"):
        os.replace(raw / f"{split}.en", text / f"{split}.{src}")
        os.replace(raw / f"{split}.de", text / f"{split}.{tgt}")
    shutil.rmtree(raw)
    log(f"[queue] rehearsal: a synthetic {pair} corpus ({REHEARSAL_CORPUS['n_train']} training sentences) in {dest}")
    fairseq_preprocess(src, tgt, text, dest, 1)
    return dest


def rehearsal(queue_path: Path, folder: Path, log=print) -> Path:
    """The rehearsal of a queue file in ``folder``: the queue file FOLDER/NAME, each run of ``queue_path`` (its
    recipe, method, pair and seed; its cpus=) at REHEARSAL_SIZE, on a synthetic corpus of its pair (made once in
    FOLDER/data), trained in FOLDER/runs and recorded in FOLDER/results. Raises QueueError naming the line and the
    fix when a recipe has no REHEARSAL_SIZE."""
    folder = Path(folder).resolve()
    lines = []
    for run in parse_queue(queue_path, data=False):
        table = run.table
        if REHEARSAL_SIZE not in table["size"] or run.pair not in size_entry(table, REHEARSAL_SIZE)["arch"]:
            raise QueueError(f"{queue_path}:{run.line}: recipe {run.recipe} has no size {REHEARSAL_SIZE} for "
                             f"{run.pair}, which a rehearsal trains; add one to its methods.toml, like "
                             f"pe_tools/recipes/wmt14/methods.toml's")
        data = synthetic_data(run.pair, folder / "data" / f"synthetic_{run.pair.replace('-', '_')}", log)
        options = {"data": data, "runs-dir": folder / "runs", "into": folder / "results",
                   **{k: run.options[k] for k in ("cpus",) if k in run.options}}
        lines.append(shlex.join([run.recipe, run.method, run.pair, REHEARSAL_SIZE, str(run.seed),
                                 *(f"{k}={v}" for k, v in options.items())]))
    out = folder / Path(queue_path).name
    write_atomic(out, f"# the rehearsal of {Path(queue_path).resolve()}: each run at size {REHEARSAL_SIZE} on a "
                      f"synthetic corpus (pe-queue run --rehearse)\n" + "\n".join(lines) + "\n")
    return out


# ---------------------------------------------------------------------------------------- pinned code
def code_root() -> Path:
    return Path(os.environ.get("PE_QUEUE_CODE_ROOT") or Path.home() / ".cache" / "pe_plugin" / "code")


def pin_code(rev: str, repo: Path) -> Path:
    """Export commit ``rev`` of ``repo`` (git archive) to CODE_ROOT/COMMIT, once; returns the folder."""
    try:
        commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", f"{rev}^{{commit}}"],
                                capture_output=True, text=True, check=True).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        raise QueueError(f"--pin {rev}: not a commit of {repo} ({getattr(e, 'stderr', e)!s}); pass a commit, "
                         f"or --code DIR for a copy of the code made beforehand") from None
    dest = code_root() / commit
    if (dest / "COMMIT").is_file():
        return dest
    tmp = dest.with_name(f".{commit}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    archive = subprocess.Popen(["git", "-C", str(repo), "archive", commit], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(tmp)], stdin=archive.stdout, check=True)
    if archive.wait():
        raise QueueError(f"git archive {commit} failed in {repo}")
    (tmp / "COMMIT").write_text(commit + "\n")
    try:
        tmp.rename(dest)
    except OSError:  # another queue exported it first
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def code_commit(code: Path) -> str:
    f = Path(code) / "COMMIT"
    return f.read_text().strip() if f.is_file() else "unknown"


# -------------------------------------------------------------------------------------- run directories
def readable(path: Path) -> bool:
    """A checkpoint that reads whole: torch.save writes a zip archive, and a truncated one has no central
    directory or fails its CRC check."""
    try:
        with zipfile.ZipFile(path) as z:
            return z.testzip() is None
    except (zipfile.BadZipFile, OSError, EOFError):
        return False


def repair(run_dir: Path, log=print) -> None:
    """Make checkpoint_last.pt the newest checkpoint that reads whole (fairseq resumes from it)."""
    last = run_dir / "checkpoint_last.pt"
    for tmp in run_dir.glob("*.pt.tmp"):  # fairseq's own half-written numbered checkpoints
        tmp.unlink()
    good = [p for p in reversed(numbered_checkpoints(run_dir, "update")) if readable(p)]
    newest = good[0] if good else None
    last_ok = last.exists() and readable(last)
    if last.exists() and not last_ok:
        log(f"[queue] {run_dir}: {last.name} does not read whole (a kill during fairseq's copy); "
            + (f"resuming from {newest.name}" if newest else "no whole checkpoint left: training starts again"))
        last.unlink()
    best = run_dir / "checkpoint_best.pt"
    if best.exists() and not readable(best):
        best.unlink()
    if newest and (not last_ok or newest.stat().st_mtime > last.stat().st_mtime):
        tmp = last.with_name(".checkpoint_last.pt.queue")
        shutil.copyfile(newest, tmp)
        os.replace(tmp, last)


def progress(run: Run) -> dict:
    """What the status view shows of a run, read from its files."""
    run_dir = run.run_dir
    log = results._read(str(run_dir / "train.log"))
    command = RunDir(run_dir).command_or_none()
    s = results.training_summary(log, command.record if command else {}) if log else {}
    total = s.get("max_update") or max_update(run)
    # the checkpoint's count where the log lags behind it (a kill before the tee wrote fairseq's last lines)
    updates = max(s.get("updates", 0), updates_of(run_dir / "checkpoint_last.pt") or 0)
    out = {"run": run.name, "updates": updates, "total": total, "valid_loss": s.get("valid_loss"),
           "commit": command.commit if command else None, "recorded": run.is_recorded()}
    out["saved"] = saved_update(run_dir) or 0
    times = [(r.time, r.updates) for r in training_log.records(log, "train_inner") if r.updates is not None]
    if len(times) >= 2 and times[-1][1] > times[-2][1]:
        (t0, u0), (t1, u1) = times[-2], times[-1]
        out["sec_per_update"] = (t1 - t0).total_seconds() / (u1 - u0)
    return out


def saved_update(run_dir: Path) -> Optional[int]:
    """The update a run resumes from (None: no checkpoint): checkpoint_last.pt's, or a newer numbered checkpoint's
    (by its name), as ``repair`` would make it; not the log's last update, which may lie past the checkpoint."""
    run_dir = Path(run_dir)
    numbered = numbered_checkpoints(run_dir, "update") if run_dir.is_dir() else []
    counts = [updates_of(run_dir / "checkpoint_last.pt"),
              int(PATTERNS["update"].fullmatch(numbered[-1].name)[1]) if numbered else None]
    return max((c for c in counts if c is not None), default=None)


def finished_run(run: Run) -> bool:
    """Whether ``run`` has finished training, as train.finished (the one decider) says from its command.json."""
    command = command_of(run.run_dir)
    return command is not None and bool(command.argv) and finished(run.run_dir, command.argv)


def max_update(run: Run) -> int:
    return results.max_update_of(size_entry(run.table, run.size)["flags"]) or 0


def recorded_commit(run: Run) -> Optional[str]:
    command = command_of(run.recorded) if recorded(run.into, run.name) else None
    return command.commit if command else None


# ---------------------------------------------------------------------------------------------- running
def decoded(run_dir: Path, tgt: str, name: Optional[str]) -> bool:
    """Whether the decode ``name`` (pe-generate --name; None: RUN/gen/) is newer than the run's last checkpoint."""
    hyp, last = results.decode_dir(run_dir, name) / f"hyp.detok.{tgt}", run_dir / "checkpoint_last.pt"
    return hyp.is_file() and last.is_file() and hyp.stat().st_mtime > last.stat().st_mtime


def run_chain(run_dir: Path, tgt: str, train: List[str], step: Callable[[str, List[str]], int],
              decodes=DECODES, into: Optional[Path] = None) -> str:
    """One run's chain, as pe-queue, pe-demo and pe-length run it; each step is a pe-* command (pe-train,
    pe-generate, pe-record), run by ``step(what, args)``, which returns its exit status.

    1. train: pe-train ``train`` (it resumes from checkpoint_last.pt, and does nothing for a finished run), then
       the last checkpoint must hold the --max-update of the run's command.json;
    2. decode: pe-generate, each of ``decodes`` ((--name, --checkpoints) pairs) not newer than that checkpoint;
    3. record: pe-record into ``into``, when given.

    A run whose decodes are all newer than its last checkpoint is not trained again (a chain killed after its
    decodes). Returns "recorded" (``into`` given) or "decoded", else "failed: ..." naming the step."""
    if not all(decoded(run_dir, tgt, name) for name, _ in decodes):
        if rc := step("training", train):
            return f"failed: pe-train exited {rc} (see {run_dir / 'train.log'})"
        command = command_of(run_dir)
        argv = command.argv if command else []
        if not finished(run_dir, argv):  # the one decider (pe_tools/recipes/train.py)
            top, reached = results.max_update_of(argv), updates_of(run_dir / "checkpoint_last.pt")
            return f"failed: training stopped at update {reached or 0} of {top} (see {run_dir / 'train.log'})"
        for name, n in decodes:
            if decoded(run_dir, tgt, name):
                continue  # decoded after the last update (a chain killed after this decode)
            what = "decoding " + (name or f"the average of the last {n} checkpoints")
            if rc := step(what, ["generate", str(run_dir), "--checkpoints", str(n)] + (["--name", name] if name else [])):
                return f"failed: pe-generate exited {rc}"
    if into is None:
        return "decoded"
    if rc := step("recording", ["record", str(run_dir), "--into", str(into)]):
        return f"failed: pe-record exited {rc}"
    return "recorded"


class Queue:
    def __init__(self, path: Path, runs: List[Run], code: Path, jobs: int, threads: int, log=print):
        self.path, self.runs, self.code, self.jobs, self.threads = Path(path), runs, Path(code), jobs, threads
        self.commit, self.log = code_commit(code), log
        self.pids_file = self.path.with_name(self.path.name + ".pids")
        self.groups: Dict[str, int] = {}
        self.held: Dict[str, int] = {}  # run name -> its writer lock's descriptor, while the queue works on it
        self.lock = threading.Lock()
        self.stopping = False

    def env(self) -> dict:
        path = os.pathsep.join(p for p in (str(self.code), os.environ.get("PYTHONPATH")) if p)
        env = dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS=str(self.threads),
                   MKL_NUM_THREADS=str(self.threads), PYTHONUNBUFFERED="1")
        env[COMMIT_ENV] = self.commit
        # no current folder first on sys.path (Python >= 3.11): run from a checkout, `python -m` would import the
        # working tree's pe_tools and pe_plugin instead of the pinned copy, and so would fairseq-train beneath it
        env["PYTHONSAFEPATH"] = "1"
        env.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)
        return env

    def _save_pids(self) -> None:
        write_atomic(self.pids_file, json.dumps(self.groups, indent=1) + "\n")

    def end_orphans(self) -> None:
        """End the process groups a killed queue left running (QUEUE.pids), and wait until they are gone."""
        if not self.pids_file.is_file():
            return
        for name, pgid in json.loads(self.pids_file.read_text() or "{}").items():
            try:
                cmdline = Path(f"/proc/{pgid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "pe_tools.recipes.launch" not in cmdline:
                continue  # the number was reused by another program
            self.log(f"[queue] ending {name}'s processes left by an earlier queue (group {pgid})")
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            while Path(f"/proc/{pgid}").exists() and not _zombie(pgid):
                time.sleep(0.1)
        self.pids_file.unlink()

    def step(self, run: Run, args: List[str], log_file: Path) -> int:
        """One pe-* command of a run, from the pinned code, in a process group of its own."""
        cmd = [sys.executable, "-m", "pe_tools.recipes.launch", *args]
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(log_file, "a", encoding="utf-8") as out:
            out.write(f"[queue] {shlex.join(cmd)}\n")
            out.flush()
            held = self.held.get(run.name)  # the run's writer lock, handed on: the step works under it
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                    env=handed_on(self.env(), held) if held is not None else self.env(),
                                    pass_fds=(held,) if held is not None else ())
            with self.lock:
                self.groups[run.name] = proc.pid
                self._save_pids()
            try:
                rc = proc.wait()
            finally:
                with self.lock:
                    self.groups.pop(run.name, None)
                    self._save_pids()
            # the step's last line, whatever it printed: which step, how it ended, and where its output is
            if rc:
                where = run.run_dir / "train.log" if args[0] == "train" else log_file
                line = f"[queue] {args[0]} failed (exit {rc}): see {where}"
                self.log(f"[queue] {run.name}: {line[len('[queue] '):]}")
            else:
                line = f"[queue] {args[0]} done"
            out.write(line + "\n")
            return rc

    def process(self, run: Run) -> str:
        """Train, decode and record one run (``run_chain``) holding its writer lock (RUN/run.lock) for the whole
        chain, handed on to each step; returns its final state, "refused: ..." naming the holder (RUN/queue.log
        untouched) when another process writes the run."""
        if self.stopping:
            return "stopped"
        if recorded_commit(run) == self.commit and run.is_recorded():
            return "recorded"
        with contextlib.ExitStack() as lock:
            try:
                held = lock.enter_context(RunDir(run.run_dir).writer(f"pe-queue run {self.path}", wait=CHAIN_WAIT))
            except Busy as e:
                return f"refused: {e}"
            with self.lock:
                self.held[run.name] = held
            try:
                return self._process(run)
            finally:
                with self.lock:
                    self.held.pop(run.name, None)

    def _process(self, run: Run) -> str:
        run_dir, queue_log = run.run_dir, run.run_dir / "queue.log"
        command = command_of(run_dir)
        if command is not None and (run_dir / "checkpoint_last.pt").exists():
            begun = command.commit
            if begun != self.commit:
                raise QueueError(f"{run.name} (line {run.line}): {run_dir} was begun by code {begun or 'unknown'}, "
                                 f"this queue runs {self.commit}; restart the queue with --pin {begun} to finish it "
                                 f"with its own code, or delete {run_dir} to train it again")
        if run_dir.is_dir():
            repair(run_dir, self.log)

        def step(what: str, args: List[str]) -> int:
            self.log(f"[queue] {run.name}: {what}" + (f" (log {run_dir / 'train.log'})" if args[0] == "train" else ""))
            return self.step(run, args, queue_log)

        state = run_chain(run_dir, run.pair.split("-")[1], run.train_args(), step, DECODES, run.into)
        if state != "recorded":
            return f"{state}; the steps' output is in {queue_log}"
        self.log(f"[queue] {run.name}: recorded in {run.recorded}")
        return state

    def run(self) -> int:
        self.end_orphans()
        states: Dict[str, str] = {}

        def one(run):
            try:
                states[run.name] = self.process(run)
            except QueueError as e:
                states[run.name] = f"refused: {e}"
            except Exception as e:  # noqa: BLE001 - one run's failure must not stop the others
                states[run.name] = f"failed: {type(e).__name__}: {e}"
            if not states[run.name].startswith("recorded"):
                self.log(f"[queue] {run.name}: {states[run.name]}")

        with ThreadPoolExecutor(self.jobs) as pool:
            list(pool.map(one, self.runs))
        bad = [n for n, s in states.items() if s != "recorded"]
        self.log(f"[queue] {len(states) - len(bad)} of {len(states)} runs recorded"
                 + (f"; not: {', '.join(bad)}" if bad else ""))
        return 1 if bad else 0

    def stop(self, *_):
        """SIGTERM/SIGINT: end every running step's process group, then exit."""
        self.stopping = True
        with self.lock:
            for pgid in self.groups.values():
                try:
                    os.killpg(pgid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        raise SystemExit(130)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except (OSError, IndexError):
        return True


# ------------------------------------------------------------------------------------------------ status
def failed_step(run: Run) -> Optional[str]:
    """What RUN/queue.log says of the run's last step when that step failed (``train failed (exit 1): see
    RUN/train.log``, as ``Queue.step`` writes it), else None: nothing ran, the last step ended well, or a step has
    begun since the failure (its command line is the log's last word of the queue's)."""
    try:
        lines = (run.run_dir / "queue.log").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    said = [line[len("[queue] "):] for line in lines if line.startswith("[queue] ")]
    return said[-1] if said and " failed (exit " in said[-1] else None


def status_table(runs: List[Run], extra: Optional[Dict[str, List[str]]] = None, resuming=()) -> str:
    """One row per run; ``extra``: more columns, {heading: one value per run} (the SLURM job's, slurm.py). The runs
    named in ``resuming`` (no job works on them) show the update they resume from (``saved_update``); "done" is
    train.finished's word alone."""
    extra = extra or {}
    rows = [("run", "updates", "valid loss", "s/update", "finish (est.)", "recorded", "commit", *extra)]
    for run in runs:
        p = progress(run)
        updates = p["saved"] if run.name in resuming else p["updates"]
        left = max(0, p["total"] - updates) * p["sec_per_update"] if "sec_per_update" in p else None
        eta = "done" if finished_run(run) else (
            time.strftime("%H:%M", time.localtime(time.time() + left)) if left is not None else "-")
        rows.append((run.name, f"{updates}/{p['total']}",
                     f"{p['valid_loss']:.3f}" if p["valid_loss"] is not None else "-",
                     f"{p['sec_per_update']:.2f}" if "sec_per_update" in p else "-", eta,
                     "yes" if p["recorded"] else "no", (p["commit"] or "-")[:10],
                     *(values[len(rows) - 1] for values in extra.values())))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)

"""pe-queue's tiny runs for the tests: a methods table of three encodings at a tiny size (12 updates), queue files
naming them, pe-queue started from the checkout, and what a queue recorded. The uninterrupted queue
(``run_whole_queue``) is conftest.py's ``queue_reference``, built once per session: the killed queue
(tests/test_queue.py) and the queues on SLURM (tests/test_slurm.py) must record what it recorded."""
import subprocess
import sys
from pathlib import Path

from pe_testing import REPO, SAFE_ENV, code_copy

RUNS = ("sape", "rope", "t5")
MAX_UPDATE = 12


def recipe(tmp_path: Path, data: Path) -> Path:
    """A methods table of a tiny size: 12 updates, a checkpoint every 2 (the last 5 kept)."""
    path = tmp_path / "tiny_methods.toml"
    methods = "\n".join(f"[method.{m}]\nflags = []" for m in RUNS)
    path.write_text(f"""data = "{data}"
[common]
flags = ["--cpu", "--num-workers", "0", "--share-all-embeddings", "--optimizer", "adam", "--lr", "1e-3",
         "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--max-tokens", "200",
         "--save-interval-updates", "2", "--keep-interval-updates", "5", "--no-epoch-checkpoints",
         "--log-format", "simple", "--log-interval", "1", "--no-progress-bar"]
[size.mini]
arch = {{ en-de = "tiny" }}
flags = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
         "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2",
         "--decoder-attention-heads", "2", "--dropout", "0.1", "--max-update", "{MAX_UPDATE}",
         "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "4"]
{methods}
""")
    return path


def queue_file(tmp_path: Path, table: Path, name: str, methods=RUNS) -> Path:
    q = tmp_path / name / "queue.txt"
    q.parent.mkdir(parents=True)
    q.write_text("# a test queue\n" + "".join(
        f"{table} {m} en-de mini 1 runs-dir={q.parent / 'runs'} into={q.parent / 'rec'}\n" for m in methods))
    return q


def start(q: Path, code: Path) -> subprocess.Popen:
    """pe-queue run -j 2 from the checkout, the runs from the copy of the code ``code`` (pe-queue --code)."""
    env = dict(SAFE_ENV, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    return subprocess.Popen([sys.executable, "-m", "pe_tools.recipes.queue_cli", "run", str(q), "-j", "2",
                             "--code", str(code)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def run_whole_queue(root: Path, data: Path) -> None:
    """The uninterrupted queue of RUNS, run to its end in ``root`` (the recipe, ``whole/``, ``code/``): the
    reference that this file's killed queue and tests/test_slurm.py's queues on SLURM must record again. Built
    once per session (conftest.py's ``queue_reference``)."""
    table = recipe(root, data)
    proc = start(queue_file(root, table, "whole"), code_copy(root))
    out = proc.communicate(timeout=900)[0]
    assert proc.returncode == 0, out[-4000:]


def recorded(q: Path, methods=None) -> dict:
    """{RUN/[last/]hyp.detok.de: its bytes} of what queue ``q`` recorded (in REC beside it), of ``methods`` only if
    given (the runs of a queue with fewer lines, compared with the reference queue's)."""
    rec = q.parent / "rec"
    return {str(p.relative_to(rec)): p.read_bytes() for p in sorted(rec.rglob("hyp.detok.de"))
            if methods is None or p.relative_to(rec).parts[0].split(".")[0] in methods}

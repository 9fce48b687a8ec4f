"""A queue's rehearsal: each of its runs at a tiny size on a synthetic corpus (pe-queue run --rehearse)."""
import os
import shlex
import shutil
from pathlib import Path

from ...file_io import write_atomic
from ..train import size_entry
from .file import QueueError, parse_queue

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
    from ...data.pipeline import fairseq_preprocess
    from ...synthetic.toy import write_corpus

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


def rehearsal_line(queue_path: Path, run, folder: Path, options: dict, log=print) -> str:
    """The queue line that rehearses ``run`` (line ``run.line`` of ``queue_path``): its recipe, method, pair and
    seed, and its cpus=, at REHEARSAL_SIZE on a synthetic corpus of its pair (made once in FOLDER/data), with the
    queue options ``options`` (runs-dir=, into=). Raises QueueError naming the line and the fix when its recipe has
    no REHEARSAL_SIZE for its pair."""
    table = run.table
    if REHEARSAL_SIZE not in table["size"] or run.pair not in size_entry(table, REHEARSAL_SIZE)["arch"]:
        raise QueueError(f"{queue_path}:{run.line}: recipe {run.recipe} has no size {REHEARSAL_SIZE} for "
                         f"{run.pair}, which a rehearsal trains; add one to its methods.toml, like "
                         f"pe_tools/recipes/wmt14/methods.toml's")
    data = synthetic_data(run.pair, Path(folder) / "data" / f"synthetic_{run.pair.replace('-', '_')}", log)
    options = {"data": data, **options, **{k: run.options[k] for k in ("cpus",) if k in run.options}}
    return shlex.join([run.recipe, run.method, run.pair, REHEARSAL_SIZE, str(run.seed),
                       *(f"{k}={v}" for k, v in options.items())])


def rehearsal(queue_path: Path, folder: Path, log=print) -> Path:
    """The rehearsal of a queue file in ``folder``: the queue file FOLDER/NAME, each run of ``queue_path`` rehearsed
    (``rehearsal_line``), trained in FOLDER/runs and recorded in FOLDER/results. Raises QueueError naming the line
    and the fix when a recipe has no REHEARSAL_SIZE."""
    folder = Path(folder).resolve()
    lines = [rehearsal_line(queue_path, run, folder, {"runs-dir": folder / "runs", "into": folder / "results"}, log)
             for run in parse_queue(queue_path, data=False)]
    out = folder / Path(queue_path).name
    write_atomic(out, f"# the rehearsal of {Path(queue_path).resolve()}: each run at size {REHEARSAL_SIZE} on a "
                      f"synthetic corpus (pe-queue run --rehearse)\n" + "\n".join(lines) + "\n")
    return out

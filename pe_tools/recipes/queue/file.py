"""A queue file: one run a line (``Run``), each line checked before anything starts (``parse_queue``)."""
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from ...runs.run_dir import command_of, recorded
from .. import is_recipe, load_table, recipe_names
from ..train import check_pair, data_dir, size_entry

COUNTS = ("gpus", "cpus", "nodes")  # what one run asks of a cluster (pe-queue run --slurm; gpus= also locally)
OPTIONS = ("data", "runs-dir", "into") + COUNTS


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

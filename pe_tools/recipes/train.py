"""pe-train: one method of a recipe's methods table as one fairseq-train command, run in its run directory
RUNS/METHOD.PAIR.SIZE.seedN (checkpoints, train.log with all output, the resolved command as command.txt and
command.json); re-running the same command resumes from its checkpoint_last.pt.

While it trains, pe-train holds RUN/train.lock (an flock, kept by fairseq-train beneath it: the kernel drops it
when the last of them exits, however they end) and, after each progress line of fairseq-train, prints the updates
done of the run's --max-update and an estimated finish. ``finished`` is the one decider of a finished run (for
pe-train, pe-generate, pe-record and pe-queue's status): no live trainer holds the lock, and checkpoint_last.pt
holds the run's --max-update (pe_tools/recipes/run_state.py)."""
import difflib
import shlex
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from ..checkpoint_files import updates_of
from ..command_line import fail
from ..fairseq_plugin import cpu_fp16_problem, foreign_user_dir, plugin_dir
from ..naming import arch_name
from ..process import tee
from ..runs.run_dir import RunDir, read_command
from . import batching, is_recipe, load_table, recipe_names, results, srun, table_pairs, training_log
# the one decider of a finished run and the trainer's lock (pe_tools/recipes/run_state.py), pe-train's to use and
# everyone's to import from here (pe-generate, pe-record, pe-queue's status)
from .run_state import (TRAINER_LOCK, TrainerBusy, TrainingState, describe_trainer, finished,  # noqa: F401
                        live_trainer, trainer_lock, training_state)


def data_dir(table, recipe: str, pair: str) -> Path:
    """The recipe's prepared data of ``pair``: its ``data`` pattern, else data-bin/RECIPE_SRC_TGT."""
    src, tgt = pair.split("-")
    return Path(table.get("data", "data-bin/{recipe}_{src}_{tgt}").format(recipe=recipe, src=src, tgt=tgt))


def default_size(table) -> str:
    return table.get("default_size", "base")


def check_pair(table, pair: str) -> None:
    """Raise ValueError naming the table's pairs when it has no architecture for ``pair``."""
    pairs = table_pairs(table)
    if pair not in pairs:
        raise ValueError(f"unknown pair {pair!r} for this recipe; its pairs: {', '.join(pairs)}")


def flag_groups(flags) -> List[Tuple[str, list]]:
    """``["--a", "1", "--b", "--c", "x", "y"]`` -> ``[("--a", ["1"]), ("--b", []), ("--c", ["x", "y"])]``."""
    groups: List[Tuple[str, list]] = []
    for item in flags:
        if item.startswith("--"):
            groups.append((item, []))
        elif groups:
            groups[-1][1].append(item)
        else:
            raise ValueError(f"flag value {item!r} before any --flag")
    return groups


def merge_flags(*lists, drop=()) -> list:
    """The flag lists in order, each flag once: a later list's flag replaces an earlier one's in place (its value
    and all), new flags are appended, and flags named in ``drop`` are removed. So a size's ``--max-update`` or a
    method's ``--update-freq`` overrides [common]'s without the resolved command carrying both."""
    merged: Dict[str, list] = {}
    for flags in lists:
        for flag, values in flag_groups(flags):
            merged[flag] = values  # a dict keeps the first insertion's place
    return [x for flag, values in merged.items() if flag not in drop for x in (flag, *values)]


def size_entry(table, size: str, _seen=()) -> dict:
    """A size of the table with ``like = "OTHER"`` resolved: OTHER's architecture, its flags without those in
    ``drop``, then the size's own flags (replacing OTHER's of the same name). Raises ValueError naming the sizes."""
    sizes = table["size"]
    if size not in sizes:
        raise ValueError(f"unknown size {size!r}; sizes: {', '.join(sizes)}")
    entry = sizes[size]
    if "like" not in entry:
        return {"arch": entry["arch"], "flags": list(entry.get("flags", []))}
    if entry["like"] in _seen + (size,):
        raise ValueError(f"size {size!r}: `like` makes a cycle through {entry['like']!r}")
    base = size_entry(table, entry["like"], _seen + (size,))
    flags = merge_flags(base["flags"], entry.get("flags", []), drop=entry.get("drop", ()))
    return {"arch": entry.get("arch", base["arch"]), "flags": flags}


def train_argv(table, method, pair, size, seed, data, run_dir, gpus=1, extra=(), max_tokens=None) -> list:
    """The fairseq-train argv of one run; raises ValueError naming the valid choices. The run's tokens per update
    are those its resolved flags state ([common], then the size's, then the method's); ``gpus`` ranks and micro-batches
    of at most ``max_tokens`` (default: the recipe's own) share them (``batching.plan``)."""
    methods, sizes = table["method"], table["size"]
    if method not in methods:
        close = difflib.get_close_matches(method, list(methods), n=3, cutoff=0.6)
        raise ValueError(f"unknown method {method!r}" + (f"; did you mean {', '.join(close)}?" if close else "")
                         + f" Valid methods: {', '.join(methods)}")
    check_pair(table, pair)
    resolved = size_entry(table, size) if size in sizes else {"arch": {}}
    if pair not in resolved["arch"]:
        raise ValueError(f"no size {size!r} for pair {pair!r} in this recipe; sizes: {', '.join(sizes)}")
    entry = methods[method]
    src, tgt = pair.split("-")
    flags = merge_flags(table["common"]["flags"], resolved["flags"], entry["flags"])
    recipe = batching.recipe_batch(flags)
    split = batching.plan(recipe.tokens_per_update, gpus, max_tokens or recipe.max_tokens)
    flags = merge_flags(flags, split.flags())
    # fp16 where CUDA is, unless the size's flags or those after -- keep the run on the CPU (wmt14's tiny-cpu)
    fp16 = ["--fp16"] if "--cpu" not in (*flags, *extra) and cuda() else []
    argv = [str(data), "--user-dir", plugin_dir(),
            "--arch", entry.get("arch") or arch_name(entry.get("pe", method), resolved["arch"][pair]),
            "--source-lang", src, "--target-lang", tgt,
            *flags, "--seed", str(seed), "--save-dir", str(run_dir), *fp16, *extra]
    on_cpu = "--cpu" in argv or not cuda()
    if problem := foreign_user_dir(argv, "pe-train") or (cpu_fp16_problem(argv) if on_cpu else None):
        raise ValueError(problem)
    return argv


def micro_batch(table, method, pair, size, run_dir: Path, gpus: int, extra, spec="auto"):
    """(BatchPlan, batching.Choice) of one run: the recipe's tokens per update split over ``gpus`` ranks with the
    micro-batch ``spec`` (``--max-tokens-per-gpu``: auto, tokens or a GPU memory) allows. A run that has a
    checkpoint_last.pt keeps, under auto, the micro-batch its command.json records; flags after ``--`` that set
    --max-tokens or --update-freq win in fairseq, so the choice is theirs."""
    recipe = batching.recipe_batch(train_argv(table, method, pair, size, 1, "data", run_dir))
    if "--max-tokens" in extra or "--update-freq" in extra:
        choice = batching.Choice(recipe.max_tokens, "extra", "set by the flags after -- (they win in fairseq)")
        return batching.plan(recipe.tokens_per_update, gpus, recipe.max_tokens), choice
    return batching.choose_plan(recipe.tokens_per_update, gpus, spec, size, recipe.max_tokens,
                                resumed=resumed_max_tokens(run_dir),
                                memory=lambda: batching.device_memory() if cuda() else None)


def resumed_max_tokens(run_dir: Path):
    """The --max-tokens a run that has a checkpoint_last.pt started with (its command.json), else None."""
    try:
        if not (run_dir / "checkpoint_last.pt").is_file():
            return None
        return batching.recipe_batch(read_command(run_dir).argv).max_tokens
    except (ValueError, KeyError, TypeError):
        return None


def batch_record(split, choice) -> dict:
    """command.json's ``batch``: the split, its tokens per update and how its micro-batch was chosen."""
    return {"max_tokens": split.max_tokens, "update_freq": split.update_freq, "world_size": split.world_size,
            "tokens_per_update": split.tokens_per_update, "cap": choice.cap, "chosen_by": choice.how,
            "note": choice.note, "memory_bytes": choice.memory_bytes, "device": choice.device,
            "footprint": choice.footprint}


class Progress:
    """pe-train's note after each progress line of fairseq-train (training_log), pe_plugin's after a process's first
    updates included (from update 1 on, before fairseq's first line at --log-interval): the updates done of the
    run's --max-update and an estimated finish, at the pace since this segment's first progress line (since the
    launch, for the first one: start-up included). ``clock``: seconds since the epoch (time.time; a fixed one in
    tests)."""

    def __init__(self, top: Optional[int], start_update: int, clock: Callable[[], float] = time.time):
        self.top, self.clock = top, clock
        self.mark = (clock(), start_update)  # (time, update) the pace is measured from
        self.first = True

    def note(self, line: str) -> Optional[str]:
        r = training_log.parse_line(line)
        if r is None or r.kind not in ("first", "train_inner", "train") or r.updates is None:
            return None
        now, (t0, u0) = self.clock(), self.mark
        done = f"update {r.updates}" + (f" of {self.top} ({100 * r.updates / self.top:.0f}%)" if self.top else "")
        if r.updates <= u0 or not self.top:
            return f"[pe-train] {done}"
        pace = (now - t0) / (r.updates - u0)
        left = max(self.top - r.updates, 0) * pace
        if self.first:
            self.mark, self.first = (now, r.updates), False
        finish = datetime.fromtimestamp(now + left).strftime("%Y-%m-%d %H:%M")
        return f"[pe-train] {done}, {pace:.2f} s/update, finish ~ {finish} (in {_duration(left)})"

    def echo(self, line: str) -> None:
        if (note := self.note(line)) is not None:
            print(note, flush=True)


def _duration(seconds: float) -> str:
    """``45 s``, ``12 min``, ``3 h 05 min``."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def train(a) -> int:
    """``pe-train`` with the parsed arguments ``a``; returns the exit status."""
    if not is_recipe(a.recipe):
        return fail(f"unknown recipe {a.recipe!r}; recipes: {', '.join(recipe_names())} "
                    f"(pe_tools/recipes/RECIPE/methods.toml), or the path of a methods .toml file")
    table = load_table(a.recipe)
    size = a.size or default_size(table)
    data = Path(a.data or data_dir(table, a.recipe, a.pair))
    run_dir = Path(a.runs_dir or table.get("runs_dir", "runs")) / f"{a.method}.{a.pair}.{size}.seed{a.seed}"
    try:
        split, choice = micro_batch(table, a.method, a.pair, size, run_dir, a.gpus, a.extra,
                                    getattr(a, "max_tokens_per_gpu", "auto"))
        argv = train_argv(table, a.method, a.pair, size, a.seed, data, run_dir, a.gpus, a.extra,
                          max_tokens=split.max_tokens)
    except ValueError as e:
        return fail(str(e))
    print(f"pe-train: {split.describe()}; micro-batch cap: {choice.note}", file=sys.stderr, flush=True)
    cmd = [sys.executable, "-m", "fairseq_cli.train", *argv]
    if not a.dry_run and not (data / f"dict.{a.pair.split('-')[0]}.txt").exists():
        return fail(f"data directory {data} has no fairseq dictionary; prepare it with "
                    f"pe-prepare {a.pair} --recipe {a.recipe} (from a checkout: examples/wmt14/prepare.sh "
                    f"{a.pair} --recipe {a.recipe}), or pass --data DIR")
    print(shlex.join(cmd), flush=True)
    if a.dry_run:
        return 0
    if finished(run_dir, argv):
        return nothing_to_do(run_dir, argv)
    launch = cmd
    if a.gpus > 1 and srun.in_allocation():  # in a SLURM job: one srun task per rank
        try:
            launch = srun.srun_command(cmd, a.gpus)
        except srun.SlurmError as e:
            return fail(str(e))
        print(f"[train] {a.gpus} ranks under SLURM: {shlex.join(launch[:launch.index(sys.executable)])} ...",
              flush=True)
    try:
        with trainer_lock(run_dir) as lock:
            if finished_checkpoint(run_dir, argv):  # a trainer that ended between the check above and the lock
                return nothing_to_do(run_dir, argv)
            RunDir(run_dir).write_command(
                {"recipe": a.recipe, "method": a.method, "pair": a.pair, "size": size, "seed": a.seed,
                 "data": str(data), "argv": cmd, "extra": list(a.extra), "batch": batch_record(split, choice),
                 **results.machine()}, shlex.join(cmd) + "\n")
            progress = Progress(results.max_update_of(argv), updates_of(run_dir / "checkpoint_last.pt") or 0)
            return tee(launch, run_dir / "train.log", on_line=progress.echo, pass_fds=(lock,))
    except TrainerBusy as e:
        return fail(str(e))


def finished_checkpoint(run_dir: Path, argv) -> bool:
    """checkpoint_last.pt holds the --max-update (what ``finished`` adds to "no live trainer", for a caller that
    holds the lock itself)."""
    return TrainingState(Path(run_dir), results.max_update_of(argv), updates_of(Path(run_dir) / "checkpoint_last.pt"),
                         None).trained


def nothing_to_do(run_dir: Path, argv) -> int:
    # fairseq-train resumed at its --max-update still trains one more update (and overwrites the checkpoints)
    top = results.max_update_of(argv)
    print(f"{run_dir} has finished training (update {top} of {top}, "
          f"checkpoint_last.pt saved); nothing to do. Decode it with pe-generate {shlex.quote(str(run_dir))}",
          flush=True)
    return 0

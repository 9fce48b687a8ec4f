"""pe-train: one method of a recipe's methods table as one fairseq-train command, run in its run directory
RUNS/METHOD.PAIR.SIZE.seedN (checkpoints, train.log with all output, the resolved command as command.txt and
command.json); re-running the same command resumes from its checkpoint_last.pt."""
import difflib
import json
import shlex
import sys
from pathlib import Path
from typing import Dict, List, Tuple

from ..checkpoint_files import updates_of
from ..command_line import fail
from ..fairseq_plugin import cpu_fp16_problem, foreign_user_dir, plugin_dir
from ..file_io import write_atomic
from ..naming import arch_name
from ..process import tee
from . import batching, is_recipe, load_table, recipe_names, results, srun, table_pairs


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
    fp16 = ["--fp16"] if "--cpu" not in extra and cuda() else []
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
        recorded = json.loads((run_dir / "command.json").read_text(encoding="utf-8"))
        return batching.recipe_batch(recorded["argv"]).max_tokens
    except (OSError, ValueError, KeyError, TypeError):
        return None


def batch_record(split, choice) -> dict:
    """command.json's ``batch``: the split, its tokens per update and how its micro-batch was chosen."""
    return {"max_tokens": split.max_tokens, "update_freq": split.update_freq, "world_size": split.world_size,
            "tokens_per_update": split.tokens_per_update, "cap": choice.cap, "chosen_by": choice.how,
            "note": choice.note, "memory_bytes": choice.memory_bytes, "device": choice.device,
            "footprint": choice.footprint}


def finished(run_dir: Path, argv) -> bool:
    """Whether the run in ``run_dir`` has trained to this argv's --max-update: the checkpoint fairseq would resume
    from, checkpoint_last.pt, reads whole and holds that update. Not the log: a run killed after its last
    checkpoint and before fairseq's "done training" line (or before the tee wrote it) has finished, and fairseq
    resumed there would train one update more and overwrite the checkpoints."""
    top = results.max_update_of(argv)
    return top is not None and (updates_of(run_dir / "checkpoint_last.pt") or 0) >= top


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
        # fairseq-train resumed at its --max-update still trains one more update (and overwrites the checkpoints)
        top = results.max_update_of(argv)
        print(f"{run_dir} has finished training (update {top} of {top}, "
              f"checkpoint_last.pt saved); nothing to do. Decode it with pe-generate {run_dir}", flush=True)
        return 0
    launch = cmd
    if a.gpus > 1 and srun.in_allocation():  # in a SLURM job: one srun task per rank
        try:
            launch = srun.srun_command(cmd, a.gpus)
        except srun.SlurmError as e:
            return fail(str(e))
        print(f"[train] {a.gpus} ranks under SLURM: {shlex.join(launch[:launch.index(sys.executable)])} ...",
              flush=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(run_dir / "command.txt", shlex.join(cmd) + "\n")
    write_atomic(run_dir / "command.json", json.dumps(
        {"recipe": a.recipe, "method": a.method, "pair": a.pair, "size": size, "seed": a.seed, "data": str(data),
         "argv": cmd, "batch": batch_record(split, choice), **results.machine()}, indent=1))
    return tee(launch, run_dir / "train.log")

"""pe-train / pe-generate: train and decode a recipe, pe_tools/recipes/RECIPE/methods.toml joined into one fairseq
command (scripts/launch.py and examples/wmt14/{train,generate}.sh call it too).

    pe-train METHOD [--recipe wmt14] [--pair en-de] [--size base] [--seed 1] [--gpus N] [--max-tokens-per-gpu auto|N|MEMgb] [--dry-run] [-- FLAGS]
    pe-generate RUN_DIR [--data DIR] [--subset test] [--checkpoints 5] [--no-detok] [--pe-beyond-max {clamp,error}] [--partial]
    pe-record RUN_DIR [--into DIR] [--allow-changed]
    pe-report [--recipe multi30k] [--pair en-de] [--size small] [--ref REF] --out-dir DIR [-- PE-EVALUATE FLAGS]
    python scripts/launch.py {train,generate,record,report,methods} ...        (the same, from a checkout)

A recipe is data: pe_tools/recipes/RECIPE/methods.toml ([common], [size.*], [method.*] and optional defaults
data, runs_dir, results_dir, default_size). wmt14 (the paper's) and multi30k (small enough for a CPU) ship here.

train: one run directory RUNS/METHOD.PAIR.SIZE.seedN holds the checkpoints, train.log (all output) and the resolved
command (command.txt, command.json); re-running the same command resumes from its checkpoint_last.pt.
generate: averages the last N update checkpoints (--checkpoints N, N >= 1), decodes with the paper's settings (beam 4, lenpen 0.6,
max length 1 x source + 50), and writes RUN/gen/hyp.detok.TGT and ref.detok.TGT in the corpus order, with
hyp.detok.TGT.meta.json (the encoding signature) for pe-evaluate.
Every test sentence is translated: before decoding, the sentences longer than the model's positions (LAPE's
and PosNet's L_max) are named in a warning and decoded with the positions beyond L_max reusing the last row
(--pe-beyond-max clamp, the default; hypotheses that run past the target limit are counted after decoding,
and both lists go into the meta file as positions_beyond_max); --pe-beyond-max error names them and stops
before anything is decoded. The meta file also holds the training summary (parameters, updates, losses, training time)
read from train.log.
record / report: a finished run as small files to commit, and the results table made from them
(pe_tools/recipes/results.py).
This module is the command line; the commands are pe_tools/recipes/train.py and generate.py.
"""
import argparse
import shlex
import sys
from pathlib import Path

from ..command_line import fail, int_at_least
from . import all_pairs, load_table, recipe_names, results
from .results import decode_name
from .generate import generate
from .train import check_pair, data_dir, default_size, train


def micro_batch_spec(value: str) -> str:
    """``--max-tokens-per-gpu``'s value, checked (batching.parse_spec)."""
    from .batching import parse_spec

    try:
        parse_spec(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


def size_help() -> str:
    """The sizes of every recipe, e.g. ``multi30k: small; wmt14: base, big, tiny``."""
    return "; ".join(f"{r}: {', '.join(load_table(r)['size'])}" for r in recipe_names())


def main(argv=None, progs=None) -> int:
    """``progs``: the program name a sub-command's usage shows (the console scripts pe-train, pe-generate)."""
    progs = progs or {}
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    named = {cmd: {"prog": prog} for cmd, prog in progs.items()}
    recipes, pairs = recipe_names(), all_pairs()
    t = sub.add_parser("train", help="train one method (flags after -- go to fairseq-train)", **named.get("train", {}))
    t.add_argument("method", help="a method of the recipe's table; " + "; ".join(
        f"{r}: {', '.join(load_table(r)['method'])}" for r in recipes))
    t.add_argument("--recipe", default="wmt14", help="pe_tools/recipes/RECIPE/methods.toml: " + ", ".join(recipes))
    t.add_argument("--pair", choices=pairs, default="en-de", help="a language pair of the recipe's table")
    t.add_argument("--size", help=f"a size of the recipe ({size_help()}); default: the recipe's default_size, "
                                  "else base")
    t.add_argument("--seed", type=int, default=1)
    t.add_argument("--gpus", type=int, default=1, help="world size; the recipe's tokens per update are kept, shared by N ranks (pe_tools/recipes/batching.py)")
    t.add_argument("--max-tokens-per-gpu", default="auto", metavar="auto|N|MEMgb", type=micro_batch_spec,
                   help="the largest micro-batch of one GPU: auto (default: what the free memory of this machine's "
                        "GPU holds at the size's measured footprint; without CUDA the recipe's --max-tokens), N "
                        "tokens, or a GPU memory (e.g. 40GB); the recipe's tokens per update are kept "
                        "(pe_tools/recipes/batching.py)")
    t.add_argument("--data", help="fairseq data directory (default: the recipe's, data-bin/RECIPE_SRC_TGT)")
    t.add_argument("--runs-dir", help="parent of the run directory (default: the recipe's runs_dir, else runs)")
    t.add_argument("--dry-run", action="store_true", help="print the fairseq command and stop")
    g = sub.add_parser("generate", help="average, decode and detokenise one run", **named.get("generate", {}))
    g.add_argument("run_dir")
    g.add_argument("--data", help="fairseq data directory (default: the one the run trained on)")
    g.add_argument("--subset", default="test")
    g.add_argument("--checkpoints", type=int_at_least(1), default=5, metavar="N",
                   help="average the last N update checkpoints, N >= 1 (default: 5)")
    g.add_argument("--name", type=decode_name, metavar="NAME",
                   help="a named decode, written to RUN/gen/NAME/ and recorded beside the default one (e.g. "
                        "--checkpoints 1 --name last: the last checkpoint alone); default: RUN/gen/")
    g.add_argument("--no-detok", action="store_true", help="skip Moses detokenisation")
    g.add_argument("--partial", action="store_true",
                   help="decode a run that has not finished (its trainer still running, or checkpoint_last.pt short "
                        "of its --max-update); the meta file says so and pe-record refuses it")
    g.add_argument("--pe-beyond-max", choices=["clamp", "error"], default="clamp",
                   help="sentences longer than the model's positions (LAPE, PosNet's L_max): clamp (default) "
                        "translates them, positions beyond the limit reusing the last row, and names them in a "
                        "warning; error names them and stops before decoding")
    m = sub.add_parser("methods", help="list a recipe's methods, one a line (e.g. for xargs)")
    m.add_argument("--recipe", default="wmt14", choices=recipes)
    r = sub.add_parser("record", help="copy a finished, decoded run's translations, meta file, command and log "
                                      "into the recipe's results folder (to commit)", **named.get("record", {}))
    r.add_argument("run_dir")
    r.add_argument("--into", help="parent folder (default: the recipe's results_dir, e.g. examples/multi30k/results, "
                                  "for a run of the recipe's own command; RUNS/recorded beside the run for one "
                                  "changed with fairseq flags after pe-train's --)")
    r.add_argument("--allow-changed", action="store_true",
                   help="record a run changed with flags after pe-train's -- into a committed results folder "
                        "(examples/RECIPE/results*) all the same")
    rp = sub.add_parser("report", help="score every recorded run of a pair and size against the baseline with "
                                      "pe-evaluate (its flags after --)", **named.get("report", {}),
                        epilog="Flags after -- go to pe-evaluate, e.g. -- --ngram-analysis, or -- --source FILE "
                               "--length-buckets 10,15,20 for scores by source length. The recorded runs of the "
                               "recipe, pair and size must be alike in every other key of a run's identity "
                               "(updates, flags after pe-train's --; pe_tools/runs/identity.py IDENTITY): "
                               "-- --allow-mismatch scores one that is not, marked in the table.")
    rp.add_argument("--recipe", default="multi30k", choices=recipes)
    rp.add_argument("--pair", choices=pairs, default="en-de", help="a language pair of the recipe's table")
    rp.add_argument("--size", help="default: the recipe's default_size, else base")
    rp.add_argument("--results", help="folder of recorded runs (default: the recipe's results_dir)")
    rp.add_argument("--ref", help="the test reference, untokenised (default: DATA/work/raw.test.TGT of the "
                                 "recipe's prepared data)")
    rp.add_argument("--decode", type=decode_name, metavar="NAME",
                    help="score the recorded runs' decode NAME (pe-generate --name NAME; e.g. last) instead of the "
                         "default one (the average of the last checkpoints); its tables are named RESULTS_NAME")
    rp.add_argument("--out-dir", required=True, help="pe-evaluate's report folder")
    a = p.parse_args(argv)
    a.extra = extra
    if a.cmd == "methods":
        print("\n".join(load_table(a.recipe)["method"]))
        return 0
    return {"train": train, "generate": generate, "record": record, "report": report}[a.cmd](a)


def record(a) -> int:
    """``pe-record``: copy a finished run's small files into the recipe's results folder."""
    run_dir = Path(a.run_dir)
    try:
        command = results.run_command(run_dir)
        into = Path(a.into or results.default_into(run_dir, command,
                                                   load_table(command["recipe"]).get("results_dir", "results")))
        dest = results.record(run_dir, into, a.allow_changed)
    except results.RecordError as e:
        return fail(str(e))
    print(f"recorded {run_dir} -> {dest}")
    return 0


def report(a) -> int:
    """``pe-report``: pe-evaluate every recorded run of a pair and size against the baseline."""
    from ..scoring import cli as evaluate

    table = load_table(a.recipe)
    tgt = a.pair.split("-")[1]
    size = a.size or default_size(table)
    try:
        check_pair(table, a.pair)
    except ValueError as e:
        return fail(str(e))
    try:
        runs = results.recorded_runs(Path(a.results or table.get("results_dir", "results")),
                                     list(table["method"]), a.pair, size, a.decode, recipe=a.recipe,
                                     mismatch_ok="--allow-mismatch" in a.extra)
    except results.RecordError as e:
        return fail(str(e))
    print(f"pe-report: {a.recipe} {a.pair} {size}, the runs and the updates each decode stands for:\n"
          + "\n".join(results.describe_runs(runs)), flush=True)
    ref = Path(a.ref or data_dir(table, a.recipe, a.pair) / "work" / f"raw.test.{tgt}")
    if not ref.is_file():
        return fail(f"reference {ref} not found; prepare the data (pe-prepare {a.pair} --recipe {a.recipe}) or "
                    f"pass --ref FILE (the untokenised test reference)")
    for prefix, systems in results.tables(runs).items():
        prefix = f"{prefix}_{a.decode}" if a.decode else prefix
        argv = results.evaluate_argv(systems, ref, tgt, Path(a.out_dir), prefix, a.extra)
        print("pe-evaluate " + shlex.join(argv), flush=True)
        rc = evaluate.main(argv)
        if rc:
            return rc
    return 0


def console_script(cmd: str):
    """The entry point of the console script ``pe-CMD`` (setup.py): ``launch CMD`` with its arguments."""
    def entry() -> int:
        return main([cmd, *sys.argv[1:]], {cmd: f"pe-{cmd}"})

    entry.__name__ = entry.__qualname__ = f"{cmd}_main"
    entry.__doc__ = f"pe-{cmd}: ``launch {cmd}``."
    return entry


train_main, generate_main, record_main, report_main = map(console_script, ("train", "generate", "record", "report"))


if __name__ == "__main__":
    sys.exit(main())

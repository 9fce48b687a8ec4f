"""pe-bench: speed and memory benchmarks, reported as ratios measured side by side in one run.

    pe-bench --list                     (= python scripts/benchmark.py --list)
    pe-bench NAME [options]      # NAME from --list; NAME --help for its options

Each benchmark is one module of pe_tools/bench/ (not cli, not _private) exposing NAME, HELP, add_args(parser) and
run(args) -> int; they are discovered automatically. What they share (timer, runner, kernel summary, ratios, rounds,
--device, UsageError) is _common.py; the files they write, the output options, --resume and --time-budget,
_partial_runs.py; the models and padded batches of models, cost and fp16, _build.py.
"""
import argparse
import importlib
import pkgutil
import sys
import time

STARTED = time.monotonic()  # --time-budget counts from here: the imports of torch and fairseq are part of a run

from ..command_line import fail
from ._common import UsageError


def discover():
    from pe_tools import bench

    found = {}
    for info in sorted(pkgutil.iter_modules(bench.__path__), key=lambda i: i.name):
        if info.name.startswith("_") or info.name == "cli":
            continue
        mod = importlib.import_module(f"pe_tools.bench.{info.name}")
        found[mod.NAME] = mod
    return found


def main(argv=None) -> int:
    benches = discover()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", action="store_true", help="list the benchmarks")
    sub = parser.add_subparsers(dest="name")
    for name, mod in benches.items():
        mod.add_args(sub.add_parser(name, help=mod.HELP, description=mod.HELP))
    args = parser.parse_args(argv)
    args.argv = [str(a) for a in (sys.argv[1:] if argv is None else argv)]  # what --resume hints repeat (bench/_partial_runs.py)
    args.started = STARTED if argv is None else time.monotonic()
    if args.list or args.name is None:
        for name, mod in benches.items():
            print(f"{name:24s} {mod.HELP}")
        return 0
    try:
        return benches[args.name].run(args)
    except UsageError as e:
        return fail(str(e))


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Speed and memory benchmarks, reported as ratios measured side by side in one run.

    python scripts/benchmark.py --list
    python scripts/benchmark.py NAME [options]      # NAME from --list; NAME --help for its options

Each benchmark is one module in scripts/bench/ exposing NAME, HELP, add_args(parser) and run(args) -> int;
they are discovered automatically.
"""
import argparse
import importlib
import pkgutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def discover():
    import bench

    found = {}
    for info in sorted(pkgutil.iter_modules(bench.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"bench.{info.name}")
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
    if args.list or args.name is None:
        for name, mod in benches.items():
            print(f"{name:24s} {mod.HELP}")
        return 0
    return benches[args.name].run(args)


if __name__ == "__main__":
    sys.exit(main())

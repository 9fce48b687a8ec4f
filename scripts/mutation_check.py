#!/usr/bin/env python
"""Plant small bugs in pe_plugin/encodings, pe_plugin/modules, pe_tools/scoring and pe_tools/recipes, one at a time,
in a temporary copy of the repository, run the tests that cover each module, and record the kill rate per module
and the surviving mutants (pe_tools/mutation.py; docs/testing.md). Not part of `make test`.

    OMP_NUM_THREADS=1 nice -n 15 python scripts/mutation_check.py --max-per-module 6
    python scripts/mutation_check.py --modules pe_plugin/encodings/rope.py --rerun-survivors
    python scripts/mutation_check.py --summary-only        # rewrite summary.md from the recorded results
"""
import argparse
import fnmatch
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pe_tools import mutation  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modules", nargs="*", default=None,
                    help="modules to mutate: paths or globs relative to the repository (default: all four packages)")
    ap.add_argument("--max-per-module", type=int, default=None, help="a reproducible sample of at most N mutants each")
    ap.add_argument("--seed", type=int, default=0, help="seed of the sample")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds per mutant (default: 3x the unmutated tests' time, at least 60)")
    ap.add_argument("--commit", default="HEAD", help="the commit copied and mutated (the working tree never is)")
    ap.add_argument("--out", type=Path, default=mutation.REPO / "examples" / "mutation",
                    help="results.jsonl (appended, resumable), summary.md, and equivalent.json (read)")
    ap.add_argument("--rerun-survivors", action="store_true", help="run the recorded survivors again (new tests)")
    ap.add_argument("--list", action="store_true", help="print the mutants that would run, and stop")
    ap.add_argument("--summary-only", action="store_true", help="only rewrite summary.md from results.jsonl")
    args = ap.parse_args(argv)

    every = mutation.all_modules()
    modules = every if not args.modules else list(dict.fromkeys(  # in the order the patterns are given
        m for pat in args.modules for m in every
        if fnmatch.fnmatch(m, pat) or m.startswith(pat.rstrip("/") + "/") or m == pat))
    if args.modules and not modules:
        ap.error(f"no module matches {args.modules}")
    if args.list:
        for module in modules:
            for m in mutation.sample(mutation.generate(mutation.REPO / module), args.max_per_module, args.seed):
                print(f"{module}:{m.line} {m.kind}: {m.change}")
        return 0
    if not args.summary_only:
        mutation.run_check(modules, args.out, args.max_per_module, args.seed, args.timeout, commit=args.commit,
                           rerun_survivors=args.rerun_survivors, log=lambda s: print(s, flush=True))
    eq_path = args.out / "equivalent.json"
    equivalent = json.loads(eq_path.read_text()) if eq_path.is_file() else {}
    rows, text = mutation.summarize(mutation.load_results(args.out / "results.jsonl"), equivalent)
    (args.out / "summary.md").write_text(
        "# Mutation check\n\nWritten by `scripts/mutation_check.py` (docs/testing.md): each row counts the mutants run "
        "in that module, one planted change at a time, against the tests `pe_tools/mutation.TEST_MAP` names for it.\n\n"
        + text)
    for r in rows:
        print(f"{r['module']:45s} {r['killed']:3d}/{r['mutants']:3d} killed  {100 * r['kill_rate']:5.1f}%  "
              f"survived {r['survived']} (equivalent {r['equivalent']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

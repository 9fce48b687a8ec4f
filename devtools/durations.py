"""Write tests/durations.log from the output of a whole-suite run with ``--durations=0``.

    # in a fresh clone that finds the Multi30k test set (docs/dev/testing.md):
    WORKERS=2 PYTEST_ADDOPTS="--durations=0 -rf" CI=true bash .ci/run 2>&1 | tee ci.out
    python -m devtools.durations ci.out --commit "$(git -C CLONE rev-parse --short HEAD)" --machine "..."

The log keeps the previous log's per-file seconds as a second column (compare within a column only: machines of
the same description differ), the run's result line, and every phase of 0.005 s or more, largest first. The test
suite reads it through tests/pe_testing.recorded_phases (the tier split and the order of the test files).
"""
import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOG = ROOT / "tests" / "durations.log"
sys.path.insert(0, str(ROOT / "tests"))
from pe_testing import recorded_file_seconds, recorded_phases  # noqa: E402  (the log's one reader)

MIN_PHASE_S = 0.005
RESULT = re.compile(r"^=*\s*((?:\d+ (?:failed|passed|skipped|errors?|warnings?|deselected|xfailed|xpassed)"
                    r"(?:, )?)+ in [\d.]+s(?: \([\d:]+\))?)\s*=*$", re.M)


def previous_commit(log: str) -> str:
    """The commit the previous log measured (its ``fresh clone of X`` line), or ``the previous log``."""
    m = re.search(r"fresh clone of (\w+)", log)
    return m.group(1) if m else "the previous log"


def render(output: str, previous: str, commit: str, machine: str) -> str:
    """The log's text: header, seconds per test file (now, previous), then every phase line."""
    phases = recorded_phases(output)
    if not phases:
        raise SystemExit("no --durations=0 lines in the output: run the suite with PYTEST_ADDOPTS=--durations=0")
    result = RESULT.findall(output)
    now, before = recorded_file_seconds(output), recorded_file_seconds(previous)
    lines = [
        "# Durations of the whole suite (measure before cutting, and after)",
        "#",
        f"# Command: WORKERS=2 PYTEST_ADDOPTS=\"--durations=0 -rf\" CI=true bash .ci/run on a fresh clone of {commit}",
        "# (make test's command plus --durations=0, in two test processes), the clone finding the Multi30k test set",
        "# (docs/dev/testing.md), so the needs_multi30k tests ran.",
        f"# Machine: {machine}.",
        f"# Result: {result[-1] if result else 'no result line found'}.",
        f"# The second column is the previous log's ({previous_commit(previous)}): compare within a column only.",
        f"# Sum of the durations below: {sum(now.values()):.0f} s over two test processes; previous: "
        f"{sum(before.values()):.0f} s.",
        "#",
        "# Seconds per test file (setup + call + teardown), largest first:  now   previous",
    ]
    for file, seconds in sorted(now.items(), key=lambda kv: -kv[1]):
        old = f"{before[file]:8.1f}" if file in before else "       -"
        lines.append(f"  {seconds:7.1f} {old}  {file}")
    lines += ["#", f"# Every test phase of {MIN_PHASE_S} s or more, largest first (pytest's --durations=0 lines):"]
    for (phase, node), seconds in sorted(phases.items(), key=lambda kv: -kv[1]):
        if seconds >= MIN_PHASE_S:
            lines.append(f"{seconds:.2f}s {phase:<8} {node}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m devtools.durations", description=__doc__.split("\n")[0])
    p.add_argument("output", type=Path, help="the saved output of the suite run with --durations=0")
    p.add_argument("--commit", required=True, help="the commit the clone was at")
    p.add_argument("--machine", required=True, help="the machine and its load, in words")
    a = p.parse_args(argv)
    text = render(a.output.read_text(encoding="utf-8", errors="replace"), LOG.read_text(encoding="utf-8"),
                  a.commit, a.machine)
    tmp = LOG.with_name(LOG.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(LOG)
    print(f"wrote {LOG} ({len(recorded_phases(text))} phases)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

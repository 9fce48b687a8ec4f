"""The suite's two tiers against its recorded durations (tests/durations.log): every test whose call took 5 s or
more is marked ``slow``, so that ``make test-fast`` stays fast. Read from the test files' source (their decorators
and module ``pytestmark``), not from this session's collection, which ``-m``/``-k`` may have cut."""
import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
SLOW_CALL_S = 5.0  # the `slow` marker's definition in conftest.py


def recorded_calls(log: str) -> dict:
    """{node id: seconds} of the log's `call` lines (pytest --durations=0)."""
    from pe_testing import recorded_phases

    return {node: seconds for (phase, node), seconds in recorded_phases(log).items() if phase == "call"}


def _is_slow(node: ast.expr) -> bool:
    """``pytest.mark.slow`` or a list holding it."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return any(_is_slow(e) for e in node.elts)
    return ast.unparse(node) == "pytest.mark.slow"


def slow_tests(source: str) -> set:
    """Names of a test file's functions in the slow tier: each one if the module's pytestmark is slow."""
    tree = ast.parse(source)
    module_slow = any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)
                      and _is_slow(n.value) for n in tree.body)
    funcs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
    return {f.name for f in funcs if module_slow or any(_is_slow(d) for d in f.decorator_list)}


def fast_calls_over(log: str, sources: dict, limit: float) -> list:
    """The recorded calls of ``limit`` seconds or more of tests that are not in the slow tier ({file: source})."""
    slow = {f: slow_tests(s) for f, s in sources.items()}
    defined = {f: {n.name for n in ast.walk(ast.parse(s)) if isinstance(n, ast.FunctionDef)} for f, s in sources.items()}
    out = []
    for node, seconds in recorded_calls(log).items():
        file, name = node.split("::")[0], node.split("::")[-1].split("[")[0]
        if seconds >= limit and file in slow and name in defined[file] and name not in slow[file]:  # removed: moot
            out.append(f"{node} ({seconds:.1f} s)")
    return out


def test_every_recorded_call_of_5_s_or_more_is_marked_slow():
    sources = {f"tests/{p.name}": p.read_text(encoding="utf-8") for p in TESTS.glob("test_*.py")}
    log = (TESTS / "durations.log").read_text(encoding="utf-8")
    assert len(recorded_calls(log)) > 100  # the log is read
    assert fast_calls_over(log, sources, SLOW_CALL_S) == []


def test_the_reader_sees_marks_on_functions_and_modules():
    log = "  6.00s call     tests/test_a.py::test_one[x]\n  7.00s call     tests/test_a.py::test_two\n" \
          "  9.00s setup    tests/test_a.py::test_three\n  8.00s call     tests/test_b.py::test_four\n"
    a = "import pytest\n\n@pytest.mark.slow\ndef test_one(x):\n    pass\n\ndef test_two():\n    pass\n\n" \
        "def test_three():\n    pass\n"
    b = "import pytest\npytestmark = [pytest.mark.slow]\n\ndef test_four():\n    pass\n"
    sources = {"tests/test_a.py": a, "tests/test_b.py": b}
    assert fast_calls_over(log, sources, 5.0) == ["tests/test_a.py::test_two (7.0 s)"]
    assert fast_calls_over(log, sources, 7.5) == []


def test_files_go_to_the_workers_longest_first_by_the_log(pytestconfig):
    """make test's order (conftest.py): whole files, longest recorded first, unknown files before them, a file's
    tests in their order; xdist's own reordering by test count is off."""
    from pe_testing import DURATIONS_LOG, longest_files_first, recorded_file_seconds

    log = ("  3.00s call     tests/test_a.py::test_one[x]\n  0.50s setup    tests/test_b.py::test_two\n"
           "  2.00s call     tests/test_b.py::test_two\n  0.70s teardown tests/test_a.py::test_one[x]\n")
    seconds = recorded_file_seconds(log)
    assert seconds == {"tests/test_a.py": 3.7, "tests/test_b.py": 2.5}
    ids = ["tests/test_b.py::test_two", "tests/test_a.py::test_one[x]", "tests/test_c.py::test_new",
           "tests/test_b.py::test_three", "tests/test_a.py::test_one[y]"]
    order = [ids[i] for i in longest_files_first(ids, seconds)]
    assert order == ["tests/test_c.py::test_new", "tests/test_a.py::test_one[x]", "tests/test_a.py::test_one[y]",
                     "tests/test_b.py::test_two", "tests/test_b.py::test_three"]
    recorded = recorded_file_seconds(DURATIONS_LOG.read_text(encoding="utf-8"))
    assert len(recorded) > 40 and max(recorded, key=recorded.get) == "tests/test_slurm.py"  # the real log is read
    assert getattr(pytestconfig.option, "loadscopereorder", False) is False


def test_the_durations_writer_keeps_every_phase_the_reader_needs():
    """devtools/durations.py writes the log that the tier split and the file order read: every phase of 0.005 s or
    more, as pytest printed it, and the run's result line; smaller phases and other lines dropped."""
    from devtools.durations import render

    output = ("============ slowest durations ============\n"
              "12.50s call     tests/test_a.py::test_one[x y]\n  0.01s setup    tests/test_a.py::test_one[x y]\n"
              "0.00s teardown tests/test_b.py::test_two\n0.004s call     tests/test_b.py::test_three\n"
              "= 1 failed, 3 passed, 2 warnings in 13.07s =\n")
    text = render(output, "", "abc1234", "2 idle cores")
    from pe_testing import recorded_file_seconds, recorded_phases

    assert recorded_phases(text) == {("call", "tests/test_a.py::test_one[x y]"): 12.5,
                                     ("setup", "tests/test_a.py::test_one[x y]"): 0.01}
    assert recorded_file_seconds(text) == {"tests/test_a.py": 12.51}
    assert "# Result: 1 failed, 3 passed, 2 warnings in 13.07s." in text


def test_the_durations_writer_keeps_a_phase_of_exactly_the_smallest_it_records():
    """devtools/durations.py's MIN_PHASE_S is the smallest phase kept: one of exactly that many seconds is in the
    log, one a thousandth below it is not."""
    from devtools.durations import MIN_PHASE_S, render

    from pe_testing import recorded_phases

    output = (f"{MIN_PHASE_S}s call     tests/test_a.py::test_at\n"
              f"{MIN_PHASE_S - 0.001:.3f}s call     tests/test_a.py::test_below\n= 2 passed in 1.00s =\n")
    assert list(recorded_phases(render(output, "", "abc1234", "2 idle cores"))) == [
        ("call", "tests/test_a.py::test_at")]

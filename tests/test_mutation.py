"""The mutation check's own logic (pe_tools/mutation.py) on a toy package: the mutants it plants, and its verdicts
against a toy test that checks one function and not the other, run in a temporary copy, resumable."""
import ast
import json

import pytest

from pe_tools import mutation

TOY = '''"""A docstring with 1 + 2 < 3 in it."""


def add(a, b):
    return a + b


def is_small(x):
    if x < 0:
        raise ValueError(f"negative: {x - 1}")
    return x < 10  # pragma: no mutate
'''
TOY_TEST = '''from toy.calc import add, is_small


def test_add():
    assert add(2, 3) == 5


def test_is_small():
    assert is_small(3)
'''
FILES = {"toy/__init__.py": "", "toy/calc.py": TOY, "tests/test_calc.py": TOY_TEST}


def test_mutants_of_a_toy_module(tmp_path):
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "calc.py").write_text(TOY)
    mutants = mutation.generate(tmp_path / "toy" / "calc.py", tmp_path)
    changes = {(m.line, m.change) for m in mutants}
    # the arithmetic of add, its dropped term, the comparison x < 0 and its constant; nothing in the docstring,
    # the raise's message or the line marked no-mutate
    assert changes == {(5, "a + b -> (a - b)"), (5, "a + b -> (a)"), (9, "x < 0 -> (x <= 0)"), (9, "0 -> 1")}
    for m in mutants:
        mutated = m.apply(TOY)
        ast.parse(mutated)
        changed = [i + 1 for i, (a, b) in enumerate(zip(TOY.splitlines(), mutated.splitlines())) if a != b]
        assert changed == [m.line] and m.replacement in mutated.splitlines()[m.line - 1]
    assert mutation.sample(mutants, 2) == mutation.sample(mutants, 2) and len(mutation.sample(mutants, 2)) == 2
    first = mutation.generate(tmp_path / "toy" / "calc.py", tmp_path, limit=1)  # the first the walk finds
    assert len(first) == 1 and first[0] in mutants


@pytest.mark.slow
def test_verdicts_resume_and_record(tmp_path):
    test_map = {"toy/calc.py": ["tests/test_calc.py"]}
    seen = []
    results = mutation.run_check(["toy/calc.py"], tmp_path, test_map=test_map, files=FILES, root=tmp_path,
                                 log=seen.append)
    verdicts = {r["change"]: r["status"] for r in results.values()}
    # add is checked: both of its mutants fail test_add; is_small(3) is True under x <= 0 and x < 1 alike
    assert verdicts == {"a + b -> (a - b)": "killed", "a + b -> (a)": "killed",
                        "x < 0 -> (x <= 0)": "survived", "0 -> 1": "survived"}
    assert all(r["path"] == "toy/calc.py" and r["line"] in (5, 9) for r in results.values())
    # resumable: nothing runs again, and the record is one line per mutant
    again = []
    mutation.run_check(["toy/calc.py"], tmp_path, test_map=test_map, files=FILES, root=tmp_path, log=again.append)
    assert any("already recorded" in line for line in again)
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 4
    equivalent = {f"toy/calc.py|if x < 0:|x < 0 -> (x <= 0)": "x = 0 behaves as x > 0 here"}
    # a rerun of the survivors skips the one judged equivalent (equivalent.json beside the record)
    (tmp_path / "equivalent.json").write_text(json.dumps(equivalent))
    rerun = []
    mutation.run_check(["toy/calc.py"], tmp_path, test_map=test_map, files=FILES, root=tmp_path,
                       rerun_survivors=True, log=rerun.append)
    assert any("1 of 4 mutants to run" in line for line in rerun), rerun
    ran = [line for line in rerun if line.lstrip().startswith(("survived", "killed"))]
    assert len(ran) == 1 and "toy/calc.py:9 constant: 0 -> 1" in ran[0], ran
    rows, text = mutation.summarize(mutation.load_results(tmp_path / "results.jsonl"), equivalent)
    row = {"module": "toy/calc.py", "mutants": 4, "killed": 2, "survived": 2, "equivalent": 1,
           "kill_rate": 0.5, "kill_rate_non_equivalent": 2 / 3}
    assert rows == [row, dict(row, module="toy/ (all)")]  # the module, then its package's total
    assert "| toy/ (all) | 4 | 2 | 2 | 1 | 50% | 67% |" in text
    assert "`toy/calc.py:9` (comparison) `x < 0` -> `(x <= 0)`: equivalent: x = 0" in text
    assert "`toy/calc.py:9` (constant) `0` -> `1`: NOT KILLED" in text


def test_only_mutants_of_each_files_present_version_count(tmp_path):
    """A record counts while its file is as it was mutated (the hash of its text); once the file changes, its old
    mutants are superseded (that code is gone) and counted apart, per file."""
    (tmp_path / "toy").mkdir()
    calc = tmp_path / "toy" / "calc.py"
    calc.write_text(TOY)
    records = {m.key: {"path": m.path, "file_sha": m.file_sha, "status": "killed"}
               for m in mutation.generate(calc, tmp_path)}
    assert len(records) == 4
    kept, superseded = mutation.current(records, tmp_path)
    assert kept == records and superseded == {}
    calc.write_text(TOY.replace("a + b", "b + a"))  # an edit: every record of the file is of the old version
    kept, superseded = mutation.current(records, tmp_path)
    assert kept == {} and superseded == {"toy/calc.py": 4}
    calc.unlink()  # a file that is gone supersedes its records too
    assert mutation.current(records, tmp_path) == ({}, {"toy/calc.py": 4})


@pytest.mark.slow
def test_the_copy_is_what_the_tests_import(tmp_path):
    """A mutant in the copy must reach the tests: a planted failure in the copied module kills."""
    files = dict(FILES, **{"tests/test_calc.py": TOY_TEST + "\n\ndef test_where():\n    import toy\n"
                                                            "    assert 'pe_mutation_' in toy.__file__\n"})
    results = mutation.run_check(["toy/calc.py"], tmp_path, test_map={"toy/calc.py": ["tests/test_calc.py"]},
                                 files=files, root=tmp_path, log=lambda s: None)
    assert {r["change"]: r["status"] for r in results.values()}["a + b -> (a - b)"] == "killed"
    assert json.loads((tmp_path / "results.jsonl").read_text().splitlines()[0])["source"] == "files"


def test_every_module_is_mapped_to_tests_or_a_reason():
    for module in mutation.all_modules():
        if not mutation.generate(mutation.REPO / module, limit=1):  # nothing to mutate
            continue
        assert module in mutation.TEST_MAP or module in mutation.NOT_RUN, module
        for arg in mutation.TEST_MAP.get(module) or []:
            assert not arg.startswith("tests/") or (mutation.REPO / arg).is_file() or arg.endswith("kills.py"), arg

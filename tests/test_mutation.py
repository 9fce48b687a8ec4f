"""The mutation check's own logic (devtools/mutation.py) on a toy package: the mutants it plants (the mechanical
classes and the hand-written ones), and its verdicts against a toy test that checks one function and not the
other, run in a temporary copy, resumable; the map of which tests execute which module; and that the check is a
tool of the checkout, not of the installed wheel."""
import ast
import json
import os
import re
import runpy
import sys

import pytest

from pe_testing import REPO

sys.path.insert(0, str(REPO))  # devtools/ is the checkout's, not installed
from devtools import mutation  # noqa: E402

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
    assert changes == {(5, "a + b -> (a - b)"), (5, "a + b -> (a)"), (9, "x < 0 -> (x <= 0)"), (9, "0 -> 1"),
                       (9, "x < 0 -> True"),  # the if's condition removed (guard)
                       (9, "x < 0 -> False")}  # the refusal dropped (refusal)
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
    assert verdicts == {"a + b -> (a - b)": "killed", "a + b -> (a)": "killed", "x < 0 -> False": "survived",
                        "x < 0 -> (x <= 0)": "survived", "0 -> 1": "survived", "x < 0 -> True": "killed"}
    assert all(r["path"] == "toy/calc.py" and r["line"] in (5, 9) for r in results.values())
    # resumable: nothing runs again, and the record is one line per mutant
    again = []
    mutation.run_check(["toy/calc.py"], tmp_path, test_map=test_map, files=FILES, root=tmp_path, log=again.append)
    assert any("already recorded" in line for line in again)
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 6
    equivalent = {f"toy/calc.py|if x < 0:|x < 0 -> (x <= 0)": {"tried": "x = 0", "why": "x = 0 behaves as x > 0 here"}}
    # a rerun of the survivors skips the one judged equivalent (equivalent.json beside the record)
    (tmp_path / "equivalent.json").write_text(json.dumps(equivalent))
    rerun = []
    mutation.run_check(["toy/calc.py"], tmp_path, test_map=test_map, files=FILES, root=tmp_path,
                       rerun_survivors=True, log=rerun.append)
    assert any("2 of 6 mutants to run" in line for line in rerun), rerun
    ran = sorted(line.strip() for line in rerun if line.lstrip().startswith(("survived", "killed")))
    assert len(ran) == 2 and "toy/calc.py:9 constant: 0 -> 1" in ran[0] and "refusal: x < 0 -> False" in ran[1], ran
    rows, text = mutation.summarize(mutation.load_results(tmp_path / "results.jsonl"), equivalent)
    row = {"module": "toy/calc.py", "mutants": 6, "killed": 3, "survived": 3, "equivalent": 1,
           "kill_rate": 0.5, "kill_rate_non_equivalent": 3 / 5}
    assert rows == [row, dict(row, module="toy/ (all)")]  # the module, then its package's total
    assert "| toy/ (all) | 6 | 3 | 3 | 1 | 50% | 60% |" in text
    # per package and class: boundary 0/1, guard 1/1, refusal 0/1, then the mechanical classes
    assert "| toy/ | 0/1 | 1/1 | 0/1 | 1/1 | 0/1 | 1/1 | 3/6 (50%) |" in text, text
    assert "`toy/calc.py:9` (boundary) `x < 0` -> `(x <= 0)`: equivalent: x = 0 behaves as x > 0 here (tried: x = 0)" \
        in text
    assert "`toy/calc.py:9` (constant) `0` -> `1`: NOT KILLED" in text


def record(module, line, status, change="a -> b"):
    """A result line of results.jsonl as run_check writes it (the fields summarize reads)."""
    original, replacement = change.split(" -> ")
    return {"module": module, "path": module, "line": line, "col": 0, "kind": "refusal", "status": status,
            "line_text": f"line {line}", "original": original, "replacement": replacement}


def test_the_raw_rate_is_printed_beside_the_rate_without_equivalents():
    """Counted by hand: 4 mutants in p/a.py, 2 killed, 2 survived of which 1 equivalent: raw 2/4 = 50%, equivalent
    excluded 2/3 = 67%; p/b.py 1 of 1 killed. Each package's raw rate leads, the excluded one beside it, in the record's
    opening list, the table and the printed lines; the equivalent survivor shows its demonstration."""
    results = {str(i): rec for i, rec in enumerate([
        record("p/a.py", 1, "killed"), record("p/a.py", 2, "killed"), record("p/a.py", 3, "survived"),
        record("p/a.py", 4, "survived", "x -> y"), record("p/b.py", 1, "killed")])}
    equivalent = {"p/a.py|line 4|x -> y": {"tried": "x = 0", "why": "only x is read"}}
    rows, text = mutation.summarize(results, equivalent)
    assert "* `p/`: 60% raw (3/5); 75% with the 1 equivalent excluded" in text, text
    assert "* `p, every package`: 60% raw (3/5); 75% with the 1 equivalent excluded" in text, text
    assert "| kill rate (raw) | kill rate (equivalent excluded) |" in text
    assert "| p/a.py | 4 | 2 | 2 | 1 | 50% | 67% |" in text, text
    assert "`p/a.py:4` (refusal) `x` -> `y`: equivalent: only x is read (tried: x = 0)" in text
    assert "`p/a.py:3` (refusal) `a` -> `b`: NOT KILLED" in text
    printed = mutation.line_of(rows[0])
    assert "raw  50.0%" in printed and "(equivalent excluded  66.7%)" in printed, printed
    every_equivalent = mutation.line_of(mutation.summarize({"0": record("p/c.py", 4, "survived", "x -> y")},
                                                          {"p/c.py|line 4|x -> y": equivalent["p/a.py|line 4|x -> y"]})[0][0])
    assert "raw   0.0%" in every_equivalent and "(equivalent excluded n/a)" in every_equivalent, every_equivalent


@pytest.mark.parametrize("entry, lacking", [
    ("x is only read here", "'tried' and 'why'"),  # the old form: a reason, no input tried
    ({"why": "only x is read"}, "'tried'"),
    ({"tried": "x = 0", "why": " "}, "'why'"),
])
def test_an_equivalent_survivor_needs_its_demonstration(tmp_path, entry, lacking):
    """equivalent.json is refused, naming the file, the entry and the fix, unless each entry says which input was
    tried and why no input tells the mutant apart; one with both loads."""
    key = "p/a.py|line 4|x -> y"
    (tmp_path / "equivalent.json").write_text(json.dumps({key: entry}))
    with pytest.raises(mutation.EquivalentError) as e:
        mutation.load_equivalent(tmp_path)
    assert str(tmp_path / "equivalent.json") in str(e.value) and key in str(e.value)
    assert f"lacks {lacking}:" in str(e.value) and "remove the entry" in str(e.value)
    (tmp_path / "equivalent.json").write_text(json.dumps({"p/a.py x -> y": {"tried": "x = 0", "why": "w"}}))
    with pytest.raises(mutation.EquivalentError, match=re.escape("is not path|line text|change")):
        mutation.load_equivalent(tmp_path)
    good = {key: {"tried": "x = 0", "why": "only x is read"}}
    (tmp_path / "equivalent.json").write_text(json.dumps(good))
    assert mutation.load_equivalent(tmp_path) == good


def test_the_recorded_equivalents_each_carry_a_demonstration():
    """examples/mutation/equivalent.json as committed: every entry names the input tried and why (it loads)."""
    entries = mutation.load_equivalent(mutation.MAP_FILE.parent)
    assert entries and all(e["tried"] and e["why"] for e in entries.values())


@pytest.mark.slow
def test_a_survivor_of_its_selection_is_judged_by_the_whole_fast_tier(tmp_path):
    """With fast_tier, a mutant its traced selection (test_add) lets pass runs against every fast test: the removed
    condition (x < 0 -> True) fails test_is_small and is killed there, recorded as such; the others pass the fast tier
    too. A slow test (is_small(0.5), which the off-by-one fails) is not the fast tier's; without fast_tier the
    selection's verdict stands."""
    slow_test = "\n\nimport pytest\n\n\n@pytest.mark.slow\ndef test_half():\n    assert is_small(0.5)\n"
    files = dict(FILES, **{"tests/test_calc.py": TOY_TEST + slow_test})
    test_map = {"toy/calc.py": ["tests/test_calc.py::test_add"]}
    seen = []
    results = mutation.run_check(["toy/calc.py"], tmp_path, test_map=test_map, files=files, root=tmp_path,
                                 log=seen.append, fast_tier=True)
    got = {r["change"]: (r["status"], r["how"], r["judged_by"]) for r in results.values()}
    assert got == {"a + b -> (a - b)": ("killed", "failed", "selection"),
                   "a + b -> (a)": ("killed", "failed", "selection"),
                   "x < 0 -> True": ("killed", "fast tier: failed", "selection, fast tier"),
                   "x < 0 -> False": ("survived", "passed", "selection, fast tier"),
                   "x < 0 -> (x <= 0)": ("survived", "passed", "selection, fast tier"),
                   "0 -> 1": ("survived", "passed", "selection, fast tier")}, got
    assert sum("the fast tier unmutated: passed" in line for line in seen) == 1, seen  # its baseline once
    _, text = mutation.summarize(results, {})
    assert "`toy/calc.py:9` (constant) `0` -> `1`: NOT KILLED (its selection and the whole fast tier pass" in text
    alone = mutation.run_check(["toy/calc.py"], tmp_path / "plain", test_map=test_map, files=files, root=tmp_path,
                               log=lambda s: None)
    assert {r["change"]: r["status"] for r in alone.values()}["x < 0 -> True"] == "survived"
    assert "(its selection passes; the fast tier not run: a gap" in mutation.summarize(alone, {})[1]


def test_only_mutants_of_each_files_present_version_count(tmp_path):
    """A record counts while its file is as it was mutated (the hash of its text); once the file changes, its old
    mutants are superseded (that code is gone) and counted apart, per file."""
    (tmp_path / "toy").mkdir()
    calc = tmp_path / "toy" / "calc.py"
    calc.write_text(TOY)
    records = {m.key: {"path": m.path, "file_sha": m.file_sha, "status": "killed"}
               for m in mutation.generate(calc, tmp_path)}
    assert len(records) == 6
    kept, superseded = mutation.current(records, tmp_path)
    assert kept == records and superseded == {}
    calc.write_text(TOY.replace("a + b", "b + a"))  # an edit: every record of the file is of the old version
    kept, superseded = mutation.current(records, tmp_path)
    assert kept == {} and superseded == {"toy/calc.py": 6}
    calc.unlink()  # a file that is gone supersedes its records too
    assert mutation.current(records, tmp_path) == ({}, {"toy/calc.py": 6})


@pytest.mark.slow
def test_the_copy_is_what_the_tests_import(tmp_path):
    """A mutant in the copy must reach the tests: a planted failure in the copied module kills."""
    files = dict(FILES, **{"tests/test_calc.py": TOY_TEST + "\n\ndef test_where():\n    import toy\n"
                                                            "    assert 'pe_mutation_' in toy.__file__\n"})
    results = mutation.run_check(["toy/calc.py"], tmp_path, test_map={"toy/calc.py": ["tests/test_calc.py"]},
                                 files=files, root=tmp_path, log=lambda s: None)
    assert {r["change"]: r["status"] for r in results.values()}["a + b -> (a - b)"] == "killed"
    assert json.loads((tmp_path / "results.jsonl").read_text().splitlines()[0])["source"] == "files"


HAND = '''import shlex
import torch

IDENTITY = ("pair", "size", "seed")


def same_run(a, b):
    return (a.pair, a.size) == (b.pair, b.size)


def script(cwd, code):
    return f"cd {q(cwd)}\\nexec {shlex.join(code)}\\n"


def fits(n, limit, strict):
    if n > limit and strict:
        raise ValueError(f"{n} > {q(limit)}")
    return sorted([n], key=lambda r: (r, limit))


def heads(x, t, b, h, d):
    y = x.view(t, b, h, d).transpose(0, 1)
    return y.float().softmax(dim=-1).to(torch.float64)
'''
# every hand-written mutant of HAND, by (line, class, change): independent of the generator, written out by hand
HAND_MUTANTS = {
    (4, "key", 'IDENTITY = ("pair", "size", "seed") -> IDENTITY = (\'size\', \'seed\')'),
    (4, "key", 'IDENTITY = ("pair", "size", "seed") -> IDENTITY = (\'pair\', \'seed\')'),
    (4, "key", 'IDENTITY = ("pair", "size", "seed") -> IDENTITY = (\'pair\', \'size\')'),
    (8, "key", "(a.pair, a.size) == (b.pair, b.size) -> ((a.size,) == (b.size,))"),
    (8, "key", "(a.pair, a.size) == (b.pair, b.size) -> ((a.pair,) == (b.pair,))"),
    (12, "quoting", "q(cwd) -> (cwd)"),  # inside an f-string
    (12, "quoting", "shlex.join(code) -> ' '.join(code)"),
    (16, "boundary", "n > limit -> (n >= limit)"),
    (16, "refusal", "n > limit and strict -> (n > limit)"),  # the guard's terms, its branch refusing: the reviewer's
    (16, "refusal", "n > limit and strict -> (strict)"),
    (16, "guard", "n > limit and strict -> True"),
    (18, "key", "lambda r: (r, limit) -> (lambda r: (limit,))"),
    (18, "key", "lambda r: (r, limit) -> (lambda r: (r,))"),
    (22, "axis", "x.view(t, b, h, d) -> x.view(b, t, h, d)"),
    (22, "axis", "x.view(t, b, h, d) -> x.view(t, b, d, h)"),
    (22, "axis", "x.view(t, b, h, d) -> x.view(t, h, b, d)"),
    (22, "axis", "x.view(t, b, h, d).transpose(0, 1) -> x.view(t, b, h, d).transpose(0, 2)"),  # never (0, 0)
    (23, "axis", "y.float().softmax(dim=-1) -> y.float().softmax(dim=-2)"),
    (23, "dtype", "y.float() -> (y)"),
    (23, "dtype", "y.float().softmax(dim=-1).to(torch.float64) -> (y.float().softmax(dim=-1))"),
}


def test_the_hand_written_classes(tmp_path):
    """Each hand-written class at each of its sites in a toy module, nothing in the raise's f-string message (its
    q() is a message, not a shell word), and every mutant's source one node away from the original."""
    (tmp_path / "hand.py").write_text(HAND)
    mutants = mutation.generate(tmp_path / "hand.py", tmp_path)
    hand = {(m.line, m.kind, m.change) for m in mutants if m.kind in mutation.HAND_WRITTEN}
    assert hand == HAND_MUTANTS, sorted(hand ^ HAND_MUTANTS)
    for m in mutants:
        ast.parse(m.apply(HAND))
    picked = mutation.sample_per_class(mutants, 1, kinds=mutation.HAND_WRITTEN)
    # one of each class that has a site, and each of the reviewer's classes at every site (here refusal's two)
    kinds = [m.kind for m in picked]
    assert set(kinds) == {m.kind for m in mutants if m.kind in mutation.HAND_WRITTEN}, kinds
    assert kinds.count("refusal") == 2 and all(kinds.count(k) == 1 for k in set(kinds) - {"refusal"}), kinds
    assert picked == mutation.sample_per_class(mutants, 1, kinds=mutation.HAND_WRITTEN)  # the same draw


REVIEW = '''import os


def head_size(d):
    if d < 16 or d & (d - 1):
        raise ValueError("a power of 2, at least 16")
    return d


def device(env):
    return int(env.get("SLURM_LOCALID", "0"))


def detok(lines, lang):
    return MosesDetokenizer(lang=lang).detokenize(lines)


def read(path):
    try:
        return json.loads(open(path).read())
    except (OSError, ValueError, UnicodeDecodeError):
        return {}


def resume(resp, have):
    if have and resp.status != 206:
        have = 0
    return have


def score(baseline, systems, trg_lang):
    check_languages(trg_lang, [baseline] + systems)
    for s in systems:
        if s is None:
            raise ValueError("missing")
    check_size(baseline)
    check_size(systems)


def problem(x, src_lang):
    if not x:
        return f"empty: {src_lang}"
    if x > 3:
        return 0
    return src_lang


def load(d, source_lang, target_lang):
    return from_pretrained(d, source_lang=source_lang, target_lang=target_lang)


if __name__ == "__main__":
    sys.exit(main())
'''
# the reviewer's mutants of REVIEW, by (line, class, change), written out by hand: six kinds of bug a review plants
# (a head-size refusal's term, a sibling variable, a language dropped, an except narrowed, a 206 check dropped, a
# check of the baseline dropped), and nothing for a refusal-free branch or the __main__ guard
REVIEW_MUTANTS = {
    (5, "refusal", "d < 16 or d & (d - 1) -> (d < 16)"),
    (5, "refusal", "d < 16 or d & (d - 1) -> (d & d - 1)"),
    (11, "env", "\"SLURM_LOCALID\" -> 'SLURM_PROCID'"),
    (11, "env", "\"SLURM_LOCALID\" -> 'SLURM_NODEID'"),
    (15, "language", "MosesDetokenizer(lang=lang) -> MosesDetokenizer()"),
    (21, "except", "(OSError, ValueError, UnicodeDecodeError) -> ((OSError, UnicodeDecodeError))"),
    (21, "except", "(OSError, ValueError, UnicodeDecodeError) -> ((ValueError, UnicodeDecodeError))"),
    # not UnicodeDecodeError left out: a ValueError, still caught (no mutant)
    (26, "status", "resp.status != 206 -> False"),
    (32, "language", "trg_lang -> src_lang"),
    (32, "per-input", "[baseline] + systems -> (systems)"),
    (32, "per-input", "[baseline] + systems -> ([baseline])"),  # also the mechanical dropped term: counted once
    (33, "per-input", "systems -> list(systems)[1:]"),  # a checking loop: the first input skipped
    (34, "refusal", "s is None -> False"),
    (36, "per-input", "check_size(baseline) -> pass"),
    (37, "per-input", "check_size(systems) -> pass"),
    (41, "refusal", "not x -> False"),  # an error returned as a message refuses; `return 0` does not
    (45, "language", "src_lang -> trg_lang"),  # not inside the f-string (a message)
    (49, "language", "from_pretrained(d, source_lang=source_lang, target_lang=target_lang) -> from_pretrained(d, target_lang=target_lang)"),
    (49, "language", "from_pretrained(d, source_lang=source_lang, target_lang=target_lang) -> from_pretrained(d, source_lang=source_lang)"),
    (49, "language", "from_pretrained(d, source_lang=source_lang, target_lang=target_lang) -> from_pretrained(d, source_lang=target_lang, target_lang=source_lang)"),
    (49, "language", "source_lang -> target_lang"),
    (49, "language", "target_lang -> source_lang"),
}


def test_the_reviewers_classes_at_every_site(tmp_path):
    """Each reviewer's class (refusal, per-input, env, language, except, status) at every site of a toy module,
    drawn whole by sample_per_class whatever N, and each change found by two classes counted once."""
    (tmp_path / "review.py").write_text(REVIEW)
    mutants = mutation.generate(tmp_path / "review.py", tmp_path)
    got = {(m.line, m.kind, m.change) for m in mutants if m.kind in mutation.REVIEWER}
    assert got == REVIEW_MUTANTS, sorted(got ^ REVIEW_MUTANTS)
    assert len({m.key for m in mutants}) == len(mutants)  # no change twice (the dropped term is the reviewer's)
    for m in mutants:
        ast.parse(m.apply(REVIEW))
    drawn = mutation.sample_per_class(mutants, 1, kinds=mutation.REVIEWER)
    assert {(m.line, m.kind, m.change) for m in drawn} == REVIEW_MUTANTS
    assert len(mutation.sample_per_class(mutants, 0)) == len(REVIEW_MUTANTS)  # the other classes: N = 0 each


def test_the_map_runs_the_tests_that_execute_a_module(tmp_path):
    """derived_test_map: the traced tests of a module, fastest first by durations.log; a module no test executes
    in-process gets the test files that name it (a tool run as a subprocess); NOT_RUN's modules get None."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("")
    (tmp_path / "tests" / "test_tool.py").write_text("subprocess.run(['python', '-m', 'pe_tools.recipes.x'])")
    (tmp_path / "tests" / "durations.log").write_text("3.00s call     tests/test_a.py::test_slow\n"
                                                      "0.10s call     tests/test_a.py::test_quick\n")
    for module in ("pe_tools/recipes/x.py", "pe_tools/recipes/y.py", "pe_plugin/kernels/shaw_rpe.py"):
        (tmp_path / module).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / module).write_text("A = 1\n")
    trace = {"tests": {"pe_tools/recipes/y.py": ["tests/test_a.py::test_slow", "tests/test_a.py::test_quick",
                                                 "tests/test_gone.py::test_x"]}, "imports": {}}
    got = mutation.derived_test_map(trace, tmp_path)
    assert got["pe_tools/recipes/y.py"] == ["tests/test_a.py::test_quick", "tests/test_a.py::test_slow"]
    assert got["pe_tools/recipes/x.py"] == ["tests/test_tool.py"]
    assert got["pe_plugin/kernels/shaw_rpe.py"] is None
    five = [f"tests/a.py::t{i}" for i in range(5)]
    assert mutation.per_file(five + ["tests/b.py::t1", "tests/c.py"], 3) == [  # spread: first, middle, last
        "tests/a.py::t0", "tests/a.py::t2", "tests/a.py::t4", "tests/b.py::t1", "tests/c.py"]
    assert mutation.per_file(five, 1) == ["tests/a.py::t0"] and mutation.per_file(five, None) == five


def test_a_partial_trace_replaces_only_its_files():
    """merge_trace: the files traced again bring their tests and imports as they are now (a test gone or no longer
    executing a module leaves it); the other files' entries stay; a module left with no entry leaves the map."""
    old = {"tests": {"m/a.py": ["tests/t1.py::x", "tests/t2.py::y"], "m/b.py": ["tests/t2.py::gone"]},
           "imports": {"m/a.py": ["tests/t1.py", "tests/t2.py"], "m/c.py": ["tests/t2.py"]}}
    new = {"tests": {"m/a.py": ["tests/t2.py::z"], "m/d.py": ["tests/t2.py::z"]}, "imports": {"m/d.py": ["tests/t2.py"]}}
    got = mutation.merge_trace(old, new, ["tests/t2.py"])
    assert got == {"tests": {"m/a.py": ["tests/t1.py::x", "tests/t2.py::z"], "m/d.py": ["tests/t2.py::z"]},
                   "imports": {"m/a.py": ["tests/t1.py"], "m/d.py": ["tests/t2.py"]}}
    assert mutation.merge_trace(old, {"tests": {}, "imports": {}}, ["tests/t9.py"]) == old  # another file: unchanged


def test_every_module_is_mapped_to_tests_or_a_reason():
    """The recorded map (examples/mutation/test_map.json): every module it saw with something to mutate has tests
    that execute it, or a reason in NOT_RUN; pass_context.py's include test_rope_alibi.py's (a padding-mask mutant there
    is killed only by them) and Shaw's core's include the gradcheck that replays the dropout mask."""
    derived = mutation.derived_test_map()
    recorded = json.loads(mutation.MAP_FILE.read_text())
    traced = set(recorded["tests"]) | set(recorded["imports"])  # a module added since is mapped by the next --trace
    for module in mutation.all_modules():
        if module not in traced or not mutation.generate(mutation.REPO / module, limit=1):  # nothing to mutate
            continue
        assert derived[module] or module in mutation.NOT_RUN, module
    assert len(traced & set(mutation.all_modules())) > 50
    assert any(n.startswith("tests/test_rope_alibi.py::") for n in derived["pe_plugin/modules/pass_context.py"])
    shaw = derived["pe_plugin/encodings/shaw.py"]
    assert any("test_gradcheck_with_dropout_replays_its_mask" in n for n in shaw), shaw


def test_the_check_is_not_in_the_wheel(monkeypatch):
    """setup.py's packages (what `pip install .` puts in the wheel) hold no development tool: neither devtools nor
    a module named mutation; the tools still run from the checkout (scripts/mutation_check.py imports them)."""
    import setuptools

    seen = {}
    monkeypatch.setattr(setuptools, "setup", lambda **kw: seen.update(kw))
    monkeypatch.chdir(REPO)
    runpy.run_path(str(REPO / "setup.py"))
    packages = seen["packages"]
    assert "pe_tools" in packages and "pe_plugin" in packages  # the reader sees the real list
    assert not any(p == "devtools" or p.startswith("devtools.") for p in packages)
    assert not [p for p in packages if (REPO / p.replace(".", "/") / "mutation.py").exists()]
    assert "from devtools.mutation import main" in (REPO / "scripts" / "mutation_check.py").read_text()


def test_an_except_tuple_of_two_is_narrowed_each_way(tmp_path):
    """The except class narrows a tuple of two as it does a longer one: each exception left out in turn."""
    (tmp_path / "two.py").write_text("def read(path):\n    try:\n        return open(path).read()\n"
                                     "    except (OSError, ValueError):\n        return ''\n")
    got = {m.change for m in mutation.generate(tmp_path / "two.py", tmp_path) if m.kind == "except"}
    assert got == {"(OSError, ValueError) -> ((OSError,))", "(OSError, ValueError) -> ((ValueError,))"}


def test_the_durations_reader_takes_only_the_calls(tmp_path):
    """recorded_seconds: a test's call phase from tests/durations.log, never its setup or teardown."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "durations.log").write_text(
        "# a comment line\n  9.00s setup    tests/test_a.py::test_one\n  2.50s call     tests/test_a.py::test_one\n"
        "  7.00s teardown tests/test_a.py::test_one\n  8.00s setup    tests/test_b.py::test_two\n")
    assert mutation.recorded_seconds(tmp_path) == {"tests/test_a.py::test_one": 2.5}


@pytest.mark.parametrize("status, failing, kept", [("timeout", [], False), ("failed", [], False),
                                                   ("failed", ["tests/test_x.py::test_y"], True), ("passed", [], True)])
def test_an_unmutated_fast_tier_that_times_out_stops_the_check(status, failing, kept, monkeypatch):
    """fast_tier_baseline: the unmutated fast tier timed out, or failed without naming what failed, gives None (no
    mutant is judged against it); one that failed naming its failures runs without them."""
    output = "".join(f"FAILED {node} - AssertionError\n" for node in failing)
    monkeypatch.setattr(mutation, "run_tests", lambda *a, **k: (status, 12.0, output))
    got = mutation.fast_tier_baseline(REPO, log=lambda line: None)
    assert (got is not None) == kept
    if kept:
        assert got == (12.0, ["tests", *(x for node in failing for x in ("--deselect", node))])


def test_the_tracer_takes_its_root_from_pe_trace_root(tmp_path):
    """devtools/trace_tests.py: the packages it records are those under PE_TRACE_ROOT (the copy the mutation check
    traces), not under the folder of its output file PE_TRACE_OUT nor the working directory."""
    import subprocess

    root, out = tmp_path / "copy", tmp_path / "maps" / "map.json"
    env = {**os.environ, "PE_TRACE_ROOT": str(root), "PE_TRACE_OUT": str(out), "PYTHONPATH": str(REPO)}
    code = "import devtools.trace_tests as t; print(t._ROOT); print(*t._PACKAGES, sep='\\n')"
    printed = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                             check=True).stdout.splitlines()
    assert printed == [str(root.resolve()), *(str(root.resolve() / p) + os.sep for p in ("pe_plugin", "pe_tools"))]

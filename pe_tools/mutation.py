"""A mutation check: plant one small bug at a time in a module, run the tests that cover that module, and record
whether they caught it (``scripts/mutation_check.py``; docs/testing.md).

Mutants (``generate``), one change each, made on the module's syntax tree and written back as source text:
  comparison   <  <=  >  >=  ==  !=  is  is not  in  not in   each turned into its neighbour (< to <=, == to !=, ...)
  arithmetic   + and - swapped, * and / swapped, // to /, % to //, ** to *; a + b and a - b lose their right term
  augmented    += and -= swapped, *= and /= swapped
  unary        -x to x, not x to x
  boolean      and / or swapped
  constant     an integer n to n + 1 (0 to 1, 1 to 2: off by one), a float x to 2x (0.0 to 1.0), True / False swapped
Strings are never changed, nor anything inside a ``raise`` (messages), a logging / print / warnings call, an
f-string, an annotation or a docstring; a line with ``# pragma: no mutate`` is skipped.

Each mutant runs in a temporary copy of the repository (``git archive`` of a commit, HEAD by default: the working
tree is never written), with that copy first on the import path (checked before any mutant runs), running only the
tests the module's entry in ``TEST_MAP`` names, with ``-x`` and a timeout. A mutant is *killed* when those tests
fail (or do not import, or time out) and *survives* when they pass; the unmutated module must pass them first
(else its mutants are not run). Results are appended to ``results.jsonl`` as they come (an interrupted run
resumes where it stopped: a mutant is keyed by its file's content, its place and its change), and ``summary.md``
gives the kill rate per module and every survivor, with the reason it is equivalent where ``equivalent.json``
explains it (keys: ``path|line text|change``, so they survive edits elsewhere in the file).
"""
import argparse
import ast
import copy
import fnmatch
import hashlib
import itertools
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from .tables import markdown_table

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("pe_plugin/encodings", "pe_plugin/encoding_parts", "pe_plugin/kernels", "pe_plugin/modules",
            "pe_tools/scoring", "pe_tools/recipes")
NO_MUTATE = "pragma: no mutate"

# ---- which tests cover which module ------------------------------------------------------------------------
# module (path relative to the repository) -> pytest arguments (files, node ids, -k expressions), run with -x and
# -m MARKS: the fast tier, and the slow tests marked `mutation` because they kill mutants of their module (the SLURM
# trainings, the partial benchmarks). None: not run, with the reason in NOT_RUN. Chosen to exercise the module in
# seconds, not to be every test that touches it: a survivor means these tests miss the change.
MARKS = "not slow or mutation"
_FAST_REL = "not help_states and not slopes_are_divided and not base_tables_are_per_layer"
_REL = ["tests/test_relative.py"]
_IFACE = ["tests/test_interface.py", "-k", "not module_cli and not share_all and not unknown and not flag_of_another "
          "and not stock_position and not encoding_and_architecture and not listed_flag"]
_ROPE = ["tests/test_rope_alibi.py", "-k", "rope or fused or incremental or padding"]
_POSNET = ["tests/test_posnet.py", "-k", "not lmax_is_capped and not max_positions_reach and not sides_and_flag "
           "and not per-layer"]
_SHAW_CORE = ["tests/test_shaw_core.py", "-k", "not gradcheck"]
_SCORING = ["tests/test_evaluate.py", "tests/test_mutation_kills.py"]
TEST_MAP: Dict[str, Optional[List[str]]] = {
    "pe_plugin/encoding_parts/base.py": _IFACE + _ROPE,
    "pe_plugin/encoding_parts/head_layout.py": _SHAW_CORE,
    "pe_plugin/encoding_parts/limits.py": ["tests/test_position_limits.py"],
    "pe_plugin/encoding_parts/posnet_kernels.py": _POSNET,
    "pe_plugin/encoding_parts/relative.py": _REL + ["-k", _FAST_REL],
    "pe_plugin/encodings/__init__.py": _IFACE,
    "pe_plugin/encodings/adaptive_t5.py": _REL + ["-k", f"at5 and ({_FAST_REL})"],
    "pe_plugin/encodings/alibi.py": ["tests/test_rope_alibi.py", "-k", "alibi", "tests/test_kerple.py"],
    "pe_plugin/encodings/kerple.py": ["tests/test_kerple.py"],
    "pe_plugin/encodings/learned.py": _IFACE + ["tests/test_position_limits.py", "-k", "lape"],  # parity tests are slow
    "pe_plugin/encodings/none.py": _IFACE,
    "pe_plugin/encodings/posnet_attention.py": ["tests/test_posnet.py", "-k", "attn and not per-layer"],
    "pe_plugin/encodings/posnet_embedding.py": ["tests/test_posnet.py", "-k", "embed and not lmax_is_capped"],
    "pe_plugin/encodings/rope.py": _ROPE,
    "pe_plugin/encodings/shaw.py": _REL + ["-k", f"rpe and ({_FAST_REL})"] + _SHAW_CORE,
    "pe_plugin/encodings/sinusoidal.py": _IFACE,
    "pe_plugin/kernels/shaw_rpe.py": None,
    "pe_plugin/encodings/t5_bias.py": _REL + ["-k", f"t5 and ({_FAST_REL})"],
    "pe_plugin/modules/pass_context.py": ["tests/test_fast_paths.py"],
    "pe_plugin/modules/pe_attention.py": _IFACE + _REL + ["-k", "module or incremental or gradients"]
    + ["tests/test_fast_paths.py", "-k", "equals_reference"],  # the reference path, in float64
    # batches wider than 2 (test_fast_paths) and PosNet's hook after the dropout (test_posnet)
    "pe_plugin/modules/pe_embedding.py": _IFACE + ["tests/test_fast_paths.py", "tests/test_posnet.py"],
    "pe_plugin/modules/sdpa.py": _REL + ["-k", "module or fused"] + ["tests/test_rope_alibi.py", "-k", "fused"]
    + ["tests/test_fast_paths.py", "-k", "learned_mask"],  # the learned mask's gradient against torch's math path
    "pe_tools/scoring/agreement.py": ["tests/test_agreement.py"],
    "pe_tools/scoring/cli.py": _SCORING,
    "pe_tools/scoring/generate_output.py": _SCORING,
    "pe_tools/scoring/inputs.py": _SCORING,
    "pe_tools/scoring/length_buckets.py": _SCORING + ["tests/test_benchmark_partial.py"],
    "pe_tools/scoring/metrics.py": _SCORING,
    "pe_tools/scoring/ngram.py": _SCORING,
    "pe_tools/scoring/report.py": _SCORING,
    "pe_tools/scoring/significance.py": _SCORING,
    "pe_tools/scoring/style.py": _SCORING,
    "pe_tools/recipes/__init__.py": ["tests/test_recipes.py"],
    "pe_tools/recipes/batching.py": ["tests/test_batching.py"],
    "pe_tools/recipes/curves.py": ["tests/test_annealed.py"],
    "pe_tools/recipes/generate.py": ["tests/test_recipes.py"],
    # pe-train's flags after -- (test_batching) and its help listing each recipe's methods (test_annealed)
    "pe_tools/recipes/launch.py": ["tests/test_batching.py", "-k", "pe_train_auto_on_a_gpu", "tests/test_annealed.py",
                                   "-k", "train_help_lists_the_methods", "tests/test_recipes.py"],
    "pe_tools/recipes/queue.py": ["tests/test_queue.py"],
    "pe_tools/recipes/queue_cli.py": ["tests/test_queue.py"],
    "pe_tools/recipes/results.py": ["tests/test_results.py"],
    "pe_tools/recipes/train.py": ["tests/test_annealed.py", "-k", "size or finished_run", "tests/test_recipes.py",
                                  "tests/test_batching.py"],
    "pe_tools/recipes/slurm.py": ["tests/test_slurm.py"],
    "pe_tools/recipes/srun.py": ["tests/test_slurm.py"],
    "pe_tools/recipes/training_log.py": ["tests/test_training_log.py", "tests/test_results.py"],
}
NOT_RUN = {"pe_plugin/kernels/shaw_rpe.py": "Triton kernels: their tests need a GPU (skipped on CPU)"}


def pytest_argv(selection: Sequence[str]) -> List[List[str]]:
    """A TEST_MAP entry as one pytest argument list per (files, -k) group: ``-k`` applies to the files before it,
    so ``a.py -k x b.py`` runs ``a.py -k x`` then ``b.py``."""
    groups, files = [], []
    items = list(selection)
    i = 0
    while i < len(items):
        if items[i] == "-k":
            groups.append(files + ["-k", items[i + 1]])
            files, i = [], i + 2
        else:
            files.append(items[i])
            i += 1
    if files:
        groups.append(files)
    return groups


# ---- mutants -----------------------------------------------------------------------------------------------
@dataclass
class Mutant:
    path: str  # relative to the repository
    line: int
    col: int
    end_line: int
    end_col: int
    kind: str  # comparison, arithmetic, ...
    original: str  # the source text replaced
    replacement: str  # the text put in its place
    line_text: str  # the original line, stripped (for the equivalence keys)
    file_sha: str  # sha1 of the unmutated file

    @property
    def change(self) -> str:
        return f"{_one_line(self.original)} -> {self.replacement}"

    @property
    def key(self) -> str:
        """Identity in the results: the file's content, the place and the change."""
        return hashlib.sha1(f"{self.file_sha}|{self.line}|{self.col}|{self.change}".encode()).hexdigest()[:16]

    @property
    def equivalence_key(self) -> str:
        return f"{self.path}|{self.line_text}|{self.change}"

    def apply(self, source: str) -> str:
        """The source with this mutant's span replaced."""
        lines = source.splitlines(keepends=True)
        offsets = [0]
        for text in lines:
            offsets.append(offsets[-1] + len(text.encode()))
        data = source.encode()
        start = offsets[self.line - 1] + self.col
        end = offsets[self.end_line - 1] + self.end_col
        return (data[:start] + self.replacement.encode() + data[end:]).decode()


_COMPARE = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
            ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}
_BINOP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Div,
          ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult}
_AUG = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult}
_QUIET_CALLS = {"print", "debug", "info", "warning", "warn", "error", "exception", "critical", "log"}


def _skipped_nodes(tree: ast.AST) -> set:
    """ids of the nodes whose subtrees are never mutated (messages, logging, f-strings, annotations, docstrings)."""
    skip = set()

    def mark(node):
        for sub in ast.walk(node):
            skip.add(id(sub))

    for node in ast.walk(tree):
        if isinstance(node, (ast.Raise, ast.JoinedStr)):
            mark(node)
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in _QUIET_CALLS:
                mark(node)
            for kw in node.keywords:
                if kw.arg == "metadata":  # dataclass help texts
                    mark(kw.value)
        elif isinstance(node, ast.AnnAssign):
            mark(node.annotation)
        elif isinstance(node, ast.arg) and node.annotation is not None:
            mark(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.returns is not None:
                mark(node.returns)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                mark(body[0])
    return skip


def _variants(node: ast.AST) -> Iterable[Tuple[str, ast.AST, bool]]:
    """(kind, replacement node, whether it needs parentheses) for one node."""
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            if type(op) in _COMPARE:
                new = copy.deepcopy(node)
                new.ops[i] = _COMPARE[type(op)]()
                yield "comparison", new, True
    elif isinstance(node, ast.BinOp):
        if type(node.op) in _BINOP:
            new = copy.deepcopy(node)
            new.op = _BINOP[type(node.op)]()
            yield "arithmetic", new, True
        if isinstance(node.op, (ast.Add, ast.Sub)):
            yield "dropped term", copy.deepcopy(node.left), True
    elif isinstance(node, ast.AugAssign):
        if type(node.op) in _AUG:
            new = copy.deepcopy(node)
            new.op = _AUG[type(node.op)]()
            yield "augmented", new, False
    elif isinstance(node, ast.UnaryOp):
        if isinstance(node.op, (ast.USub, ast.Not)):
            yield "unary", copy.deepcopy(node.operand), True
    elif isinstance(node, ast.BoolOp):
        new = copy.deepcopy(node)
        new.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        yield "boolean", new, True
    elif isinstance(node, ast.Constant):
        v = node.value
        if isinstance(v, bool):
            yield "constant", ast.Constant(not v), False
        elif isinstance(v, int):
            yield "constant", ast.Constant(v + 1), False
        elif isinstance(v, float):
            yield "constant", ast.Constant(v * 2 if v else 1.0), False


def generate(path: Path, root: Path = REPO, limit: Optional[int] = None) -> List[Mutant]:
    """Every mutant of one file, in source order; each compiles and changes the syntax tree. With ``limit``, the
    first ``limit`` found in the walk (each found costs a parse of the whole file)."""
    mutants = list(itertools.islice(_walk_mutants(path, root), limit))
    mutants.sort(key=lambda m: (m.line, m.col, m.kind, m.replacement))
    return mutants


def _walk_mutants(path: Path, root: Path) -> Iterator[Mutant]:
    """The mutants of one file in the order of ``ast.walk``, found lazily."""
    source = path.read_text()
    rel = str(path.relative_to(root))
    sha = hashlib.sha1(source.encode()).hexdigest()
    tree = ast.parse(source)
    skip = _skipped_nodes(tree)
    lines = source.splitlines()
    # marked[i]: how many of the first i lines carry the no-mutate pragma (a span's check in O(1))
    marked = [0]
    for text in lines:
        marked.append(marked[-1] + (NO_MUTATE in text))
    encoded = [text.encode() for text in source.splitlines(keepends=True)]  # offsets are in UTF-8 bytes
    original_dump = ast.dump(tree)
    for node in ast.walk(tree):
        if id(node) in skip or not hasattr(node, "lineno") or node.end_lineno is None:
            continue
        if marked[node.end_lineno] - marked[node.lineno - 1]:
            continue
        variants = list(_variants(node))
        if not variants:
            continue
        first, last = node.lineno - 1, node.end_lineno - 1  # the node's source text, as ast.get_source_segment
        segment = (encoded[first][node.col_offset:node.end_col_offset] if first == last else
                   encoded[first][node.col_offset:] + b"".join(encoded[first + 1:last])
                   + encoded[last][:node.end_col_offset]).decode()
        for kind, new, parens in variants:
            text = ast.unparse(new)
            text = f"({text})" if parens else text
            m = Mutant(rel, node.lineno, node.col_offset, node.end_lineno, node.end_col_offset, kind,
                       segment, text, lines[node.lineno - 1].strip(), sha)
            try:
                mutated = ast.parse(m.apply(source))
            except SyntaxError:
                continue
            if ast.dump(mutated) != original_dump:
                yield m


def sample(mutants: List[Mutant], n: Optional[int], seed: int = 0) -> List[Mutant]:
    """At most n mutants, drawn reproducibly (the same draw for the same file and seed), in source order."""
    if n is None or len(mutants) <= n:
        return list(mutants)
    rng = random.Random(f"{seed}|{mutants[0].path}|{mutants[0].file_sha}")
    return sorted(rng.sample(mutants, n), key=lambda m: (m.line, m.col, m.kind, m.replacement))


# ---- running ------------------------------------------------------------------------------------------------
def make_copy(dest: Path, root: Path = REPO, commit: str = "HEAD", files: Optional[Dict[str, str]] = None) -> str:
    """Write the tree of ``commit`` under dest (``git archive``), or the given {path: text} files; returns the
    commit's hash (or "files")."""
    dest.mkdir(parents=True, exist_ok=True)
    if files is not None:
        for rel, text in files.items():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            (dest / rel).write_text(text)
        return "files"
    sha = subprocess.run(["git", "-C", str(root), "rev-parse", commit], check=True, capture_output=True,
                         text=True).stdout.strip()
    archive = subprocess.run(["git", "-C", str(root), "archive", sha], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return sha


def copy_env(copy_root: Path) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env.update(PYTHONPATH=str(copy_root), OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1",
               PYTHONWARNINGS="ignore")
    return env


def check_imports_from(copy_root: Path, packages: Sequence[str]) -> None:
    """Fail unless the copy's packages are the ones its tests import (not the working tree's editable install)."""
    code = "import importlib, sys; print('\\n'.join(importlib.import_module(p).__file__ for p in sys.argv[1:]))"
    out = subprocess.run([sys.executable, "-c", code, *packages], cwd=copy_root, env=copy_env(copy_root),
                         capture_output=True, text=True, check=True).stdout.split()
    outside = [f for f in out if not Path(f).resolve().is_relative_to(copy_root.resolve())]
    if outside:
        raise RuntimeError(f"the copy's tests would import {outside}, not the copy under {copy_root}")


def run_tests(copy_root: Path, selection: Sequence[str], timeout: float) -> Tuple[str, float, str]:
    """Run the selection in the copy: ("passed" | "failed" | "timeout", seconds, last lines of output)."""
    start = time.monotonic()
    tail = ""
    for group in pytest_argv(selection):
        left = timeout - (time.monotonic() - start)
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", MARKS, *group]
        try:
            proc = subprocess.run(cmd, cwd=copy_root, env=copy_env(copy_root), capture_output=True, text=True,
                                  timeout=max(left, 1))
        except subprocess.TimeoutExpired:
            return "timeout", time.monotonic() - start, tail
        tail = proc.stdout[-1500:]
        if proc.returncode == 5:  # nothing collected: a selection error, not a verdict
            raise RuntimeError(f"no tests selected by {group}:\n{tail}")
        if proc.returncode != 0:
            return "failed", time.monotonic() - start, tail
    return "passed", time.monotonic() - start, tail


def load_results(path: Path) -> Dict[str, dict]:
    results = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                results[rec["key"]] = rec
    return results


def load_equivalent(out: Path) -> Dict[str, str]:
    """out/equivalent.json, written by hand: {equivalence key: why that survivor is equivalent} ({} if absent)."""
    path = out / "equivalent.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def run_check(modules: Sequence[str], out: Path, max_per_module: Optional[int] = None, seed: int = 0,
              timeout: Optional[float] = None, root: Path = REPO, commit: str = "HEAD",
              test_map: Optional[Dict[str, Optional[List[str]]]] = None, files: Optional[Dict[str, str]] = None,
              rerun_survivors: bool = False, log=print) -> Dict[str, dict]:
    """Run the mutants of ``modules`` (paths relative to root) and append their results to out/results.jsonl;
    returns every recorded result by key. ``files`` replaces the git copy (tests of this module)."""
    test_map = TEST_MAP if test_map is None else test_map
    out.mkdir(parents=True, exist_ok=True)
    results_path = out / "results.jsonl"
    results = load_results(results_path)
    equivalent = load_equivalent(out)  # survivors judged equivalent are not rerun: no test can kill them
    with tempfile.TemporaryDirectory(prefix="pe_mutation_") as tmp:
        copy_root = Path(tmp) / "repo"
        source_id = make_copy(copy_root, root, commit, files)
        check_imports_from(copy_root, sorted({m.split("/")[0] for m in modules}))
        baselines: Dict[tuple, Tuple[str, float, str]] = {}
        for module in modules:
            selection = test_map.get(module)
            if selection is None:
                log(f"{module}: not run ({NOT_RUN.get(module, 'no tests mapped')})")
                continue
            target = copy_root / module
            if not target.is_file():
                log(f"{module}: not in the copied tree ({source_id}); skipped")
                continue
            original = target.read_text()
            mutants = sample(generate(target, copy_root), max_per_module, seed)
            todo = [m for m in mutants if m.key not in results
                    or (rerun_survivors and results[m.key]["status"] == "survived"
                        and _eq_key(results[m.key]) not in equivalent)]
            if not todo:
                log(f"{module}: {len(mutants)} mutants already recorded")
                continue
            if tuple(selection) not in baselines:  # the unmutated tests, once per selection
                baselines[tuple(selection)] = run_tests(copy_root, selection, timeout=timeout or 1800)
            status, base_s, tail = baselines[tuple(selection)]
            if status != "passed":
                log(f"{module}: its tests do not pass unmutated ({status}); skipped\n{tail}")
                continue
            limit = timeout or max(60.0, 3 * base_s)
            log(f"{module}: {len(todo)} of {len(mutants)} mutants to run (tests {base_s:.0f}s unmutated, "
                f"timeout {limit:.0f}s)")
            for m in todo:
                target.write_text(m.apply(original))
                try:
                    status, secs, _ = run_tests(copy_root, selection, limit)
                finally:
                    target.write_text(original)
                verdict = "survived" if status == "passed" else "killed"
                rec = {"key": m.key, "module": module, "status": verdict, "how": status, "seconds": round(secs, 1),
                       "source": source_id, **asdict(m), "change": m.change}
                results[m.key] = rec
                with results_path.open("a") as f:
                    f.write(json.dumps(rec) + "\n")
                log(f"  {verdict:8s} {module}:{m.line} {m.kind}: {m.change}  ({secs:.0f}s)")
    return results


# ---- the record -------------------------------------------------------------------------------------------
def current(results: Dict[str, dict], root: Path = REPO) -> Tuple[Dict[str, dict], Dict[str, int]]:
    """The results of mutants of each file as it is now (its content's hash, ``file_sha``), and the count of
    superseded ones per file (mutants of an earlier version: that code is gone, and the file's sample is drawn
    anew, so ``run_check`` records its new mutants on the next run)."""
    shas: Dict[str, Optional[str]] = {}
    kept, superseded = {}, {}
    for key, rec in results.items():
        if rec["path"] not in shas:
            f = root / rec["path"]
            shas[rec["path"]] = hashlib.sha1(f.read_text().encode()).hexdigest() if f.is_file() else None
        if shas[rec["path"]] == rec["file_sha"]:
            kept[key] = rec
        else:
            superseded[rec["path"]] = superseded.get(rec["path"], 0) + 1
    return kept, superseded


def summarize(results: Dict[str, dict], equivalent: Dict[str, str]) -> Tuple[List[dict], str]:
    """Per-module rows (mutants, killed, survived, equivalent, kill rate) and the markdown record."""
    by_module: Dict[str, List[dict]] = {}
    for rec in results.values():
        by_module.setdefault(rec["module"], []).append(rec)
    rows, survivors = [], []
    for module in sorted(by_module):
        recs = by_module[module]
        killed = sum(r["status"] == "killed" for r in recs)
        surv = [r for r in recs if r["status"] == "survived"]
        eq = [r for r in surv if _eq_key(r) in equivalent]
        rows.append({"module": module, "mutants": len(recs), "killed": killed, "survived": len(surv),
                     "equivalent": len(eq), "kill_rate": killed / len(recs),
                     # killed / (mutants - equivalent); None when every mutant is an equivalent survivor
                     "kill_rate_non_equivalent": killed / (len(recs) - len(eq)) if len(recs) > len(eq) else None})
        survivors += sorted(surv, key=lambda r: (r["line"], r["col"]))
    # one total per package (pe_plugin/encodings, ...): the figure the project's goal is stated for
    for package in sorted({r["module"].rsplit("/", 1)[0] for r in rows}):
        mine = [r for r in rows if r["module"].rsplit("/", 1)[0] == package]
        n, k, e = (sum(r[c] for r in mine) for c in ("mutants", "killed", "equivalent"))
        rows.append({"module": f"{package}/ (all)", "mutants": n, "killed": k, "survived": sum(r["survived"] for r in mine),
                     "equivalent": e, "kill_rate": k / n, "kill_rate_non_equivalent": k / (n - e) if n > e else None})

    def rate(x):
        return "n/a" if x is None else f"{100 * x:.0f}%"
    lines = [markdown_table(["module", "mutants", "killed", "survived", "of which equivalent", "kill rate",
                             "kill rate (equivalent excluded)"],
                            [[r["module"], str(r["mutants"]), str(r["killed"]), str(r["survived"]), str(r["equivalent"]),
                              rate(r["kill_rate"]), rate(r["kill_rate_non_equivalent"])]
                             for r in rows], "lrrrrrr", compact_rule=True)]
    lines += ["", "## Survivors", ""]
    if not survivors:
        lines.append("None.")
    for r in survivors:
        why = equivalent.get(_eq_key(r))
        verdict = f"equivalent: {why}" if why else "NOT KILLED (a gap in the tests)"
        lines.append(f"* `{r['path']}:{r['line']}` ({r['kind']}) `{_one_line(r['original'])}` -> "
                     f"`{r['replacement']}`: {verdict}")
    return rows, "\n".join(lines) + "\n"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _eq_key(rec: dict) -> str:
    return f"{rec['path']}|{rec['line_text']}|{_one_line(rec['original'])} -> {rec['replacement']}"


def all_modules(root: Path = REPO) -> List[str]:
    return sorted(str(p.relative_to(root)) for pkg in PACKAGES for p in (root / pkg).glob("*.py"))


def main(argv=None) -> int:
    """``scripts/mutation_check.py``: the command line of the check (its usage is in docs/testing.md)."""
    ap = argparse.ArgumentParser(description="Plant small bugs one at a time in a copy of the repository and run the "
                                             "tests that cover each module (docs/testing.md).")
    ap.add_argument("--modules", nargs="*", default=None,
                    help="modules to mutate: paths or globs relative to the repository (default: PACKAGES)")
    ap.add_argument("--max-per-module", type=int, default=None, help="a reproducible sample of at most N mutants each")
    ap.add_argument("--seed", type=int, default=0, help="seed of the sample")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds per mutant (default: 3x the unmutated tests' time, at least 60)")
    ap.add_argument("--commit", default="HEAD", help="the commit copied and mutated (the working tree never is)")
    ap.add_argument("--out", type=Path, default=REPO / "examples" / "mutation",
                    help="results.jsonl (appended, resumable), summary.md, and equivalent.json (read)")
    ap.add_argument("--rerun-survivors", action="store_true", help="run the recorded survivors again (new tests)")
    ap.add_argument("--list", action="store_true", help="print the mutants that would run, and stop")
    ap.add_argument("--summary-only", action="store_true", help="only rewrite summary.md from results.jsonl")
    args = ap.parse_args(argv)

    every = all_modules()
    modules = every if not args.modules else list(dict.fromkeys(  # in the order the patterns are given
        m for pat in args.modules for m in every
        if fnmatch.fnmatch(m, pat) or m.startswith(pat.rstrip("/") + "/") or m == pat))
    if args.modules and not modules:
        ap.error(f"no module matches {args.modules}")
    if args.list:
        for module in modules:
            for m in sample(generate(REPO / module), args.max_per_module, args.seed):
                print(f"{module}:{m.line} {m.kind}: {m.change}")
        return 0
    if not args.summary_only:
        run_check(modules, args.out, args.max_per_module, args.seed, args.timeout, commit=args.commit,
                           rerun_survivors=args.rerun_survivors, log=lambda s: print(s, flush=True))
    equivalent = load_equivalent(args.out)
    results, superseded = current(load_results(args.out / "results.jsonl"))
    rows, text = summarize(results, equivalent)
    old = "".join(f"\n* `{path}`: {n}" for path, n in sorted(superseded.items()))
    (args.out / "summary.md").write_text(
        "# Mutation check\n\nWritten by `scripts/mutation_check.py` (docs/testing.md): each row counts the mutants run "
        "in that module, one planted change at a time, against the tests `pe_tools/mutation.TEST_MAP` names for it.\n\n"
        + text + (f"\nNot counted: mutants of earlier versions of a file (results.jsonl keeps them; the file has "
                  f"changed since, and its new sample is what counts):\n{old}\n" if old else ""))
    for r in rows:
        print(f"{r['module']:45s} {r['killed']:3d}/{r['mutants']:3d} killed  {100 * r['kill_rate']:5.1f}%  "
              f"survived {r['survived']} (equivalent {r['equivalent']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

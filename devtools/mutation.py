"""A mutation check: plant one small bug at a time in a module, run the tests that execute that module, and record
whether they caught it (``scripts/mutation_check.py``; docs/dev/testing.md). A development tool of the checkout, not
installed (``devtools/``).

Mutants (``generate``), one change each, made on the module's syntax tree and written back as source text.
Mechanical classes:
  comparison   ==  !=  is  is not  in  not in   each turned into its neighbour (== to !=, in to not in, ...)
  arithmetic   + and - swapped, * and / swapped, // to /, % to //, ** to *; a + b and a - b lose their right term
  augmented    += and -= swapped, *= and /= swapped
  unary        -x to x, not x to x
  boolean      and / or swapped
  constant     an integer n to n + 1 (0 to 1, 1 to 2: off by one), a float x to 2x (0.0 to 1.0), True / False swapped
Hand-written classes, the mistakes a person makes (issue 57):
  boundary     <  <=  >  >=  at a limit: < to <=, > to >=, and back
  guard        a condition dropped from a guard: one operand of ``a and b`` / ``a or b`` left out; an ``if``'s
               condition removed (``if True:``)
  key          a key dropped from a comparison: one element left out of the tuples compared (``(a, b) == (c, d)``
               to ``(a,) == (c,)``), of a dict literal compared, of a ``lambda``'s key tuple, or of a module-level
               tuple of names called ``*KEY*`` / ``*IDENTITY*``
  quoting      a quoting function dropped: ``q(x)`` / ``quote(x)`` / ``shlex.quote(x)`` to ``x`` (inside f-strings
               too), ``shlex.join(x)`` to ``' '.join(x)``
  axis         an axis swapped: two neighbouring sizes or axes of ``view``/``reshape``/``permute``/``expand``
               exchanged; the second axis of ``transpose``/``swapaxes``/``movedim`` or a ``dim=``/``axis=`` (or the
               positional dim of ``sum``, ``softmax``, ``cat``, ...) moved to its neighbour
  dtype        a cast dropped: ``x.float()`` / ``.double()`` / ``.half()`` / ``.long()`` / ... to ``x``, ``x.to(DTYPE)``
               / ``x.type_as(y)`` to ``x``, a ``dtype=`` argument left out
The reviewer's classes, drawn at every site (never sampled: ``DRAW_ALL``; ``_reviewer_variants`` says each):
  refusal      each and/or term of a guard whose branch refuses (raise, exit, an error returned) left out, nested
               ones too; a one-term refusal dropped (``if False``)
  per-input    a check applied to several inputs skips one: an element of the list it loops over or is given left
               out (``[baseline] + systems`` to ``systems``), a checking loop over ``xs`` run over
               ``list(xs)[1:]``, one of several calls of one check_* in a block dropped
  env          an environment variable swapped with a sibling (``ENV_SIBLINGS``: SLURM_LOCALID / SLURM_PROCID, ...)
  language     a language or locale argument dropped (``lang=lang``) or swapped (``src_lang`` / ``tgt_lang``)
  except       an except tuple narrowed (``except (OSError, ValueError)`` to ``except (OSError,)``)
  status       a status code check dropped (``resp.status != 206`` to False, ``returncode == 0`` to True)
Strings are never changed, nor anything inside a ``raise`` (messages), a logging / print / warnings call, an
annotation or a docstring; inside an f-string only its quoting calls are; a line with ``# pragma: no mutate`` is
skipped. Each mutant's source is parsed again and must equal the tree with that one node replaced.

Which tests run for a module (``test_map``): the tests that execute it, recorded by running the fast tier under a
call tracer (``devtools/trace_tests.py``; ``scripts/mutation_check.py --trace``, kept in
``examples/mutation/test_map.json``), fastest first; where no test executes it in the tests' own process, the test
files that import it or name it (a tool run as a subprocess). Each mutant runs in a temporary copy of the
repository (``git archive`` of a commit, HEAD by default: the working tree is never written), with that copy first
on the import path (checked before any mutant runs), with ``-x`` and a timeout. A mutant is *killed* when those
tests fail (or do not import, or time out) and *survives* when they pass; the unmutated module must pass them first
(else its mutants are not run). Results are appended to ``results.jsonl`` as they come (an interrupted run
resumes where it stopped: a mutant is keyed by its file's content, its place and its change), and ``summary.md``
gives the kill rate per module and per package and class, and every survivor, with the reason it is equivalent
where ``equivalent.json`` explains it (keys: ``path|line text|change``, so they survive edits elsewhere in the
file).
"""
import argparse
import ast
import builtins
import copy
import fnmatch
import hashlib
import json
import os
import random
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from pe_tools.tables import markdown_table

REPO = Path(__file__).resolve().parents[1]
# every package of the two (a folder with an __init__.py), found rather than listed: a new one is mutated too
PACKAGES = tuple(sorted(str(init.parent.relative_to(REPO)) for top in ("pe_plugin", "pe_tools")
                        for init in (REPO / top).rglob("__init__.py")))
NO_MUTATE = "pragma: no mutate"

# ---- which tests execute which module ------------------------------------------------------------------------
# Derived, never kept by hand: examples/mutation/test_map.json holds, per module, the node ids of the fast-tier tests
# that executed it (devtools/trace_tests.py) and the test files that imported it; derived_test_map() adds the test files
# that name a module they run in a subprocess. MARKS: the fast tier, and the slow tests marked `mutation` (they kill
# mutants the fast tier misses: the partial benchmarks, the srun training) whose recorded call is under
# MUTATION_BUDGET_S; those over it (tests/test_slurm.py's trainings, a minute each) are deselected, so that a module's
# mutant is judged in minutes.
MARKS = "not slow or mutation"
FAST_TIER = "not slow"  # with --fast-tier, a survivor of its selection is run against the whole of it
MUTATION_BUDGET_S = 30.0
MAP_FILE = REPO / "examples" / "mutation" / "test_map.json"
NOT_RUN = {"pe_plugin/kernels/shaw_rpe.py": "Triton kernels: their tests need a GPU (skipped on CPU)"}


def dotted(module: str) -> str:
    """pe_tools/recipes/slurm/job.py -> pe_tools.recipes.slurm.job (a package's __init__.py -> the package)."""
    name = module[:-3].replace("/", ".")
    return name[: -len(".__init__")] if name.endswith(".__init__") else name


def recorded_seconds(root: Path = REPO) -> Dict[str, float]:
    """{node id: seconds of its call} from tests/durations.log (unknown tests: absent)."""
    out = {}
    log = root / "tests" / "durations.log"
    if log.is_file():
        for line in log.read_text(encoding="utf-8").splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[1] == "call" and parts[0].endswith("s"):
                try:
                    out[parts[2]] = float(parts[0][:-1])
                except ValueError:
                    pass
    return out


def naming_files(module: str, root: Path = REPO) -> List[str]:
    """Test files that name the module (its dotted name, or its path): those that run it as a tool."""
    name, path = dotted(module), module
    return sorted(f"tests/{p.name}" for p in (root / "tests").glob("test_*.py")
                  if name in (text := p.read_text(encoding="utf-8")) or path in text)


def derived_test_map(trace: Optional[dict] = None, root: Path = REPO) -> Dict[str, Optional[List[str]]]:
    """module -> pytest arguments: the node ids of the tests that executed it, fastest first (by
    tests/durations.log); else the test files that name it or import it. None for the modules of NOT_RUN."""
    if trace is None:
        trace = json.loads(MAP_FILE.read_text()) if MAP_FILE.is_file() else {"tests": {}, "imports": {}}
    seconds = recorded_seconds(root)
    out: Dict[str, Optional[List[str]]] = {}
    for module in all_modules(root):
        if module in NOT_RUN:
            out[module] = None
            continue
        nodes = [n for n in trace["tests"].get(module, []) if (root / n.split("::")[0]).is_file()]
        if nodes:
            out[module] = sorted(nodes, key=lambda n: (seconds.get(n, 1e9), n))
            continue
        files = naming_files(module, root) or [f for f in trace["imports"].get(module, []) if (root / f).is_file()]
        out[module] = files or None
    return out


def pytest_argv(selection: Sequence[str]) -> List[List[str]]:
    """A test map entry as one pytest argument list per (files, -k) group: ``-k`` applies to the files before it,
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


_COMPARE = {ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn,
            ast.NotIn: ast.In}
_BOUNDARY = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt}
_BINOP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Div,
          ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult}
_AUG = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult}
_QUIET_CALLS = {"print", "debug", "info", "warning", "warn", "error", "exception", "critical", "log"}
# the reviewer's classes (issue 64): every site of each is drawn, never a sample (DRAW_ALL)
REVIEWER = ("refusal", "per-input", "env", "language", "except", "status")
HAND_WRITTEN = ("boundary", "guard", "key", "quoting", "axis", "dtype") + REVIEWER
DRAW_ALL = frozenset(REVIEWER)
# the hand-written classes' sites
_QUOTES = {"q", "quote"}  # q(x), quote(x), shlex.quote(x)
_ORDER_CALLS = {"view", "reshape", "permute", "expand", "repeat"}  # sizes / axes in order: neighbours exchanged
_PAIR_CALLS = {"transpose", "swapaxes", "movedim"}  # (a, b): b moved to its neighbour
_DIM_FIRST = {"sum", "mean", "softmax", "log_softmax", "unsqueeze", "squeeze", "size", "cumsum", "argmax", "amax",
              "logsumexp", "flatten", "gather", "index_select", "narrow", "select"}  # the first argument is a dim
_DIM_SECOND = {"cat", "stack"}  # the second argument is a dim
_CASTS = {"float", "double", "half", "bfloat16", "long", "int", "bool"}  # x.float() ...
_KEY_NAMES = ("KEY", "IDENTITY")


def _skipped_nodes(tree: ast.AST, fstrings: bool = True) -> set:
    """ids of the nodes whose subtrees are never mutated (messages, logging, annotations, docstrings, and with
    ``fstrings`` f-strings)."""
    skip = set()

    def mark(node):
        for sub in ast.walk(node):
            skip.add(id(sub))

    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) or (fstrings and isinstance(node, ast.JoinedStr)):
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


def _variants(node: ast.AST, parent: Optional[ast.AST] = None) -> Iterable[Tuple[str, ast.AST, bool]]:
    """(kind, replacement node, whether it needs parentheses) for one node (``parent``: the node holding it)."""
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            for table, kind in ((_COMPARE, "comparison"), (_BOUNDARY, "boundary")):
                if type(op) in table:
                    new = copy.deepcopy(node)
                    new.ops[i] = table[type(op)]()
                    yield kind, new, True
        yield from _dropped_keys(node)
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
        for i in range(len(node.values)):  # one condition of the guard left out
            rest = [copy.deepcopy(v) for j, v in enumerate(node.values) if j != i]
            yield "guard", rest[0] if len(rest) == 1 else ast.BoolOp(op=copy.deepcopy(node.op), values=rest), True
    elif isinstance(node, ast.Constant):
        v = node.value
        if isinstance(v, bool):
            yield "constant", ast.Constant(not v), False
        elif isinstance(v, int):
            yield "constant", ast.Constant(v + 1), False
        elif isinstance(v, float):
            yield "constant", ast.Constant(v * 2 if v else 1.0), False
    elif isinstance(node, ast.Call):
        yield from _call_variants(node)
    elif isinstance(node, ast.Lambda) and isinstance(node.body, ast.Tuple) and len(node.body.elts) > 1:
        for i in range(len(node.body.elts)):  # a sort / grouping key without one of its parts
            new = copy.deepcopy(node)
            del new.body.elts[i]
            yield "key", new, True
    elif isinstance(node, ast.Assign) and isinstance(node.value, (ast.Tuple, ast.List)) and len(node.value.elts) > 1 \
            and any(isinstance(t, ast.Name) and any(k in t.id for k in _KEY_NAMES) for t in node.targets):
        for i in range(len(node.value.elts)):  # IDENTITY = ("pair", "size", ...) without one of its keys
            new = copy.deepcopy(node)
            del new.value.elts[i]
            yield "key", new, False
    if isinstance(parent, (ast.If, ast.While)) and parent.test is node and not _is_const(node):
        yield "guard", ast.Constant(True), False  # the condition removed: the branch always taken


def _is_const(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant)


def _int_value(node: ast.AST) -> Optional[int]:
    """The integer a literal (``3``, ``-1``) stands for, else None."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and _int_value(node.operand) is not None:
        return -_int_value(node.operand)
    return None


def _neighbour(axis: int) -> int:
    """The axis a slip of the hand gives instead: -1 -> -2, 0 -> 1, 2 -> 1."""
    return axis - 1 if axis != 0 else 1


def _axis_node(axis: int) -> ast.AST:
    return ast.UnaryOp(op=ast.USub(), operand=ast.Constant(-axis)) if axis < 0 else ast.Constant(axis)


def _call_variants(node: ast.Call) -> Iterable[Tuple[str, ast.AST, bool]]:
    func = node.func
    attr = func.attr if isinstance(func, ast.Attribute) else None
    name = func.id if isinstance(func, ast.Name) else attr
    # quoting: q(x) / quote(x) / shlex.quote(x) -> x; shlex.join(x) -> ' '.join(x)
    if name in _QUOTES and len(node.args) == 1 and not node.keywords:
        yield "quoting", copy.deepcopy(node.args[0]), True
    if attr == "join" and isinstance(func.value, ast.Name) and func.value.id == "shlex" and len(node.args) == 1:
        yield "quoting", ast.Call(func=ast.Attribute(value=ast.Constant(" "), attr="join", ctx=ast.Load()),
                                  args=[copy.deepcopy(node.args[0])], keywords=[]), False
    # dtype: a cast dropped
    if attr in _CASTS and not node.args and not node.keywords:
        yield "dtype", copy.deepcopy(func.value), True
    if attr in ("to", "type", "type_as") and len(node.args) == 1 and not node.keywords:
        arg = ast.unparse(node.args[0])
        if attr == "type_as" or "dtype" in arg or arg.startswith("torch."):
            yield "dtype", copy.deepcopy(func.value), True
    for i, kw in enumerate(node.keywords):
        if kw.arg == "dtype":
            new = copy.deepcopy(node)
            del new.keywords[i]
            if attr == "to" and not new.args and not new.keywords:
                yield "dtype", copy.deepcopy(func.value), True
            else:
                yield "dtype", new, False
    # axis: neighbouring sizes / axes exchanged, or an axis moved to its neighbour
    if attr in _ORDER_CALLS:
        args = node.args[0].elts if len(node.args) == 1 and isinstance(node.args[0], ast.Tuple) else node.args
        for i in range(len(args) - 1):
            if ast.dump(args[i]) != ast.dump(args[i + 1]) and not any(isinstance(a, ast.Starred) for a in args[i:i + 2]):
                new = copy.deepcopy(node)
                new_args = new.args[0].elts if args is not node.args else new.args
                new_args[i], new_args[i + 1] = new_args[i + 1], new_args[i]
                yield "axis", new, False
    positions = ([1] if attr in _PAIR_CALLS else [0] if attr in _DIM_FIRST else [1] if attr in _DIM_SECOND else [])
    for pos in positions:
        if pos < len(node.args) and (axis := _int_value(node.args[pos])) is not None:
            other = _int_value(node.args[0]) if attr in _PAIR_CALLS else None
            moved = _neighbour(axis)
            if moved == other:  # transpose(0, 1) -> transpose(0, 2), not the identity transpose(0, 0)
                moved = axis + 1 if axis >= 0 else axis - 1
            new = copy.deepcopy(node)
            new.args[pos] = _axis_node(moved)
            yield "axis", new, False
    for i, kw in enumerate(node.keywords):
        if kw.arg in ("dim", "axis") and (axis := _int_value(kw.value)) is not None:
            new = copy.deepcopy(node)
            new.keywords[i].value = _axis_node(_neighbour(axis))
            yield "axis", new, False


def _dropped_keys(node: ast.Compare) -> Iterable[Tuple[str, ast.AST, bool]]:
    """A key left out of a comparison of tuples (the same element of each) or of a dict literal."""
    operands = [node.left] + list(node.comparators)
    tuples = [o for o in operands if isinstance(o, ast.Tuple)]
    if tuples and len(tuples) == len(operands) and len({len(t.elts) for t in tuples}) == 1 and len(tuples[0].elts) > 1:
        for i in range(len(tuples[0].elts)):
            new = copy.deepcopy(node)
            for o in [new.left] + list(new.comparators):
                del o.elts[i]
            yield "key", new, True
    for k, o in enumerate(operands):
        if isinstance(o, ast.Dict) and len(o.keys) > 1 and None not in o.keys:
            for i in range(len(o.keys)):
                new = copy.deepcopy(node)
                d = new.left if k == 0 else new.comparators[k - 1]
                del d.keys[i], d.values[i]
                yield "key", new, True


# ---- the reviewer's classes: what a careful reviewer plants, at every site ----------------------------------------
# Environment variables that name a sibling of another (a slip between them is a wrong rank, job or node, seen only
# on a cluster): each is swapped with every other of its group.
ENV_SIBLINGS = (("SLURM_LOCALID", "SLURM_PROCID", "SLURM_NODEID"), ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID"),
                ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_JOB_ID"), ("SLURM_NTASKS", "SLURM_NNODES"),
                ("SLURM_JOB_NODELIST", "SLURMD_NODENAME"), ("SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE"),
                ("LOCAL_RANK", "RANK"), ("LOCAL_WORLD_SIZE", "WORLD_SIZE"))
_LANG_KEYWORDS = {"lang", "language", "locale", "src_lang", "tgt_lang", "trg_lang", "source_lang", "target_lang"}
_LANG_SWAPS = {"src_lang": ("tgt_lang", "trg_lang"), "tgt_lang": ("src_lang",), "trg_lang": ("src_lang",),
               "source_lang": ("target_lang",), "target_lang": ("source_lang",)}
_STATUS_NAMES = {"status", "status_code", "returncode", "code", "getcode", "exit_code"}
_CHECK_PREFIXES = ("check", "_check", "require", "validate", "ensure", "verify", "refuse")
_REFUSING_CALLS = {"exit", "_exit", "fail", "error", "abort"}  # sys.exit, pytest's fail, argparse's ap.error


def _siblings(name: str) -> List[str]:
    return [other for group in ENV_SIBLINGS if name in group for other in group if other != name]


def _call_name(node: ast.AST) -> str:
    if not isinstance(node, ast.Call):
        return ""
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _is_check_call(node: ast.AST) -> bool:
    return _call_name(node).lower().startswith(_CHECK_PREFIXES)


def _own_statements(body: Sequence[ast.stmt]) -> Iterator[ast.AST]:
    """The nodes of a block, not entering nested functions, classes or lambdas (another scope's refusals)."""
    todo = list(body)
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))


def _refuses(body: Sequence[ast.stmt]) -> bool:
    """Whether a branch refuses: its own statements (not a nested block's) raise, exit, fail, or return an error
    (a message, an f-string, a non-zero exit code, or a call named *error* / *problem* / *fail*)."""
    for stmt in body:
        if isinstance(stmt, ast.Raise):
            return True
        if isinstance(stmt, ast.Expr) and _call_name(stmt.value) in _REFUSING_CALLS:
            return True
        if isinstance(stmt, ast.Return) and stmt.value is not None:
            v = stmt.value
            if isinstance(v, ast.JoinedStr) or (isinstance(v, ast.Constant) and (
                    isinstance(v.value, str) or (type(v.value) is int and v.value != 0))):
                return True
            if any(w in _call_name(v).lower() for w in ("error", "problem", "fail", "refus")):
                return True
    return False


def _loop_checks(body: Sequence[ast.stmt]) -> bool:
    """Whether a loop's body checks each input: it raises, exits or calls a check (check_*, require*, ...)."""
    return any(isinstance(n, ast.Raise) or (isinstance(n, ast.Expr) and (_is_check_call(n.value) or
                                                                           _call_name(n.value) in _REFUSING_CALLS))
               for n in _own_statements(body))


def _bool_terms(test: ast.AST) -> Iterator[Tuple[ast.AST, ast.AST]]:
    """(BoolOp, parent) for every and/or inside a condition, nested ones included (not inside lambdas or calls'
    comprehensions: another condition)."""
    todo = [(test, None)]
    while todo:
        node, parent = todo.pop()
        if isinstance(node, (ast.Lambda, ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp)):
            continue
        if isinstance(node, ast.BoolOp):
            yield node, parent
        todo.extend((child, node) for child in ast.iter_child_nodes(node))


def _without(node: ast.BoolOp, i: int) -> ast.AST:
    rest = [copy.deepcopy(v) for j, v in enumerate(node.values) if j != i]
    return rest[0] if len(rest) == 1 else ast.BoolOp(op=copy.deepcopy(node.op), values=rest)


def _caught_by_another(elts: Sequence[ast.AST], i: int) -> bool:
    """Whether the builtin exception elts[i] is a subclass of another builtin of the tuple (UnicodeDecodeError beside
    ValueError, FileNotFoundError beside OSError): leaving it out catches the same exceptions, so it is no mutant."""
    def builtin(node):
        cls = getattr(builtins, node.id, None) if isinstance(node, ast.Name) else None
        return cls if isinstance(cls, type) and issubclass(cls, BaseException) else None
    mine = builtin(elts[i])
    return mine is not None and any(j != i and (other := builtin(e)) is not None and issubclass(mine, other)
                                    for j, e in enumerate(elts))


def _one_input_fewer(it: ast.AST) -> List[ast.AST]:
    """The inputs of a loop or a check with one of them left out: each element of a list / tuple literal, each side
    of ``[a] + b``; else None (the caller drops the first input)."""
    if isinstance(it, (ast.List, ast.Tuple)) and len(it.elts) > 1 and not any(isinstance(e, ast.Starred)
                                                                                for e in it.elts):
        out = []
        for i in range(len(it.elts)):
            new = copy.deepcopy(it)
            del new.elts[i]
            out.append(new)
        return out
    if isinstance(it, ast.BinOp) and isinstance(it.op, ast.Add) and any(
            isinstance(side, (ast.List, ast.Tuple)) for side in (it.left, it.right)):
        return [copy.deepcopy(it.right), copy.deepcopy(it.left)]
    return []


def _reviewer_variants(tree: ast.AST) -> Dict[int, List[Tuple[str, ast.AST, bool]]]:
    """{id(node): [(class, replacement, needs parentheses)]}: the reviewer's classes at every site of a module.

    refusal    a guard whose branch refuses (raise, exit, an error returned): each and/or term of its condition left
               out, nested ones too (``d < 16 or d & (d - 1)`` to ``d < 16``); a one-term condition dropped
               (``if False``)
    per-input  a check applied to several inputs, for one of them fewer: an element of the list it loops over or is
               given left out (``[baseline] + systems`` to ``systems``), a checking loop over ``xs`` run over
               ``list(xs)[1:]``, one of several calls of the same check_* in a block dropped
    env        an environment variable swapped with a sibling (ENV_SIBLINGS: SLURM_LOCALID and SLURM_PROCID, ...)
    language   a language or locale argument dropped (``lang=lang`` left out) or swapped (``src_lang`` for
               ``tgt_lang``, the two of one call exchanged)
    except     an except tuple narrowed: one exception of ``except (A, B)`` left out
    status     a status code check dropped: ``resp.status != 206`` to False, ``proc.returncode == 0`` to True (an
               ordering check to each)
    """
    out: Dict[int, List[Tuple[str, ast.AST, bool]]] = {}

    def add(node, kind, new, parens=True):
        out.setdefault(id(node), []).append((kind, new, parens))

    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    attrs = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _refuses(node.body) and "__main__" not in ast.unparse(node.test):
            if isinstance(node.test, ast.BoolOp) or any(True for _ in _bool_terms(node.test)):
                for boolop, _ in _bool_terms(node.test):
                    for i in range(len(boolop.values)):
                        add(boolop, "refusal", _without(boolop, i))
            else:
                add(node.test, "refusal", ast.Constant(False), False)
        elif isinstance(node, (ast.For, ast.AsyncFor)) and _loop_checks(node.body):
            fewer = _one_input_fewer(node.iter)
            for new in fewer:
                add(node.iter, "per-input", new)
            if not fewer:
                add(node.iter, "per-input", ast.Subscript(
                    value=ast.Call(func=ast.Name("list", ast.Load()), args=[copy.deepcopy(node.iter)], keywords=[]),
                    slice=ast.Slice(lower=ast.Constant(1)), ctx=ast.Load()), False)
        elif isinstance(node, ast.Call):
            if _is_check_call(node):
                for arg in node.args:
                    for new in _one_input_fewer(arg):
                        add(arg, "per-input", new)
            lang = [i for i, kw in enumerate(node.keywords) if kw.arg in _LANG_KEYWORDS]
            for i in lang:
                new = copy.deepcopy(node)
                del new.keywords[i]
                add(node, "language", new, False)
            if len(lang) == 2:
                new = copy.deepcopy(node)
                a, b = lang
                new.keywords[a].value, new.keywords[b].value = new.keywords[b].value, new.keywords[a].value
                add(node, "language", new, False)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for other in _siblings(node.value):
                add(node, "env", ast.Constant(other), False)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and node.attr in _LANG_SWAPS:
            for other in _LANG_SWAPS[node.attr]:
                if other in attrs:
                    add(node, "language", ast.Attribute(value=copy.deepcopy(node.value), attr=other, ctx=ast.Load()),
                        False)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in _LANG_SWAPS:
            for other in _LANG_SWAPS[node.id]:
                if other in names:
                    add(node, "language", ast.Name(other, ast.Load()), False)
        elif isinstance(node, ast.ExceptHandler) and isinstance(node.type, ast.Tuple) and len(node.type.elts) > 1:
            for i, new in enumerate(_one_input_fewer(node.type)):
                if not _caught_by_another(node.type.elts, i):
                    add(node.type, "except", new)
        elif isinstance(node, ast.Compare) and len(node.ops) == 1:
            sides = (node.left, node.comparators[0])
            named = any((isinstance(s, ast.Attribute) and s.attr in _STATUS_NAMES) or
                        (isinstance(s, ast.Name) and s.id in _STATUS_NAMES) or _call_name(s) in _STATUS_NAMES
                        for s in sides)
            codes = any(_int_value(s) is not None or (isinstance(s, ast.Tuple) and s.elts and all(
                _int_value(e) is not None for e in s.elts)) for s in sides)
            if named and codes:
                op = node.ops[0]
                fixed = ([True] if isinstance(op, (ast.Eq, ast.In, ast.Is)) else
                         [False] if isinstance(op, (ast.NotEq, ast.NotIn, ast.IsNot)) else [True, False])
                for value in fixed:
                    add(node, "status", ast.Constant(value), False)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.For, ast.While, ast.If,
                             ast.With, ast.Try)):
            for body in (getattr(node, f, None) for f in ("body", "orelse", "finalbody")):
                if not body:
                    continue
                calls = [s for s in body if isinstance(s, ast.Expr) and _is_check_call(s.value)]
                by_name: Dict[str, List[ast.AST]] = {}
                for s in calls:
                    by_name.setdefault(_call_name(s.value), []).append(s)
                for same in by_name.values():
                    if len(same) > 1:  # one check called on several inputs: one of the calls dropped
                        for s in same:
                            add(s, "per-input", ast.Pass(), False)
    return out


def generate(path: Path, root: Path = REPO, limit: Optional[int] = None) -> List[Mutant]:
    """Every mutant of one file, in source order; each compiles and changes the syntax tree. With ``limit``, the
    first ``limit`` found in the walk (each found costs a parse of the whole file)."""
    mutants, seen = [], set()
    for m in _walk_mutants(path, root):  # one change found by two classes counts once, as the reviewer's
        if m.key not in seen:
            seen.add(m.key)
            mutants.append(m)
            if limit is not None and len(mutants) >= limit:
                break
    mutants.sort(key=lambda m: (m.line, m.col, m.kind, m.replacement))
    return mutants


def _replaced_dump(tree: ast.AST, parent: ast.AST, node: ast.AST, new: ast.AST) -> str:
    """ast.dump of the tree with ``node`` (a child of ``parent``) replaced by ``new`` (the tree is restored)."""
    for field, value in ast.iter_fields(parent):
        if value is node:
            setattr(parent, field, new)
            try:
                return ast.dump(tree)
            finally:
                setattr(parent, field, node)
        if isinstance(value, list):
            for i, item in enumerate(value):
                if item is node:
                    value[i] = new
                    try:
                        return ast.dump(tree)
                    finally:
                        value[i] = node
    raise ValueError("node not found in its parent")


def _walk_mutants(path: Path, root: Path) -> Iterator[Mutant]:
    """The mutants of one file in the order of ``ast.walk``, found lazily. Each mutant's source parses to the tree
    with exactly that node replaced (so a span read wrongly, e.g. inside an f-string, is never planted)."""
    source = path.read_text()
    rel = str(path.relative_to(root))
    sha = hashlib.sha1(source.encode()).hexdigest()
    tree = ast.parse(source)
    skip = _skipped_nodes(tree)
    skip_messages = _skipped_nodes(tree, fstrings=False)  # quoting is mutated inside f-strings too
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    lines = source.splitlines()
    # marked[i]: how many of the first i lines carry the no-mutate pragma (a span's check in O(1))
    marked = [0]
    for text in lines:
        marked.append(marked[-1] + (NO_MUTATE in text))
    encoded = [text.encode() for text in source.splitlines(keepends=True)]  # offsets are in UTF-8 bytes
    original_dump = ast.dump(tree)
    reviewer = _reviewer_variants(tree)
    for node in ast.walk(tree):
        if id(node) in skip_messages or not hasattr(node, "lineno") or node.end_lineno is None:
            continue
        if marked[node.end_lineno] - marked[node.lineno - 1]:
            continue
        parent = parents.get(id(node))
        variants = [v for v in [*reviewer.get(id(node), []), *_variants(node, parent)]
                    if id(node) not in skip or v[0] == "quoting"]
        if not variants or parent is None:
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
                mutated = ast.dump(ast.parse(m.apply(source)))
            except SyntaxError:
                continue
            if mutated != original_dump and mutated == _replaced_dump(tree, parent, node, new):
                yield m


def sample(mutants: List[Mutant], n: Optional[int], seed: int = 0) -> List[Mutant]:
    """At most n mutants, drawn reproducibly (the same draw for the same file and seed), in source order."""
    if n is None or len(mutants) <= n:
        return list(mutants)
    rng = random.Random(f"{seed}|{mutants[0].path}|{mutants[0].file_sha}")
    return sorted(rng.sample(mutants, n), key=lambda m: (m.line, m.col, m.kind, m.replacement))


def sample_per_class(mutants: List[Mutant], n: Optional[int], seed: int = 0,
                     kinds: Optional[Sequence[str]] = None) -> List[Mutant]:
    """At most n mutants of each class (of ``kinds``, default all) drawn reproducibly per file, class and seed: every
    class that has a site in the file is sampled, and the reviewer's classes (DRAW_ALL) at all their sites. In source
    order."""
    by_kind: Dict[str, List[Mutant]] = {}
    for m in mutants:
        if kinds is None or m.kind in kinds:
            by_kind.setdefault(m.kind, []).append(m)
    out = []
    for kind, group in sorted(by_kind.items()):
        if n is None or len(group) <= n or kind in DRAW_ALL:  # the reviewer's classes: every site
            out += group
        else:
            out += random.Random(f"{seed}|{group[0].path}|{group[0].file_sha}|{kind}").sample(group, n)
    return sorted(out, key=lambda m: (m.line, m.col, m.kind, m.replacement))


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


def run_tests(copy_root: Path, selection: Sequence[str], timeout: float, stop_first: bool = True,
              marks: str = MARKS) -> Tuple[str, float, str]:
    """Run the selection in the copy under ``marks``: ("passed" | "failed" | "timeout", seconds, output: its tail, or
    with ``stop_first`` False the whole of it)."""
    start = time.monotonic()
    tail = ""
    for group in pytest_argv(selection):
        left = timeout - (time.monotonic() - start)
        cmd = [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", "-m", marks,
               *deselected(copy_root), *group]
        cmd[3:3] = ["-x"] if stop_first else []
        try:
            proc = subprocess.run(cmd, cwd=copy_root, env=copy_env(copy_root), capture_output=True, text=True,
                                  timeout=max(left, 1))
        except subprocess.TimeoutExpired:
            return "timeout", time.monotonic() - start, tail
        tail = proc.stdout[-1500:] if stop_first else proc.stdout
        if proc.returncode == 5:  # nothing collected: a selection error, not a verdict
            raise RuntimeError(f"no tests selected by {group}:\n{tail}")
        if proc.returncode != 0:
            return "failed", time.monotonic() - start, tail
    return "passed", time.monotonic() - start, tail


def fast_tier_baseline(copy_root: Path, log=print) -> Optional[Tuple[float, List[str]]]:
    """The whole fast tier of the copy, unmutated: (its seconds, the pytest arguments that run it less the tests that
    fail unmutated, named in the log); None when it does not pass even so (a timeout)."""
    status, secs, output = run_tests(copy_root, ["tests"], 3600, stop_first=False, marks=FAST_TIER)
    dropped = failing_nodes(output) if status == "failed" else []
    log(f"the fast tier unmutated: {status} in {secs:.0f}s" + (f"; left out, failing unmutated: {' '.join(dropped)}"
                                                                 if dropped else ""))
    if status == "timeout" or (status == "failed" and not dropped):
        return None
    return secs, ["tests", *(x for node in dropped for x in ("--deselect", node))]


def failing_nodes(output: str) -> List[str]:
    """The node ids pytest's short summary (-rfE) names as FAILED or ERROR."""
    return sorted({line.split()[1] for line in output.splitlines()
                   if line.startswith(("FAILED ", "ERROR ")) and "::" in line.split()[1]})


def still_there(root: Path, node: str) -> bool:
    """Whether a node id of the map still names a test of the copy (its file, and a def of its function)."""
    path = root / node.split("::")[0]
    if not path.is_file():
        return False
    return "::" not in node or f"def {node.split('::')[-1].split('[')[0]}(" in path.read_text(encoding="utf-8")


def per_file(selection: List[str], k: Optional[int], files: Optional[int] = None) -> List[str]:
    """At most k node ids of each test file, spread evenly over the file's ids in the map's order (fastest first:
    the fastest, the slowest and k - 2 between, so that one parametrization does not fill the quota), of at most
    ``files`` test files (those with the most tests that execute the module); files whole."""
    if k is None and files is None:
        return selection
    by_file: Dict[str, List[str]] = {}
    for arg in selection:
        by_file.setdefault(arg.split("::")[0], []).append(arg)
    if files is not None:  # the files with the most tests executing the module (ties: the map's order)
        by_file = dict(sorted(by_file.items(), key=lambda kv: -len(kv[1]))[:files])
    k = k or max(len(ids) for ids in by_file.values())
    keep = set()
    for ids in by_file.values():
        n = len(ids)
        picks = range(n) if n <= k else sorted({round(i * (n - 1) / (k - 1)) for i in range(k)} if k > 1 else {0})
        keep.update(ids[i] for i in picks)
    return [arg for arg in selection if arg in keep]


def load_results(path: Path) -> Dict[str, dict]:
    results = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                results[rec["key"]] = rec
    return results


class EquivalentError(ValueError):
    """An entry of equivalent.json without its demonstration."""


def load_equivalent(out: Path) -> Dict[str, Dict[str, str]]:
    """out/equivalent.json, written by hand: {equivalence key: {"tried": the input that was tried, "why": why no input
    tells the mutant from the original}} ({} if absent). A survivor is accepted as equivalent only with that
    demonstration: an entry without both (or a key that is not ``path|line text|change``) is an EquivalentError
    naming the file, the key and the fix."""
    path = out / "equivalent.json"
    if not path.is_file():
        return {}
    entries = json.loads(path.read_text())
    for key, entry in entries.items():
        if key.count("|") < 2:
            raise EquivalentError(f"{path}: the key {key!r} is not path|line text|change; copy it from the survivor's "
                                  f"line in results.jsonl (path, line_text, change)")
        lacking = [f for f in ("tried", "why") if not isinstance(entry, dict) or not str(entry.get(f, "")).strip()]
        if lacking:
            raise EquivalentError(
                f"{path}: {key!r} lacks {' and '.join(repr(f) for f in lacking)}: an equivalent survivor needs "
                f"{{\"tried\": the input that was tried on the mutant and the original, \"why\": why no input "
                f"tells them apart}}; without such a demonstration remove the entry (the survivor then counts as not "
                f"killed)")
    return entries


def run_check(modules: Sequence[str], out: Path, max_per_module: Optional[int] = None, seed: int = 0,
              timeout: Optional[float] = None, root: Path = REPO, commit: str = "HEAD",
              test_map: Optional[Dict[str, Optional[List[str]]]] = None, files: Optional[Dict[str, str]] = None,
              rerun_survivors: bool = False, log=print, per_class: Optional[int] = None,
              kinds: Optional[Sequence[str]] = None, tests_per_file: Optional[int] = None,
              max_files: Optional[int] = None, fast_tier: bool = False) -> Dict[str, dict]:
    """Run the mutants of ``modules`` (paths relative to root) and append their results to out/results.jsonl;
    returns every recorded result by key. ``files`` replaces the git copy (tests of this module). The sample:
    ``per_class`` of each class (of ``kinds``) in each module, or ``max_per_module`` in all. A test of the
    selection that fails unmutated is left out (and named in the log). With ``fast_tier``, a mutant that its
    selection does not kill is run against the whole fast tier (``-m "not slow"``, the tests that fail unmutated
    left out) before it is counted a survivor (``judged_by`` in its record)."""
    test_map = derived_test_map(root=root) if test_map is None else test_map
    out.mkdir(parents=True, exist_ok=True)
    results_path = out / "results.jsonl"
    results = load_results(results_path)
    equivalent = load_equivalent(out)  # survivors judged equivalent are not rerun: no test can kill them
    with tempfile.TemporaryDirectory(prefix="pe_mutation_") as tmp:
        copy_root = Path(tmp) / "repo"
        source_id = make_copy(copy_root, root, commit, files)
        check_imports_from(copy_root, sorted({m.split("/")[0] for m in modules}))
        baselines: Dict[tuple, Tuple[str, float, List[str]]] = {}
        fast: Optional[Tuple[float, List[str]]] = None  # the fast tier's unmutated run, once, when a survivor needs it
        fast_known = False
        for module in modules:
            selection = test_map.get(module)
            if selection is None:
                log(f"{module}: not run ({NOT_RUN.get(module, 'no tests mapped')})")
                continue
            selection = per_file([n for n in selection if still_there(copy_root, n)], tests_per_file, max_files)
            target = copy_root / module
            if not target.is_file():
                log(f"{module}: not in the copied tree ({source_id}); skipped")
                continue
            original = target.read_text()
            found = generate(target, copy_root)
            mutants = (sample_per_class(found, per_class, seed, kinds) if per_class is not None or kinds else
                       sample(found, max_per_module, seed))
            todo = [m for m in mutants if m.key not in results
                    or (rerun_survivors and results[m.key]["status"] == "survived"
                        and _eq_key(results[m.key]) not in equivalent)]
            if not todo:
                log(f"{module}: {len(mutants)} mutants already recorded")
                continue
            if tuple(selection) not in baselines:  # the unmutated tests, once per selection, all of them
                status, base_s, output = run_tests(copy_root, selection, timeout or 1800, stop_first=False)
                dropped = failing_nodes(output) if status == "failed" else []
                baselines[tuple(selection)] = (status, base_s, dropped)
                if dropped:
                    log(f"{module}: left out, failing unmutated: {' '.join(dropped)}")
            status, base_s, dropped = baselines[tuple(selection)]
            selection = [n for n in selection if n not in dropped]
            if status == "timeout" or (status == "failed" and not dropped) or not selection:
                log(f"{module}: its tests do not pass unmutated ({status}); skipped")
                continue
            limit = timeout or max(60.0, 3 * base_s)
            log(f"{module}: {len(todo)} of {len(mutants)} mutants to run ({len(selection)} tests, "
                f"{base_s:.0f}s unmutated, timeout {limit:.0f}s)")
            for m in todo:
                target.write_text(m.apply(original))
                judged = "selection"
                try:
                    status, secs, _ = run_tests(copy_root, selection, limit)
                    if status == "passed" and fast_tier:  # a survivor of its selection: the whole fast tier judges
                        if not fast_known:
                            target.write_text(original)
                            fast, fast_known = fast_tier_baseline(copy_root, log), True
                            target.write_text(m.apply(original))
                        if fast is not None:
                            status, more, _ = run_tests(copy_root, fast[1], max(600.0, 3 * fast[0]),
                                                        marks=FAST_TIER)
                            secs, judged = secs + more, "selection, fast tier"
                            status = "fast tier: " + status if status != "passed" else status
                finally:
                    target.write_text(original)
                verdict = "survived" if status == "passed" else "killed"
                rec = {"key": m.key, "module": module, "status": verdict, "how": status, "seconds": round(secs, 1),
                       "judged_by": judged, "source": source_id, **asdict(m), "change": m.change}
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


def summarize(results: Dict[str, dict], equivalent: Dict[str, dict]) -> Tuple[List[dict], str]:
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
    # the raw rate first, every mutant counted: what a reviewer's planted bugs measure; the rate that leaves out the
    # survivors judged equivalent is printed beside it, never alone
    lines = ["Raw kill rate per package (killed / every mutant), beside the rate with the survivors judged "
             "equivalent left out:", ""]
    packages = [r for r in rows if r["module"].endswith(" (all)")]
    for top in sorted({r["module"].split("/")[0] for r in packages}):  # pe_plugin, pe_tools: all their packages
        mine = [r for r in packages if r["module"].split("/")[0] == top]
        n, k, e = (sum(r[c] for r in mine) for c in ("mutants", "killed", "equivalent"))
        packages.append({"module": f"{top}, every package (all)", "mutants": n, "killed": k, "equivalent": e,
                         "kill_rate": k / n, "kill_rate_non_equivalent": k / (n - e) if n > e else None})
    lines += [f"* `{r['module'][:-len(' (all)')]}`: {rate(r['kill_rate'])} raw ({r['killed']}/{r['mutants']}); "
              f"{rate(r['kill_rate_non_equivalent'])} with the {r['equivalent']} equivalent excluded"
              for r in packages]
    lines += ["", markdown_table(["module", "mutants", "killed", "survived", "of which equivalent", "kill rate (raw)",
                             "kill rate (equivalent excluded)"],
                            [[r["module"], str(r["mutants"]), str(r["killed"]), str(r["survived"]), str(r["equivalent"]),
                              rate(r["kill_rate"]), rate(r["kill_rate_non_equivalent"])]
                             for r in rows], "lrrrrrr", compact_rule=True)]
    lines += ["", "## Per package and class", "", "killed / mutants (the hand-written classes first):", "",
              class_table(results)]
    lines += ["", "## Survivors", ""]
    if not survivors:
        lines.append("None.")
    for r in survivors:
        demo = equivalent.get(_eq_key(r))
        judged = ("its selection and the whole fast tier pass" if r.get("judged_by") == "selection, fast tier"
                  else "its selection passes; the fast tier not run")
        verdict = (f"equivalent: {demo['why']} (tried: {demo['tried']})" if demo
                   else f"NOT KILLED ({judged}: a gap in the tests)")
        lines.append(f"* `{r['path']}:{r['line']}` ({r['kind']}) `{_one_line(r['original'])}` -> "
                     f"`{r['replacement']}`: {verdict}")
    return rows, "\n".join(lines) + "\n"


def line_of(row: dict) -> str:
    """One row of the printed record: the raw kill rate, and beside it the rate with the equivalent survivors
    excluded."""
    excluded = row["kill_rate_non_equivalent"]
    return (f"{row['module']:45s} {row['killed']:3d}/{row['mutants']:3d} killed  raw {100 * row['kill_rate']:5.1f}%  "
            f"(equivalent excluded {'n/a' if excluded is None else f'{100 * excluded:5.1f}%'})  "
            f"survived {row['survived']} (equivalent {row['equivalent']})")


def class_table(results: Dict[str, dict]) -> str:
    """A markdown table: one row per package, one column per class, each cell killed/mutants (blank: none)."""
    cells: Dict[Tuple[str, str], List[int]] = {}
    for rec in results.values():
        cell = cells.setdefault((rec["module"].rsplit("/", 1)[0], rec["kind"]), [0, 0])
        cell[0] += rec["status"] == "killed"
        cell[1] += 1
    kinds = [k for k in HAND_WRITTEN if any(c[1] == k for c in cells)]
    kinds += sorted({k for _, k in cells} - set(kinds))
    rows = []
    for package in sorted({p for p, _ in cells}):
        row = [f"{package}/"]
        for kind in kinds:
            k, n = cells.get((package, kind), (0, 0))
            row.append(f"{k}/{n}" if n else "")
        k, n = (sum(c[i] for (p, _), c in cells.items() if p == package) for i in (0, 1))
        rows.append(row + [f"{k}/{n} ({100 * k / n:.0f}%)"])
    return markdown_table(["package", *kinds, "all"], rows, "l" + "r" * (len(kinds) + 1), compact_rule=True)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _eq_key(rec: dict) -> str:
    return f"{rec['path']}|{rec['line_text']}|{_one_line(rec['original'])} -> {rec['replacement']}"


def all_modules(root: Path = REPO) -> List[str]:
    return sorted(str(p.relative_to(root)) for pkg in PACKAGES for p in (root / pkg).glob("*.py"))


def deselected(root: Path = REPO) -> List[str]:
    """--deselect arguments for the tests over MUTATION_BUDGET_S by tests/durations.log (the slow tier's, which
    MARKS would otherwise take in through their `mutation` mark)."""
    return [x for node, secs in sorted(recorded_seconds(root).items()) if secs > MUTATION_BUDGET_S
            for x in ("--deselect", node)]


def merge_trace(old: dict, new: dict, files: Sequence[str]) -> dict:
    """The map ``old`` with the test files ``files`` traced anew: their node ids and imports as ``new`` has them (a
    test removed or renamed since is gone), every other file's as they were."""
    gone = set(files)

    def mine(entry: str) -> bool:
        return entry.split("::")[0] in gone

    out = {}
    for part in ("tests", "imports"):
        merged = {m: [x for x in xs if not mine(x)] for m, xs in old.get(part, {}).items()}
        for m, xs in new.get(part, {}).items():
            merged.setdefault(m, []).extend(xs)
        out[part] = {m: sorted(set(xs)) for m, xs in sorted(merged.items()) if xs}
    return out


def trace(out: Path, root: Path = REPO, commit: str = "HEAD", timeout: float = 3600, log=print,
          files: Sequence[str] = ()) -> dict:
    """Run the fast tier of a copy of ``commit`` under devtools/trace_tests.py and write its map of which tests
    execute which module to ``out`` (examples/mutation/test_map.json); returns the map. With ``files``, only those
    test files run, and their entries replace theirs in the map ``out`` holds (``merge_trace``)."""
    with tempfile.TemporaryDirectory(prefix="pe_trace_") as tmp:
        copy_root = Path(tmp) / "repo"
        source_id = make_copy(copy_root, root, commit)
        env = dict(copy_env(copy_root), PE_TRACE_OUT=str(copy_root / "map.json"), PE_TRACE_ROOT=str(copy_root))
        head = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "devtools.trace_tests", "-m", MARKS]
        cmd = [sys.executable, *head, *deselected(copy_root), *(files or ["tests"])]
        proc = subprocess.run(cmd, cwd=copy_root, env=env, capture_output=True, text=True, timeout=timeout)
        log(proc.stdout[-1500:])
        found = json.loads((copy_root / "map.json").read_text())
    if files:
        old = json.loads(out.read_text())
        found = merge_trace(old, found, files)
        found["source"] = old.get("source")
        found["command"] = f"{old.get('command')}; then {' '.join(files)} traced again on {source_id} and merged"
    else:
        found["source"] = source_id
        found["command"] = shlex.join(head) + " (deselections of devtools.mutation.deselected()) tests"
    out.write_text(json.dumps(found, indent=0, sort_keys=True) + "\n")
    return found


def main(argv=None) -> int:
    """``scripts/mutation_check.py``: the command line of the check (its usage is in docs/dev/testing.md)."""
    ap = argparse.ArgumentParser(description="Plant small bugs one at a time in a copy of the repository and run the "
                                             "tests that execute each module (docs/dev/testing.md).")
    ap.add_argument("--modules", nargs="*", default=None,
                    help="modules to mutate: paths or globs relative to the repository (default: all packages)")
    ap.add_argument("--max-per-module", type=int, default=None, help="a reproducible sample of at most N mutants each")
    ap.add_argument("--per-class", type=int, default=None,
                    help="a reproducible sample of at most N mutants of each class in each module")
    ap.add_argument("--classes", default=None,
                    help="comma-separated classes to plant ('hand': the hand-written ones, " + ", ".join(HAND_WRITTEN)
                         + "); default all")
    ap.add_argument("--tests-per-file", type=int, default=None,
                    help="run at most N of each test file's tests that execute the module (the fastest)")
    ap.add_argument("--max-files", type=int, default=None,
                    help="run the tests of at most N test files per module (those with the most tests executing it)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the sample")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds per mutant (default: 3x the unmutated tests' time, at least 60)")
    ap.add_argument("--commit", default="HEAD", help="the commit copied and mutated (the working tree never is)")
    ap.add_argument("--out", type=Path, default=REPO / "examples" / "mutation",
                    help="results.jsonl (appended, resumable), summary.md, and equivalent.json (read)")
    ap.add_argument("--rerun-survivors", action="store_true", help="run the recorded survivors again (new tests)")
    ap.add_argument("--fast-tier", action="store_true",
                    help="judge a survivor of its selection by the whole fast tier (-m 'not slow') before counting it; "
                         "with --rerun-survivors, the recorded survivors")
    ap.add_argument("--list", action="store_true", help="print the mutants that would run, and stop")
    ap.add_argument("--summary-only", action="store_true", help="only rewrite summary.md from results.jsonl")
    ap.add_argument("--map", type=Path, default=MAP_FILE,
                    help=f"the map of which tests execute which module that --trace writes and a run reads (default "
                         f"examples/mutation/{MAP_FILE.name}; another file for a trace of your own)")
    ap.add_argument("--trace", nargs="*", default=None, metavar="TEST_FILE",
                    help=f"record which tests execute which module (the fast tier under a tracer) in {MAP_FILE.name}, "
                         "and stop; with test files, trace only those and merge them into the map")
    args = ap.parse_args(argv)
    kinds = (None if args.classes is None else list(HAND_WRITTEN) if args.classes == "hand"
             else args.classes.split(","))

    if args.trace is not None:
        trace(args.map, commit=args.commit, log=lambda s: print(s, flush=True), files=args.trace)
        return 0
    if not args.map.is_file() and not args.summary_only:
        ap.error(f"--map {args.map}: no such file; write it with --trace --map {args.map} (or leave --map out)")
    every = all_modules()
    modules = every if not args.modules else list(dict.fromkeys(  # in the order the patterns are given
        m for pat in args.modules for m in every
        if fnmatch.fnmatch(m, pat) or m.startswith(pat.rstrip("/") + "/") or m == pat))
    if args.modules and not modules:
        ap.error(f"no module matches {args.modules}")
    if args.list:
        for module in modules:
            found = generate(REPO / module)
            chosen = (sample_per_class(found, args.per_class, args.seed, kinds) if args.per_class is not None or kinds
                      else sample(found, args.max_per_module, args.seed))
            for m in chosen:
                print(f"{module}:{m.line} {m.kind}: {m.change}")
        return 0
    if not args.summary_only:
        run_check(modules, args.out, args.max_per_module, args.seed, args.timeout, commit=args.commit,
                  rerun_survivors=args.rerun_survivors, log=lambda s: print(s, flush=True),
                  per_class=args.per_class, kinds=kinds, tests_per_file=args.tests_per_file,
                  max_files=args.max_files, test_map=derived_test_map(json.loads(args.map.read_text())),
                  fast_tier=args.fast_tier)
    equivalent = load_equivalent(args.out)
    results, superseded = current(load_results(args.out / "results.jsonl"))
    rows, text = summarize(results, equivalent)
    old = "".join(f"\n* `{path}`: {n}" for path, n in sorted(superseded.items()))
    (args.out / "summary.md").write_text(
        "# Mutation check\n\nWritten by `scripts/mutation_check.py` (docs/dev/testing.md): each row counts the mutants run "
        "in that module, one planted change at a time, against the tests that execute it "
        f"(`examples/mutation/{MAP_FILE.name}`, derived by `--trace`).\n\n"
        + text + (f"\nNot counted: mutants of earlier versions of a file (results.jsonl keeps them; the file has "
                  f"changed since, and its new sample is what counts):\n{old}\n" if old else ""))
    for r in rows:
        print(line_of(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())

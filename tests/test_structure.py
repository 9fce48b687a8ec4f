"""The code's structure as the docs describe it: the encodings' hooks named alike in the interface, its docstring
and the two documents; no import cycle between the project's modules."""
import ast
import re
from pathlib import Path

from pe_plugin.encoding_parts import base
from pe_plugin.encodings import PE_REGISTRY

ROOT = Path(__file__).resolve().parent.parent
# PositionalEncoding's methods that are not hooks: construction and the switches the glue asks
NOT_HOOKS = {"build", "overrides", "uses", "has_embedding_hook", "has_attention_hooks", "applies_to_layer",
             "position_bias_is_shared", "signature", "max_positions"}


def test_hooks_are_what_the_encodings_override():
    """base.HOOKS is exactly the set of PositionalEncoding methods that registered encodings override, less the
    switches: a new hook added to the class without HOOKS (or a hook no encoding uses) fails here."""
    own = {n for n, v in vars(base.PositionalEncoding).items() if callable(v) and not n.startswith("_")}
    overridden = {n for cls in PE_REGISTRY.values() for n in own if cls.overrides(n)}
    assert overridden - NOT_HOOKS == set(base.HOOKS)
    assert set(base.HOOKS) <= own and set(base.ATTENTION_HOOKS) <= set(base.HOOKS)


def marked_names(doc: str) -> list:
    text = (ROOT / doc).read_text(encoding="utf-8")
    blocks = re.findall(r"<!-- hooks:.*?-->(.*?)<!-- /hooks -->", text, flags=re.S)
    assert len(blocks) == 1, f"{doc}: one <!-- hooks: --> ... <!-- /hooks --> block expected"
    return re.findall(r"`(\w+)`", blocks[0])


def test_docs_name_the_hooks_and_no_other():
    for doc in ("docs/design.md", "docs/extending.md"):
        names = marked_names(doc)
        assert sorted(names) == sorted(base.HOOKS), doc  # each once, none missing, none invented


def test_module_docstring_documents_each_hook():
    documented = re.findall(r"^  (\w+)\(", base.__doc__, flags=re.M)
    assert documented == list(base.HOOKS)


def imports_of(path: Path, module: str, modules: set) -> set:
    """The project modules ``module`` (file ``path``) imports, at any depth of its code (lazy imports count)."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = package[:len(package) - node.level + 1] if node.level else []
            target = ".".join(parts + ([node.module] if node.module else []))
            found.update(f"{target}.{a.name}" if f"{target}.{a.name}" in modules else target for a in node.names)
    return {m for m in found if m in modules and m != module}


def project_modules() -> dict:
    out = {}
    for pkg in ("pe_plugin", "pe_tools"):
        for f in (ROOT / pkg).rglob("*.py"):
            parts = f.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def cycles(graph: dict) -> list:
    """Import cycles, leaving out a package and its own submodules (a package's __init__ may import them)."""
    related = lambda a, b: a.startswith(b + ".") or b.startswith(a + ".")  # noqa: E731
    state, stack, found = {}, [], []

    def visit(u):
        state[u] = "open"
        stack.append(u)
        for v in sorted(graph[u]):
            if related(u, v):
                continue
            if state.get(v) == "open":
                found.append(stack[stack.index(v):] + [v])
            elif v not in state:
                visit(v)
        stack.pop()
        state[u] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m)
    return found


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a.x": {"a.y"}, "a.y": {"a.x"}, "a": {"a.x"}}) == [["a.x", "a.y", "a.x"]]


def test_no_import_cycle():
    modules = project_modules()
    graph = {m: imports_of(f, m, set(modules)) for m, f in modules.items()}
    assert graph["pe_tools.scoring.inputs"] >= {"pe_tools.scoring.generate_output"}  # the finder sees imports
    assert cycles(graph) == []


# ---- one module reads and writes a run directory's records (pe_tools/runs/run_dir.py) --------------------------
RUN_RECORDS = ("command.json", "run.lock", ".pe-record")  # files and folders only run_dir.py names as paths


def names_as_path(source: str, names=RUN_RECORDS) -> list:
    """The lines where ``source`` names one of ``names`` as a string of its own (a path part or a glob such as
    "*/command.json"): not in a docstring, not inside an f-string (a message to the user)."""
    tree = ast.parse(source)
    skip = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    skip |= {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in skip and any(n.value == x or n.value.endswith("/" + x) for x in names)]


def test_the_finder_of_run_record_paths_sees_a_path_and_not_a_message():
    assert names_as_path('p = run / "command.json"\nq = sorted(d.glob("*/command.json"))\n') == [1, 2]
    assert names_as_path('"""Reads command.json."""\nraise E(f"{run} has no command.json")\n') == []


def test_only_the_run_dir_module_names_a_run_directorys_records():
    """command.json (the command record), run.lock (the run's writer) and .pe-record (records being written) are
    read, written and listed through pe_tools/runs/run_dir.py alone: no other module of the tools names them as a
    path (today 9 reads of command.json in 7 modules went through it)."""
    found = {str(f.relative_to(ROOT)): lines for folder in ("pe_tools", "devtools", "scripts")
             for f in sorted((ROOT / folder).rglob("*.py"))
             if (lines := names_as_path(f.read_text(encoding="utf-8")))}
    assert found == {"pe_tools/runs/run_dir.py": found.get("pe_tools/runs/run_dir.py")}
    assert found["pe_tools/runs/run_dir.py"]  # the finder sees the module's own names

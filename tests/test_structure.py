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


# ---- the tools' layers: each module imports only from its own layer or those below ---------------------------
# From the bottom: base modules (files, names, locks, processes); a run directory's records, the data pipeline, the
# synthetic corpora and the recipe tables (pe_tools/recipes/__init__.py: TOML tables, no tool); scoring; the
# recipes' tools; and what runs them (benchmarks, the demo and the experiments built on the recipes).
BASE = {"average", "checkpoint_files", "command_line", "fairseq_plugin", "figures", "file_io", "locks", "log_noise",
        "machine", "naming", "plugin_modules", "process", "tables"}
LAYERS = {"runs": 1, "data": 1, "synthetic": 1, "scoring": 2, "recipes": 3, "bench": 4, "demo": 4,
          "length_experiment": 4, "probe": 4, "swap_probe": 4}


def layer(module: str) -> int:
    """The layer of a pe_tools module (KeyError for one no layer names: place it in BASE or LAYERS)."""
    parts = module.split(".")[1:]
    if not parts:
        return 4  # the package itself
    if parts == ["recipes"]:
        return 1  # the recipe tables, read by the data pipeline and by scoring
    return 0 if parts[0] in BASE else LAYERS[parts[0]]


def imports_with_depth(path: Path, module: str, modules: set) -> list:
    """(imported module, "module" or "function") for each project module that ``module`` imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = {id(n) for n in tree.body} | {id(n) for t in tree.body if isinstance(t, (ast.If, ast.Try))
                                        for n in ast.walk(t)}
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            parts = package[:len(package) - node.level + 1] if node.level else []
            target = ".".join(parts + ([node.module] if node.module else []))
            targets = [f"{target}.{a.name}" if f"{target}.{a.name}" in modules else target for a in node.names]
        else:
            continue
        found += [(t, "module" if id(node) in top else "function") for t in targets if t in modules and t != module]
    return found


def upward_imports() -> list:
    modules = {m: f for m, f in project_modules().items() if m.startswith("pe_tools")}
    return sorted((m, t, depth) for m, f in modules.items() for t, depth in imports_with_depth(f, m, set(modules))
                  if layer(t) > layer(m))


def test_every_tools_module_has_a_layer():
    assert all(layer(m) >= 0 for m in project_modules() if m.startswith("pe_tools"))


def test_the_layer_check_sees_module_and_function_level_imports():
    modules = project_modules()
    rehearse = imports_with_depth(modules["pe_tools.recipes.queue.rehearse"], "pe_tools.recipes.queue.rehearse",
                                  set(modules))
    assert ("pe_tools.data.pipeline", "function") in rehearse  # the rehearsal's corpus, made when asked
    assert ("pe_tools.file_io", "module") in rehearse
    assert layer("pe_tools.recipes.queue.rehearse") > layer("pe_tools.data.pipeline") > layer("pe_tools.file_io")


def test_no_module_imports_from_a_layer_above_its_own():
    """No import, at module level or inside a function, runs up the layers (e.g. scoring importing a recipe tool,
    or a run directory's records importing the queue)."""
    assert upward_imports() == []


# A package split into modules has layers of its own, from the bottom (pe_tools/recipes/slurm/__init__.py lists them):
# a module imports only from the modules below it in its package, at module level or inside a function.
PACKAGE_LAYERS = {
    "pe_tools.recipes.slurm": ("state", "files", "options", "query", "submit", "status", "job", "__main__"),
}


def package_layer(module: str):
    """(package, the module's place in it) for a module of a package in PACKAGE_LAYERS, else None (KeyError for a
    module of such a package that its layers do not name)."""
    for package, order in PACKAGE_LAYERS.items():
        if module.startswith(package + "."):
            return package, order.index(module[len(package) + 1:].split(".")[0])
    return None


def upward_package_imports(modules=None) -> list:
    modules = modules or project_modules()
    found = []
    for m, f in modules.items():
        if (mine := package_layer(m)) is None:
            continue
        for t, depth in imports_with_depth(f, m, set(modules)):
            theirs = package_layer(t)
            if theirs and theirs[0] == mine[0] and theirs[1] >= mine[1]:
                found.append((m, t, depth))
    return sorted(found)


def test_every_module_of_a_layered_package_has_a_layer():
    modules = project_modules()
    for package, order in PACKAGE_LAYERS.items():
        assert package in modules
        inside = {m[len(package) + 1:] for m in modules if m.startswith(package + ".")}
        assert inside == set(order), f"{package}: place each of its modules in PACKAGE_LAYERS"


def test_the_package_layer_check_sees_module_and_function_level_imports(tmp_path):
    modules = project_modules()
    job = imports_with_depth(modules["pe_tools.recipes.slurm.job"], "pe_tools.recipes.slurm.job", set(modules))
    assert ("pe_tools.recipes.slurm.query", "module") in job and ("pe_tools.recipes.slurm.state", "module") in job
    planted = tmp_path / "submit.py"
    planted.write_text("from .files import now\n\ndef f():\n    from .job import job_task\n")
    assert upward_package_imports({**modules, "pe_tools.recipes.slurm.submit": planted}) == [
        ("pe_tools.recipes.slurm.submit", "pe_tools.recipes.slurm.job", "function")]


def test_no_module_of_a_layered_package_imports_from_its_layers_above():
    """No module of a package in PACKAGE_LAYERS imports, at module level or inside a function, a module of its
    package at its own layer or above (e.g. the job's state machine importing the job, or a submission importing
    the status table)."""
    assert upward_package_imports() == []


def test_every_relative_import_of_the_tools_names_a_module_of_theirs():
    """A relative import, at module level or inside a function (run only when called), names an existing module of
    the package: a module moved one folder deeper keeps no import that resolves beside it."""
    modules = {m: f for m, f in project_modules().items() if m.startswith("pe_tools")}
    missing = []
    for module, path in modules.items():
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level:
                target = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
                if target not in modules:
                    missing.append((module, node.lineno, target))
    assert missing == []


# ---- each JSON file the tools read back has one parser --------------------------------------------------------
# the modules of pe_tools that parse JSON, and what each parses: a state file read back to decide what to do has
# one of them as its only reader (a decode's meta file: run_dir.load_meta; RUN/slurm.json and jobs.json: slurm/files.py)
JSON_PARSERS = {
    "pe_tools/runs/run_dir.py": "command.json, a decode's meta file",
    "pe_tools/recipes/slurm/files.py": "RUN/slurm.json (through file_io.read_json_object), QUEUE.slurm/jobs.json",
    "pe_tools/recipes/queue/local.py": "the local queue's process groups",
    "pe_tools/locks.py": "a lock file's holder record (through file_io.read_json_object)",
    "pe_tools/data/pipeline.py": "pe-prepare's step stamps",
    "pe_tools/file_io.py": "read_json_object: any state file that may be half-written",
    "pe_tools/recipes/training_log.py": "fairseq's JSON log lines",
    "pe_tools/recipes/batching.py": "the batch probe's answer on stdout",
    "pe_tools/process.py": "a child's argv list",
    "pe_tools/demo.py": "the demo's own reports",
    "pe_tools/scoring/agreement.py": "pe-evaluate's JSON reports",
}


def json_parsers() -> dict:
    """{module path: lines} of the modules of pe_tools (benchmarks aside: their records are their own) that call
    json.load, json.loads or read_json_object."""
    calls = ("json.load", "json.loads", "read_json_object")
    found = {}
    for f in sorted((ROOT / "pe_tools").rglob("*.py")):
        rel = str(f.relative_to(ROOT))
        if rel.startswith("pe_tools/bench/"):
            continue
        lines = [n.lineno for n in ast.walk(ast.parse(f.read_text(encoding="utf-8")))
                 if isinstance(n, ast.Call) and ast.unparse(n.func) in calls]
        if lines:
            found[rel] = lines
    return found


def test_each_json_file_the_tools_read_back_has_one_parser():
    """A module that starts parsing JSON must say what it parses here, and a state file is parsed by its owner
    alone: a second reader of command.json or of a meta file is a module this list does not hold."""
    assert sorted(json_parsers()) == sorted(JSON_PARSERS)

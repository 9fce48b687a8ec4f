"""The distribution as users get it: `pip install .` (not editable: the wheel built from a copy of the sources,
installed) into a fresh virtual environment installs
pe_plugin, pe_tools, the recipe tables and the console scripts, which run from a folder that holds no checkout;
the scoring and data-preparation modules import neither torch nor fairseq; the tests and scripts/ use the
installed modules, not files loaded by path.

The fresh environment reaches torch, fairseq and sacrebleu through a .pth line naming this environment's
site-packages (nothing is downloaded). A .pth line only extends sys.path: the .pth files inside that folder
(the editable install's finder) are not processed, so the fresh, non-editable copy is what imports.
"""
import ast
import math
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import pe_testing

REPO = Path(__file__).resolve().parents[1]
CONSOLE_SCRIPTS = ["pe-prepare", "pe-train", "pe-generate", "pe-record", "pe-report", "pe-queue", "pe-evaluate", "pe-average",
                   "pe-probe", "pe-swap-probe", "pe-bench", "pe-demo", "pe-length"]  # setup.py's entry points
TORCH_FREE = ("pe_tools.scoring.cli", "pe_tools.data.cli", "pe_tools.naming", "pe_tools.log_noise")


def imported_modules(module: str, python: str = sys.executable) -> list:
    """Every module ``python -X importtime -c 'import MODULE'`` imports, by name."""
    proc = subprocess.run([python, "-X", "importtime", "-c", f"import {module}"], capture_output=True, text=True,
                          cwd=REPO, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    names = [line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    return names[1:]  # the first line is the header


@pytest.mark.parametrize("module", TORCH_FREE)
def test_scoring_and_preparation_import_neither_torch_nor_fairseq(module):
    names = imported_modules(module)
    assert module in names  # the probe saw the import itself
    heavy = [n for n in names if n.split(".")[0] in ("torch", "fairseq", "fairseq_cli", "pe_plugin")]
    assert not heavy, f"{module} imports {heavy[:10]}"


# scripts/ programs of their own rather than entry points of a pe_tools module, and the test that loads each by
# its path: the GPU window's script (issue 55), which runs on a rented machine from a checkout, not installed
OWN_PROGRAMS = {"gpu_window.py": "test_gpu_window.py"}
# the development tools' entry points: devtools/ is in the checkout, not in the wheel (issue 58)
DEVTOOLS = {"mutation_check.py"}


def test_tests_and_scripts_use_installed_modules():
    """No test loads a file by path (but a script of OWN_PROGRAMS, by its own test) or puts scripts/ on sys.path,
    and every other scripts/*.py is a thin entry point that calls a pe_tools (or, DEVTOOLS, a devtools) module's
    main."""
    for path in sorted((REPO / "tests").glob("*.py")):
        text = path.read_text()
        if path.name not in OWN_PROGRAMS.values():
            assert not re.search(r"spec_from_file_location\(", text), path.name
        assert not re.search(r"sys\.path\.insert\(.*\bscripts\b", text), path.name
    for path in sorted(p for p in (REPO / "scripts").glob("*.py") if p.name not in OWN_PROGRAMS):
        tree = ast.parse(path.read_text())
        imports = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        package = "devtools" if path.name in DEVTOOLS else "pe_tools"
        assert [n.module.split(".")[0] for n in imports if n.module != "pathlib"] == [package], path.name
        assert len([n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]) == 0, path.name
        assert len(path.read_text().splitlines()) <= (12 if path.name in DEVTOOLS else 10), path.name  # (+ sys.path)


def test_shared_names_are_what_pe_plugin_registers():
    """pe_tools.naming's baseline, sizes and architecture names, and the architectures pe_plugin registers with
    fairseq: every registered encoding at four sizes (those of the README's method table and any added since)."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    from pe_documented import readme_methods
    from pe_plugin.encodings import PE_REGISTRY
    from pe_plugin.models import architectures
    from pe_tools import naming

    assert set(readme_methods()) <= set(PE_REGISTRY) and list(PE_REGISTRY)[:2] == ["nope", "sape"]
    assert naming.BASELINE == "sape"
    assert naming.CLASS_OF_SUFFIX == {"tiny": "tiny", "wmt_en_de": "base", "wmt_en_de_big": "big", "wmt_en_fr_big": "big"}
    assert naming.SUFFIX_OF_CLASS == {"tiny": "tiny", "base": "wmt_en_de", "big": "wmt_en_de_big"}
    assert naming.arch_name("posnet_embed", "wmt_en_de_big") == "transformer_posnet_embed_wmt_en_de_big"
    names = architectures.architecture_names()
    suffixes = ["tiny", "wmt_en_de", "wmt_en_de_big", "wmt_en_fr_big"]
    assert names == [f"transformer_{pe}_{suffix}" for pe in PE_REGISTRY for suffix in suffixes]
    assert len(set(names)) == 4 * len(PE_REGISTRY)
    assert {ARCH_MODEL_NAME_REGISTRY.get(name) for name in names} == {"pe_transformer"}  # each registered


def wheel_packages() -> list:
    """The packages setup.py gives the wheel (its find_packages call, run from the checkout)."""
    import runpy

    import setuptools

    seen, setup, cwd = {}, setuptools.setup, os.getcwd()
    setuptools.setup = lambda **kw: seen.update(kw)
    try:
        os.chdir(REPO)
        runpy.run_path(str(REPO / "setup.py"))
    finally:
        setuptools.setup = setup
        os.chdir(cwd)
    return seen["packages"]


OUTSIDE = ("scripts", "examples")  # the checkout's folders that a wheel does not hold


def checkout_paths(source: str, depth: int, wheel_tops: set) -> list:
    """(line, what) of each place a module's code reaches the checkout's scripts/ or examples/: a path literal into
    them (``Path("examples/...")``, ``x / "scripts"``, a ``default=`` or module-level string "scripts/..."), or a
    path from ``__file__`` that rises above the module's top package (``depth`` folders up reach it) to anything
    but another package of the wheel. Docstrings and help texts may name them."""
    found = []

    def into(value) -> bool:
        return isinstance(value, str) and (value in OUTSIDE or value.startswith(tuple(f"{o}/" for o in OUTSIDE)))

    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "Path":
            if node.args and isinstance(node.args[0], ast.Constant) and into(node.args[0].value):
                found.append((node.lineno, f"Path({node.args[0].value!r})"))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            for side in (node.left, node.right):
                if isinstance(side, ast.Constant) and into(side.value):
                    found.append((node.lineno, f"/ {side.value!r}"))
        if isinstance(node, ast.keyword) and node.arg == "default" and isinstance(node.value, ast.Constant):
            if into(node.value.value):
                found.append((node.value.lineno, f"default={node.value.value!r}"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and into(node.value.value):
            found.append((node.lineno, f"{node.value.value!r}"))
    for number, line in enumerate(source.splitlines(), 1):
        if "__file__" not in line or line.lstrip().startswith("#"):
            continue
        m = re.search(r"__file__\)(?:\.resolve\(\))?((?:\.parent)*)(?:\.parents\[(\d+)\])?\s*(?:/\s*\"(\w+)\")?", line)
        up = (m[1].count(".parent") + (int(m[2]) + 1 if m[2] else 0)) if m else None
        if up is None or (up > depth and m[3] not in wheel_tops):
            found.append((number, line.strip()))
    return found


def test_no_module_of_the_wheel_reads_the_checkouts_scripts_or_examples():
    """A module the wheel installs finds nothing in scripts/ or examples/, which only a checkout has (the tools
    that do, the GPU queue's and the analysis collector, are in devtools/); and the check sees such a module."""
    packages = wheel_packages()
    tops = {p.split(".")[0] for p in packages}
    assert tops == {"pe_plugin", "pe_tools"} and "devtools" not in packages
    bad = []
    for package in packages:
        for path in sorted((REPO / package.replace(".", "/")).glob("*.py")):
            depth = package.count(".") + 1  # folders from the module's file up to its top package's parent
            bad += [f"{path.relative_to(REPO)}:{n}: {what}" for n, what in
                    checkout_paths(path.read_text(encoding="utf-8"), depth, tops)]
    assert not bad, bad
    for tool in ("gpu_queue.py", "collect_analysis.py"):  # where they stand, the check would refuse them
        assert checkout_paths((REPO / "devtools" / tool).read_text(encoding="utf-8"), 1, tops), tool


def test_json_has_one_rule_for_nan_and_infinity(tmp_path):
    import json

    import numpy as np

    from pe_tools import file_io

    value = {"nan": float("nan"), "inf": np.float32("inf"), "-inf": -math.inf, "x": np.float64(0.5), "n": np.int64(2),
             "t": (1, 2), 3: [np.array([1.0, float("nan")])]}
    expected = {"nan": None, "inf": "inf", "-inf": "-inf", "x": 0.5, "n": 2, "t": [1, 2], "3": [[1.0, None]]}
    assert file_io.to_jsonable(value) == expected
    file_io.dump_json(tmp_path / "a.json", value)
    assert json.loads((tmp_path / "a.json").read_text()) == expected
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]  # no temporary file left


def test_toml_errors_name_the_file(tmp_path):
    from pe_tools import file_io

    with pytest.raises(file_io.TomlError, match=f"recipe table {tmp_path / 'no.toml'} not found"):
        file_io.load_toml(tmp_path / "no.toml", "recipe table")
    (tmp_path / "bad.toml").write_text("[a\n")
    with pytest.raises(file_io.TomlError, match=f"{tmp_path / 'bad.toml'} is not valid TOML"):
        file_io.load_toml(tmp_path / "bad.toml")


def test_atomic_writes_leave_the_old_file_on_error(tmp_path):
    from pe_tools import file_io

    path = tmp_path / "f.txt"
    file_io.write_atomic(path, "old\n")
    with pytest.raises(RuntimeError):
        with file_io.atomic(path) as tmp:
            tmp.write_text("new\n")
            raise RuntimeError
    with pytest.raises(TypeError):
        file_io.write_all_atomic({tmp_path / "g.txt": "g", path: 3})  # the second cannot be written: neither is
    assert path.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]


def test_csv_text_of_rows():
    from pe_tools.file_io import csv_text

    rows = [{"pe": "sape", "ratio": 1.0, "note": None, "rounds": [1, 2]}, {"pe": "rope", "ratio": None, "x": 3}]
    assert csv_text(rows, skip={"rounds"}) == "pe,ratio,note\nsape,1.0,\nrope,,\n"


def test_counts_below_the_floor_are_refused_naming_it():
    import argparse

    from pe_tools.command_line import int_at_least

    parse = int_at_least(1)
    assert parse("5") == 5
    for text, message in (("0", "must be at least 1 (got 0)"), ("-3", "must be at least 1 (got -3)"),
                          ("x", "expected an integer >= 1, got 'x'")):
        with pytest.raises(argparse.ArgumentTypeError, match=re.escape(message)):
            parse(text)


CPUINFO = """\
processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC 7B13
stepping\t: 1

processor\t: 1
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13
"""


def test_cpu_name_from_a_cpuinfo_sample(tmp_path):
    from pe_tools import machine

    assert machine.cpu_model(CPUINFO) == "AMD EPYC 7B13"
    assert machine.cpu_model("processor\t: 0\nBogoMIPS\t: 50.00\n") == ""  # e.g. an ARM machine: no model name
    (tmp_path / "cpuinfo").write_text(CPUINFO)
    assert machine.cpu_name(tmp_path / "cpuinfo") == "AMD EPYC 7B13"
    assert machine.cpu_name(tmp_path / "missing")  # the platform's name, else "cpu": never empty


def _can_build_wheels() -> bool:
    """Whether this environment's setuptools builds wheels by itself (bdist_wheel: setuptools >= 70.1, or the
    wheel package)."""
    import importlib.util

    setuptools = importlib.util.find_spec("setuptools")
    return importlib.util.find_spec("wheel") is not None or (
        setuptools is not None and (Path(setuptools.origin).parent / "command" / "bdist_wheel.py").is_file())


def _fresh_venv(tmp: Path) -> Path:
    """A virtual environment with this distribution installed from a copy of its sources (pip install, not
    editable), seeing this environment's packages through a .pth line. Returns its bin folder."""
    src = tmp / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in ("pe_plugin", "pe_tools"):
        shutil.copytree(REPO / name, src / name, ignore=ignore)
    shutil.copy(REPO / "setup.py", src / "setup.py")
    # what `pip install .` does, in two steps: build the wheel (with this environment's setuptools: a fresh
    # venv's bundled setuptools may lack bdist_wheel, and nothing is downloaded), then install it
    offline = ["--no-build-isolation", "--no-index"] if _can_build_wheels() else []  # else: pip's build isolation
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", *offline, "-q", "-w", str(tmp / "wheels"),
                           str(src)], capture_output=True, text=True, cwd=tmp)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (wheel,) = (tmp / "wheels").glob("pe_plugin-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    bin_dir = venv / "bin"
    proc = subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "--no-deps", "--no-index", "-q",
                           str(wheel)], capture_output=True, text=True, cwd=tmp)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    site = subprocess.run([str(bin_dir / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # after the install, so that pip never sees (nor tries to replace) this environment's editable copy
    (Path(site) / "project_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return bin_dir


@pytest.mark.slow
def test_pip_install_gives_console_scripts_that_run_without_a_checkout(tmp_path):
    bin_dir = _fresh_venv(tmp_path)
    python = str(bin_dir / "python")
    work = tmp_path / "work"  # no checkout here or above
    work.mkdir()
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    env.pop("PYTHONPATH", None)

    def run(argv, check=True):
        proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, cwd=work, env=env)
        if check:
            assert proc.returncode == 0, f"{argv[:3]}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        return proc

    for name in CONSOLE_SCRIPTS:
        assert (bin_dir / name).is_file(), name
    where = run([python, "-c", "import os, pe_plugin, pe_tools, pe_tools.recipes as r; print(os.path.dirname("
                 "pe_plugin.__file__)); print(os.path.dirname(pe_tools.__file__)); print(r.recipe_names('corpora'))"])
    plugin_dir, tools_dir, recipes = where.stdout.splitlines()
    for folder in (plugin_dir, tools_dir):  # the fresh copy, not the checkout
        assert Path(folder).resolve().is_relative_to(tmp_path / "venv"), folder
    assert recipes == "['multi30k', 'wmt14']"  # the tables are package data

    # pe-prepare raw: tiny text -> BPE text and fairseq binaries
    raw = pe_testing.write_corpus(work / "raw")
    out = run([bin_dir / "pe-prepare", "raw", "--src", "en", "--tgt", "de", "--train", raw / "train", "--valid",
               raw / "valid", "--test", raw / "test", "--out", "data", "--bpe-merges", "20", "--workers", "1"])
    assert "done: fairseq data in data" in out.stdout, out.stdout[-2000:]
    assert (work / "data" / "dict.en.txt").is_file() and (work / "data" / "train.en-de.en.bin").is_file()
    assert run([bin_dir / "pe-train", "sape", "--dry-run", "--data", "data"]).stdout.count(plugin_dir) == 1

    # pe-evaluate: a reference, a baseline and a system
    ref = (raw / "test.de").read_text().splitlines()
    (work / "ref.de").write_text("\n".join(ref) + "\n")
    (work / "base.de").write_text("\n".join(ref) + "\n")
    (work / "sys.de").write_text("\n".join(" ".join(line.split()[::-1]) for line in ref) + "\n")
    out = run([bin_dir / "pe-evaluate", "--ref", "ref.de", "--trg-lang", "de", "--baseline", "base=base.de",
               "--system", "rev=sys.de", "--out-dir", "results", "--n-samples", "20", "--allow-unchecked"])
    assert "| base (baseline) (unchecked) | 100.00" in out.stdout, out.stdout
    assert {p.name for p in (work / "results").iterdir()} >= {"results.md", "results.json", "results.csv"}

    # fairseq-train with --user-dir the installed plugin
    out = run([python, "-m", "fairseq_cli.train", "data", "--user-dir", plugin_dir, "--arch", "transformer_sape_tiny",
               *pe_testing.TRAIN_FLAGS, "--max-update", "2", "--save-dir", "ck", "--no-epoch-checkpoints"])
    log = out.stdout + out.stderr
    assert "arch transformer_sape_tiny" in log and "done training" in log, log[-3000:]
    assert (work / "ck" / "checkpoint_last.pt").is_file()

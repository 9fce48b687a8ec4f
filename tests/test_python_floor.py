"""One Python range, stated alike everywhere: Python 3.11 or 3.12.

setup.py (python_requires), scripts/setup_env.sh (which refuses other versions with a clear message),
README.md and ``pe_plugin.PYTHON_FLOOR`` must agree, and the code must not need more than the floor.
The set-up script is run for real, with stand-in interpreters that only report a version.
"""
import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pe_testing import REPO

import pe_plugin

FLOOR, CEILING = (3, 11), (3, 12)  # ve-fairseq 0.12.3 has wheels for these two only


def version(v) -> str:
    return "%d.%d" % tuple(v)


def test_setup_py_and_the_package_state_the_floor():
    src = (REPO / "setup.py").read_text()
    assert re.findall(r'python_requires="([^"]*)"', src) == [f">={version(FLOOR)}"]
    assert pe_plugin.PYTHON_FLOOR == FLOOR
    assert "tomli" not in src  # tomllib is in the standard library from 3.11 on


def test_readme_states_the_range():
    readme = (REPO / "README.md").read_text()
    start = readme.split("## Start here", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"Python (\d+\.\d+) or (\d+\.\d+)", start)[:1] == [(version(FLOOR), version(CEILING))]
    assert not re.search(r"Python 3\.(9|10)\b|3\.9\+", readme)


def fake_python(tmp_path: Path, reported: str) -> Path:
    """An 'interpreter' that only answers setup_env.sh's version question."""
    exe = tmp_path / f"python{reported}"
    exe.write_text(f"#!/bin/sh\necho {reported}\n")
    exe.chmod(0o755)
    return exe


def setup_env(tmp_path: Path, reported: str) -> subprocess.CompletedProcess:
    venv = tmp_path / "venv"
    venv.mkdir(exist_ok=True)
    # a finished-environment stamp newer than setup.py and setup_env.sh: an accepted version stops right after
    # the version check, before anything is installed
    stamp = venv / ".pe_plugin_setup_v2"
    stamp.touch()
    newest = max((REPO / "setup.py").stat().st_mtime, (REPO / "scripts" / "setup_env.sh").stat().st_mtime)
    os.utime(stamp, (newest + 10, newest + 10))
    return subprocess.run(["bash", str(REPO / "scripts" / "setup_env.sh")], text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, env={"PATH": "/usr/bin:/bin", "VENV": str(venv),
                                                       "PYTHON": str(fake_python(tmp_path, reported))})


@pytest.mark.parametrize("reported", ["3.9", "3.10", "3.13", "2.7"])
def test_setup_env_refuses_other_versions(tmp_path, reported):
    proc = setup_env(tmp_path, reported)
    assert proc.returncode == 2, proc.stderr
    assert f"error: Python {reported} is not supported" in proc.stderr
    assert f"needs Python {version(FLOOR)} or {version(CEILING)}" in proc.stderr


@pytest.mark.parametrize("reported", [version(FLOOR), version(CEILING)])
def test_setup_env_accepts_the_range(tmp_path, reported):
    proc = setup_env(tmp_path, reported)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


def test_no_fallbacks_for_unsupported_pythons():
    """tomllib is standard from 3.11 on: no module carries a tomli fallback for older Pythons."""
    files = [p for d in ("pe_plugin", "pe_tools", "scripts", "tests") for p in (REPO / d).rglob("*.py")]
    offenders = [str(p.relative_to(REPO)) for p in files
                 if re.search(r"^\s*(import tomli\b|from tomli\b)", p.read_text(), re.M)]
    assert not offenders, offenders


def test_code_parses_at_the_floor():
    """No syntax newer than the floor in the package, the scripts or the tests."""
    files = [p for d in ("pe_plugin", "pe_tools", "scripts", "tests") for p in (REPO / d).rglob("*.py")]
    assert len(files) > 20
    for path in files:
        ast.parse(path.read_text(), filename=str(path), feature_version=FLOOR)


def older_python():
    """An interpreter older than the floor on PATH or under pyenv, if there is one."""
    candidates = [shutil.which(name) for name in ("python3.10", "python3.9")]
    candidates += sorted(str(p) for p in (Path.home() / ".pyenv" / "versions").glob("3.*/bin/python"))
    for exe in filter(None, candidates):
        probe = subprocess.run([exe, "-c", "import sys; sys.exit(not (3, 0) <= sys.version_info < (3, 11))"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if probe.returncode == 0:
            return exe
    return None


def test_importing_pe_plugin_on_an_older_python_says_why():
    """A real interpreter older than the floor where one is installed; else this one, reporting 3.10 (the
    check reads sys.version_info, and nothing before it needs a newer Python)."""
    older = older_python()
    code = "import pe_plugin" if older else "import sys; sys.version_info = (3, 10, 13, 'final', 0); import pe_plugin"
    proc = subprocess.run([older or sys.executable, "-c", code], cwd=REPO, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.returncode != 0
    assert f"pe_plugin needs Python {version(FLOOR)} or newer" in proc.stderr
    assert sys.version_info >= FLOOR  # and the interpreter running the tests is a supported one


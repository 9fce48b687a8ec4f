"""The test suite's own layout: tests are filed by the subject they check, and what several test files share lives in
a helper module (tests/pe_*.py, conftest.py), never in a test file that another one imports. A test module that
imports another runs that module's code (and its fixtures' imports) a second time under another name, and ties
the two files' contents together: moving a test then breaks a file that does not hold it. Files named after how
their tests were made, rather than what they check, are not kept."""
import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
TEST_MODULES = {p.stem for p in TESTS.glob("test_*.py")}


def imported_modules(path: Path) -> list:
    """(line, module) of every import in ``path``, at any depth (a test's own ``import`` included)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
            found.append((node.lineno, node.args[0].value))
    return found


def imports_of_test_modules(path: Path) -> list:
    """The imports in ``path`` of a module of tests/test_*.py, each as FILE:LINE imports MODULE."""
    return [f"{path.name}:{line} imports {module}" for line, module in imported_modules(path)
            if module.split(".")[0] in TEST_MODULES]


@pytest.mark.parametrize("path", sorted(TESTS.glob("*.py")), ids=lambda p: p.name)
def test_no_test_file_imports_a_test_module(path):
    """Every file under tests/ (test modules, helper modules, conftest.py) imports no test module: shared helpers
    are in tests/pe_*.py."""
    assert imports_of_test_modules(path) == [], "move what is shared into a tests/pe_*.py helper module"


def test_the_check_sees_each_form_of_import(tmp_path):
    """The check above on files written here: a module-level, a function-level, a from-import and an importlib
    import of a test module are each found; imports of helper modules and libraries are not."""
    path = tmp_path / "test_example.py"
    path.write_text("import os\nimport pe_testing\nfrom pe_references import future_mask\n"
                    "import test_relative\n"
                    "def test_x():\n    from test_posnet import loop_matmul\n"
                    "    import importlib\n    importlib.import_module('test_hub')\n")
    assert imports_of_test_modules(path) == ["test_example.py:4 imports test_relative",
                                                       "test_example.py:6 imports test_posnet",
                                                       "test_example.py:8 imports test_hub"]


def test_no_test_file_is_named_after_how_its_tests_were_made():
    """Tests are filed by subject: no test_mutation_kills*.py (tests written for a mutation run's survivors, now in
    the files of the subjects they check)."""
    assert sorted(p.name for p in TESTS.glob("test_mutation_kills*")) == []

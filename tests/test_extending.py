"""docs/extending.md can be followed to green tests: its blocks, pasted into a copy of the checkout where it says
(``<!-- file: PATH -->`` a new file, ``<!-- append: PATH ... -->`` the end of existing ones), add an encoding that
the registry-driven tests run and pass, while the tests that compare documents and GPU records with the registry
report it as pending. The guide's table of files to touch is the list of its blocks' paths."""
import os
import re
import shutil
import subprocess
import sys

import pytest

from pe_testing import REPO

GUIDE = REPO / "docs" / "extending.md"
BLOCK = re.compile(r"<!-- (file|append): ([^>]+?) -->\n```\w*\n(.*?)```", flags=re.S)
# what a copy leaves out: the environment, caches, data and runs (none of which the selected tests read)
NOT_COPIED = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.egg-info", ".pytest_cache", "data-bin",
                                    "runs", "checkpoints", "*_out")


def guide_blocks(text: str) -> list:
    """(kind, paths, body) of each block the guide asks to paste."""
    return [(kind, paths.split(), body) for kind, paths, body in BLOCK.findall(text)]


def follow_the_guide(root, text: str) -> None:
    for kind, paths, body in guide_blocks(text):
        for path in paths:
            target = root / path
            if kind == "file":
                assert not target.exists(), f"docs/extending.md: {path} is to be a new file"
                target.write_text(body, encoding="utf-8")
            else:
                assert target.is_file(), f"docs/extending.md: {path} is to be appended to, and does not exist"
                with target.open("a", encoding="utf-8") as f:
                    f.write(body)


def test_the_files_to_touch_are_the_guides_blocks():
    """"What you add" names exactly the files the blocks create or extend (no step left out of it, none listed
    that no block shows), and the new encoding's name is not one of the package's already (read from the modules'
    text: importing the registry would import fairseq)."""
    text = GUIDE.read_text(encoding="utf-8")
    table = text.split("## What you add")[1].split("\n## ")[0]
    listed = re.findall(r"`((?:pe_plugin|pe_tools|tests)/[\w./]+)`", table)
    blocks = [p for _, paths, _ in guide_blocks(text) for p in paths]
    assert sorted(listed) == sorted(blocks) and len(blocks) == len(set(blocks)) == 4, (listed, blocks)
    names = re.findall(r'^    name = "(\w+)"', text, flags=re.M)
    shipped = {m for p in (REPO / "pe_plugin" / "encodings").glob("*.py")
               for m in re.findall(r'^    name = "(\w+)"', p.read_text(encoding="utf-8"), flags=re.M)}
    assert len(names) == 1 and len(shipped) >= 11 and names[0] not in shipped


# the tests of the copy: the new encoding's own, those the registry drives (-k its name), and those that compare
# the registry with the documents and records
REGISTRY_DRIVEN = ["tests/test_fast_paths.py", "tests/test_contract.py", "tests/test_interface.py"]
AGAINST_THE_REGISTRY = [
    "tests/test_recipes.py::test_methods_table_is_the_registry",
    "tests/test_install.py::test_shared_names_are_what_pe_plugin_registers",
    "tests/test_interface.py::test_the_registry_lists_the_encodings_in_the_method_tables_order",
    "tests/test_tables.py::test_the_counts_in_the_text",
    "tests/test_tables.py::test_the_gpu_fp16_check_in_its_readme",
    "tests/test_readme.py::test_every_registered_encoding_is_in_the_method_table",
    "tests/test_readme.py::test_the_readme_is_short_and_posnet_comes_first",
    "tests/test_structure.py::test_hooks_are_what_the_encodings_override",
]


def run_pytest(root, args):
    env = dict(os.environ, PYTHONPATH=str(root), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore",
               CUDA_VISIBLE_DEVICES="")
    return subprocess.run([sys.executable, "-m", "pytest", "-v", "-rs", "-p", "no:cacheprovider", "-m", "not slow",
                           *args], cwd=root, env=env, capture_output=True, text=True)


@pytest.mark.slow
def test_an_encoding_added_as_the_guide_says_passes_the_tests(tmp_path):
    root = tmp_path / "checkout"
    shutil.copytree(REPO, root, ignore=NOT_COPIED)
    follow_the_guide(root, GUIDE.read_text(encoding="utf-8"))
    (name,) = re.findall(r'^    name = "(\w+)"', GUIDE.read_text(encoding="utf-8"), flags=re.M)

    own = run_pytest(root, [f"tests/test_{name}.py", *REGISTRY_DRIVEN, "-k", name])
    assert own.returncode == 0, own.stdout[-4000:] + own.stderr[-2000:]
    passed = re.findall(r"^(\S+) PASSED", own.stdout, flags=re.M)
    for file in [f"tests/test_{name}.py", *REGISTRY_DRIVEN]:  # each file ran the new encoding
        assert any(t.startswith(file + "::") for t in passed), (file, own.stdout[-3000:])
    assert all(name in t for t in passed), passed

    against = run_pytest(root, AGAINST_THE_REGISTRY)
    assert against.returncode == 0, against.stdout[-4000:] + against.stderr[-2000:]
    pending = re.findall(rf"SKIPPED \[\d+\] (\S+): pending: {name} not yet in ([^(]+) \(", against.stdout)
    assert sorted(where.strip() for _, where in pending) == [
        "README.md's method table", "examples/benchmarks/gpu/fp16_check.json"], against.stdout[-3000:]
    assert re.search(r"\b6 passed, 2 skipped\b", against.stdout), against.stdout[-2000:]

"""The README stays true: every method is in its table, every file and make target it names exists, and
the test command it gives is the one CI runs."""
import re

from pe_testing import REPO

from pe_plugin.encodings import PE_REGISTRY

README = (REPO / "README.md").read_text()


def test_every_registered_encoding_is_in_the_method_table():
    rows = {m.group(1) for m in re.finditer(r"^\| `([a-z0-9_]+)` \|", README, flags=re.M)}
    assert rows == set(PE_REGISTRY)
    for pe in PE_REGISTRY:
        assert f"transformer_{pe}_wmt_en_de" in README


def test_files_the_readme_names_exist():
    paths = set(re.findall(r"\b((?:scripts|examples|pe_plugin|tests)/[\w./-]+\.(?:py|sh|toml|md))", README))
    assert paths, "the README names no files"
    missing = sorted(p for p in paths if not (REPO / p).exists())
    assert not missing, missing


def test_make_targets_exist_and_ci_runs_the_readme_test_command():
    makefile = (REPO / "Makefile").read_text()
    for target in re.findall(r"^make (\w[\w-]*)", README, flags=re.M):
        assert re.search(rf"^{target}:", makefile, flags=re.M), f"make {target} is in the README only"
    assert "make test" in README and "make test" in (REPO / ".ci" / "run").read_text()

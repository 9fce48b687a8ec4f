"""What a user reads speaks to users: the README, docs/ (but docs/dev/, the contributor notes), the examples'
READMEs and the --help of every console script of setup.py and every ``python -m`` entry point (with each
sub-command's, and the flag listing of every encoding's architecture) name no issue of the project's tracker and
none of the words of the environment the project is developed in. Each --help runs in this process."""
import contextlib
import importlib
import io
import re
import runpy
import sys

import pytest

from pe_testing import REPO

# issue references, and the words of the development environment (its GPU machines lent for short uses, the
# folders carried to them, the agents that work on the project)
ISSUE = re.compile(r"\bissues? \d+|(?<![\w/&(])#[1-9]\d*\b", flags=re.I)
DEVELOPMENT_WORDS = re.compile(r"\bGPU windows?\b|\bsessions?\b|\boffline node\b|\bcarried folder\b|\bwindow carries\b"
                               r"|\bhelpers?\b|\blent\b", flags=re.I)


def user_documents() -> list:
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "examples").glob("**/README.md"))]
    return [p for p in docs if "dev" not in p.relative_to(REPO).parts]


def findings(text: str) -> list:
    """(line number, what) of each issue reference or development word in ``text`` (HTML comments, which a reader
    of the rendered page does not see, left out; their lines keep their numbers)."""
    text = re.sub(r"<!--.*?-->", lambda m: "\n" * m[0].count("\n"), text, flags=re.S)
    return [(n, m[0]) for n, line in enumerate(text.split("\n"), 1)
            for pattern in (ISSUE, DEVELOPMENT_WORDS) for m in pattern.finditer(line)]


def test_the_scan_finds_what_it_looks_for():
    """The words of the issue that asked for this test, as they stood in the documents, are found; ordinary uses
    of the same letters are not."""
    found = [what for _, what in findings(
        "see issue 41\n(issue 29)\nfixed in #12\none window a pair (one GPU window a pair)\na short session on an "
        "offline node\ndata is the carried folder\nthe data folder a window carries\nthe helper passes\nlent\n")]
    assert found == ["issue 41", "issue 29", "#12", "GPU window", "session", "offline node", "carried folder",
                     "window carries", "helper", "lent"]
    assert findings("a 3-5-word window\n[2](#2-the-module)\n`--fp16-scale-window`\nsample #0\nhelpful\n"
                    "<!-- table: a.md#1 -->\nsilent, talent\n") == []


def test_user_documents_name_no_issue_and_no_development_word():
    docs = user_documents()
    assert REPO / "docs" / "extending.md" in docs and len(docs) >= 20
    assert not any("dev" in p.parts for p in docs)
    bad = [f"{p.relative_to(REPO)}:{n}: {what}" for p in docs for n, what in findings(p.read_text(encoding="utf-8"))]
    assert not bad, bad


def help_text(target, argv) -> str:
    """What ``target()`` prints with ``sys.argv`` = ``argv`` (a --help: argparse exits after printing)."""
    out, old = io.StringIO(), sys.argv
    sys.argv = list(argv)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            target()
    except SystemExit:
        pass
    finally:
        sys.argv = old
    return out.getvalue()


def console_scripts() -> dict:
    """{name: the function} of setup.py's console scripts."""
    declared = re.findall(r'"(pe-[\w-]+) = ([\w.]+):(\w+)"', (REPO / "setup.py").read_text())
    assert len(declared) >= 13
    return {name: getattr(importlib.import_module(module), function) for name, module, function in declared}


def module_mains() -> list:
    """The modules of the wheel's packages that run as ``python -m MODULE`` with options."""
    found = []
    for path in sorted([*REPO.glob("pe_plugin/**/*.py"), *REPO.glob("pe_tools/**/*.py")]):
        source = path.read_text(encoding="utf-8")
        if ('__name__ == "__main__"' in source or path.name == "__main__.py") and "ArgumentParser" in source:
            found.append(".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__main__"))
    return found


def sub_commands(text: str) -> list:
    m = re.search(r"^positional arguments:\n\s+\{([\w,-]+)\}", text, flags=re.M)
    return m[1].split(",") if m else []


def every_help() -> dict:
    """{command as typed: its --help} of every console script and entry point, and of each of their sub-commands;
    `python -m pe_plugin ARCH` for every encoding's tiny architecture."""
    from pe_plugin.encodings import PE_REGISTRY

    targets = {name: function for name, function in console_scripts().items()}
    for module in module_mains():
        targets[f"python -m {module}"] = lambda module=module: runpy.run_module(module, run_name="__main__",
                                                                                 alter_sys=True)
    helps = {}
    for command, target in targets.items():
        text = help_text(target, [command, "--help"])
        helps[command] = text
        for sub in sub_commands(text):
            helps[f"{command} {sub}"] = help_text(target, [command, sub, "--help"])
    run_plugin = targets["python -m pe_plugin"]
    for pe in PE_REGISTRY:
        helps[f"python -m pe_plugin transformer_{pe}_tiny"] = help_text(run_plugin, ["pe_plugin", f"transformer_{pe}_tiny"])
    return helps


@pytest.mark.slow  # about 40 --help runs in this process: 7 s on an idle core
def test_no_help_names_an_issue_or_a_development_word():
    helps = every_help()
    assert {"pe-train", "pe-queue run", "pe-bench cost", "python -m pe_tools.recipes.curves",
            "python -m pe_plugin transformer_kerple_tiny"} <= set(helps)
    assert all(len(text) > 100 for command, text in helps.items()), [c for c, t in helps.items() if len(t) <= 100]
    bad = [f"{command}: {what}" for command, text in helps.items() for _, what in findings(text)]
    assert not bad, bad

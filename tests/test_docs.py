"""The repository stands on its own: every design note the code cites is in docs/, every citation
``docs/NAME.md §SECTION`` (or link ``docs/NAME.md#anchor``) names a section that exists, and nothing points at
notes outside the repository."""
import re
import subprocess
from pathlib import Path

import pytest
from pe_testing import REPO

DOCS = REPO / "docs"
# the user documents (docs/NAME.md) and the contributor notes (docs/dev/NAME.md, named "dev/NAME")
NOTES = sorted(str(p.relative_to(DOCS).with_suffix("")) for p in [*DOCS.glob("*.md"), *DOCS.glob("dev/*.md")])
NOTE = re.compile(r"docs/((?:dev/)?\w+)\.md")


def tracked_text_files():
    """The repository's text files (tracked or new, not ignored), this test file excepted."""
    names = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                           text=True, stdout=subprocess.PIPE, check=True).stdout.split("\n")
    for name in filter(None, names):
        path = REPO / name
        if path.suffix in {".py", ".md", ".toml", ".sh", ".txt", ".cfg"} or path.name == "Makefile":
            if path.is_file() and path.resolve() != Path(__file__).resolve():
                yield path


def headings(note: str):
    return [m[1].strip() for m in re.finditer(r"^#{2,3} (.+)$", (DOCS / f"{note}.md").read_text(), re.M)]


def section_keys(note: str):
    """What ``§...`` may name: a heading's full title, or the id that starts it (``D8`` for "D8 AT5's ...", ``7``
    for "7. One run on several nodes")."""
    keys = set()
    for title in headings(note):
        keys.add(title)
        if re.match(r"[A-Z]\d+ ", title):
            keys.add(title.split()[0])
        numbered = re.match(r"(\d+)\. ", title)
        if numbered:
            keys.add(numbered[1])
    return keys


def github_anchor(title: str) -> str:
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def citations():
    """(file, line number, note, section or '#anchor') for every citation of a note in the repository."""
    found = []
    for path in tracked_text_files():
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for m in re.finditer(NOTE.pattern + r"(#[\w-]+)?", line):
                note, anchor = m[1], m[2]
                if anchor:
                    found.append((path, n, note, anchor))
                # the sections cited right after it: "docs/x.md §A, §B and §C"
                rest = re.split(NOTE.pattern, line[m.end():], maxsplit=1)[0]
                rest = re.match(r"[^).;:\"`]*(?:\([^)]*\)[^).;:\"`]*)*", rest)[0]
                for s in re.finditer(r"§", rest):
                    found.append((path, n, note, rest[s.end():]))
    return found


def test_the_notes_exist():
    assert {"encodings", "fairseq", "evaluation", "analysis"} <= set(NOTES)


def test_every_note_named_exists():
    """Every docs/NAME.md or docs/dev/NAME.md that a file of the repository names exists (a note that moved leaves
    no reference to its old place); docs/dev/ holds the contributor notes, among them the test suite's."""
    named = {(path, n, m[1]) for path in tracked_text_files()
             for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1) for m in NOTE.finditer(line)}
    missing = sorted(f"{p.relative_to(REPO)}:{n}: docs/{note}.md" for p, n, note in named if note not in NOTES)
    assert not missing, missing
    assert {"dev/testing", "dev/timings", "extending"} <= {note for _, _, note in named}  # the names are read


def layout_rows() -> dict:
    """{package folder: [module names]} of docs/design.md's table of the pe_tools modules."""
    text = (DOCS / "design.md").read_text(encoding="utf-8").split("<!-- modules:")[1].split("\n\n")[0]
    rows = re.findall(r"^\| `(pe_tools/[\w/]*)` \| (.*) \|$", text, flags=re.M)
    return {package: re.findall(r"`(\w+)`", re.sub(r"\([^)]*\)", "", modules)) for package, modules in rows}


def test_the_design_layout_names_every_module_of_pe_tools():
    """docs/design.md's Layout table names each package of pe_tools and, in its row, every module of it (a module
    added or moved without the table, or a row naming one that is gone, fails)."""
    tree = {}
    for init in sorted((REPO / "pe_tools").rglob("__init__.py")):
        folder = init.parent
        tree[f"{folder.relative_to(REPO)}/"] = sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__")
    assert len(tree) >= 7 and len(tree["pe_tools/recipes/"]) >= 10  # the tree is read
    assert {package: sorted(modules) for package, modules in layout_rows().items()} == tree


def test_every_citation_names_an_existing_section():
    cites = citations()
    assert len(cites) >= 26  # the code cites its notes; an empty list would mean this test reads nothing
    bad = []
    for path, n, note, target in cites:
        where = f"{path.relative_to(REPO)}:{n}"
        if note not in NOTES:
            bad.append(f"{where}: docs/{note}.md does not exist")
        elif target.startswith("#"):
            if target[1:] not in {github_anchor(t) for t in headings(note)}:
                bad.append(f"{where}: docs/{note}.md has no heading for {target}")
        elif not any(target.startswith(k) and not target[len(k):len(k) + 1].isalnum() for k in section_keys(note)):
            bad.append(f"{where}: docs/{note}.md has no section §{target.strip()[:40]}")
    assert not bad, "\n".join(bad)


# the design notes beside the checkout, which the code once cited (patterns assembled so that a grep for them
# does not find this file); its Multi30k text, which the tests re-score recorded results with where present, is data
OUTSIDE = ["shared" + r"/(?!data/multi30k)", r"\.\./" + "shared" + r"(?!/data/multi30k)",
           r"\b(" + "|".join(["ENCODINGS", "FAIRSEQ", "EVALUATION", "ANALYSIS", "ARCHITECTURE", "STYLE"]) + r")\.md"]


@pytest.mark.parametrize("pattern", OUTSIDE)
def test_nothing_points_outside_the_repository(pattern):
    hits = [f"{p.relative_to(REPO)}:{n}: {line.strip()}" for p in tracked_text_files()
            for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1) if re.search(pattern, line)]
    assert not hits, "\n".join(hits)

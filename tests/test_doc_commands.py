"""The commands of the README and docs/ run as written on a fresh clone and translate every test sentence.

A bash block of README.md or of the docs/ this test owns carries one of two markers on the line above it:

    <!-- commands: run -->     runs as written from a fresh clone in minutes on a CPU (tiny models); the slow test
                               below runs it in a copy of the checkout's tracked files and compares what it prints
                               after its training (decoding, averaging) with the output block after it
                               (``<!-- output: PATH -->``, a recorded file)
    <!-- commands: check -->   needs data, hours or a GPU: not run; its commands and flags are checked (here, and
                               by tests/test_readme.py, which parses every command with its program's parser)

(a block followed by ``<!-- output: command -->`` is run by tests/test_readme.py and needs no marker). Whatever its
marker, a fairseq-generate command passes ``--required-batch-size-multiple 1`` (without it fairseq 0.12 drops a
last batch: 4 of the quick start's 100 test sentences), and a fairseq-train command of a `run` block passes
``--no-epoch-checkpoints`` (else one checkpoint per epoch: 39 files for the quick start).
"""
import os
import re
import shutil
import subprocess
import sys

import pytest
from pe_testing import REPO

# README.md and the docs this test owns (docs/results.md, benchmarks*.md, design.md and hub.md have other owners;
# their commands are parsed by tests/test_readme.py all the same)
NOT_OWNED = {"results.md", "benchmarks.md", "benchmarks_cpu.md", "design.md", "extending.md", "hub.md"}
OWNED = ["README.md", *sorted(f"docs/{p.name}" for p in (REPO / "docs").glob("*.md") if p.name not in NOT_OWNED)]
ALL_DOCS = ["README.md", *sorted(f"docs/{p.name}" for p in (REPO / "docs").glob("*.md")),
            *sorted(str(p.relative_to(REPO)) for p in (REPO / "examples").glob("*/README.md"))]
MARKER = re.compile(r"<!-- commands: (\w+) -->")


def bash_blocks(doc: str):
    """(line number, marker or None, text, the path of the output marker after it or None, the lines of the output
    block) of every bash block of ``doc``."""
    lines = (REPO / doc).read_text(encoding="utf-8").split("\n")
    found = []
    for n, line in enumerate(lines):
        if line != "```bash":
            continue
        end = lines.index("```", n + 1)
        m = MARKER.fullmatch(lines[n - 1].strip()) if n else None
        # the output marker after the block, before the next code block (prose may come between)
        output, shown, k = None, [], end + 1
        while k < len(lines) and not lines[k].startswith("```") and output is None:
            output = re.fullmatch(r"<!-- output: (.+) -->", lines[k].strip())
            k += 1
        if output and k < len(lines) and lines[k] == "```":
            shown = lines[k + 1:lines.index("```", k + 1)]
        found.append((n + 1, m[1] if m else None, "\n".join(lines[n + 1:end]), output[1] if output else None, shown))
    return found


def commands(text: str):
    """The commands of a block: continuation lines joined, comments dropped."""
    joined = text.replace("\\\n", " ")
    return [re.sub(r"\s+#.*$", "", c).strip() for c in joined.split("\n") if c.strip() and not c.strip().startswith("#")]


RUN_BLOCKS = [(doc, n, text, output, shown) for doc in OWNED for n, kind, text, output, shown in bash_blocks(doc)
              if kind == "run"]


def test_every_block_is_marked():
    unmarked = [f"{doc}:{n}" for doc in OWNED for n, kind, _, output, _ in bash_blocks(doc)
                if kind not in ("run", "check") and output != "command"]
    assert not unmarked, f"bash blocks without <!-- commands: run --> or <!-- commands: check -->: {unmarked}"
    assert {doc for doc, *_ in RUN_BLOCKS} >= {"README.md", "docs/recipes.md"}  # the quick start and the toy recipe


def test_run_blocks_start_from_a_fresh_clone():
    """A fresh clone has no .venv: a run block's first line sets it up (`make setup`) before it activates it."""
    for doc, n, text, _, _ in RUN_BLOCKS:
        first = commands(text)[0]
        assert first.startswith("make setup &&") or ". .venv/bin/activate" not in text, f"{doc}:{n}: {first}"


def test_every_decode_command_keeps_every_sentence():
    """fairseq-generate and fairseq-validate everywhere in the documentation: --required-batch-size-multiple 1, and
    never --skip-invalid-size-inputs-valid-test (it drops test sentences beyond the model's positions);
    fairseq-validate also names its task and batch size (docs/fairseq.md §fairseq-validate)."""
    checked = 0
    for doc in ALL_DOCS:
        for n, _, text, _, _ in bash_blocks(doc):
            for command in commands(text):
                for part in command.split("|"):
                    words = part.split()
                    if words[:1] not in (["fairseq-generate"], ["fairseq-validate"]):
                        continue
                    checked += 1
                    if words[0] == "fairseq-validate":
                        assert {"--task", "--max-tokens"} <= set(words), f"{doc}:{n}: {part.strip()}"
                    at = words.index("--required-batch-size-multiple") if "--required-batch-size-multiple" in words else -1
                    assert at > 0 and words[at + 1] == "1", f"{doc}:{n}: {part.strip()}"
                    assert "--skip-invalid-size-inputs-valid-test" not in words, f"{doc}:{n}: {part.strip()}"
    assert checked >= 3  # README: quick start and WMT14; docs/recipes.md: the toy block


def test_run_blocks_save_no_epoch_checkpoints_and_show_every_sentence():
    for doc, n, text, output, shown in RUN_BLOCKS:
        trains = [c for c in commands(text) if c.startswith("fairseq-train ")]
        assert trains and all("--no-epoch-checkpoints" in c.split() for c in trains), f"{doc}:{n}"
        # the toy corpus's test split, from the block's own command line; the output shows that many translated
        tests = {int(m[1]) for c in commands(text) for m in re.finditer(r"toy_corpus\.py .*--test (\d+)", c)}
        assert len(tests) == 1, f"{doc}:{n}: no `scripts/toy_corpus.py ... --test N`"
        assert output and shown, f"{doc}:{n}: a run block is followed by its recorded output"
        translated = [int(m[1]) for line in shown for m in re.finditer(r"Translated (\d+) sentences", line)]
        assert translated == [tests.pop()], f"{doc}:{n}: {shown}"
        assert all(line in (REPO / output).read_text(encoding="utf-8").split("\n") for line in shown)


def fresh_clone(dest):
    """The checkout's tracked and new (not ignored) files, as a clone of it would hold them, with this
    interpreter's environment as .venv."""
    names = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO, text=True,
                           stdout=subprocess.PIPE, check=True).stdout.split("\n")
    for name in filter(None, names):
        src = REPO / name
        if src.is_file() and not name.startswith(("examples/", "tests/")):
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    (dest / ".venv").symlink_to(sys.prefix)
    # `make setup` in the copy finds this environment set up: its stamp newer than the copy's setup files (else it
    # would install the copy, editable, into this environment)
    stamp = (dest / ".venv" / ".pe_plugin_setup_v2").stat().st_mtime
    for name in ("setup.py", "scripts/setup_env.sh"):
        os.utime(dest / name, (stamp - 1, stamp - 1))


def shape(line: str) -> str:
    """A line with its numbers replaced: what must match between machines."""
    return re.sub(r"\d+(\.\d+)?", "N", line)


@pytest.mark.slow
@pytest.mark.parametrize("doc, n, text, output, shown", RUN_BLOCKS, ids=[f"{d}:{n}" for d, n, *_ in RUN_BLOCKS])
def test_run_block_runs_as_written(doc, n, text, output, shown, tmp_path):
    """The block, as written, in a fresh copy: it succeeds, prints the lines shown (numbers may differ by machine;
    the sentence count and the reference length may not), and leaves no epoch checkpoints."""
    fresh_clone(tmp_path)
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
               OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", PYTHONWARNINGS="ignore")
    steps = commands(text)
    last_train = max(i for i, c in enumerate(steps) if c.startswith("fairseq-train "))
    # what the documents show is what the block prints after training: its decoding (and averaging)
    script = "\n".join(["set -e -o pipefail", "{", *steps[:last_train + 1], "} > block.log 2>&1", *steps[last_train + 1:]])
    proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True)
    log = (tmp_path / "block.log").read_text() if (tmp_path / "block.log").exists() else ""
    assert proc.returncode == 0, log[-2000:] + proc.stderr[-3000:]
    printed = [line.replace(str(tmp_path) + "/", "") for line in proc.stdout.strip().split("\n")]
    assert [shape(line) for line in printed] == [shape(line) for line in shown], printed
    for line, recorded in zip(printed, shown):
        for fixed in (r"Translated (\d+) sentences", r"reflen=(\d+)"):  # every sentence, the whole reference
            assert re.findall(fixed, line) == re.findall(fixed, recorded), (line, recorded)
    bleu = [float(m[1]) for line in printed for m in re.finditer(r"BLEU4 = ([\d.]+)", line)]
    assert bleu and bleu[0] > 60, printed  # the toy task is learnt
    saved = {p.name for p in (tmp_path / "checkpoints").glob("*/*.pt")}
    assert saved and not any(re.fullmatch(r"checkpoint\d+\.pt", name) for name in saved), saved
    # the document's Python blocks that use what the block trained (the hub on its checkpoints) run too
    save_dirs = {m[1] for c in steps for m in re.finditer(r"--save-dir (\S+)", c)}
    blocks = [b for b in re.findall(r"```python\n(.*?)```", (REPO / doc).read_text(), flags=re.S)
              if any(d in b for d in save_dirs)]
    assert blocks or doc != "README.md", "the README's hub example on the quick start's model"
    for block in blocks:
        py = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert py.returncode == 0 and py.stdout.strip(), py.stderr[-3000:]

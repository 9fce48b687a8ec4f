"""The README stays true: every method is in its table, every file and make target it names exists, the
test command it gives is the one CI runs, every command of it and of docs/ parses, and the outputs it shows are
what the commands print. It stays short: at most 300 lines, with the PosNet-Embed commands near the top."""
import ast
import contextlib
import importlib
import inspect
import io
import os
import re
import runpy
import shlex
import subprocess
import sys

import pytest

from pe_testing import REPO, flag_values

from pe_plugin.encodings import PE_REGISTRY
from pe_plugin.models.architectures import architecture_names

README = (REPO / "README.md").read_text()


def test_every_registered_encoding_is_in_the_method_table():
    """Every row of the method table is a registered encoding with its example architecture; an encoding added
    since (docs/extending.md) and without a row yet is reported as pending."""
    from pe_documented import not_yet_in, readme_methods, report_pending

    rows = readme_methods()
    assert rows and set(rows) <= set(PE_REGISTRY), set(rows) - set(PE_REGISTRY)
    for pe in rows:
        assert f"| `transformer_{pe}_wmt_en_de` |" in README, pe
    report_pending(not_yet_in(rows, PE_REGISTRY), "README.md's method table", "a row when you publish it")


def test_files_the_readme_names_exist():
    paths = set(re.findall(r"\b((?:scripts|examples|pe_plugin|pe_tools|tests)/[\w./-]+\.(?:py|sh|toml|md))", README))
    assert paths, "the README names no files"
    missing = sorted(p for p in paths if not (REPO / p).exists())
    assert not missing, missing


def test_make_targets_exist_and_ci_runs_the_readme_test_command():
    makefile = (REPO / "Makefile").read_text()
    for target in re.findall(r"^make (\w[\w-]*)", README, flags=re.M):
        assert re.search(rf"^{target}:", makefile, flags=re.M), f"make {target} is in the README only"
    assert "make test" in README and "make test" in (REPO / ".ci" / "run").read_text()


# ------------------------------------------------------------------------------------------------
# Every command of the README's bash blocks exists, and so does every flag it passes

RECIPE_READMES = "".join((REPO / "examples" / recipe / "README.md").read_text() for recipe in ("wmt14", "multi30k"))
# docs/ too, but for the two notes other sessions write (docs/benchmarks.md, docs/hub.md)
DOCS = "".join(p.read_text() for p in sorted((REPO / "docs").glob("*.md")) if p.name not in ("benchmarks.md", "hub.md"))
BASH_BLOCKS = re.findall(r"```bash\n(.*?)```", README + RECIPE_READMES + DOCS, flags=re.S)
QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
SUBCOMMANDS = ("scripts/benchmark.py", "scripts/launch.py")  # their flags are listed by `SCRIPT SUB --help`
# the script behind each wrapper, and the arguments that select its sub-command
WRAPPERS = {"examples/wmt14/prepare.sh": ["scripts/prepare_data.py"],
            "examples/wmt14/train.sh": ["scripts/launch.py", "train"],
            "examples/wmt14/generate.sh": ["scripts/launch.py", "generate"]}
# the console scripts setup.py declares: the module behind each, and the arguments that select its sub-command
CONSOLE_SCRIPTS = {"pe-prepare": ["pe_tools.data.cli"], "pe-train": ["pe_tools.recipes.launch", "train"],
                   "pe-generate": ["pe_tools.recipes.launch", "generate"], "pe-record": ["pe_tools.recipes.launch", "record"],
                   "pe-report": ["pe_tools.recipes.launch", "report"], "pe-evaluate": ["pe_tools.scoring.cli"],
                   "pe-average": ["pe_tools.average"], "pe-probe": ["pe_tools.probe"],
                   "pe-swap-probe": ["pe_tools.swap_probe"], "pe-bench": ["pe_tools.bench.cli"],
                   "pe-demo": ["pe_tools.demo"], "pe-length": ["pe_tools.length_experiment"],
                   "pe-queue": ["pe_tools.recipes.queue_cli"]}


def without_redirections(words):
    """A command's words without the shell's redirections (``2>&1``, ``> FILE``, ``2>FILE``)."""
    kept, skip = [], False
    for w in words:
        if skip:
            skip = False
        elif re.fullmatch(r"\d*>>?&\d+", w) or re.fullmatch(r"\d*>>?\S+", w):
            continue
        elif re.fullmatch(r"\d*>>?", w):
            skip = True  # the file name follows
        else:
            kept.append(w)
    return kept


def readme_commands(blocks=None):
    """(program, flags, words) of every command in the bash blocks of the README, the recipes' READMEs and
    docs/: continuation lines joined, commands split at pipes, `;`, `&&` and `$(` outside quotes; a quoted
    word is one word, without its quotes; shell keywords and variable assignments skipped."""
    commands = []
    for block in BASH_BLOCKS if blocks is None else blocks:
        block = re.sub(r"<<'(\w+)'\n.*?\n\1\n", "\n", block, flags=re.S)  # a here-document is no command
        quoted = []

        def hide(m):  # a quoted word may hold `|`, `(` or `#`: set it aside until the words are split
            quoted.append(shlex.split(m[0])[0])
            return f"\0{len(quoted) - 1}\0"

        text = re.sub(r"(^|\s)#[^\n]*", r"\1", block.replace("\\\n", " "), flags=re.M)  # comments
        text = QUOTED.sub(hide, text)
        # `$(for X in WORDS; do echo ARGS; done)` stands for ARGS, arguments of the command around it
        text = re.sub(r"\$\(for \w+ in [^;]*; do echo ([^;]*); done\)", r"\1", text)
        for part in re.split(r"\||;|&&|\$\(|\)|\n", text):
            words = [re.sub(r"\0(\d+)\0", lambda m: quoted[int(m[1])], w) for w in part.split()]
            words = without_redirections(words)
            while words and (words[0] in ("do", "done") or "=" in words[0]):
                words = words[1:]
            if not words or words[0] in ("for", "echo"):  # `for NAME in WORDS`, `echo TEXT`: no command to check
                continue
            prog = words[0]
            if prog == "python" and words[1:3] == ["-m", "pe_plugin"]:
                prog = "python -m pe_plugin"
            elif prog == "python" and len(words) > 1 and words[1].endswith(".py"):
                prog = words[1]
                if prog in SUBCOMMANDS and len(words) > 2 and not words[2].startswith("-"):
                    prog = f"{prog} {words[2]}"
            elif prog == "pe-bench" and len(words) > 1 and not words[1].startswith("-"):
                prog = f"pe-bench {words[1]}"
            commands.append((prog, sorted({w.split("=")[0] for w in words if w.startswith("--")}), words))
    return commands


def help_text(prog: str) -> str:
    """What `python -m MODULE ... --help` (or `python SCRIPT ... --help`) prints, run in this interpreter: the
    module or script executed as __main__ by runpy, as the interpreter's -m would (no new interpreter importing
    torch and fairseq for each program; the console scripts' entry points are run in test_install)."""
    if prog.split()[0] in CONSOLE_SCRIPTS:
        module, *args = [*CONSOLE_SCRIPTS[prog.split()[0]], *prog.split()[1:]]
        target = lambda: runpy.run_module(module, run_name="__main__", alter_sys=True)  # noqa: E731
    elif prog in WRAPPERS or prog.startswith("scripts/"):
        script, *args = WRAPPERS[prog] if prog in WRAPPERS else prog.split()
        target = lambda: runpy.run_path(str(REPO / script), run_name="__main__")  # noqa: E731
        args = [str(REPO / script), *args]
    else:
        raise AssertionError(prog)
    out, err, argv, cwd = io.StringIO(), io.StringIO(), sys.argv, os.getcwd()
    sys.argv = ["python", *args, "--help"] if prog.split()[0] in CONSOLE_SCRIPTS else [*args, "--help"]
    try:
        os.chdir(REPO)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            target()
        code = 0
    except SystemExit as e:
        code = e.code or 0
    finally:
        sys.argv = argv
        os.chdir(cwd)
    assert code == 0, (prog, err.getvalue()[-2000:])
    return out.getvalue()


FAIRSEQ_PARSERS = {"fairseq-train": "get_training_parser", "fairseq-generate": "get_generation_parser",
                   "fairseq-interactive": "get_interactive_generation_parser", "fairseq-preprocess": "get_preprocessing_parser",
                   "fairseq-validate": "get_validation_parser"}


def fairseq_rejects(prog: str, words) -> str:
    """What fairseq's own parser says of the command line (empty when it parses). Its --help cannot serve: it
    prints before the architecture, task, BPE and tokenizer add their flags."""
    from fairseq import options

    parser = getattr(options, FAIRSEQ_PARSERS[prog])()
    # --user-dir pe_plugin or path/to/pe_plugin (a copy of the folder): this checkout's, wherever pytest runs
    argv = [str(REPO / "pe_plugin") if w == "pe_plugin" or w.endswith("/pe_plugin") else w for w in words[1:]]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            if prog == "fairseq-preprocess":
                parser.parse_args(argv)
            else:
                options.parse_args_and_arch(parser, argv)
    except SystemExit:
        return err.getvalue()[-1000:] or "exit"
    return ""


def test_every_readme_command_and_flag_exists():
    commands = readme_commands()
    programs = {p for p, _, _ in commands}
    assert {"make", "python", "scripts/demo.py", "examples/wmt14/train.sh", "fairseq-train"} <= programs | {"python"}
    helps = {}
    for prog, flags, words in commands:
        if prog in (".", "make", "tr", "grep", "head", "tail", "mkdir", "python", "torchrun", "xargs", "git", "export",
                    "cd", "squeue", "scontrol", "scancel"):  # the shell's, git's and SLURM's own commands
            continue
        if prog == "python -m pe_plugin":
            assert set(words[3:]) <= set(architecture_names()), f"the README describes {words[3:]}: not registered"
            continue
        if prog in FAIRSEQ_PARSERS:
            error = fairseq_rejects(prog, words)
            assert not error, f"fairseq rejects the README's {' '.join(words)}: {error}"
            continue
        assert prog.split()[0] in CONSOLE_SCRIPTS or (REPO / prog.split()[0]).exists(), \
            f"the README runs {prog}, which does not exist"
        helps.setdefault(prog, help_text(prog))
        missing = [f for f in flags if f not in ("--help",) and not re.search(rf"{re.escape(f)}\b", helps[prog])]
        assert not missing, f"the README passes {missing} to {prog}, which does not know them"


def test_console_scripts_are_the_ones_setup_py_declares():
    """The README's console scripts are those of setup.py, each naming the module the tests run."""
    setup = (REPO / "setup.py").read_text()
    declared = dict(re.findall(r'"(pe-[\w-]+) = ([\w.]+):\w+"', setup))
    assert declared == {name: argv[0] for name, argv in CONSOLE_SCRIPTS.items()}
    for name in CONSOLE_SCRIPTS:
        assert f"`{name}" in README, f"the README does not mention {name}"


# ------------------------------------------------------------------------------------------------
# A README a newcomer reads in five minutes

def test_the_readme_is_short_and_posnet_comes_first():
    lines = README.split("\n")
    assert len(lines) - (lines[-1] == "") <= 300, f"README.md has {len(lines)} lines; move details to docs/"
    head = "\n".join(lines[:120])
    for needed in ("fairseq-train", "--arch transformer_posnet_embed_wmt_en_de", "transformer_posnet_embed_tiny",
                   "fairseq-generate", "from pe_plugin.hub import from_pretrained", "docs/hub.md",
                   "make test-fast", "transformer_<pe>_<size>", "--pe-attention-impl"):
        assert needed in head, f"{needed!r} is not in the README's first 120 lines"


def test_the_posnet_command_is_the_recipes():
    """The README's fairseq-train command for PosNet-Embed has every flag of `pe-train posnet_embed` (the WMT14
    recipe) with the same value, but the launcher's own (languages, seed, run folder, logging) and with --fp16,
    which the launcher adds on a GPU."""
    from pe_tools.recipes import load_table
    from pe_tools.recipes.train import train_argv

    commands = readme_commands(re.findall(r"```bash\n(.*?)```", README, flags=re.S))
    shown = [w for p, _, w in commands if p == "fairseq-train" and "transformer_posnet_embed_wmt_en_de" in w]
    assert len(shown) == 1, shown
    readme = flag_values(shown[0][1:])
    recipe = flag_values(train_argv(load_table("wmt14"), "posnet_embed", "en-de", "base", 1, "data", "run",
                                    extra=["--cpu"]))
    own = {"--user-dir", "--source-lang", "--target-lang", "--seed", "--save-dir", "--log-format", "--log-interval",
           "--no-progress-bar", "--cpu"}
    assert {k: v for k, v in recipe.items() if k not in own} == {k: v for k, v in readme.items() if k not in own | {"--fp16"}}
    assert "--fp16" in readme and shown[0][1] == "data-bin/wmt14_en_de"
    generate = [w for p, _, w in commands if p == "fairseq-generate" and "checkpoints/posnet_embed/checkpoint_best.pt" in w]
    assert len(generate) == 1
    from pe_tools.recipes.generate import DECODE_FLAGS

    decode = flag_values(generate[0][1:])
    assert flag_values(DECODE_FLAGS) == {k: decode.get(k) for k in flag_values(DECODE_FLAGS)}


def test_python_blocks_import_what_exists():
    """The README's Python: every `from X import Y` resolves, and every keyword passed to a function it imports
    is one of that function's parameters."""
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert blocks
    for block in blocks:
        tree = ast.parse(block)
        names = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                module = importlib.import_module(node.module)
                for alias in node.names:
                    names[alias.asname or alias.name] = getattr(module, alias.name)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names:
                params = inspect.signature(names[node.func.id]).parameters
                if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
                    assert {k.arg for k in node.keywords} <= set(params), node.func.id


def relative_links(path):
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return re.findall(r"\]\((?!https?:|#|mailto:)([^)\s]+)\)", text)


def test_every_relative_link_points_at_a_file():
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("**/*.md")), *sorted((REPO / "examples").glob("**/README.md"))]
    bad = []
    for doc in docs:
        for link in relative_links(doc):
            target, _, anchor = link.partition("#")
            path = (doc.parent / target).resolve() if target else doc
            if not path.exists():
                bad.append(f"{doc.relative_to(REPO)}: {link}")
            elif anchor and path.suffix == ".md":
                titles = re.findall(r"^#{1,4} (.+)$", path.read_text(encoding="utf-8"), flags=re.M)
                slugs = {re.sub(r"[^\w\- ]", "", t.strip().lower()).replace(" ", "-") for t in titles}
                if anchor not in slugs:
                    bad.append(f"{doc.relative_to(REPO)}: {link} (no such heading)")
    assert not bad, bad


# ------------------------------------------------------------------------------------------------
# Outputs shown after `<!-- output: command -->` are what the command above prints (commands of seconds)

def shown_command_outputs():
    found = []
    for doc in ["README.md", *(str(p.relative_to(REPO)) for p in sorted((REPO / "docs").glob("*.md"))),
                *(str(p.relative_to(REPO)) for p in sorted((REPO / "examples").glob("*/README.md")))]:
        text = (REPO / doc).read_text(encoding="utf-8")
        for m in re.finditer(r"```bash\n(.*?)```\n<!-- output: command -->\n```\n(.*?)```", text, flags=re.S):
            command = m[1].replace("\\\n", " ").strip().split("\n")[-1]
            found.append((doc, re.sub(r"\s+#.*$", "", command), m[2]))
    return found


@pytest.mark.parametrize("doc, command, shown", shown_command_outputs(), ids=[c for _, c, _ in shown_command_outputs()])
def test_shown_output_is_what_the_command_prints(doc, command, shown):
    """Run from the checkout with this interpreter as `python`; the checkout's path reads /path/to/repo and the
    interpreter's python."""
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
               OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(["bash", "-c", command], cwd=REPO, env=env, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]  # the last command of the pipeline
    out = proc.stdout.replace(sys.executable, "python").replace(str(REPO), "/path/to/repo")
    assert out == shown, f"{doc}: {command}"


def test_some_outputs_are_checked():
    commands = [c for _, c, _ in shown_command_outputs()]
    assert any("--dry-run" in c for c in commands) and any("python -m pe_plugin" in c for c in commands)

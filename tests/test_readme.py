"""The README stays true: every method is in its table, every file and make target it names exists, and
the test command it gives is the one CI runs."""
import contextlib
import io
import re
import subprocess
import sys

from pe_testing import REPO

from pe_plugin.encodings import PE_REGISTRY
from pe_plugin.models.architectures import architecture_names

README = (REPO / "README.md").read_text()


def test_every_registered_encoding_is_in_the_method_table():
    rows = {m.group(1) for m in re.finditer(r"^\| `([a-z0-9_]+)` \|", README, flags=re.M)}
    assert rows == set(PE_REGISTRY)
    for pe in PE_REGISTRY:
        assert f"transformer_{pe}_wmt_en_de" in README


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
BASH_BLOCKS = re.findall(r"```bash\n(.*?)```", README + RECIPE_READMES, flags=re.S)
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
                   "pe-demo": ["pe_tools.demo"], "pe-length": ["pe_tools.length"]}


def readme_commands():
    """(program, flags, words) of every command in the README's bash blocks: continuation lines joined,
    commands split at pipes, `;`, `&&` and `$(`; shell keywords and variable assignments skipped."""
    commands = []
    for block in BASH_BLOCKS:
        block = re.sub(r"<<'(\w+)'\n.*?\n\1\n", "\n", block, flags=re.S)  # a here-document is no command
        text = re.sub(r"#[^\n]*", "", block.replace("\\\n", " "))
        # `$(for X in WORDS; do echo ARGS; done)` stands for ARGS, arguments of the command around it
        text = re.sub(r"\$\(for \w+ in [^;]*; do echo ([^;]*); done\)", r"\1", text)
        for part in re.split(r"\||;|&&|\$\(|\)|\n", text):
            words = part.split()
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
    if prog.split()[0] in CONSOLE_SCRIPTS:
        argv = ["-m", *CONSOLE_SCRIPTS[prog.split()[0]], *prog.split()[1:]]
    elif prog in WRAPPERS:
        argv = [str(REPO / WRAPPERS[prog][0]), *WRAPPERS[prog][1:]]
    elif prog.startswith("scripts/"):
        argv = [str(REPO / prog.split()[0]), *prog.split()[1:]]
    else:
        raise AssertionError(prog)
    out = subprocess.run([sys.executable, *argv, "--help"], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, (prog, out.stderr[-2000:])
    return out.stdout


FAIRSEQ_PARSERS = {"fairseq-train": "get_training_parser", "fairseq-generate": "get_generation_parser",
                   "fairseq-interactive": "get_interactive_generation_parser", "fairseq-preprocess": "get_preprocessing_parser"}


def fairseq_rejects(prog: str, words) -> str:
    """What fairseq's own parser says of the command line (empty when it parses). Its --help cannot serve: it
    prints before the architecture, task, BPE and tokenizer add their flags."""
    from fairseq import options

    parser = getattr(options, FAIRSEQ_PARSERS[prog])()
    argv = [str(REPO / w) if w == "pe_plugin" else w for w in words[1:]]  # --user-dir, wherever pytest runs
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
        if prog in (".", "make", "tr", "grep", "head", "tail", "mkdir", "python", "torchrun", "xargs"):
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

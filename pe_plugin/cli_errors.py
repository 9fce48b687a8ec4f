"""Flag errors in the format of fairseq's own: ``usage: ...``, then ``PROG: error: MESSAGE``, exit status 2.

fairseq judges most flags while parsing, but pe_plugin can judge some combinations only where fairseq hands it
the parsed arguments: the architecture function (end of parsing) and the model build, which fairseq-train runs
in its ``main`` and fairseq-generate / fairseq-interactive run while loading a checkpoint, long after their
parser is gone. An error there (``PEConfigError``) would end in a Python traceback. ``report`` ends it the way
argparse ends a bad flag instead: it rebuilds the running tool's parser and calls ``parser.error``. In any other
program (the tests, a notebook, our own scripts) ``report`` does nothing and the exception propagates.

Known limit: with several GPUs fairseq-train builds the model in spawned worker processes; a worker then prints
the usage error and exits with status 2, and torch's launcher reports that exit with its own traceback.
See docs/fairseq.md §Flag errors.
"""
import os
import sys
from typing import Optional

# fairseq's command-line tools that build models, and the ``fairseq.options`` function building each parser
PARSERS = {
    "train": "get_training_parser",
    "generate": "get_generation_parser",
    "interactive": "get_interactive_generation_parser",
    "validate": "get_validation_parser",
    "eval_lm": "get_eval_lm_parser",
}


def fairseq_tool() -> Optional[str]:
    """The fairseq tool this process runs (a key of ``PARSERS``), or None."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = getattr(spec, "name", None) or ""
    if name.startswith("fairseq_cli."):  # python -m fairseq_cli.train ...
        tool = name[len("fairseq_cli."):]
    else:  # the console scripts: fairseq-train, fairseq-generate, ...
        prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
        tool = prog[len("fairseq-"):].replace("-", "_") if prog.startswith("fairseq-") else ""
    return tool if tool in PARSERS else None


def report(error: Exception) -> None:
    """Inside a fairseq tool: print ``error`` on one line as that tool's parser would, and exit with status 2.
    Elsewhere: return, so that the caller re-raises."""
    tool = fairseq_tool()
    if tool is None:
        return
    from fairseq import options

    parser = getattr(options, PARSERS[tool])()  # prog = basename(sys.argv[0]), as in the tool itself
    parser.error(" ".join(str(error).split()))  # usage to stderr, then "PROG: error: ...", SystemExit(2)

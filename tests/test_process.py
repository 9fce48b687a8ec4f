"""pe_tools/process.py: ``exit_status``, a main function's exit status as its console script ends with it, and
``tee``, a child's output copied to a log as it comes."""
import sys

import pytest

from pe_tools.process import exit_status, tee


def _exits(code):
    def main(argv):
        raise SystemExit(code)
    return main


@pytest.mark.parametrize("main, status, printed", [
    (lambda argv: None, 0, ""),  # returned nothing: success
    (lambda argv: 3, 3, ""),
    (_exits(None), 0, ""),  # sys.exit(): success, nothing printed
    (_exits(0), 0, ""),
    (_exits(2), 2, ""),  # argparse's error exit
    (_exits("error: bad input"), 1, "error: bad input\n"),  # sys.exit("message"): the message on stderr, 1
])
def test_exit_status_is_what_the_interpreter_would_end_with(main, status, printed, capsys):
    assert exit_status(main, []) == status
    assert capsys.readouterr().err == printed


def test_tee_copies_each_line_to_the_log_and_returns_the_status(tmp_path, capsys):
    log = tmp_path / "logs" / "x.log"
    log.parent.mkdir()
    log.write_text("before\n")
    seen = []
    rc = tee([sys.executable, "-c", "import sys; print('one'); print('two', file=sys.stderr); sys.exit(4)"], log,
             on_line=seen.append)
    assert rc == 4 and log.read_text() == "before\none\ntwo\n" and seen == ["one\n", "two\n"]
    assert capsys.readouterr().out == "one\ntwo\n"

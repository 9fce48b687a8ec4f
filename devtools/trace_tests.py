"""Which tests execute which module: a pytest plugin (``-p devtools.trace_tests``) that records, for every test, the
files of the given packages whose Python functions ran while it was set up, called and torn down (``sys.settrace``
on function calls only, no line events; threads too). Code run at a test file's import is recorded for that file.
Subprocesses are not traced: the mutation check adds the test files that name a module (``devtools.mutation``).

    PE_TRACE_OUT=map.json PE_TRACE_ROOT=. python -m pytest -p devtools.trace_tests -m "not slow" tests

writes {"tests": {module path: [node ids]}, "imports": {module path: [test files]}} with paths relative to the root.
"""
import json
import os
import sys
import threading
from pathlib import Path

import pytest

_ROOT = Path(os.environ.get("PE_TRACE_ROOT", ".")).resolve()
_PACKAGES = tuple(str(_ROOT / p) + os.sep for p in ("pe_plugin", "pe_tools"))


class _Tracer:
    def __init__(self):
        self.known = {}  # co_filename -> path relative to the root, or None (not ours)
        self.hits = set()
        self.tests = {}  # module -> set of node ids
        self.imports = {}  # module -> set of test files

    def trace(self, frame, event, arg):
        name = frame.f_code.co_filename
        rel = self.known.get(name, 0)
        if rel == 0:
            rel = str(Path(name).relative_to(_ROOT)) if name.startswith(_PACKAGES) else None
            self.known[name] = rel
        if rel is not None:
            self.hits.add(rel)
        return None  # no line events: calls only

    def start(self):
        self.hits = set()
        threading.settrace(self.trace)
        sys.settrace(self.trace)

    def stop(self):
        sys.settrace(None)
        threading.settrace(None)
        hits, self.hits = self.hits, set()
        return hits


_T = _Tracer()


@pytest.hookimpl(hookwrapper=True)
def pytest_pycollect_makemodule(module_path, parent):
    _T.start()
    outcome = yield
    outcome.get_result().collect  # the module is imported lazily: import it here, under the tracer
    try:
        outcome.get_result().obj
    except Exception:  # a collection error is pytest's to report
        pass
    for rel in _T.stop():
        _T.imports.setdefault(rel, set()).add(str(Path(module_path).resolve().relative_to(_ROOT)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _T.start()
    try:
        yield
    finally:
        for rel in _T.stop():
            _T.tests.setdefault(rel, set()).add(item.nodeid)


def pytest_sessionfinish(session, exitstatus):
    out = os.environ.get("PE_TRACE_OUT")
    if out:
        Path(out).write_text(json.dumps({"tests": {k: sorted(v) for k, v in sorted(_T.tests.items())},
                                         "imports": {k: sorted(v) for k, v in sorted(_T.imports.items())}},
                                        indent=0) + "\n")

"""Which encodings the documents and the recorded runs describe, against the registry.

The README's method table lists the encodings this project ships and documents; the prose counts ("eleven
encodings"), setup.py's description and the records made on a GPU describe those. An encoding a user adds by
docs/extending.md is registered but in none of them: the tests that compare a document or a record with the
registry check every encoding the document holds, and report a registered encoding it does not hold yet as
pending (a skip that names the file and what would add it), not as a failure.
"""
import re

import pytest

from pe_testing import REPO

METHOD_ROW = re.compile(r"^\| `([a-z0-9_]+)` \|", flags=re.M)


def readme_methods() -> list:
    """The `--pe` names of the README's method table, in its order."""
    return METHOD_ROW.findall((REPO / "README.md").read_text(encoding="utf-8"))


def not_yet_in(held, registry) -> list:
    """The registered encodings that ``held`` (a document's or a record's encodings) does not hold, in registry
    order."""
    return [pe for pe in registry if pe not in set(held)]


def report_pending(missing, where: str, how: str) -> None:
    """Skip, naming what is pending, when ``missing`` is not empty (call it after every check of what is held)."""
    if missing:
        pytest.skip(f"pending: {', '.join(missing)} not yet in {where} ({how})")

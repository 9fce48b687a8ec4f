import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pe_testing  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: end-to-end runs of the fairseq command-line tools")


@pytest.fixture(scope="session")
def raw_corpus(tmp_path_factory):
    return pe_testing.write_corpus(tmp_path_factory.mktemp("raw"))


@pytest.fixture(scope="session")
def data_bin(raw_corpus, tmp_path_factory):
    """The tiny corpus binarised once per session with a joined dictionary."""
    return pe_testing.preprocess(raw_corpus, tmp_path_factory.mktemp("bin"))

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pe_testing  # noqa: E402


def pytest_configure(config):
    # pytest-xdist (make test: -n WORKERS --dist loadfile) hands out test files in the collection's order, which
    # pytest_collection_modifyitems sets, longest first; its own reordering (files with the most tests first) is off
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    config.addinivalue_line("markers", "slow: a call of 5 s or more on an idle core (tests/durations.log): end-to-end "
                                       "runs of the tools, trainings, SLURM jobs, Triton's interpreter; make test-fast "
                                       "leaves them out")
    config.addinivalue_line("markers", "mutation: a slow test that the mutation check still runs for the modules it "
                                       "executes (devtools/mutation.py, -m 'not slow or mutation'; those whose "
                                       "recorded call exceeds its MUTATION_BUDGET_S are left out: docs/dev/testing.md)")
    config.addinivalue_line("markers", "needs_multi30k: checks against the Multi30k test set, which is not in the "
                                       "repository; run where it is found (PE_MULTI30K_REF=FILE, the recipe's "
                                       "prepared data, or a raw copy beside the checkout: docs/dev/testing.md), deselected "
                                       "elsewhere "
                                       "with the reason in the report")


def pytest_report_header(config):
    why = pe_testing.multi30k_missing()
    return f"needs_multi30k: {why}: those tests are deselected" if why else (
        f"needs_multi30k: Multi30k test set from {pe_testing.multi30k_test_file('de')}")


def pytest_collection_modifyitems(config, items):
    """Test files longest first by tests/durations.log (with xdist's own reordering off, pytest_configure), then
    deselect (not skip) the optional checks whose data is absent: the suite never depends on the corpus; the
    report says which were deselected and why."""
    seconds = pe_testing.recorded_file_seconds(pe_testing.DURATIONS_LOG.read_text(encoding="utf-8"))
    items[:] = [items[i] for i in pe_testing.longest_files_first([item.nodeid for item in items], seconds)]
    why = pe_testing.multi30k_missing()
    if not why:
        return
    dropped = [item for item in items if item.get_closest_marker("needs_multi30k") is not None]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item.get_closest_marker("needs_multi30k") is None]
        config._pe_multi30k_deselected = (why, [item.nodeid for item in dropped])


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    found = getattr(config, "_pe_multi30k_deselected", None)
    if found:
        why, ids = found
        terminalreporter.write_line(f"{len(ids)} needs_multi30k tests did not run: {why}", yellow=True)
        for nodeid in ids:
            terminalreporter.write_line(f"  {nodeid}")


@pytest.fixture(scope="session")
def raw_corpus(tmp_path_factory):
    return pe_testing.write_corpus(tmp_path_factory.mktemp("raw"))


@pytest.fixture(scope="session")
def data_bin(raw_corpus, tmp_path_factory):
    """The tiny corpus binarised once per session with a joined dictionary."""
    return pe_testing.preprocess(raw_corpus, tmp_path_factory.mktemp("bin"))


@pytest.fixture(scope="session")
def tiny_posnet(data_bin, tmp_path_factory):
    """pe_testing.train_tiny_posnet's checkpoint_last.pt, trained once per session and shared by the xdist workers
    (each worker's data_bin holds the same corpus and dictionaries). Tests read it and write nothing beside it."""
    return pe_testing.built_once(tmp_path_factory, "tiny-posnet",
                                 lambda folder: pe_testing.train_tiny_posnet(folder, data_bin)) / "checkpoint_last.pt"


@pytest.fixture(scope="session")
def queue_reference(data_bin, tmp_path_factory):
    """The local queue of tests/pe_queue_runs.py's three tiny runs, run to its end once per session and shared by the
    xdist workers: its queue file (``queue``), recipe (``table``) and copy of the code (``code``). The killed queue
    (test_queue.py) and the queues on SLURM (test_slurm.py) must record what it recorded."""
    from types import SimpleNamespace

    import pe_queue_runs

    root = pe_testing.built_once(tmp_path_factory, "queue-reference",
                                 lambda folder: pe_queue_runs.run_whole_queue(folder, data_bin))
    return SimpleNamespace(queue=root / "whole" / "queue.txt", table=root / "tiny_methods.toml", code=root / "code")

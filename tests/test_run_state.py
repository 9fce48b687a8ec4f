"""A run's training state and pe-train's lock (pe_tools/recipes/run_state.py): who holds a run, where a file system
has no locks, and when a run is finished."""
import json
import os
import socket
import subprocess
import sys
from types import SimpleNamespace

import pytest

from pe_runs import stand_in_checkpoint

from pe_tools import locks


# ---- the trainer's lock on a file system without locks (pe_tools/recipes/run_state.py) ----------------------
@pytest.mark.parametrize("host,alive,held", [("here", True, True), ("here", False, False), ("elsewhere", True, False)])
def test_without_file_locks_a_trainer_is_known_by_a_live_pid_on_this_host(host, alive, held, tmp_path, monkeypatch):
    """Where flock fails (ENOLCK: a file system without locks), RUN/train.lock's holder counts as a live trainer
    only when it names this host and a pid that is running here: a dead pid on this host, or any pid on another
    host (whose pids this host cannot see), is no trainer."""
    import errno

    from pe_tools.recipes import run_state

    class NoLocks:  # fcntl on such a file system
        LOCK_SH, LOCK_NB, LOCK_UN, LOCK_EX = 1, 4, 8, 2

        @staticmethod
        def flock(fd, op):
            raise OSError(errno.ENOLCK, "No locks available")

    if alive:
        pid = os.getpid()
    else:
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()  # reaped: its pid names no process
        pid = gone.pid
    holder = {"pid": pid, "host": socket.gethostname() if host == "here" else socket.gethostname() + "-other"}
    (tmp_path / run_state.TRAINER_LOCK).write_text(json.dumps(holder))
    monkeypatch.setattr(locks, "fcntl", NoLocks)
    assert run_state.live_trainer(tmp_path) == (holder if held else None)


@pytest.mark.parametrize("released_after", [None, 1, 2])
def test_the_trainer_lock_is_tried_as_often_as_asked_and_taken_when_freed(released_after, tmp_path, monkeypatch):
    """pe-train's lock: held by another open file (flock locks belong to the open file, so this process can hold it
    against itself), ``trainer_lock(run, tries=3)`` tries three times with a pause between (two pauses), then names
    the holder; freed during the pause after attempt k, it is taken at attempt k + 1 and names this process. No
    clock: a stand-in for the lock helper's time, advanced by its pauses."""
    import fcntl

    from pe_tools.recipes import run_state

    run = tmp_path / "run"
    run.mkdir()
    theirs = os.open(run / run_state.TRAINER_LOCK, os.O_RDWR | os.O_CREAT)
    os.write(theirs, json.dumps({"pid": 1, "host": "elsewhere"}).encode())
    fcntl.flock(theirs, fcntl.LOCK_EX)
    pauses = []

    def pause(seconds):
        pauses.append(seconds)
        if len(pauses) == released_after:
            fcntl.flock(theirs, fcntl.LOCK_UN)

    monkeypatch.setattr(locks, "time", SimpleNamespace(sleep=pause, monotonic=lambda: sum(pauses)))
    try:
        if released_after is None:
            with pytest.raises(run_state.TrainerBusy, match="is being trained by pid 1 on elsewhere"):
                with run_state.trainer_lock(run, tries=3):
                    pass
            assert len(pauses) == 2
        else:
            with run_state.trainer_lock(run, tries=3):
                assert json.loads((run / run_state.TRAINER_LOCK).read_text())["pid"] == os.getpid()
            assert len(pauses) == released_after
    finally:
        os.close(theirs)


def test_without_a_lock_module_a_dead_trainers_record_holds_nothing(tmp_path, monkeypatch):
    """Where Python has no fcntl (not Linux), the lock file's record decides, as without file locks: a record
    naming a pid that has ended is no live trainer, and pe-train's lock is taken at once, naming this process."""
    from pe_tools.recipes import run_state

    run = tmp_path / "run"
    run.mkdir()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (run / run_state.TRAINER_LOCK).write_text(json.dumps({"pid": gone.pid, "host": socket.gethostname()}))
    monkeypatch.setattr(locks, "fcntl", None)
    assert run_state.live_trainer(run) is None
    with run_state.trainer_lock(run, tries=1):
        assert json.loads((run / run_state.TRAINER_LOCK).read_text())["pid"] == os.getpid()
        assert run_state.live_trainer(run)["pid"] == os.getpid()


def test_a_run_whose_command_names_no_max_update_is_not_finished(tmp_path):
    """A run's end is its --max-update: without one in its command (a run begun by hand with another stopping
    rule), no checkpoint makes it finished, and why_not says the command names none."""
    from pe_tools.recipes import run_state

    run = tmp_path / "run"
    run.mkdir()
    stand_in_checkpoint(run / "checkpoint_last.pt", 6)
    state = run_state.training_state(run, ["data", "--max-epoch", "3"])
    assert (state.top, state.reached, state.trained, state.done) == (None, 6, False, False)
    assert state.why_not() == f"{run}: its command names no --max-update"
    assert not run_state.finished(run, ["data"]) and run_state.finished(run, ["data", "--max-update", "6"])

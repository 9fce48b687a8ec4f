"""The one lock helper (pe_tools/locks.py): a lock taken or refused with its holder named, waited for as long as
asked, handed on to a child, and the holder record deciding where the file system has no locks. Another holder is
another open file of the lock (flock locks belong to the open file, so this process can hold one against itself) or
another process; the clock is a stand-in that the pauses advance."""
import errno
import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from pe_tools import locks

try:
    import fcntl
except ImportError:  # pragma: no cover (Linux only)
    fcntl = None


class Clock:
    """time for pe_tools.locks: monotonic seconds that only the pauses advance; ``on_pause(k)`` runs after pause k."""

    def __init__(self, on_pause=lambda k: None):
        self.now, self.pauses, self.on_pause = 0.0, [], on_pause

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.pauses.append(seconds)
        self.now += seconds
        self.on_pause(len(self.pauses))


def theirs(path, record):
    """Another holder of ``path``: an open file of it with an exclusive flock, ``record`` written in it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    os.write(fd, json.dumps(record).encode())
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def test_a_free_lock_is_taken_and_its_file_names_the_holder(tmp_path):
    path = tmp_path / "sub" / "x.lock"
    assert locks.holder_of(path) is None  # no file: no holder
    with locks.hold(path, holder={"what": "pe-test"}) as fd:
        record = json.loads(path.read_text())
        assert isinstance(fd, int) and set(record) == {"pid", "host", "started", "what"}
        assert (record["pid"], record["host"], record["what"]) == (os.getpid(), socket.gethostname(), "pe-test")
        assert locks.holder_of(path) == record
    assert locks.holder_of(path) is None  # released; the file stays


def test_a_held_lock_is_refused_at_once_naming_its_holder_the_file_and_the_fix(tmp_path, monkeypatch):
    path = tmp_path / "x.lock"
    fd = theirs(path, {"pid": 1, "host": "elsewhere", "started": "2026-01-01 10:00:00", "what": "pe-record"})
    clock = Clock()
    monkeypatch.setattr(locks, "time", clock)
    try:
        assert locks.holder_of(path)["pid"] == 1
        with pytest.raises(locks.Busy) as e:
            with locks.hold(path):
                pass
        assert str(e.value) == (f"{path} is held by pid 1 on elsewhere since 2026-01-01 10:00:00 (pe-record); "
                                f"wait for it to end (or end it), then run this again")
        assert e.value.holder["pid"] == 1 and clock.pauses == []  # not waited for
        with pytest.raises(locks.Busy, match="; see it end first$"):
            with locks.hold(path, fix="see it end first"):
                pass
    finally:
        os.close(fd)
    with locks.hold(path):  # freed: taken
        assert json.loads(path.read_text())["pid"] == os.getpid()


@pytest.mark.parametrize("released_after", [None, 1, 2])
def test_a_lock_is_waited_for_as_many_seconds_as_asked_and_taken_when_freed(released_after, tmp_path, monkeypatch):
    """wait=0.1 with pauses of 0.05 s: tries at 0, 0.05 and 0.1 s (two pauses; the try at the deadline is the last),
    says once whom it waits for, then Busy; freed during pause k, taken at try k + 1."""
    path = tmp_path / "x.lock"
    fd = theirs(path, {"pid": 1, "host": "elsewhere"})
    clock = Clock(lambda k: k == released_after and fcntl.flock(fd, fcntl.LOCK_UN))
    monkeypatch.setattr(locks, "time", clock)
    said = []
    try:
        if released_after is None:
            with pytest.raises(locks.Busy, match="held by pid 1 on elsewhere"):
                with locks.hold(path, wait=0.1, say=said.append):
                    pass
            assert clock.pauses == [locks.PAUSE] * 2
        else:
            with locks.hold(path, wait=0.1, say=said.append):
                assert json.loads(path.read_text())["pid"] == os.getpid()
            assert len(clock.pauses) == released_after
    finally:
        os.close(fd)
    assert said == [f"waiting for pid 1 on elsewhere to release {path}"]


def test_wait_true_waits_until_the_lock_is_freed(tmp_path, monkeypatch):
    path = tmp_path / "x.lock"
    fd = theirs(path, {"pid": 1, "host": "elsewhere"})
    clock = Clock(lambda k: k == 50 and fcntl.flock(fd, fcntl.LOCK_UN))
    monkeypatch.setattr(locks, "time", clock)
    try:
        with locks.hold(path, wait=True, say=lambda line: None):
            pass
    finally:
        os.close(fd)
    assert len(clock.pauses) == 50


class NoLocks:
    """fcntl on a file system without locks: flock fails with ENOLCK."""
    LOCK_SH, LOCK_NB, LOCK_UN, LOCK_EX = 1, 4, 8, 2

    @staticmethod
    def flock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")


def dead_pid() -> int:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # reaped: its pid names no process
    return gone.pid


@pytest.mark.parametrize("module", [NoLocks, None])  # no locks on the file system; no fcntl module at all
@pytest.mark.parametrize("host,alive,held", [("here", True, True), ("here", False, False), ("elsewhere", True, False)])
def test_without_locks_the_holder_record_decides(module, host, alive, held, tmp_path, monkeypatch):
    """Without locks, the lock is held while its record names a live pid on this host: a dead pid on this host, or
    any pid on another host (whose pids this host cannot see), holds nothing. holder_of and hold agree; a lock taken
    this way is released at the end of the block (its record emptied), so this live process holds it no longer."""
    monkeypatch.setattr(locks, "fcntl", module)
    monkeypatch.setattr(locks, "time", Clock())
    path = tmp_path / "x.lock"
    record = {"pid": os.getpid() if alive else dead_pid(),
              "host": socket.gethostname() if host == "here" else socket.gethostname() + "-other"}
    path.write_text(json.dumps(record))
    assert locks.holder_of(path) == (record if held else None)
    if held:
        with pytest.raises(locks.Busy):
            with locks.hold(path):
                pass
        assert json.loads(path.read_text()) == record
        path.write_text("")  # its holder ended and emptied it
    with locks.hold(path) as fd:
        assert locks.holder_of(path)["pid"] == os.getpid() and isinstance(fd, int)
        with pytest.raises(locks.Busy):  # a second taker in the same instant sees the record
            with locks.hold(path):
                pass
    assert locks.holder_of(path) is None and path.read_text() == ""


CHILD = textwrap.dedent("""
    import sys
    from pe_tools import locks
    try:
        with locks.hold(sys.argv[1]):
            print("taken")
    except locks.Busy as e:
        print(e)
""")


@pytest.mark.parametrize("handed", [True, False])
def test_a_lock_handed_on_to_a_child_is_its_own_and_another_process_is_refused(handed, tmp_path):
    """A child started with the held lock's descriptor and ``handed_on`` works under it; a child without it is another
    process, refused at once with the holder named. After the block, the lock is free for any process."""
    path = tmp_path / "x.lock"
    with locks.hold(path, holder={"what": "parent"}) as fd:
        env = locks.handed_on(dict(os.environ), fd) if handed else dict(os.environ)
        out = subprocess.run([sys.executable, "-c", CHILD, str(path)], env=env, pass_fds=(fd,) if handed else (),
                             capture_output=True, text=True, check=True).stdout.strip()
        assert out == ("taken" if handed else f"{path} is held by pid {os.getpid()} on {socket.gethostname()} since "
                       f"{json.loads(path.read_text())['started']} (parent); wait for it to end (or end it), then "
                       f"run this again")
    assert subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True,
                          check=True).stdout.strip() == "taken"


def test_a_descriptor_named_in_the_environment_of_another_file_is_no_lock(tmp_path, monkeypatch):
    """PE_HELD_LOCKS naming a descriptor open on another file (or closed) does not stand for the lock."""
    other = os.open(tmp_path / "other", os.O_RDWR | os.O_CREAT)
    path = tmp_path / "x.lock"
    fd = theirs(path, {"pid": 1, "host": "elsewhere"})
    monkeypatch.setenv(locks.HANDED_ON, f"{other},999")
    try:
        with pytest.raises(locks.Busy):
            with locks.hold(path):
                pass
    finally:
        os.close(fd)
        os.close(other)


def test_handed_on_adds_descriptors_once():
    assert locks.handed_on({"A": "1"}, 5) == {"A": "1", locks.HANDED_ON: "5"}
    assert locks.handed_on({locks.HANDED_ON: "5"}, 5, 7)[locks.HANDED_ON] == "5,7"


def test_describe_says_what_the_record_holds():
    assert locks.describe({}) == locks.describe(None) == "a process"
    assert locks.describe({"pid": 3, "what": "pe-generate"}) == "pid 3 (pe-generate)"



@pytest.mark.parametrize("pid", [None, "abc", [1]])  # no pid (int(None): TypeError), "abc" (ValueError), a list
def test_without_locks_a_record_without_a_usable_pid_holds_nothing(pid, tmp_path, monkeypatch):
    """Without locks, a record on this host whose pid is missing or not a number names no live process: the lock is
    free (not a traceback of int())."""
    monkeypatch.setattr(locks, "fcntl", None)
    path = tmp_path / "x.lock"
    path.write_text(json.dumps({"host": socket.gethostname(), **({} if pid is None else {"pid": pid})}))
    assert locks.holder_of(path) is None


def test_the_holder_record_of_a_missing_or_garbled_file_is_empty(tmp_path):
    """read_holder: {} for a lock file that is missing, not UTF-8, cut short, or not an object."""
    assert locks.read_holder(tmp_path / "none.lock") == {}
    for name, data in (("latin1.lock", '{"what": "r\xe9sum\xe9"}'.encode("latin-1")), ("cut.lock", b'{"pid": 1'),
                       ("list.lock", b"[1]")):
        (tmp_path / name).write_bytes(data)
        assert locks.read_holder(tmp_path / name) == {}, name

"""The one lock helper of pe_tools: an exclusive lock on a file, whose content names the holder. Standard library
only.

``hold(path)`` takes an flock on ``path`` (created as needed), first without waiting; when another process holds it
the caller either gets ``Busy`` at once (``wait=False``), waits for it (``wait=True``, saying so first), or tries
again every 50 ms for ``wait`` seconds. Once taken, the file holds the holder record: its pid, host and start time,
plus the fields the caller gives (``holder={"what": "pe-train"}``). The kernel releases an flock when the last
process holding its open file ends, however it ends (kill -9 included), so no stale lock outlives its holder; a
process can hand its lock to a child it starts (``handed_on``): the child's ``hold`` of the same file then uses the
inherited descriptor instead of waiting for its own parent.

Where the file system has no locks (flock fails with ENOLCK, EOPNOTSUPP or ENOSYS, as on some network file systems)
or Python has no fcntl module, the holder record alone decides: the lock is held while its record names a process
alive on this host. A record written on another host counts as no holder (this host cannot see its pids), and two
processes that start in the same instant can both take it; such a file system gives no stronger guarantee.
``holder_of`` answers the same way, so a probe and a taker always agree."""
import contextlib
import errno
import json
import os
import socket
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterator, Optional, Union

from .file_io import read_json_object

try:
    import fcntl
except ImportError:  # not on Linux or macOS: the holder record decides, as on a file system without locks
    fcntl = None

PAUSE = 0.05  # seconds between two tries of a lock held by another process
EXIT_WAIT = 10.0  # seconds a run's next writer waits for a killed one (a requeued job's) to finish exiting
HANDED_ON = "PE_HELD_LOCKS"  # environment: descriptors of locks a parent handed on to this process (``handed_on``)
NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)


class Busy(RuntimeError):
    """Another live process holds the lock: the message names it (from its record), the lock file and the fix."""

    def __init__(self, path: Path, holder: dict, fix: str = "wait for it to end (or end it), then run this again"):
        self.path, self.holder = Path(path), holder
        super().__init__(f"{path} is held by {describe(holder)}; {fix}")


def describe(holder: Optional[dict]) -> str:
    """``pid 123 on n1 since 2026-11-28 10:00:00 (pe-train)``: who a holder record names, in words."""
    holder = holder or {}
    who = " ".join(x for x in (f"pid {holder['pid']}" if "pid" in holder else "",
                               f"on {holder['host']}" if "host" in holder else "",
                               f"since {holder['started']}" if "started" in holder else "") if x)
    return (who or "a process") + (f" ({holder['what']})" if holder.get("what") else "")


def read_holder(path: Path) -> dict:
    """The holder record in ``path``: {} when the file is missing, empty or not a JSON object (a holder may be
    rewriting it)."""
    return read_json_object(path)


def _alive_here(record: dict) -> bool:
    """The record names a process alive on this host."""
    if record.get("host") != socket.gethostname():
        return False
    try:
        os.kill(int(record.get("pid")), 0)
    except (TypeError, ValueError, ProcessLookupError):
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def _try(fd: int, op: int) -> Optional[bool]:
    """flock ``op`` without waiting: True when taken, False when another holds it, None without locks."""
    if fcntl is None:
        return None
    try:
        fcntl.flock(fd, op | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError as e:
        if e.errno in NO_LOCKS:
            return None
        raise


def holder_of(path: Union[str, Path]) -> Optional[dict]:
    """The live holder of the lock ``path`` (its record, {} when unreadable), or None when no process holds it. A
    shared lock is tried and dropped at once, so the probe never makes a taker wait for long."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        took = _try(fd, fcntl.LOCK_SH if fcntl else 0)
        if took is None:
            record = read_holder(path)
            return record if _alive_here(record) else None
        if took:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        return read_holder(path)
    finally:
        os.close(fd)


def _inherited(path: Path) -> Optional[int]:
    """A descriptor of ``path`` this process inherited from a parent that holds its lock (``handed_on``), or None."""
    try:
        here = os.stat(path)
    except OSError:
        return None
    for word in os.environ.get(HANDED_ON, "").split(","):
        try:
            there = os.fstat(int(word))
        except (ValueError, OSError):
            continue
        if (there.st_dev, there.st_ino) == (here.st_dev, here.st_ino):
            return int(word)
    return None


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextlib.contextmanager
def hold(path: Union[str, Path], *, wait: Union[bool, float] = False, holder: Optional[dict] = None,
         say: Optional[Callable[[str], None]] = None, fix: Optional[str] = None) -> Iterator[int]:
    """Hold the lock ``path`` while the block runs; yields its file descriptor (pass it to a child with
    ``handed_on`` so that the lock lasts as long as either process). ``wait``: False raises Busy at once when
    another process holds it; True waits as long as it takes; a number of seconds tries every PAUSE seconds for that
    long, then raises Busy. Before waiting it says whom it waits for (``say``, default: a line on stderr). ``holder``:
    fields added to the record; ``fix``: the end of Busy's message."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    inherited = _inherited(path)
    if inherited is not None:  # the parent holds it for this process: nothing to take, nothing to release
        yield inherited
        return
    say = say or _say
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    recorded = False  # taken without locks: the record is the lock, released at the end
    try:
        deadline = None if wait is True else time.monotonic() + (0 if wait is False else float(wait))
        said = False
        while True:
            took = _try(fd, fcntl.LOCK_EX if fcntl else 0)
            if took is None:  # no locks: the record decides
                took = recorded = not _alive_here(read_holder(path))
            if took:
                break
            record = read_holder(path)
            if deadline is not None and time.monotonic() >= deadline:
                raise Busy(path, record, *([fix] if fix else []))
            if not said:
                say(f"waiting for {describe(record)} to release {path}")
                said = True
            time.sleep(PAUSE)
        mine = {"pid": os.getpid(), "host": socket.gethostname(),
                "started": datetime.now().strftime("%Y-%m-%d %H:%M:%S"), **(holder or {})}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(mine).encode(), 0)
        yield fd
    finally:
        if recorded and read_holder(path).get("pid") == os.getpid():
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
        os.close(fd)


def handed_on(env: dict, *fds: int) -> dict:
    """``env`` for a child started with ``pass_fds=fds``: its ``hold`` of these locks uses them (the child works
    under its parent's lock) instead of waiting for its own parent."""
    known = [w for w in env.get(HANDED_ON, "").split(",") if w]
    return {**env, HANDED_ON: ",".join(dict.fromkeys(known + [str(fd) for fd in fds]))}

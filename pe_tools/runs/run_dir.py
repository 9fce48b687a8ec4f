"""A run directory and a recorded run: the one module that reads and writes their records. Standard library and
base modules only.

A run directory (RUNS/METHOD.PAIR.SIZE.seedN, pe-train's ``--save-dir``) holds:
  command.json, command.txt   the resolved fairseq-train command (``Command``), written by pe-train
  checkpoint_last.pt          the checkpoint fairseq resumes from; the update it holds (``RunDir.reached``)
  gen/hyp.detok.TGT           a decode (pe-generate), with its meta file hyp.detok.TGT.meta.json;
  gen/NAME/...                a named decode (pe-generate --name NAME)
  run.lock                    held by whoever writes the run (train, decode or record; ``RunDir.writer``)
  decode.lock                 held by whoever decodes the run (``RunDir.decoder``): a --partial decode beside a
                              live trainer holds it alone
A recorded run (pe-record) is a folder RESULTS/RUN_NAME holding command.json and the decodes' files. pe-record
writes it in RESULTS/.pe-record/ (a folder no reader looks into) and renames it into place when whole, so a reader
(``records``) sees a whole record or none."""
import contextlib
import functools
import json
import os
import shutil
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Union

from ..checkpoint_files import updates_of
from ..command_line import fail
from ..file_io import write_all_atomic
from ..locks import Busy, hold

COMMAND = "command.json"
COMMAND_TEXT = "command.txt"
LAST = "checkpoint_last.pt"
GEN = "gen"
RUN_LOCK = "run.lock"
DECODE_LOCK = "decode.lock"
STAGING = ".pe-record"  # RESULTS/.pe-record/: records being written; no reader looks into it


class RunRecordError(ValueError):
    """A run directory's or a record's file is missing or unreadable; the message names it and the fix."""


@dataclass(frozen=True)
class Command:
    """A run's command.json: what pe-train was asked (recipe, method, pair, size, seed, data), the fairseq-train
    argv it ran, the flags after ``--`` (``extra``: None in a command.json of an older pe-train) and the machine.
    ``record`` is the whole file, for the keys this class does not name."""
    record: Dict = field(repr=False)

    @property
    def method(self) -> Optional[str]:
        return self.record.get("method")

    @property
    def pair(self) -> str:
        return self.record.get("pair") or ""

    @property
    def tgt(self) -> str:
        """The target language (the pair's second side)."""
        return self.pair.split("-")[1] if "-" in self.pair else ""

    @property
    def size(self) -> Optional[str]:
        return self.record.get("size")

    @property
    def seed(self) -> Optional[int]:
        return self.record.get("seed")

    @property
    def data(self) -> Optional[str]:
        return self.record.get("data")

    @property
    def argv(self) -> List[str]:
        return [str(x) for x in self.record.get("argv") or []]

    @property
    def commit(self) -> Optional[str]:
        return self.record.get("commit")

    @property
    def batch(self) -> Dict:
        return self.record.get("batch") or {}

    def get(self, key: str, default=None):
        return self.record.get(key, default)


def read_command(folder: Union[str, Path]) -> Command:
    """FOLDER/command.json (a run directory or a record); RunRecordError naming the file when it is missing or is
    not a JSON object."""
    path = Path(folder) / COMMAND
    if not path.is_file():
        raise RunRecordError(f"{folder} has no {COMMAND}; is it a run directory of pe-train?")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise RunRecordError(f"{path} cannot be read ({e}); re-run the run's pe-train command to write it again") \
            from None
    if not isinstance(record, dict):
        raise RunRecordError(f"{path} is not a JSON object; re-run the run's pe-train command to write it again")
    return Command(record)


def command_of(folder: Union[str, Path]) -> Optional[Command]:
    """FOLDER/command.json, or None when it is missing or unreadable (a run not begun, or begun by other code)."""
    try:
        return read_command(folder)
    except RunRecordError:
        return None


def load_meta(path: Union[str, Path]) -> Dict:
    """A decode's meta file (hyp.detok.TGT.meta.json, or pe-evaluate's --meta file); RunRecordError naming the file
    when it is missing, not UTF-8 JSON or not a JSON object."""
    try:
        meta = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunRecordError(f"{path}: metadata file not found") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise RunRecordError(f"{path}: not a valid UTF-8 JSON file ({e})") from None
    except OSError as e:
        raise RunRecordError(f"{path}: metadata file cannot be read ({e})") from None
    if not isinstance(meta, dict):
        raise RunRecordError(f"{path}: metadata must be a JSON object, got {type(meta).__name__}")
    return meta


def read_meta(path: Union[str, Path]) -> Dict:
    """A decode's meta file (``load_meta``), or {} when it is missing or unreadable."""
    try:
        return load_meta(path)
    except RunRecordError:
        return {}


class RunDir:
    """A run directory (module docstring)."""

    def __init__(self, path: Union[str, Path]):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def command(self) -> Command:
        return read_command(self.path)

    def command_or_none(self) -> Optional[Command]:
        return command_of(self.path)

    def write_command(self, record: Dict, text: str) -> None:
        """command.json and command.txt, replaced together (pe-train, under the run's locks)."""
        write_all_atomic({self.path / COMMAND: json.dumps(record, indent=1), self.path / COMMAND_TEXT: text})

    @property
    def last(self) -> Path:
        return self.path / LAST

    def reached(self) -> Optional[int]:
        """The update checkpoint_last.pt holds, or None when it is missing or cut short."""
        return updates_of(self.last)

    def decode_dir(self, name: Optional[str] = None) -> Path:
        """Where pe-generate writes decode ``name`` (the default decode when None)."""
        return self.path / GEN / name if name else self.path / GEN

    # ---------------------------------------------------------------------------------------- its writers
    def writer(self, what: str, wait: Union[bool, float] = False, say=None):
        """Hold RUN/run.lock while one step of the run's chain (train, decode, record) or the whole chain (a queue)
        writes it: a second writer of any step is refused at once (Busy naming the holder), unless this process
        works under a parent that holds it (``locks.handed_on``). Yields the lock's descriptor to hand on."""
        self.path.mkdir(parents=True, exist_ok=True)
        return _held(self.path / RUN_LOCK, what, "it writes the run (train, decode or record), and one step at a "
                                                  "time may", wait=wait, say=say)

    def decoder(self, what: str):
        """Hold RUN/decode.lock while a decode writes RUN/gen/: every decode takes it, so that a --partial decode,
        which runs beside the run's live trainer without its writer lock (it writes no result pe-record takes), and
        the run's own decode never write gen/ at once. A second decoder is refused at once (Busy naming it)."""
        return _held(self.path / DECODE_LOCK, what, "it decodes the run, and one decode at a time may")


@contextlib.contextmanager
def _held(path: Path, what: str, why: str, wait: Union[bool, float] = False, say=None) -> Iterator[int]:
    """``locks.hold`` of a run's lock ``path`` for ``what``; its Busy says ``why`` one holder at a time."""
    with contextlib.ExitStack() as held:
        try:
            fd = held.enter_context(hold(path, wait=wait, holder={"what": what}, say=say))
        except Busy as e:
            raise Busy(e.path, e.holder, f"{why}: wait for it to end (or end it), then run this again") from None
        yield fd


def writes_run(what: str, decodes: bool = False, beside_the_trainer: bool = False):
    """Decorate a command ``f(a) -> exit status`` whose ``a.run_dir`` is a run directory: it runs holding the run's
    writer lock (``RunDir.writer``), and with ``decodes`` its decode lock too (``RunDir.decoder``), and is refused at
    once (status 2, the holder named) while another process holds either. ``beside_the_trainer``: the decode lock
    alone (a --partial decode, which a live trainer's writer lock must not stop). A folder that does not exist is not
    made: ``f`` says what is missing."""
    def wrap(f):
        @functools.wraps(f)
        def run(a) -> int:
            if not Path(a.run_dir).is_dir():
                return f(a)
            run_dir = RunDir(a.run_dir)
            with contextlib.ExitStack() as held:
                try:
                    if not beside_the_trainer:
                        held.enter_context(run_dir.writer(what))
                    if decodes or beside_the_trainer:
                        held.enter_context(run_dir.decoder(what))
                except Busy as e:
                    return fail(str(e))
                return f(a)
        return run
    return wrap


# ------------------------------------------------------------------------------------------------ records
def records(results: Union[str, Path]) -> List[Path]:
    """The recorded runs in a results folder, in name order: its folders holding command.json, a hidden one (a
    name starting with ".": a record being written, or one a killed pe-record of an older version left) never."""
    results = Path(results)
    if not results.is_dir():
        return []
    return sorted(p.parent for p in results.glob(f"*/{COMMAND}") if not p.parent.name.startswith("."))


def recorded(results: Union[str, Path], name: str) -> bool:
    """RESULTS/NAME is a whole record."""
    return not name.startswith(".") and (Path(results) / name / COMMAND).is_file()


def _leftovers(into: Path, name: str) -> List[Path]:
    """What killed pe-records of ``name`` left: their folders in RESULTS/.pe-record/, and the hidden
    .NAME.tmpPID/.NAME.oldPID folders of older versions beside the records."""
    return [*(into / STAGING).glob(f"{name}.*"), *into.glob(f".{name}.tmp*"), *into.glob(f".{name}.old*")]


def publish(into: Union[str, Path], name: str, files: Dict[str, Union[bytes, str]]) -> Path:
    """Write the record INTO/NAME whole or not at all: its files in INTO/.pe-record/NAME.PID, then the folder
    renamed into place (a record already there is replaced). What an earlier pe-record of NAME left is removed
    first; SIGTERM while writing removes this one's folder and then ends the process (exit 143); the two renames
    that replace a record, and the cleanup, are not interrupted by it."""
    into = Path(into)
    dest, staging = into / name, into / STAGING
    tmp, old = staging / f"{name}.{os.getpid()}", staging / f"{name}.{os.getpid()}.old"
    for leftover in _leftovers(into, name):
        shutil.rmtree(leftover, ignore_errors=True)
    with _terminated_by_sigterm():
        try:
            write_all_atomic({tmp / f: data for f, data in files.items()})
            with _sigterm_blocked():
                if dest.exists():
                    dest.rename(old)
                tmp.rename(dest)
        finally:
            with _sigterm_blocked():
                shutil.rmtree(tmp, ignore_errors=True)
                shutil.rmtree(old, ignore_errors=True)
                with contextlib.suppress(OSError):
                    staging.rmdir()  # when empty: no other pe-record is writing there
    return dest


class Terminated(SystemExit):
    """SIGTERM arrived while a record was written."""


@contextlib.contextmanager
def _terminated_by_sigterm():
    """SIGTERM raises Terminated (exit 143) in the main thread, so that ``finally`` blocks clean up; elsewhere (a
    thread cannot set handlers) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the cleanup runs to its end
        raise Terminated(128 + signum)

    before = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


@contextlib.contextmanager
def _sigterm_blocked():
    """SIGTERM held back (delivered when the block ends)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})

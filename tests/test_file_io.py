"""pe_tools/file_io.py's reader of state files, and the readers that stand on a file another process may be
rewriting while they read it: a SLURM job's RUN/slurm.json (read by pe-queue status, by submitting and by the job
itself) and the trainer lock's holder record, RUN/train.lock (rewritten in place by each process that takes the
lock; read by the lock probe behind pe-queue status and pe-train). A file caught half-written reads as nothing
known, never as an error; a whole one reads as what it holds. The contents are written here, byte for byte."""
import json

import pytest

from pe_tools.file_io import read_json_object

HALF_WRITTEN = {
    "cut_inside_a_string": b'{"job": "1234_0", "state": "RUNN',
    "cut_after_a_key": b'{"pid": 4242, "host":',
    "empty": b"",  # truncated, not yet written again
    "cut_inside_a_utf8_character": '{"host": "n\u00f6de'.encode("utf-8")[:-1],
    "not_utf8": b'\xff\xfe{"job": "1"}',
    "two_writers_interleaved": b'{"job": "1"}{"job": "2"}',
}
NOT_AN_OBJECT = {"list": b"[1, 2]", "string": b'"RUNNING"', "number": b"12", "null": b"null"}
WHOLE = {"job": "1234_0", "state": "RUNNING", "requeues": 2, "host": "n\u00f6de"}


@pytest.mark.parametrize("content", list(HALF_WRITTEN.values()) + list(NOT_AN_OBJECT.values()),
                         ids=list(HALF_WRITTEN) + list(NOT_AN_OBJECT))
def test_a_state_file_half_written_or_not_an_object_reads_as_nothing_known(content, tmp_path):
    path = tmp_path / "state.json"
    path.write_bytes(content)
    assert read_json_object(path) == {}


def test_a_whole_state_file_reads_as_its_object_and_a_missing_one_as_nothing(tmp_path):
    path = tmp_path / "state.json"
    path.write_text(json.dumps(WHOLE), encoding="utf-8")
    assert read_json_object(path) == WHOLE
    assert read_json_object(tmp_path / "absent.json") == {}
    assert read_json_object(tmp_path) == {}  # a folder where the file should be: unreadable


@pytest.mark.parametrize("content", list(HALF_WRITTEN.values()), ids=list(HALF_WRITTEN))
def test_slurm_status_reads_a_half_written_job_state_as_no_state(content, tmp_path):
    """slurm/files.py's read_state, the one reader of RUN/slurm.json (pe-queue status's job and state columns, the
    submit check for a live job, the job's own restart count): {} for a file caught half-written; the whole file's
    fields otherwise."""
    from pe_tools.recipes.slurm import files

    (tmp_path / files.STATE_FILE).write_bytes(content)
    assert files.read_state(tmp_path) == {}
    (tmp_path / files.STATE_FILE).write_text(json.dumps(WHOLE), encoding="utf-8")
    assert files.read_state(tmp_path) == WHOLE


@pytest.mark.parametrize("content", list(HALF_WRITTEN.values()), ids=list(HALF_WRITTEN))
def test_the_trainer_lock_probe_reads_a_holder_record_being_rewritten_as_held_by_someone(content, tmp_path):
    """The lock probe (run_state.live_trainer) while the lock is held and its record is being rewritten in place:
    held, by a holder it cannot name ({}), rather than an error; once the record is whole, the holder it names.
    Released, the same bytes mean no trainer."""
    from pe_tools import locks
    from pe_tools.recipes import run_state

    lock = tmp_path / run_state.TRAINER_LOCK
    with locks.hold(lock, holder={"what": "pe-train"}):
        lock.write_bytes(content)  # in place, as a taker rewrites its record
        assert run_state.live_trainer(tmp_path) == {}
        lock.write_text(json.dumps({"pid": 4242, "host": "elsewhere", "what": "pe-train"}))
        assert run_state.live_trainer(tmp_path) == {"pid": 4242, "host": "elsewhere", "what": "pe-train"}
        lock.write_bytes(content)
    assert run_state.live_trainer(tmp_path) is None

"""The SLURM job's state machine (pe_tools/recipes/slurm/state.py) without SLURM: the status word of every pair of
(the job's own last word, SLURM's answer), against a table of expectations written here from the rules users are
promised (docs/cluster.md); the log's traceback rule; the job's own transitions; and no SLURM state written as a
string literal outside the state module."""
import itertools
import re
from pathlib import Path

import pytest

from pe_testing import REPO
from pe_tools.recipes.slurm import state as ss

OWN_WORDS = [None, ss.UNREADABLE, "SUBMITTED", "RUNNING", "REQUEUEING", "ENDED", "RECORDED", "FAILED"]
LISTED = ["PENDING", "RUNNING", "COMPLETING", "REQUEUED", "SUSPENDED"]  # SLURM lists the job as queued or running
ENDED = ["COMPLETED", "CANCELLED", "TIMEOUT", "FAILED", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY"]
ANSWERS = ["no answer", "not listed"] + LISTED + ENDED
FRESH, STALE = 7.0, ss.STALE_SECONDS + 1.0


def expected(own, answer, log: bool, stale: bool) -> str:
    """The promise, case by case: SLURM's word while it lists the job; the job's final word; SLURM's word on the
    ended job; ENDED; then for a job that works or never spoke: never RUNNING once SLURM answered without listing
    it."""
    if answer in LISTED:
        return answer
    if own in ("RECORDED", "FAILED"):
        return own
    if answer in ENDED:
        return answer
    if own == "ENDED":
        return "ENDED"
    if own in ("RUNNING", "REQUEUEING"):
        if answer == "not listed":
            return "DIED"
        return "DIED" if stale else own
    if answer == "no answer":
        return "SUBMITTED" if own == "SUBMITTED" else "UNKNOWN"
    return "DIED" if log else "NEVER-RAN"


def evidence(own, answer, log: bool, stale: bool, tail=("[queue] sape: job 5, start 1, code abc",)):
    return ss.Evidence(job="5_1", slurm=answer if answer in LISTED + ENDED else None, answered=answer != "no answer",
                       own=own, message="the chain's reason" if own else "",
                       heartbeat_age=None if own in (None, ss.UNREADABLE) else (STALE if stale else FRESH),
                       log="logs/pe-q-0_5_1.out" if log else None, tail=tail if log else (),
                       state_file="runs/sape/slurm.json", problem="12 bytes, not JSON" if own == ss.UNREADABLE else "",
                       again="pe-queue run q.txt --slurm submits it again")


@pytest.mark.parametrize("own,answer", list(itertools.product(OWN_WORDS, ANSWERS)))
def test_every_own_word_and_slurm_answer_gives_the_promised_status(own, answer):
    for log, stale in itertools.product((False, True), (False, True)):
        word, note = ss.status_word(evidence(own, answer, log, stale))
        assert word == expected(own, answer, log, stale), (own, answer, log, stale, word, note)
        if answer != "no answer" and answer not in LISTED:
            assert word != "RUNNING"  # SLURM answered and lists no such job: it is not running
        if word in ("DIED", "FAILED") and not (answer in ENDED and word == "FAILED" and own != "FAILED"):
            assert note and note.startswith(f"{word} (job 5_1): ") or "is gone from SLURM" in note, note
        if word == "NEVER-RAN":
            assert "never started" in note and note.endswith("submits it again"), note


def test_a_failed_job_names_its_own_reason_and_a_job_slurm_failed_its_log():
    word, note = ss.status_word(evidence("FAILED", "not listed", True, False))
    assert (word, note) == ("FAILED", "FAILED (job 5_1): the chain's reason (this job's SLURM log: "
                                      "logs/pe-q-0_5_1.out)")
    word, note = ss.status_word(evidence("FAILED", "not listed", False, False))
    assert (word, note) == ("FAILED", "FAILED (job 5_1): the chain's reason")
    word, note = ss.status_word(evidence("RUNNING", "FAILED", True, False))
    assert word == "FAILED" and note == "FAILED (job 5_1): the last lines of logs/pe-q-0_5_1.out: " \
                                        "[queue] sape: job 5, start 1, code abc"


def test_a_dead_job_says_how_long_since_its_heartbeat():
    word, note = ss.status_word(evidence("RUNNING", "not listed", False, False))
    assert word == "DIED" and "no heartbeat for 7 s" in note and "it left no SLURM log" in note, note
    word, note = ss.status_word(evidence("REQUEUEING", "no answer", True, True))
    assert word == "DIED" and f"no heartbeat for {STALE:.0f} s" in note and "does not answer" in note, note


@pytest.mark.parametrize("log", [False, True])
def test_an_unreadable_state_file_is_named_unreadable(log):
    """A RUN/slurm.json that exists but does not read (truncated by a full disk) is named as such, never as a job
    that wrote none."""
    word, note = ss.status_word(evidence(ss.UNREADABLE, "not listed", log, False))
    assert word == ("DIED" if log else "NEVER-RAN")
    assert "runs/sape/slurm.json is unreadable (12 bytes, not JSON)" in note and "wrote no" not in note, note
    word, note = ss.status_word(evidence(ss.UNREADABLE, "no answer", log, False))
    assert word == "UNKNOWN" and "is unreadable (12 bytes, not JSON)" in note, note
    word, note = ss.status_word(evidence(None, "not listed", True, False))
    assert "wrote no runs/sape/slurm.json" in note and "unreadable" not in note, note


@pytest.mark.parametrize("tail,died", [
    (["[queue] a", "Traceback (most recent call last):", "  x", "KeyError: 1"], True),
    (["Traceback (most recent call last):", "KeyError: 1"], True),
    # a traceback the job handled and went on from, then another one at its end: the last decides
    (["[queue] a", "Traceback (most recent call last):", "ValueError", "[queue] b: went on",
      "Traceback (most recent call last):", "OSError: [Errno 28] No space left on device"], True),
    # a traceback handled, the job went on: not dead
    (["Traceback (most recent call last):", "ValueError", "[queue] b: went on"], False),
    (["[queue] a", "[queue] b"], False),
    ([], False),
])
def test_a_log_ends_in_a_traceback_when_its_last_traceback_follows_its_last_queue_line(tail, died):
    assert ss.ends_in_traceback(tail) is died
    word, _ = ss.status_word(evidence("RUNNING", "no answer", True, False, tail=tuple(tail)))
    assert word == ("DIED" if died else "RUNNING")


def test_the_jobs_own_word_changes_only_as_the_table_allows():
    E, O = ss.Event, ss.Own
    life = [(None, E.SUBMIT, O.SUBMITTED), (O.SUBMITTED, E.START, O.RUNNING), (O.RUNNING, E.SIGNAL, O.REQUEUEING),
            (O.REQUEUEING, E.TERMINATED, O.ENDED), (O.ENDED, E.START, O.RUNNING),
            (O.RUNNING, E.CHAIN_RECORDED, O.RECORDED), (O.REQUEUEING, E.REQUEUE_REFUSED, O.RUNNING),
            (O.RUNNING, E.CHAIN_FAILED, O.FAILED), (O.FAILED, E.START, O.RUNNING), (None, E.STALLED, O.FAILED)]
    for before, event, after in life:
        assert ss.step(before, event) is after
    for before, event in [(O.RECORDED, E.TERMINATED), (O.FAILED, E.SIGNAL), (O.RECORDED, E.SIGNAL),
                          (None, E.SIGNAL), (O.SUBMITTED, E.CHAIN_RECORDED), (O.RUNNING, E.SUBMIT)]:
        with pytest.raises(ValueError, match="cannot take"):
            ss.step(before, event)


STATE_WORDS = sorted({s.value for s in ss.Slurm} | {s.value for s in ss.Own} | {s.value for s in ss.Shown})


def test_no_slurm_state_is_a_string_literal_outside_the_state_module():
    """The state module alone spells the states; a literal elsewhere in pe_tools is a second place to keep
    true."""
    literal = re.compile(r"""(["'])(%s)\1""" % "|".join(map(re.escape, STATE_WORDS)))
    found = []
    for path in sorted((REPO / "pe_tools").rglob("*.py")):
        if path == REPO / "pe_tools" / "recipes" / "slurm" / "state.py":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if literal.search(line):
                found.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert found == []
    assert literal.search('x = "RUNNING"') and literal.search("'NEVER-RAN'") and not literal.search('"RUNNINGS"')

"""The SLURM job of one run as a state machine: SLURM's states of a job, the words a job writes about itself into
RUN/slurm.json, the one table of how a job's own word may change, and the status word pe-queue status shows, a
pure function of what is known about the job (``Evidence``). Standard library only; the queries are query.py's,
the files files.py's.

The status word is the newest word on the job:
- SLURM's, while SLURM lists the job as queued or running;
- else the job's own final word (RECORDED, or FAILED with its reason);
- else SLURM's word on the ended job (squeue until MinJobAge, sacct where accounting is on);
- else, for a job whose own last word says it works (RUNNING, REQUEUEING), or that wrote none: DIED when its log
  ends in a traceback; DIED when SLURM answered and does not list it (its chain ended without its last word:
  killed, or its last write failed), whatever the cluster's MinJobAge; DIED when its heartbeat is older than
  STALE_SECONDS while SLURM does not answer; its own word while SLURM does not answer and its heartbeat is fresh;
  NEVER-RAN or DIED, by its SLURM log, for a job that never wrote a word and that SLURM no longer lists;
- else (ENDED: SLURM ended it, and does not list it any more) ENDED.
"""
import enum
from dataclasses import dataclass
from typing import Dict, FrozenSet, Optional, Sequence, Tuple

HEARTBEAT_SECONDS = 60  # a running job rewrites RUN/slurm.json this often (its "heartbeat")
STALE_SECONDS = 300  # a job whose heartbeat is older, and which SLURM does not answer for, is dead
MAX_STALLED_STARTS = 3  # a job started this many times in a row on the same checkpoint stops requeueing: FAILED
TAIL_LINES = 3  # lines of a dead or failed job's SLURM log shown under the status table


# SLURM's states of a job (squeue(1), JOB STATE CODES)
Slurm = enum.Enum("Slurm", [(w, w) for w in (
    "PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD",
    "RESIZING", "SIGNALING", "SPECIAL_EXIT", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD", "COMPLETED", "CANCELLED",
    "TIMEOUT", "FAILED", "PREEMPTED", "NODE_FAIL", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "REVOKED")], type=str)


# queued or running; every other state is an end
ACTIVE: FrozenSet[str] = frozenset(s.value for s in (
    Slurm.PENDING, Slurm.RUNNING, Slurm.SUSPENDED, Slurm.COMPLETING, Slurm.CONFIGURING, Slurm.REQUEUED,
    Slurm.REQUEUE_FED, Slurm.REQUEUE_HOLD, Slurm.RESIZING, Slurm.SIGNALING, Slurm.SPECIAL_EXIT, Slurm.STAGE_OUT,
    Slurm.STOPPED, Slurm.RESV_DEL_HOLD))
# the job's processes exist: its run directory is in use
WORKING: FrozenSet[str] = frozenset(s.value for s in (
    Slurm.RUNNING, Slurm.COMPLETING, Slurm.CONFIGURING, Slurm.SIGNALING, Slurm.STOPPED, Slurm.SUSPENDED,
    Slurm.STAGE_OUT))


# a job's own word on itself in RUN/slurm.json (SUBMITTED: the submitter's, before the job starts)
Own = enum.Enum("Own", [(w, w) for w in ("SUBMITTED", "RUNNING", "REQUEUEING", "ENDED", "RECORDED", "FAILED")],
                type=str)


class Event(enum.Enum):
    """What makes a job's own word change."""
    SUBMIT = "sbatch took it"
    START = "a start of the job (its first, or after a requeue)"
    STALLED = "a start that found no new checkpoint too often in a row"
    SIGNAL = "SLURM's signal before the time limit: the job requeues itself"
    REQUEUE_REFUSED = "scontrol refused the requeue: the job works on until its limit"
    TERMINATED = "SLURM ends the job (SIGTERM: time limit, preemption, requeue, cancel)"
    CHAIN_RECORDED = "the run's chain recorded it"
    CHAIN_FAILED = "the run's chain failed or was refused"


# the one table of the job's own transitions: (word before, or None for no word; event) -> word after
TRANSITIONS: Dict[Tuple[Optional[Own], Event], Own] = {
    (None, Event.SUBMIT): Own.SUBMITTED,
    **{(before, Event.SUBMIT): Own.SUBMITTED for before in (Own.ENDED, Own.RECORDED, Own.FAILED)},
    **{(before, Event.START): Own.RUNNING for before in (None, *Own)},
    **{(before, Event.STALLED): Own.FAILED for before in (None, *Own)},
    (Own.RUNNING, Event.SIGNAL): Own.REQUEUEING,
    (Own.REQUEUEING, Event.REQUEUE_REFUSED): Own.RUNNING,
    **{(before, Event.TERMINATED): Own.ENDED for before in (Own.RUNNING, Own.REQUEUEING)},
    **{(before, Event.CHAIN_RECORDED): Own.RECORDED for before in (Own.RUNNING, Own.REQUEUEING, Own.ENDED)},
    **{(before, Event.CHAIN_FAILED): Own.FAILED for before in (Own.RUNNING, Own.REQUEUEING, Own.ENDED)},
}
OWN_FINAL = (Own.RECORDED, Own.FAILED)  # the job's chain ended: SLURM's word on the job comes after
OWN_ALIVE = (Own.RUNNING, Own.REQUEUEING)  # the job works


def step(before: Optional[str], event: Event) -> Own:
    """The job's own word after ``event``; raises ValueError for a change the table does not allow."""
    key = (Own(before) if before else None, event)
    if key not in TRANSITIONS:
        raise ValueError(f"a job whose word is {before or 'none'} cannot take {event.name} ({event.value})")
    return TRANSITIONS[key]


class Shown(str, enum.Enum):
    """Status words that are neither SLURM's nor the job's own."""
    DIED = "DIED"  # ended without its last word
    NEVER_RAN = "NEVER-RAN"  # gone from SLURM without having started
    UNKNOWN = "UNKNOWN"  # no word from anyone


UNREADABLE = "unreadable"  # Evidence.own of a RUN/slurm.json that exists and does not read as a JSON object


@dataclass(frozen=True)
class Evidence:
    """What is known about one run's newest job when pe-queue status asks."""
    job: str  # its id, JOB_TASK
    slurm: Optional[str]  # SLURM's state of it (squeue, else sacct); None when SLURM lists none
    answered: bool  # whether SLURM's controller answered at all
    own: Optional[str]  # the job's own last word (RUN/slurm.json of this job), None for none, or UNREADABLE
    message: str = ""  # the job's own message with that word
    heartbeat_age: Optional[float] = None  # seconds since the job last wrote RUN/slurm.json
    log: Optional[str] = None  # its SLURM log, None when there is none
    tail: Tuple[str, ...] = ()  # the log's last non-empty lines
    state_file: str = "RUN/slurm.json"  # where the job's own word lives, for the notes
    problem: str = ""  # why RUN/slurm.json is unreadable
    logs_dir: str = "QUEUE.slurm/logs"  # where its SLURM log would be
    again: str = "pe-queue run QUEUE --slurm submits it again"  # the command that submits the run again


def ends_in_traceback(tail: Sequence[str]) -> bool:
    """Whether a log's last lines end in a Python traceback: its last traceback comes after the queue's last own
    line (a job that handled a traceback and went on has written a [queue] line since)."""
    marks = [k for k, ln in enumerate(tail) if ln.startswith("Traceback (most recent call last)")]
    own = [k for k, ln in enumerate(tail) if ln.startswith("[queue]")]
    return bool(marks) and (not own or marks[-1] > own[-1])


def tail_note(e: Evidence) -> str:
    if not e.log:
        return "no SLURM log"
    if not e.tail:
        return f"{e.log} is empty"
    return f"the last lines of {e.log}: " + " | ".join(ln.strip()[:300] for ln in e.tail[-TAIL_LINES:])


def status_word(e: Evidence) -> Tuple[str, Optional[str]]:
    """(the status word of the job, the note under the table or None). The note is what follows the run's name:
    ``WORD (job J): why`` for FAILED and DIED, or what became of a job SLURM no longer lists."""
    if e.slurm in ACTIVE:
        return e.slurm, None
    if e.own in OWN_FINAL:
        word = Own(e.own).value
        if e.own != Own.FAILED:
            return word, None
        where = f" (this job's SLURM log: {e.log})" if e.log and e.log not in e.message else ""
        return word, f"{word} (job {e.job}): {e.message or '(no reason written)'}{where}"
    if e.slurm:  # SLURM's word on the ended job
        why = None if e.slurm == Slurm.COMPLETED else f"{e.slurm} (job {e.job}): {tail_note(e)}"
        return e.slurm, (why if e.slurm == Slurm.FAILED else None)
    if e.own == Own.ENDED:
        return e.own.value if isinstance(e.own, Own) else e.own, None
    if e.log and ends_in_traceback(e.tail):
        return died(e, f"its SLURM log ends in a traceback: {tail_note(e)}")
    age = "" if e.heartbeat_age is None else f"no heartbeat for {e.heartbeat_age:.0f} s"
    if e.own in OWN_ALIVE:
        if e.answered:
            return died(e, f"SLURM no longer lists it, and its last word in {e.state_file} is {e.own}, {age}: it "
                           f"ended without its last word; {tail_note(e) if e.log else 'it left no SLURM log'}")
        if e.heartbeat_age is not None and e.heartbeat_age > STALE_SECONDS:
            return died(e, f"{age} in {e.state_file} ({e.own}) and SLURM does not answer; "
                           f"{tail_note(e) if e.log else 'it left no SLURM log'}")
        return Own(e.own).value, None
    if not e.answered:
        if e.own == UNREADABLE:
            return Shown.UNKNOWN.value, (f"{Shown.UNKNOWN.value} (job {e.job}): its {e.state_file} is unreadable "
                                         f"({e.problem}) and SLURM does not answer")
        return (Own(e.own).value if e.own in tuple(Own) else Shown.UNKNOWN.value), None
    # SLURM answered, does not list it, and it never wrote a word of its own (SUBMITTED, none or unreadable)
    wrote = (f"its {e.state_file} is unreadable ({e.problem})" if e.own == UNREADABLE
             else f"wrote no {e.state_file}")
    if not e.log:
        return Shown.NEVER_RAN.value, (f"job {e.job} is gone from SLURM and never started (no SLURM log in "
                                       f"{e.logs_dir}, {wrote.replace('wrote no', 'no')}): it was cancelled or "
                                       f"purged while queued; {e.again}")
    return Shown.DIED.value, (f"job {e.job} is gone from SLURM; it started but {wrote}; the last line of its log "
                              f"{e.log}: {(e.tail or ('(empty)',))[-1][:300]}; fix that, then {e.again}")


def died(e: Evidence, why: str) -> Tuple[str, str]:
    return Shown.DIED.value, f"{Shown.DIED.value} (job {e.job}): {why}"

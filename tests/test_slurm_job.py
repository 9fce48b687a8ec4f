"""A SLURM job's own side and pe-queue's SLURM queries (pe_tools/recipes/slurm/), without a SLURM install: the
SLURM programs are stand-ins on PATH that answer what each test gives them, the job's chain a stand-in in this
process."""
import os
import shlex
import signal
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

# each payload leaves a PWNED* file if a shell runs it
NASTY = "a b'c\"d;touch PWNED1;e$(touch PWNED2)f`touch PWNED3`g"


# ---- a SLURM job's refused requeue (pe_tools/recipes/slurm/job.py) ------------------------------------------
@pytest.fixture
def requeue_job(tmp_path, monkeypatch):
    """A SLURM array task 7_1 (job 8) of a one-run queue, in this process, whose chain only receives SLURM's signal
    before the time limit; ``scontrol`` is a stand-in on PATH that refuses with what the test gives it. Returns a
    function (stdout, stderr) -> what the job printed."""
    from pe_tools.recipes.slurm import job as slurm_job

    for name in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_RESTART_COUNT",
                 "SLURMD_NODENAME", slurm_job.local.REHEARSE_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "7")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "1")
    monkeypatch.setenv("SLURM_JOB_ID", "8")
    data, code, bin_dir = tmp_path / "data", tmp_path / "code", tmp_path / "bin"
    for d in (data, code, bin_dir):
        d.mkdir()
    for lang in ("en", "de"):
        (data / f"dict.{lang}.txt").write_text("")
    (code / "COMMIT").write_text("mine\n")
    snapshot = tmp_path / "queue.txt"
    snapshot.write_text(f"multi30k sape en-de annealed 1 data={data} runs-dir={tmp_path / 'runs'}\n")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    def process(self, run):  # the chain: SLURM's USR1 arrives, the handler runs, the run ends recorded
        signal.getsignal(signal.SIGUSR1)(signal.SIGUSR1, None)
        return "recorded"

    monkeypatch.setattr(slurm_job.JobQueue, "process", process)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGTERM)}

    def job(stdout, stderr, capsys):
        fake_program(bin_dir, "scontrol", stdout, stderr)
        capsys.readouterr()
        assert slurm_job.job_main([str(snapshot), "--line", "1", "--code", str(code)]) == 0
        return capsys.readouterr().out

    yield job
    for s, h in handlers.items():
        signal.signal(s, h)


@pytest.mark.parametrize("stdout,stderr,reason", [
    ("Requeue of job 8 is disabled\n", "", "Requeue of job 8 is disabled"),  # only stdout says why
    ("", "scontrol: error: Job has no requeue\n", "scontrol: error: Job has no requeue"),
    ("some chatter\n", "scontrol: error: Job has no requeue\n", "scontrol: error: Job has no requeue"),
])
def test_a_refused_requeue_shows_scontrols_reason_from_stderr_else_stdout(requeue_job, stdout, stderr, reason,
                                                                           capsys):
    """When `scontrol requeue` fails, the job's log names its reason: scontrol's stderr, or its stdout when
    stderr is empty (some versions and wrappers print the refusal there), never an empty pair of brackets."""
    out = requeue_job(stdout, stderr, capsys)
    assert f"could not requeue job 7_1 ({reason}); the time limit will end it" in out, out


@pytest.mark.parametrize("array", [True, False])
def test_a_job_requeues_its_own_array_task_alone(array, requeue_job, tmp_path, monkeypatch, capsys):
    """SLURM's signal before the time limit: the job requeues itself by its own address, ARRAY_TASK (7_1) for an
    array task, whose job id (8) may be the array's own id and would requeue every task of the array; the plain
    job id for a job outside an array."""
    if not array:
        monkeypatch.delenv("SLURM_ARRAY_JOB_ID")
        monkeypatch.delenv("SLURM_ARRAY_TASK_ID")
    requeue_job("", "scontrol: error: stand-in\n", capsys)
    assert (tmp_path / "bin" / "scontrol.args").read_text() == ("requeue 7_1\n" if array else "requeue 8\n")



def fake_program(bin_dir: Path, name: str, stdout: str, stderr: str, status: int = 1) -> None:
    """``name`` on PATH (``bin_dir``): prints ``stdout`` and ``stderr`` and exits with ``status``; each call's
    arguments are appended to ``bin_dir / (name + '.args')``."""
    bin_dir.mkdir(exist_ok=True)
    program = bin_dir / name
    program.write_text(f"#!/bin/sh\necho \"$*\" >> {shlex.quote(str(bin_dir / (name + '.args')))}\n"
                       f"printf '%s' {shlex.quote(stdout)}\nprintf '%s' {shlex.quote(stderr)} >&2\nexit {status}\n")
    program.chmod(0o755)


@pytest.mark.parametrize("stdout,stderr,reason", [
    ("sinfo: error: from stdout\n", "", "sinfo: error: from stdout"),
    ("chatter\n", "sinfo: error: from stderr\n", "sinfo: error: from stderr"),
])
def test_a_failed_slurm_query_names_its_reason_from_stderr_else_stdout(stdout, stderr, reason, tmp_path,
                                                                        monkeypatch):
    """A SLURM program that fails (sinfo for the cluster's size, squeue for the jobs' states) is named with its
    reason: its stderr, or its stdout when stderr is empty. The programs are stand-ins on PATH."""
    from pe_tools.recipes.slurm import query
    from pe_tools.recipes.srun import SlurmError

    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    fake_program(tmp_path / "bin", "sinfo", stdout, stderr)
    with pytest.raises(SlurmError) as e:
        query._slurm("sinfo", "-h", what="--partition")
    assert str(e.value) == f"--partition: `sinfo -h` failed: {reason}"
    fake_program(tmp_path / "bin", "squeue", stdout.replace("sinfo", "squeue"), stderr.replace("sinfo", "squeue"))
    with pytest.raises(query.NoAnswer) as e:
        query.job_states(["5"])
    assert str(e.value) == f"`squeue` failed: {reason.replace('sinfo', 'squeue')}"



@pytest.mark.parametrize("stdout,stderr,reason", [
    ("scancel: error: from stdout\n", "", "scancel: error: from stdout"),
    ("chatter\n", "scancel: error: from stderr\n", "scancel: error: from stderr"),
])
def test_a_failed_cancel_names_scancels_reason_from_stderr_else_stdout(stdout, stderr, reason, tmp_path, monkeypatch,
                                                                       capsys):
    """pe-queue cancel, when scancel fails: the error names scancel's reason, its stderr or, when that is empty,
    its stdout. The queue's job and its live task are stand-ins; scancel a stand-in on PATH."""
    from pe_tools.recipes.slurm import submit

    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    fake_program(tmp_path / "bin", "scancel", stdout, stderr)
    monkeypatch.setattr(submit, "load_jobs", lambda queue_path: [{"job": "9", "name": "pe-q-k-1"}])
    monkeypatch.setattr(submit, "live_states", lambda jobs, names=None: {"9_1": "RUNNING"})
    assert submit.cancel(tmp_path / "q.txt") == 2
    assert capsys.readouterr().err == f"error: scancel 9 failed: {reason}\n"


def test_cancel_leaves_a_job_recorded_without_its_name_and_says_so(tmp_path, monkeypatch, capsys):
    """A jobs.json record without the name its job was submitted under (written before jobs were named) cannot show
    that SLURM's job of that id is still this queue's: cancel names it and leaves it; the named job beside it is
    cancelled, asked for by its name. squeue and scancel are stand-ins on PATH (squeue lists both, as ours)."""
    from pe_tools.recipes.slurm import submit

    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    fake_program(tmp_path / "bin", "squeue", "7_1|RUNNING|pe-old\n8_1|RUNNING|pe-q-k-2\n", "", status=0)
    fake_program(tmp_path / "bin", "scancel", "", "", status=0)
    monkeypatch.setattr(submit, "load_jobs", lambda queue_path: [{"job": "7"}, {"job": "8", "name": "pe-q-k-2"}])
    assert submit.cancel(tmp_path / "q.txt") == 0
    out = capsys.readouterr().out
    assert (tmp_path / "bin" / "scancel.args").read_text() == "8\n"
    assert "job(s) 7 of" in out and "not cancelled" in out and "squeue -j 7 " in out, out
    assert "cancelled job(s) 8 (1 array task(s))" in out, out


def test_a_job_refused_by_the_runs_lock_fails_naming_the_holder_and_leaves_its_logs(requeue_job, tmp_path,
                                                                                     monkeypatch, capsys):
    """The run's chain refused (another writer holds the run: a local pe-queue, or pe-train by hand): the job ends
    FAILED with the refusal itself as its reason (who holds which lock), writes nothing into the run's shared
    queue.log, and exits 1; status's note is that reason and the job's SLURM log, not train.log."""
    import json

    from pe_tools.recipes.slurm import files, job as slurm_job, state as slurm_state

    refusal = "refused: runs/x/run.lock is held by pid 5 on n1 since 2026-12-07 10:00:00 (pe-queue run local.txt)"
    monkeypatch.setattr(slurm_job.JobQueue, "process", lambda self, run: refusal)
    snapshot, code = tmp_path / "queue.txt", tmp_path / "code"
    assert slurm_job.job_main([str(snapshot), "--line", "1", "--code", str(code)]) == 1
    run_dir = tmp_path / "runs" / "sape.en-de.annealed.seed1"
    state = json.loads((run_dir / files.STATE_FILE).read_text())
    assert (state["state"], state["message"]) == ("FAILED", refusal)
    assert not (run_dir / "queue.log").exists()
    assert capsys.readouterr().out.splitlines()[-1] == f"[queue] sape.en-de.annealed.seed1: {refusal}"
    word, note = slurm_state.status_word(slurm_state.Evidence(job="7_1", slurm=None, answered=True, own="FAILED",
                                                              message=state["message"], log="logs/x_7_1.out"))
    assert word == "FAILED" and note == f"FAILED (job 7_1): {refusal} (this job's SLURM log: logs/x_7_1.out)"
    assert "train.log" not in note


# ---- pe-queue status of a job SLURM no longer lists ------------------------------------------------------------
def status_of(queue_path: Path, state: str, log: str, tmp_path: Path, monkeypatch):
    """pe-queue status's SLURM columns and notes for a queue whose one run's job 5_1 (submitted as pe-q-0a-0)
    SLURM answers for and does not list (squeue and sacct: stand-ins on PATH that list nothing); ``state``: the
    text of the run's RUN/slurm.json (None: none), ``log``: its SLURM log's (None: none)."""
    import json

    from pe_tools.recipes.slurm import files, status

    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    fake_program(tmp_path / "bin", "squeue", "", "", status=0)
    fake_program(tmp_path / "bin", "sacct", "", "", status=0)
    run = SimpleNamespace(name="sape.en-de.mini.seed1", run_dir=tmp_path / "runs" / "sape.en-de.mini.seed1")
    run.run_dir.mkdir(parents=True)
    sub = files.submit_dir(queue_path)
    (sub / "logs").mkdir(parents=True)
    (sub / "jobs.json").write_text(json.dumps([{"job": "5", "name": "pe-q-0a-0",
                                                "snapshot_lines": {"1": str(run.run_dir.resolve())}}]))
    if state is not None:
        (run.run_dir / files.STATE_FILE).write_text(state)
    if log is not None:
        (sub / "logs" / "pe-q-0a-0_5_1.out").write_text(log)
    notes = []
    return status.status_columns(queue_path, [run], notes), notes, run


@pytest.mark.parametrize("with_log", [False, True])
def test_the_resubmit_command_of_a_forgotten_job_pastes_back_as_its_queue_file(with_log, tmp_path, monkeypatch):
    """A job SLURM has forgotten (NEVER-RAN without a SLURM log, DIED with one): pe-queue status's note ends with
    ``pe-queue run QUEUE --slurm submits it again``. For a queue file whose folder and name hold a space, both
    quotes, `;`, `$(...)` and backquotes, that command reads back (shlex, and bash itself) as exactly pe-queue,
    run, the queue file's path and --slurm, and pasting it runs none of the payloads."""
    folder = tmp_path / NASTY
    folder.mkdir()
    queue_path = folder / f"queue {NASTY}.txt"
    cols, notes, _ = status_of(queue_path, None, "[queue] sape.en-de.mini.seed1\nKilled\n" if with_log else None,
                               tmp_path, monkeypatch)
    assert cols["state"] == ["DIED" if with_log else "NEVER-RAN"], (cols, notes)
    (note,) = notes
    assert note.endswith(" submits it again") and note.count("pe-queue run ") == 1, note
    command = note[note.index("pe-queue run "):-len(" submits it again")]
    want = ["pe-queue", "run", str(queue_path), "--slurm"]
    assert shlex.split(command) == want
    read = subprocess.run(["bash", "-c", "printf '%s\\0' " + command], cwd=tmp_path, capture_output=True, check=True)
    assert read.stdout.decode().split("\0")[:-1] == want  # bash's own reading of it
    assert not list(tmp_path.rglob("PWNED*"))


# ---- a SLURM job's count of starts without a new checkpoint (pe_tools/recipes/slurm/job.py) -----------------
@pytest.mark.parametrize("state,counted", [
    ("RUNNING", True), ("REQUEUEING", True), ("ENDED", True),  # the start before worked, or SLURM ended it
    ("FAILED", False), ("RECORDED", False), ("SUBMITTED", False), (None, False),  # its chain ended, or never ran
])
def test_a_start_counts_as_stalled_only_after_a_start_that_worked_on_the_same_checkpoint(state, counted):
    """A job's start is one more in a row without a new checkpoint (stalled 2 -> 3) when RUN/slurm.json is this
    job's own from a start that was working or that SLURM ended (RUNNING, REQUEUEING, ENDED), with a lower
    restart count and the same checkpoint resumed from. After the job's own final word (FAILED, e.g. stopped for
    stalling, then requeued by hand; RECORDED), the submitter's SUBMITTED, or no word, the count starts again
    (0); so does it for another job, a restart count not above the file's, or another checkpoint."""
    from pe_tools.recipes.slurm.job import stalled_starts

    previous = {"job": "7_1", "restarts": 1, "resumed_from": 10, "stalled": 2,
                **({"state": state} if state else {})}
    assert stalled_starts(previous, "7_1", 2, 10) == (3 if counted else 0)
    if counted:  # the other conditions, each on its own
        assert stalled_starts(previous, "8_1", 2, 10) == 0
        assert stalled_starts(previous, "7_1", 1, 10) == 0
        assert stalled_starts(previous, "7_1", 2, 12) == 0
        assert stalled_starts(dict(previous, resumed_from=None), "7_1", 2, None) == 3  # no checkpoint yet, again


# ---- the pe-train command of a SLURM job (pe_tools/recipes/slurm/job.py, ``job_main``) ----------------------
@pytest.mark.parametrize("gpus", [1, 2])
def test_a_slurm_job_runs_its_lines_pe_train_command_adding_gpus_only_for_several(gpus, requeue_job, tmp_path,
                                                                                   monkeypatch, capsys):
    """A SLURM array task (``slurm job SNAPSHOT --line N --gpus G``) trains its line with the pe-train arguments a
    queue run here gives that line, plus ``--gpus G`` only for G > 1: with one GPU, the same command as the local
    queue's, pe-train's own default of one rank."""
    from pe_tools.recipes import queue
    from pe_tools.recipes.slurm import job as slurm_job

    snapshot = tmp_path / "queue.txt"
    (line,) = queue.parse_queue(snapshot)
    trained = []
    monkeypatch.setattr(slurm_job.JobQueue, "process", lambda self, run: trained.append(run.train_args()) or "recorded")
    code = str(tmp_path / "code")
    assert slurm_job.job_main([str(snapshot), "--line", "1", "--code", code, "--gpus", str(gpus)]) == 0
    assert trained == [line.train_args() + (["--gpus", str(gpus)] if gpus > 1 else [])]
    assert "--gpus" not in line.train_args()


# ---- whose job an id is (``job_states``) ----------------------------------------------------------------------
def test_a_job_listed_under_another_name_than_its_submissions_is_not_this_queues(tmp_path, monkeypatch):
    """squeue lists each job with its name (``%j``, last: another user's name may hold `|` or spaces); a job whose
    name is not the one pe-queue gave its id at submission (the queue's key in it) is another job that got the id
    since, and is left out; an id without a recorded name is taken as listed. squeue is a stand-in on PATH."""
    from pe_tools.recipes.slurm import query

    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    fake_program(tmp_path / "bin", "squeue", "5_1|RUNNING|pe-q-0a1b-0\n6_2|PENDING|their job|x\n7|FAILED|pe-q-9-0\n",
                 "", status=0)
    assert query.job_states(["5", "6", "7"], names={"5": "pe-q-0a1b-0", "6": "pe-q-0a1b-1"}) == {
        "5_1": "RUNNING", "7": "FAILED"}
    assert query.job_states(["5", "6"], names={"5": "pe-q-ffff-0", "6": "their job|x"}) == {"6_2": "PENDING",
                                                                                      "7": "FAILED"}
    assert (tmp_path / "bin" / "squeue.args").read_text().split()[-2:] == ["-o", "%i|%T|%j"]


# ---- a start that finds the run's lock held (``claim``) -------------------------------------------------------
@pytest.mark.parametrize("holder_job", ["7_1", "9_1"])
def test_a_start_waits_for_its_own_earlier_processes_and_leaves_another_jobs_run(holder_job, tmp_path, monkeypatch):
    """RUN/slurm.lock held (pe_tools/locks.py, in a thread here) by array task 7_1's earlier processes, which SLURM
    started again while they still work (slurmd restarted): the new start of 7_1 says so and waits for them, then
    takes the run. Held by another job (9_1): it leaves the run at once (None), taking nothing."""
    import threading

    from pe_tools import locks
    from pe_tools.recipes.slurm import files, job as slurm_job

    run = SimpleNamespace(name="sape.en-de.mini.seed1", run_dir=tmp_path)
    said, holding, release = [], threading.Event(), threading.Event()

    def earlier():
        with locks.hold(tmp_path / files.JOB_LOCK, holder={"what": "SLURM job", "job": holder_job}):
            holding.set()
            release.wait(30)
    threading.Thread(target=earlier, daemon=True).start()
    assert holding.wait(30)
    monkeypatch.setattr(slurm_job, "_say", lambda message: said.append(message) or release.set())
    lock = slurm_job.claim(run, "7_1")
    release.set()
    if holder_job == "7_1":
        assert lock is not None and "earlier processes" in said[0] and "waiting" in said[0], said
        assert locks.holder_of(tmp_path / files.JOB_LOCK)["job"] == "7_1"
        lock.close()
    else:
        assert lock is None and "in use by 9_1" in said[0] and "leaves it untouched" in said[0], said


# ---- pe-queue status of a job whose state file is cut short ----------------------------------------------------
@pytest.mark.parametrize("with_log", [False, True])
def test_status_names_a_truncated_state_file_as_unreadable(with_log, tmp_path, monkeypatch):
    """RUN/slurm.json cut short (a full disk): SLURM answers and lists no such job; status names the file as
    unreadable, never as one the job did not write, and never shows the job RUNNING. squeue and sacct are
    stand-ins on PATH that list nothing."""
    from pe_tools.recipes.slurm import files

    cols, notes, run = status_of(tmp_path / "q.txt", '{"job": "5_1", "state": "RUNNING", "heartb',
                                 "[queue] sape.en-de.mini.seed1: job 6, start 1\n" if with_log else None, tmp_path,
                                 monkeypatch)
    assert cols["job"] == ["5_1"] and cols["state"] == ["DIED" if with_log else "NEVER-RAN"], (cols, notes)
    (note,) = notes
    assert f"{run.run_dir / files.STATE_FILE} is unreadable (" in note and "wrote no" not in note, note


@pytest.mark.parametrize("env, expected", [
    ({"SLURM_JOB_ID": "123"}, "123"),  # a job of its own: its id
    ({"SLURM_JOB_ID": "102", "SLURM_ARRAY_JOB_ID": "100", "SLURM_ARRAY_TASK_ID": "2"}, "100_2"),  # an array's task
    ({"SLURM_JOB_ID": "100", "SLURM_ARRAY_JOB_ID": "100", "SLURM_ARRAY_TASK_ID": "0"}, "100_0"),  # holding the array's id
    ({}, "-"),  # outside SLURM
    ({"SLURM_JOB_ID": "123", "SLURM_ARRAY_JOB_ID": "100"}, "123"),  # one array variable alone: not an array task
    ({"SLURM_JOB_ID": "123", "SLURM_ARRAY_TASK_ID": "2"}, "123"),
])
def test_a_job_names_itself_by_its_job_id_or_as_an_array_task(env, expected):
    """job_task, the name jobs.json, status and the job's own commands use: an array task is ARRAY_TASK (task 0
    included, whose SLURM_JOB_ID is the array's), any other job its SLURM_JOB_ID, as SLURM sets them."""
    from pe_tools.recipes.slurm.job import job_task

    assert job_task(env) == expected


def test_a_jobs_state_record_names_its_own_job_id_node_and_start(tmp_path, monkeypatch):
    """RUN/slurm.json's fields for task 2 of array 100 (its own job id 102) on node gpu7 of gpu[1-8], started a
    second time: each from its own SLURM variable, not a sibling's (the array's id, the job's node list)."""
    from pe_tools.recipes.slurm.job import JobState

    env = {"SLURM_JOB_ID": "102", "SLURM_ARRAY_JOB_ID": "100", "SLURM_ARRAY_TASK_ID": "2", "SLURM_JOB_NAME": "pe-x",
           "SLURM_RESTART_COUNT": "1", "SLURMD_NODENAME": "gpu7", "SLURM_JOB_NODELIST": "gpu[1-8]"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert JobState(tmp_path).fields == {"job": "100_2", "job_id": "102", "name": "pe-x", "restarts": 1,
                                         "node": "gpu7"}


def test_the_state_files_problem_is_named_whatever_it_is(tmp_path):
    """state_problem names what is wrong with RUN/slurm.json: nothing when it is missing or an object; the error of a
    folder in its place (OSError) or of bytes that are not UTF-8 (ValueError), never raised; empty, not JSON, not
    an object."""
    from pe_tools.recipes.slurm.files import STATE_FILE, state_problem

    path = tmp_path / STATE_FILE
    assert state_problem(tmp_path) == ""
    path.mkdir()
    assert state_problem(tmp_path).startswith("IsADirectoryError: "), state_problem(tmp_path)
    path.rmdir()
    for data, says in ((b'{"word": "r\xe9"}', "UnicodeDecodeError: "), (b" ", "empty"),
                       (b"{oops", "5 bytes, not JSON ("), (b"[1]", "not a JSON object"), (b"{}", "")):
        path.write_bytes(data)
        assert state_problem(tmp_path).startswith(says) and (says or state_problem(tmp_path) == ""), (data, says)


# ---- the code the jobs run (--code) ----------------------------------------------------------------------------
@pytest.mark.parametrize("entry", ["pe_tools/recipes/slurm/__main__.py", "pe_tools/recipes/slurm.py", None])
def test_submitting_takes_a_code_copy_with_the_job_package_or_the_module_of_an_older_copy(entry, tmp_path, capsys):
    """pe-queue run --slurm --code DIR (a dry run): DIR runs the jobs (``python -m pe_tools.recipes.slurm job``),
    so it must hold the job's package (its __main__.py), or, in a copy pinned before the package, the module
    pe_tools/recipes/slurm.py, which takes the same job command line; a folder with neither is refused."""
    from pe_tools.recipes import queue_cli

    data, code = tmp_path / "data", tmp_path / "code"
    data.mkdir()
    for lang in ("en", "de"):
        (data / f"dict.{lang}.txt").write_text("")
    code.mkdir()
    (code / "COMMIT").write_text("pinned\n")
    if entry:
        (code / entry).parent.mkdir(parents=True)
        (code / entry).write_text("")
    queue_file = tmp_path / "q.txt"
    queue_file.write_text(f"multi30k sape en-de annealed 1 data={data} runs-dir={tmp_path / 'runs'}\n")
    rc = queue_cli.main(["run", str(queue_file), "--slurm", "--dry-run", "--code", str(code)])
    out, err = capsys.readouterr()
    if entry:
        assert rc == 0 and f"-m pe_tools.recipes.slurm job {queue_file.parent}" in out, (out, err)
    else:
        assert rc == 2 and f"--code {code.resolve()}: no pe_tools/recipes/slurm/__main__.py there" in err, err

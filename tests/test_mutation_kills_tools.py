"""Behaviours of pe_tools at the edges where a plausible slip (a limit compared with `>` for `>=`, one side of an
`or` dropped, a quoting function left out) passes the ordinary tests: each test feeds the edge, both sides of it
where there are two, against a reference worked out here (counts, fractions and argument vectors the test writes
itself, bash's own reading of a command line)."""
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
from argparse import Namespace
from pathlib import Path
from types import SimpleNamespace

import pytest

from pe_testing import REPO
from test_recipes import generate_args, generate_run  # imports torch, fairseq and the plugin, as pe-generate does

# ---- pe-generate (pe_tools/recipes/generate.py) -------------------------------------------------------------


@pytest.mark.parametrize("given", [False, True])
def test_generate_decodes_the_data_given_with_data_over_the_runs_recorded_one(given, tmp_path, monkeypatch):
    """pe-generate --data DIR decodes DIR, not the data folder the run recorded in command.json (a run trained on
    one copy of the data, decoded from another, e.g. moved to a node's disk); without --data, the recorded one.
    Both the position check and fairseq-generate's positional data argument get it."""
    from pe_tools.recipes import generate

    run = generate_run(tmp_path, 1)
    recorded = json.loads((run / "command.json").read_text())["data"]
    other = tmp_path / "data elsewhere"
    checked, decoded = [], []
    monkeypatch.setattr(generate, "average_into", lambda paths, avg: 0)
    monkeypatch.setattr(generate, "check_positions",
                        lambda avg, data, *rest: checked.append(str(data)) or {"pe": "rope", "decoder_limit": None})
    monkeypatch.setattr(generate, "fairseq_generate", lambda args: decoded.append(list(args)) or (5, ""))
    a = generate_args(run, 1)
    a.data = str(other) if given else None
    assert generate.generate(a) == 5  # fairseq-generate's status: nothing written after it
    want = str(other) if given else recorded
    assert recorded != str(other) and checked == [want]
    (args,) = decoded
    assert args[0] == want  # fairseq-generate's first argument (after python -m fairseq_cli.generate)


# ---- pe-queue's step log (pe_tools/recipes/queue.py) --------------------------------------------------------
HOSTILE = ["two words", "it's", 'say "hi"', "a;touch PWNED_SEMI", "$(touch PWNED_SUBST)", "`touch PWNED_BACK`",
           "tab\there", ""]


def test_the_logged_queue_command_pastes_back_as_the_same_argv(tmp_path, monkeypatch):
    """Each step's first line in RUN/queue.log, ``[queue] COMMAND``, is the step's argument vector as a shell line:
    pasted into a shell it gives back the same arguments, even ones holding a space, quotes, `;`, `$(...)`,
    backquotes, a tab or nothing, and runs none of them. The reference is the argv handed to the process and bash's
    own reading of the line (printf of each argument), not shlex alone."""
    from pe_tools.recipes import queue

    started = []

    class StandIn:  # the step's process: records its argv, ends at once
        pid = 424242

        def __init__(self, cmd, **kw):
            started.append(list(cmd))

        def wait(self):
            return 0

    run = queue.Run(1, "multi30k", "sape", "en-de", "annealed", 1, {"runs-dir": str(tmp_path / "runs")})
    q = queue.Queue(tmp_path / "q.txt", [run], REPO, 1, 1, log=lambda *_: None)
    log = tmp_path / "queue.log"
    with monkeypatch.context() as m:
        m.setattr(queue.subprocess, "Popen", StandIn)
        assert q.step(run, ["generate", *HOSTILE], log) == 0
    (argv,) = started
    assert argv[-len(HOSTILE):] == HOSTILE
    first = log.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("[queue] ")
    line = first[len("[queue] "):]
    assert shlex.split(line) == argv
    out = subprocess.run(["bash", "-c", "printf '%s\\0' " + line], cwd=tmp_path, capture_output=True, check=True)
    assert out.stdout.decode().split("\0")[:-1] == argv
    assert not list(tmp_path.glob("PWNED*"))


# ---- pe-report's comparisons (pe_tools/recipes/results.py) --------------------------------------------------
@pytest.mark.parametrize("n_seeds", [1, 2])
def test_a_report_compares_over_seeds_only_when_the_baseline_has_several(n_seeds):
    """pe-report's tables: ``results`` (the baseline's first seed) always; ``results_seeds`` only when the
    baseline was recorded with more than one seed: with one, it would repeat ``results`` under another name."""
    from pe_tools.naming import BASELINE
    from pe_tools.recipes.results import tables

    seeds = range(1, n_seeds + 1)
    runs = {m: {s: Path(f"{m}{s}") for s in seeds} for m in (BASELINE, "rope", "alibi")}
    out = tables(runs)
    assert out["results"] == {m: [Path(f"{m}1")] for m in runs}
    if n_seeds == 1:
        assert set(out) == {"results"}
    else:
        assert set(out) == {"results", "results_seeds"}
        assert out["results_seeds"] == {m: [Path(f"{m}1"), Path(f"{m}2")] for m in runs}


@pytest.mark.parametrize("with_both", [(), ("rope",), ("rope", "alibi")])
def test_a_report_over_seeds_needs_a_method_recorded_with_every_seed_of_the_baseline(with_both):
    """Two baseline seeds: ``results_seeds`` holds the baseline and each method recorded with both of its seeds,
    and is left out when no method is (a table of the baseline alone compares nothing)."""
    from pe_tools.naming import BASELINE
    from pe_tools.recipes.results import tables

    runs = {BASELINE: {1: Path("b1"), 2: Path("b2")}, "rope": {1: Path("r1")}, "alibi": {2: Path("a2")}}
    for m in with_both:
        runs[m] = {1: Path(f"{m}1"), 2: Path(f"{m}2")}
    out = tables(runs)
    if not with_both:
        assert set(out) == {"results"}
    else:
        assert out["results_seeds"] == {m: [runs[m][1], runs[m][2]] for m in (BASELINE, *with_both)}


# ---- a SLURM job's refused requeue (pe_tools/recipes/slurm.py) ----------------------------------------------
@pytest.fixture
def requeue_job(tmp_path, monkeypatch):
    """A SLURM array task 7_1 (job 8) of a one-run queue, in this process, whose chain only receives SLURM's signal
    before the time limit; ``scontrol`` is a stand-in on PATH that refuses with what the test gives it. Returns a
    function (stdout, stderr) -> what the job printed."""
    from pe_tools.recipes import slurm

    for name in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_RESTART_COUNT",
                 "SLURMD_NODENAME", slurm.local.REHEARSE_ENV):
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

    monkeypatch.setattr(slurm.JobQueue, "process", process)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGTERM)}

    def job(stdout, stderr, capsys):
        fake_program(bin_dir, "scontrol", stdout, stderr)
        capsys.readouterr()
        assert slurm.job_main([str(snapshot), "--line", "1", "--code", str(code)]) == 0
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
    assert f"could not requeue job 8 ({reason}); the time limit will end it" in out, out



def fake_program(bin_dir: Path, name: str, stdout: str, stderr: str, status: int = 1) -> None:
    """``name`` on PATH (``bin_dir``): prints ``stdout`` and ``stderr`` and exits with ``status``."""
    bin_dir.mkdir(exist_ok=True)
    program = bin_dir / name
    program.write_text(f"#!/bin/sh\nprintf '%s' {shlex.quote(stdout)}\nprintf '%s' {shlex.quote(stderr)} >&2\n"
                       f"exit {status}\n")
    program.chmod(0o755)


@pytest.mark.parametrize("stdout,stderr,reason", [
    ("sinfo: error: from stdout\n", "", "sinfo: error: from stdout"),
    ("chatter\n", "sinfo: error: from stderr\n", "sinfo: error: from stderr"),
])
def test_a_failed_slurm_query_names_its_reason_from_stderr_else_stdout(stdout, stderr, reason, tmp_path,
                                                                        monkeypatch):
    """A SLURM program that fails (sinfo for the cluster's size, squeue for the jobs' states) is named with its
    reason: its stderr, or its stdout when stderr is empty. The programs are stand-ins on PATH."""
    from pe_tools.recipes import slurm

    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    fake_program(tmp_path / "bin", "sinfo", stdout, stderr)
    with pytest.raises(slurm.SlurmError) as e:
        slurm._slurm("sinfo", "-h", what="--partition")
    assert str(e.value) == f"--partition: `sinfo -h` failed: {reason}"
    fake_program(tmp_path / "bin", "squeue", stdout.replace("sinfo", "squeue"), stderr.replace("sinfo", "squeue"))
    with pytest.raises(slurm.NoAnswer) as e:
        slurm.job_states(["5"])
    assert str(e.value) == f"`squeue` failed: {reason.replace('sinfo', 'squeue')}"



@pytest.mark.parametrize("stdout,stderr,reason", [
    ("scancel: error: from stdout\n", "", "scancel: error: from stdout"),
    ("chatter\n", "scancel: error: from stderr\n", "scancel: error: from stderr"),
])
def test_a_failed_cancel_names_scancels_reason_from_stderr_else_stdout(stdout, stderr, reason, tmp_path, monkeypatch,
                                                                       capsys):
    """pe-queue cancel, when scancel fails: the error names scancel's reason, its stderr or, when that is empty,
    its stdout. The queue's job and its live task are stand-ins; scancel a stand-in on PATH."""
    from pe_tools.recipes import slurm

    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    fake_program(tmp_path / "bin", "scancel", stdout, stderr)
    monkeypatch.setattr(slurm, "load_jobs", lambda queue_path: [{"job": "9"}])
    monkeypatch.setattr(slurm, "live_states", lambda jobs: {"9_1": "RUNNING"})
    assert slurm.cancel(tmp_path / "q.txt") == 2
    assert capsys.readouterr().err == f"error: scancel 9 failed: {reason}\n"


# ---- the language check (pe_tools/scoring/language.py) ------------------------------------------------------
FILLER = "haus katze baum wiese garten hund wagen straße fenster tisch".split()  # on no language's list


def _check_lists():
    from pe_tools.scoring.language import STOP_WORDS

    assert not any(w in stop for stop in STOP_WORDS.values() for w in FILLER)
    return STOP_WORDS


def test_shares_are_fractions_of_all_the_words():
    """language.shares gives each language's share of all the words (hits / words), with the counts apart;
    counted here over a text of 4 German, 1 English and 5 other words, and for no words at all."""
    from pe_tools.scoring.language import shares

    stop = _check_lists()
    german, english = ["der", "und", "nicht", "mit"], ["the"]
    assert all(w in stop["de"] for w in german) and english[0] in stop["en"]
    s = shares([" ".join(german + FILLER[:3]), " ".join(english + FILLER[3:5])])
    assert s["_words"] == 10 and s["_hits"]["de"] == 4 and s["_hits"]["en"] == 1
    assert s["de"] == pytest.approx(0.4) and s["en"] == pytest.approx(0.1) and s["fr"] == 0
    empty = shares(["", "123 ..."])
    assert empty["_words"] == 0 and all(empty[lang] == 0 for lang in stop)


@pytest.mark.parametrize("words,expected", [(250, "de"), (251, None)])
def test_a_language_is_identified_at_exactly_the_minimum_share_and_not_below(words, expected):
    """20 German stop words (5 different) among 250 words are a share of exactly 20/250 = 0.08, the minimum:
    German; among 251 words the share is just under it: not identified. Every other condition holds in both (20
    hits, 5 distinct, no other language's word)."""
    from pe_tools.scoring.language import MIN_DISTINCT, MIN_SHARE, MIN_WORDS, identify

    stop = _check_lists()
    german = ["der", "und", "nicht", "mit", "eine"] * 4
    assert all(w in stop["de"] and not any(w in s for lang, s in stop.items() if lang != "de") for w in german)
    assert (MIN_WORDS, MIN_DISTINCT, MIN_SHARE) == (20, 5, 0.08) and 20 / 250 == 0.08 and 20 / 251 < 0.08
    text = german + (FILLER * 30)[:words - 20]
    assert identify([" ".join(text)]) == expected


def test_a_long_text_with_enough_stop_words_but_too_small_a_share_is_not_identified():
    """MIN_WORDS stop words are not enough in a long text: 20 German ones among 1000 words (a share of 0.02, under
    0.08) identify nothing, while the same 20 among 100 words (0.2) are German."""
    from pe_tools.scoring.language import identify

    german = ["der", "und", "nicht", "mit", "eine"] * 4
    assert identify([" ".join(german + (FILLER * 100)[:980])]) is None
    assert identify([" ".join(german + (FILLER * 10)[:80])]) == "de"


# ---- significance marks and signatures (pe_tools/scoring/significance.py) -----------------------------------
@pytest.mark.parametrize("p,better,worse", [
    (0.0499, "++", "--"), (0.05, "+", "-"), (0.0999, "+", "-"), (0.10, "", ""), (None, "", ""),
])
def test_marks_at_exactly_the_significance_levels(p, better, worse):
    """'++' needs p < 0.05 and '+' p < 0.10: exactly 0.05 earns one sign, exactly 0.10 none; the sign follows the
    delta, and a zero delta earns nothing."""
    from pe_tools.scoring.significance import mark

    assert (mark(1.5, p), mark(-1.5, p), mark(0.0, p)) == (better, worse, "")


@pytest.mark.parametrize("aggressive", [True, False])
def test_only_the_compound_split_bleu_signature_names_its_preprocessing(aggressive):
    """The report's signatures: compound-split BLEU's says how its text was prepared (pre:moses-de[-a]+compound-
    split, -a with the aggressive dash split); sacreBLEU's BLEU and chrF++ score the text as given, and their
    signatures name no preprocessing."""
    from pe_tools.scoring.inputs import Inputs, System
    from pe_tools.scoring.significance import score_systems

    ref = ["Der Hund läuft schnell über die Wiese.", "Ein Kind spielt im Garten."] * 3
    base = System("base", ["b"], runs=[["Der Hund rennt über die Wiese.", "Ein Kind spielt im Park."] * 3])
    other = System("other", ["o"], runs=[["Der Hund läuft über die Wiese.", "Ein Kind spielt im Garten."] * 3])
    args = Namespace(n_samples=10, paired="bs", no_aggressive_dash=not aggressive, trg_lang="de", seed=1, jobs=1)
    sigs = score_systems(Inputs("ref", ref, base, [other]), args)["signatures"]
    fields = {key: dict(f.split(":", 1) for f in sig.split("|")) for key, sig in sigs.items()}
    assert fields["bleu_cs"]["pre"] == ("moses-de-a+compound-split" if aggressive else "moses-de+compound-split")
    assert "pre" not in fields["bleu"] and "pre" not in fields["chrf"], sigs
    assert fields["bleu"]["tok"] == "13a" and fields["bleu_cs"]["tok"] == "none"


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
    monkeypatch.setattr(run_state, "fcntl", NoLocks)
    assert run_state.live_trainer(tmp_path) == (holder if held else None)


@pytest.mark.parametrize("released_after", [None, 1, 2])
def test_the_trainer_lock_is_tried_as_often_as_asked_and_taken_when_freed(released_after, tmp_path, monkeypatch):
    """pe-train's lock: held by another open file (flock locks belong to the open file, so this process can hold it
    against itself), ``trainer_lock(run, tries=3)`` tries three times with a pause between (two pauses), then names
    the holder; freed during the pause after attempt k, it is taken at attempt k + 1 and names this process. No
    clock: the pauses are counted by a stand-in for time.sleep."""
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

    monkeypatch.setattr(run_state, "time", SimpleNamespace(sleep=pause))  # run_state's own name only
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


def test_without_a_lock_module_there_is_no_live_trainer_and_the_lock_is_not_waited_for(tmp_path, monkeypatch):
    """Where Python has no fcntl (not Linux): no process is known to hold a run, whatever RUN/train.lock says, and
    pe-train's lock is taken at once, naming this process."""
    from pe_tools.recipes import run_state

    run = tmp_path / "run"
    run.mkdir()
    (run / run_state.TRAINER_LOCK).write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
    monkeypatch.setattr(run_state, "fcntl", None)
    assert run_state.live_trainer(run) is None
    with run_state.trainer_lock(run, tries=1):
        assert json.loads((run / run_state.TRAINER_LOCK).read_text())["pid"] == os.getpid()


def test_a_run_whose_command_names_no_max_update_is_not_finished(tmp_path):
    """A run's end is its --max-update: without one in its command (a run begun by hand with another stopping
    rule), no checkpoint makes it finished, and why_not says the command names none."""
    from test_results import stand_in_checkpoint

    from pe_tools.recipes import run_state

    run = tmp_path / "run"
    run.mkdir()
    stand_in_checkpoint(run / "checkpoint_last.pt", 6)
    state = run_state.training_state(run, ["data", "--max-epoch", "3"])
    assert (state.top, state.reached, state.trained, state.done) == (None, 6, False, False)
    assert state.why_not() == f"{run}: its command names no --max-update"
    assert not run_state.finished(run, ["data"]) and run_state.finished(run, ["data", "--max-update", "6"])


# ---- what pe-queue status tells a user to paste (pe_tools/recipes/slurm.py, ``forgotten``) ----------------
NASTY = "a b'c\"d;touch PWNED1;e$(touch PWNED2)f`touch PWNED3`g"  # each payload leaves a PWNED* file if run


def bash_argv(line: str, cwd: Path) -> list:
    """The argument vector bash reads from ``line`` (printf of each word, nothing run but printf)."""
    out = subprocess.run(["bash", "-c", "printf '%s\\0' " + line], cwd=cwd, capture_output=True, check=True)
    return out.stdout.decode().split("\0")[:-1]


@pytest.mark.parametrize("with_log", [False, True])
def test_the_resubmit_command_of_a_forgotten_job_pastes_back_as_its_queue_file(with_log, tmp_path):
    """A job SLURM has forgotten (NEVER-RAN without a SLURM log, DIED with one): pe-queue status's note ends with
    ``pe-queue run QUEUE --slurm submits it again``. For a queue file whose folder and name hold a space, both
    quotes, `;`, `$(...)` and backquotes, that command reads back (shlex, and bash itself) as exactly pe-queue,
    run, the queue file's path and --slurm, and pasting it runs none of the payloads."""
    from pe_tools.recipes import slurm

    folder = tmp_path / NASTY
    folder.mkdir()
    queue_path = folder / f"queue {NASTY}.txt"
    run = SimpleNamespace(name="sape.en-de.mini.seed1", run_dir=tmp_path / "runs" / "sape.en-de.mini.seed1")
    if with_log:
        logs = slurm.submit_dir(queue_path) / "logs"
        logs.mkdir(parents=True)
        (logs / "pe-q-0_7_1.out").write_text("[queue] sape.en-de.mini.seed1\nKilled\n")
    notes = []
    assert slurm.forgotten(queue_path, run, "7_1", notes) == ("DIED" if with_log else "NEVER-RAN")
    (note,) = notes
    assert note.endswith(" submits it again") and note.count("pe-queue run ") == 1, note
    command = note[note.index("pe-queue run "):-len(" submits it again")]
    want = ["pe-queue", "run", str(queue_path), "--slurm"]
    assert shlex.split(command) == want
    assert bash_argv(command, tmp_path) == want
    assert not list(tmp_path.rglob("PWNED*"))


# ---- pe-train's command lines and its launch (pe_tools/recipes/train.py) ------------------------------------
def pe_train(tmp_path, monkeypatch, *flags, folder="d", runs="runs"):
    """pe-train sape (multi30k) in this process, fairseq-train never started (train.tee a stand-in recording the
    command it would run); data and runs under ``tmp_path / folder``. Returns (status, launched commands, the
    run's directory)."""
    from pe_tools.recipes import launch, run_state, train

    data = tmp_path / folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    (data / "dict.en.txt").write_text("")
    launched = []
    monkeypatch.setattr(run_state, "LOCK_TRIES", 1)
    monkeypatch.setattr(train, "tee", lambda cmd, log, **kw: launched.append(list(cmd)) or 0)
    runs_dir = tmp_path / folder / runs
    rc = launch.main(["train", "sape", "--recipe", "multi30k", "--data", str(data), "--runs-dir", str(runs_dir),
                      *flags, "--", "--max-update", "4", "--cpu"])
    return rc, launched, runs_dir / "sape.en-de.small.seed1"


def test_pe_trains_printed_and_recorded_commands_paste_back_as_the_command_it_runs(tmp_path, monkeypatch, capsys):
    """pe-train prints the fairseq-train command it runs and writes it to RUN/command.txt as a shell line: for a
    data folder and a runs folder holding a space, both quotes, `;`, `$(...)` and backquotes, each reads back
    (shlex, and bash itself) as exactly the argument vector started (and recorded in command.json), and running
    bash on them runs no payload. Once the run is finished, the pe-generate command pe-train suggests reads back
    as pe-generate and the run's folder."""
    from test_results import stand_in_checkpoint

    rc, launched, run = pe_train(tmp_path, monkeypatch, folder=NASTY, runs=f"runs {NASTY}")
    assert rc == 0
    (cmd,) = launched
    assert cmd[:3] == [sys.executable, "-m", "fairseq_cli.train"] and cmd[3] == str(tmp_path / NASTY / "data")
    assert str(run) in cmd  # --save-dir
    assert json.loads((run / "command.json").read_text())["argv"] == cmd
    printed = capsys.readouterr().out.splitlines()[0]
    recorded = (run / "command.txt").read_text()
    assert recorded.endswith("\n") and recorded.count("\n") == 1
    for line in (printed, recorded[:-1]):
        assert shlex.split(line) == cmd
        assert bash_argv(line, tmp_path) == cmd
    stand_in_checkpoint(run / "checkpoint_last.pt", 4)
    rc, launched, _ = pe_train(tmp_path, monkeypatch, folder=NASTY, runs=f"runs {NASTY}")
    assert rc == 0 and not launched
    out = capsys.readouterr().out
    assert "nothing to do. Decode it with pe-generate " in out, out
    command = out[out.index("pe-generate "):].rstrip("\n")
    assert shlex.split(command) == ["pe-generate", str(run)]
    assert bash_argv(command, tmp_path) == ["pe-generate", str(run)]
    assert not list(tmp_path.rglob("PWNED*"))


@pytest.mark.parametrize("gpus,allocation,by_srun", [(1, True, False), (2, True, True), (2, False, False)])
def test_pe_train_starts_one_srun_task_per_rank_only_for_several_gpus_inside_slurm(gpus, allocation, by_srun,
                                                                                    tmp_path, monkeypatch, capsys):
    """pe-train --gpus N inside a SLURM allocation (SLURM_JOB_ID set; 2 tasks) runs fairseq-train as N srun tasks
    (``srun --ntasks=N ... python -m pe_tools.recipes.srun -- CMD``) only when N > 1; with one GPU, in an
    allocation or not, and with two outside one, it runs the command itself: no srun step, no distributed
    rendezvous, no "[train] N ranks under SLURM" line."""
    for name in ("SLURM_JOB_ID", "SLURM_NTASKS", "SLURM_CPUS_PER_TASK"):
        monkeypatch.delenv(name, raising=False)
    if allocation:
        monkeypatch.setenv("SLURM_JOB_ID", "5")
        monkeypatch.setenv("SLURM_NTASKS", "2")
    rc, (launched,), run = pe_train(tmp_path, monkeypatch, "--gpus", str(gpus))
    assert rc == 0
    cmd = json.loads((run / "command.json").read_text())["argv"]
    assert cmd[:3] == [sys.executable, "-m", "fairseq_cli.train"]
    out = capsys.readouterr().out
    if by_srun:
        assert launched == ["srun", "--kill-on-bad-exit=1", f"--ntasks={gpus}", sys.executable, "-m",
                            "pe_tools.recipes.srun", "--", *cmd]
        assert f"[train] {gpus} ranks under SLURM: srun --kill-on-bad-exit=1 --ntasks={gpus} ..." in out
    else:
        assert launched == cmd
        assert "ranks under SLURM" not in out


@pytest.mark.parametrize("seconds,shown", [
    (59, "59 s"), (60, "1 min"), (59 * 60, "59 min"), (59 * 60 + 29, "59 min"), (60 * 60 - 31, "59 min"),
    (60 * 60 - 29, "1 h 00 min"), (60 * 60, "1 h 00 min"), (61 * 60, "1 h 01 min"), (125 * 60, "2 h 05 min"),
])
def test_a_time_left_of_an_hour_or_more_is_shown_in_hours_and_minutes(seconds, shown):
    """pe-train's progress note gives the time left as seconds under a minute, whole minutes under an hour (59
    min), and hours with two-digit minutes from a rounded 60 minutes on (``1 h 00 min``, never ``60 min``); the
    rounding to the nearest minute decides on which side a time just under the hour falls."""
    from pe_tools.recipes import train

    assert train._duration(seconds) == shown


# ---- what pe-record and pe-queue run tell a user to paste (results.record, queue_cli) ------------------------
@pytest.mark.parametrize("decoded", [False, True])
def test_pe_records_decode_command_pastes_back_as_its_run_folder(decoded, tmp_path):
    """pe-record of a run not decoded yet (no hypotheses), and of one decoded before its training finished: the
    message ends with the pe-generate command to run, which for a run folder holding a space, both quotes, `;`,
    `$(...)` and backquotes reads back (shlex, and bash itself) as exactly pe-generate and that folder, and
    pasting it runs none of the payloads."""
    from pe_tools.recipes import results

    run = tmp_path / NASTY / "sape.en-de.annealed.seed1"
    run.mkdir(parents=True)
    (run / "command.json").write_text(json.dumps({"pair": "en-de", "argv": ["d", "--max-update", "6"],
                                                  "extra": []}))
    if decoded:
        (run / "gen").mkdir()
        (run / "gen" / "hyp.detok.de").write_text("x\n")
        (run / "gen" / "hyp.detok.de.meta.json").write_text("{}")
    with pytest.raises(results.RecordError) as e:
        results.record(run, tmp_path / "into")
    message = str(e.value)
    command = message[message.rindex("pe-generate "):]
    want = ["pe-generate", str(run)]
    assert shlex.split(command) == want, message
    assert bash_argv(command, tmp_path) == want
    assert ("decode it again" in message) == decoded
    assert not list(tmp_path.rglob("PWNED*"))


def test_a_busy_queues_status_command_pastes_back_as_its_queue_file(data_bin, tmp_path, capsys):
    """pe-queue run on a queue file another pe-queue runs (it holds QUEUE.lock): refused, naming the pe-queue
    status command to see it, which for a queue file whose folder holds a space, quotes, `;`, `$(...)` and
    backquotes reads back (shlex and bash) as pe-queue, status and that file."""
    import fcntl

    from pe_tools.recipes import queue_cli

    folder = tmp_path / NASTY
    folder.mkdir()
    q = folder / "q.txt"
    q.write_text(f"multi30k sape en-de annealed 1 data={data_bin} runs-dir={tmp_path / 'runs'}\n")
    code = tmp_path / "code"
    (code / "pe_tools" / "recipes").mkdir(parents=True)
    (code / "pe_tools" / "recipes" / "launch.py").write_text("")
    with open(folder / "q.txt.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert queue_cli.main(["run", str(q), "--code", str(code)]) == 2
    err = capsys.readouterr().err.strip()
    command = err[err.index("pe-queue status "):-len(" shows it")]
    want = ["pe-queue", "status", str(q)]
    assert shlex.split(command) == want, err
    assert bash_argv(command, tmp_path) == want
    assert not list(tmp_path.rglob("PWNED*")) and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("update, paced", [(19, False), (20, False), (21, True)])
def test_a_progress_line_at_or_before_the_resumed_update_gives_no_pace(update, paced):
    """pe-train's progress note of a run resumed at update 20: a line at update 20 (or an earlier one) has no
    update since the mark to pace by, so the note gives the count alone and never divides by zero; at 21, the pace
    is the seconds since the launch, 10 s for one update."""
    from pe_tools.recipes import train

    now = [1_000_000.0]
    p = train.Progress(100, 20, clock=lambda: now[0])
    now[0] += 10
    line = f"2026-01-01 10:00:10 | INFO | train_inner | epoch 001:  1 / 9 loss=5.0, num_updates={update}, wall=0"
    done = f"[pe-train] update {update} of 100 ({update}%)"
    note = p.note(line)
    if paced:
        assert note.startswith(f"{done}, 10.00 s/update, finish ~ "), note
    else:
        assert note == done


# ---- the validation curves' figure (pe_tools/recipes/curves.py) ---------------------------------------------
@pytest.mark.parametrize("points,top", [
    ([(100, 9.0), (500, 4.0)], 4.0 * 1.05),  # only the point at exactly 500 counts: the axis ends above it
    ([(100, 9.0), (500, 4.0), (1000, 3.0)], 4.0 * 1.05),  # 500 and 1000: the higher of the two
    ([(100, 9.0), (499, 4.0)], None),  # none from update 500 on: matplotlib's own limits, the first point shown
])
def test_the_curves_y_axis_ends_above_the_highest_loss_from_update_500_on(points, top, monkeypatch):
    """The curves' figure cuts its y axis at 1.05 x the highest validation nll at update 500 or later (the first
    updates' 8-10 bits would squash the rest); a validation at exactly update 500 is one of them. With none
    from 500 on, matplotlib's own limits hold and the point at update 100 (nll 9) is inside the axis."""
    from pe_tools.recipes import curves

    figures = []
    monkeypatch.setattr(curves, "png_bytes", lambda fig, **kw: figures.append(fig) or b"")
    rows = [{"updates": u, "nll_loss": nll, "size": "small", "method": "sape"} for u, nll in points]
    curves.plot(rows, ["small"], ["sape"])
    (fig,) = figures
    bottom, ceiling = fig.axes[0].get_ylim()
    curves.pyplot().close(fig)
    if top is None:
        assert ceiling > 9.0
    else:
        assert ceiling == pytest.approx(top)


# ---- pe-generate's position override (pe_tools/recipes/generate.py) ----------------------------------------
@pytest.mark.parametrize("mode,pe,overridden", [
    ("clamp", "rope", True), ("clamp", "fairseq", False), ("error", "rope", False), ("error", "fairseq", False),
])
def test_generate_asks_for_clamped_positions_only_of_a_pe_plugin_model(mode, pe, overridden, tmp_path, monkeypatch,
                                                                        capsys):
    """pe-generate --pe-beyond-max clamp decodes a pe_plugin model with ``--model-overrides "{'pe_beyond_max':
    'clamp'}"``; a stock fairseq model (the position check's pe ``fairseq``, pe_plugin.decode_limits.STOCK) has no
    such option and gets no override, nor does any model under --pe-beyond-max error. Checked in the command
    fairseq-generate is given and in the one pe-generate prints."""
    from pe_plugin.decode_limits import STOCK
    from pe_tools.recipes import generate

    assert STOCK == "fairseq"
    run = generate_run(tmp_path, 1)
    decoded = []
    monkeypatch.setattr(generate, "average_into", lambda paths, avg: 0)
    monkeypatch.setattr(generate, "check_positions", lambda *args: {"pe": pe, "decoder_limit": None})
    monkeypatch.setattr(generate, "fairseq_generate", lambda args: decoded.append(list(args)) or (5, ""))
    a = generate_args(run, 1)
    a.pe_beyond_max = mode
    assert generate.generate(a) == 5
    (args,) = decoded
    printed = shlex.split(capsys.readouterr().out.splitlines()[-1])
    assert printed[3:] == args
    override = ["--model-overrides", "{'pe_beyond_max': 'clamp'}"]
    assert (args[-2:] == override) == overridden and ("--model-overrides" in args) == overridden


# ---- the console scripts' names (pe_tools/recipes/launch.py) ------------------------------------------------
@pytest.mark.parametrize("cmd", ["train", "generate", "record", "report"])
def test_each_console_scripts_usage_names_it(cmd, monkeypatch, capsys):
    """pe-train, pe-generate, pe-record and pe-report (setup.py's console scripts) show their own name in their
    help and in an error's usage line (``usage: pe-train ...``, ``pe-train: error: ...``), not the launcher's
    ``launch.py train``; ``launch.main`` called without names keeps argparse's own (the program, then the
    sub-command)."""
    from pe_tools.recipes import launch

    entry = getattr(launch, f"{cmd}_main")
    monkeypatch.setattr(sys, "argv", [f"/somewhere/pe-{cmd}", "--help"])
    with pytest.raises(SystemExit) as e:
        entry()
    assert e.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: pe-{cmd} [-h] ")
    monkeypatch.setattr(sys, "argv", [f"/somewhere/pe-{cmd}", "--no-such-flag"])
    with pytest.raises(SystemExit) as e:
        entry()
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith(f"usage: pe-{cmd} [-h] ") and f"\npe-{cmd}: error: " in err, err
    monkeypatch.setattr(sys, "argv", ["/somewhere/launch.py"])
    with pytest.raises(SystemExit):
        launch.main([cmd, "--help"])
    assert capsys.readouterr().out.startswith(f"usage: launch.py {cmd} ")


# ---- pe-queue's rehearsal queue file (pe_tools/recipes/queue.py, ``rehearsal``) ------------------------------
def test_a_rehearsal_queue_file_in_a_hostile_folder_reads_back_as_its_folders(tmp_path, monkeypatch):
    """pe-queue run --rehearse writes FOLDER/NAME: each run of the queue at the rehearsal size with data=, runs-dir=
    and into= under FOLDER (and the line's cpus=). For a FOLDER holding a space, both quotes, `;`, `$(...)` and
    backquotes, the file reads back (pe-queue's own parser) as exactly those folders, one run a line. The
    synthetic corpus is a stand-in (its folder, not made)."""
    from pe_tools.recipes import queue

    made = []
    monkeypatch.setattr(queue, "synthetic_data", lambda pair, dest, log: made.append(pair) or dest)
    q = tmp_path / "q.txt"
    q.write_text("wmt14 sape en-de base 1 cpus=3\nwmt14 rope en-fr base 2\n")
    folder = tmp_path / NASTY
    out = queue.rehearsal(q, folder)
    assert out == folder.resolve() / "q.txt" and made == ["en-de", "en-fr"]
    runs = queue.parse_queue(out, data=False)
    assert [(r.recipe, r.method, r.pair, r.size, r.seed) for r in runs] == [
        ("wmt14", "sape", "en-de", queue.REHEARSAL_SIZE, 1), ("wmt14", "rope", "en-fr", queue.REHEARSAL_SIZE, 2)]
    root = folder.resolve()
    for r, pair, cpus in zip(runs, ("en_de", "en_fr"), ({"cpus": "3"}, {})):
        assert r.options == {"data": str(root / "data" / f"synthetic_{pair}"), "runs-dir": str(root / "runs"),
                             "into": str(root / "results"), **cpus}
    assert not list(tmp_path.rglob("PWNED*"))


@pytest.mark.parametrize("steps,pace", [
    ([(0, 10)], None),  # one line: nothing to pace by
    ([(0, 10), (5, 20)], 0.5),  # exactly two: 5 s for 10 updates
    ([(0, 10), (5, 20), (9, 40)], 0.2),  # the last two: 4 s for 20 updates
    ([(0, 10), (5, 20), (9, 20)], None),  # a resumed log repeating update 20: no update between them
])
def test_pe_queue_status_paces_a_run_by_its_last_two_training_lines(steps, pace, tmp_path):
    """pe-queue status's seconds per update of a run: the time between the last two train_inner lines of its
    train.log over the updates between them, from two lines on (a log of exactly two is paced); none from one
    line, nor when the last line's update is not past the one before."""
    from pe_tools.recipes import queue

    run = queue.Run(1, "multi30k", "sape", "en-de", "annealed", 1, {"runs-dir": str(tmp_path)})
    run.run_dir.mkdir(parents=True)
    line = "2026-01-01 10:00:{s:02d} | INFO | train_inner | epoch 001: loss=5.0, num_updates={u}, wall=0\n"
    (run.run_dir / "train.log").write_text("".join(line.format(s=s, u=u) for s, u in steps))
    got = queue.progress(run)
    assert got["updates"] == steps[-1][1]
    if pace is None:
        assert "sec_per_update" not in got
    else:
        assert got["sec_per_update"] == pytest.approx(pace)


# ---- pe-queue status's notes (pe_tools/recipes/queue_cli.py) ------------------------------------------------
@pytest.mark.parametrize("submitted", [False, True])
def test_status_notes_a_failed_step_from_the_runs_log_only_for_a_local_queue(submitted, tmp_path, monkeypatch,
                                                                              capsys):
    """pe-queue status under its table: for a queue run here, a note per run whose last step failed, read from
    RUN/queue.log; for a queue submitted to SLURM, SLURM's notes alone (the job's own reason, which says more),
    never the run's queue.log line beside them. SLURM's columns and notes are a stand-in."""
    from pe_tools.recipes import queue_cli, slurm

    data = tmp_path / "data"
    data.mkdir()
    for lang in ("en", "de"):
        (data / f"dict.{lang}.txt").write_text("")
    qfile = tmp_path / "q.txt"
    qfile.write_text(f"multi30k sape en-de annealed 1 data={data} runs-dir={tmp_path / 'runs'}\n")
    (run,) = queue_cli.parse_queue(qfile)
    failed = f"train failed (exit 1): see {run.run_dir / 'train.log'}"
    run.run_dir.mkdir(parents=True)
    (run.run_dir / "queue.log").write_text(f"[queue] python -m pe_tools.recipes.launch train sape\n[queue] {failed}\n")
    slurm_note = f"{run.name}: FAILED: the job's own reason"

    def columns(queue_path, runs, notes, resuming):
        if not submitted:
            return None
        notes.append(slurm_note)
        return {"job": ["5_1"], "state": ["FAILED"], "requeues": ["0"]}

    monkeypatch.setattr(slurm, "status_columns", columns)
    assert queue_cli.main(["status", str(qfile)]) == 0
    notes = capsys.readouterr().out.splitlines()[2:]  # after the heading and the row
    assert notes == ([slurm_note] if submitted else [f"{run.name}: {failed}"])


# ---- what pe-record takes (pe_tools/recipes/results.py, ``record``) -----------------------------------------
@pytest.mark.parametrize("missing", ["hyp.detok.de", "hyp.detok.de.meta.json"])
def test_record_refuses_a_decode_missing_either_of_its_two_files(missing, tmp_path):
    """pe-record needs both files of a decode, RUN/gen/hyp.detok.TGT and its meta file: a run missing either one
    is refused with the pe-generate command that makes them (not a traceback of the file it could not read), and
    nothing is recorded."""
    from test_results import GOOD, write_run

    from pe_tools.recipes import results

    run = write_run(tmp_path, "sape", 1, GOOD, 60)
    (run / "gen" / missing).unlink()
    with pytest.raises(results.RecordError) as e:
        results.record(run, tmp_path / "recorded")
    assert str(e.value) == (f"{run}: no hyp.detok.de and hyp.detok.de.meta.json in {run / 'gen'}; decode it first "
                            f"with pe-generate {shlex.quote(str(run))}")
    assert not (tmp_path / "recorded").exists()


@pytest.mark.parametrize("name", [None, "last"])
@pytest.mark.parametrize("seconds,taken", [(0, True), (1, True), (-1, False)])
def test_record_takes_a_decode_as_new_as_its_last_checkpoint(name, seconds, taken, tmp_path):
    """pe-record refuses a decode older than the run's checkpoint_last.pt (it may not be of the last weights) and
    takes one written in the same instant as it or after: the decode's mtime set to the checkpoint's, one second
    after it and one second before it (nanoseconds exact), for the default decode and for a named one."""
    from test_results import GOOD, write_run

    from pe_tools.recipes import results

    run = write_run(tmp_path, "sape", 1, GOOD, 60)
    gen = run / "gen"
    if name:
        (gen / name).mkdir()
        for f in ("hyp.detok.de", "hyp.detok.de.meta.json"):
            (gen / name / f).write_bytes((gen / f).read_bytes())
    t = 1_700_000_000 * 10**9
    os.utime(run / "checkpoint_last.pt", ns=(t, t))
    for d in {gen, results.decode_dir(run, name)}:
        os.utime(d / "hyp.detok.de", ns=(t, t))
    h = results.decode_dir(run, name) / "hyp.detok.de"
    os.utime(h, ns=(t + seconds * 10**9,) * 2)
    if taken:
        dest = results.record(run, tmp_path / "recorded")
        assert (dest / "hyp.detok.de").is_file() and (not name or (dest / name / "hyp.detok.de").is_file())
    else:
        with pytest.raises(results.RecordError, match="is older than checkpoint_last.pt"):
            results.record(run, tmp_path / "recorded")


# ---- a SLURM job's count of starts without a new checkpoint (pe_tools/recipes/slurm.py) ---------------------
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
    from pe_tools.recipes.slurm import stalled_starts

    previous = {"job": "7_1", "restarts": 1, "resumed_from": 10, "stalled": 2,
                **({"state": state} if state else {})}
    assert stalled_starts(previous, "7_1", 2, 10) == (3 if counted else 0)
    if counted:  # the other conditions, each on its own
        assert stalled_starts(previous, "8_1", 2, 10) == 0
        assert stalled_starts(previous, "7_1", 1, 10) == 0
        assert stalled_starts(previous, "7_1", 2, 12) == 0
        assert stalled_starts(dict(previous, resumed_from=None), "7_1", 2, None) == 3  # no checkpoint yet, again


# ---- the pe-train command of a SLURM job (pe_tools/recipes/slurm.py, ``job_main``) --------------------------
@pytest.mark.parametrize("gpus", [1, 2])
def test_a_slurm_job_runs_its_lines_pe_train_command_adding_gpus_only_for_several(gpus, requeue_job, tmp_path,
                                                                                   monkeypatch, capsys):
    """A SLURM array task (``slurm job SNAPSHOT --line N --gpus G``) trains its line with the pe-train arguments a
    queue run here gives that line, plus ``--gpus G`` only for G > 1: with one GPU, the same command as the local
    queue's, pe-train's own default of one rank."""
    from pe_tools.recipes import queue, slurm

    snapshot = tmp_path / "queue.txt"
    (line,) = queue.parse_queue(snapshot)
    trained = []
    monkeypatch.setattr(slurm.JobQueue, "process", lambda self, run: trained.append(run.train_args()) or "recorded")
    assert slurm.job_main([str(snapshot), "--line", "1", "--code", str(tmp_path / "code"), "--gpus", str(gpus)]) == 0
    assert trained == [line.train_args() + (["--gpus", str(gpus)] if gpus > 1 else [])]
    assert "--gpus" not in line.train_args()


# ---- the rendezvous of srun tasks (pe_tools/recipes/srun.py) -------------------------------------------------
@pytest.mark.parametrize("given", [False, True])
def test_an_srun_tasks_rendezvous_is_pe_master_addr_else_the_first_nodes_address(given, tmp_path, monkeypatch):
    """Each srun task's --distributed-init-method is tcp://HOST:PORT with PORT 20000 + job id mod 20000 and HOST
    PE_MASTER_ADDR when set (scontrol not asked), else the NodeAddr scontrol gives for the first node of
    SLURM_JOB_NODELIST. scontrol is a stand-in on PATH that logs each call."""
    from pe_tools.recipes import srun

    calls = tmp_path / "calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f"#!/bin/sh\necho \"$*\" >> {shlex.quote(str(calls))}\n"
                        "case \"$2\" in hostnames) printf 'node1\\nnode2\\n';; "
                        "node) echo \"NodeName=$4 Arch=x86_64 NodeAddr=10.1.2.$4x State=IDLE\";; esac\n")
    scontrol.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    env = {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "20123", "SLURM_LOCALID": "1",
           "SLURM_JOB_NODELIST": "node[1-2]", **({"PE_MASTER_ADDR": "10.9.9.9"} if given else {})}
    flags = srun.rank_flags(["python", "-m", "fairseq_cli.train", "data"], env)
    host = "10.9.9.9" if given else "10.1.2.node1x"
    assert flags[flags.index("--distributed-init-method") + 1] == f"tcp://{host}:20123"
    assert flags[:5] == ["--distributed-world-size", "2", "--distributed-rank", "1", "--distributed-no-spawn"]
    said = calls.read_text().splitlines() if calls.exists() else []
    assert said == ([] if given else ["show hostnames node[1-2]", "show node -o node1"])

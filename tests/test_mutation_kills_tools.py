"""Behaviours of pe_tools at the edges where a plausible slip (a limit compared with `>` for `>=`, one side of an
`or` dropped, a quoting function left out) passes the ordinary tests: each test feeds the edge, both sides of it
where there are two, against a reference worked out here (counts, fractions and argument vectors the test writes
itself, bash's own reading of a command line)."""
import json
import os
import shlex
import sys
from argparse import Namespace
from pathlib import Path

import pytest

from pe_shell import NASTY, bash_argv
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

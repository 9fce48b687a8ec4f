"""The trained Multi30k setting (issue: results on trained models): the `annealed` sizes of the recipe and how
sizes resolve (pe_tools/recipes/train.py: merge_flags, size_entry), named decodes through pe-generate's output
folder, pe-record and pe-report --decode, a finished run that pe-train does not train again, and the validation
curves of recorded runs (pe_tools/recipes/curves.py)."""
import json
import shlex

import pytest

from pe_testing import REPO, flag_values
from pe_tools.recipes import launch, load_table
from pe_tools.recipes.curves import valid_curve
from pe_tools.recipes.train import finished, merge_flags, size_entry, train_argv

from pe_runs import BAD, GOOD, REF, save_checkpoint, write_run

METHODS = load_table("multi30k")


def test_small_resolves_to_the_command_its_recorded_runs_trained_with(tmp_path):
    """Moving the schedule flags from [common] into the sizes keeps `small`'s command: the same flags with the same
    values as the recorded SAPE run's command.json (paths and the device's --fp16 aside), none repeated."""
    recorded = json.loads((REPO / "examples/multi30k/results/sape.en-de.small.seed1/command.json").read_text())["argv"]
    ours = train_argv(METHODS, "sape", "en-de", "small", 1, "DATA", "RUN", extra=["--cpu"])
    skip = {"--user-dir", "--save-dir", "--fp16", "--cpu", "--log-format"}  # the log's format changes no training
    want = {k: v for k, v in flag_values(recorded[4:], once=True).items() if k not in skip}
    assert flag_values(recorded[4:])["--log-format"] == ["simple"] and flag_values(ours[1:])["--log-format"] == ["json"]
    got = {k: v for k, v in flag_values(ours[1:], once=True).items() if k not in skip}
    assert got == want
    assert recorded[3] == "data-bin/multi30k_en_de" and recorded[2] == "fairseq_cli.train"


@pytest.mark.parametrize("size, updates", [("annealed", 3000), ("annealed6k", 6000)])
def test_annealed_sizes_parse_as_a_linear_decay_to_zero(size, updates, tmp_path):
    from fairseq import options

    argv = train_argv(METHODS, "rope", "en-de", size, 1, tmp_path, tmp_path / "run", extra=["--cpu"])
    flag_values(argv, once=True)  # no flag twice
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    assert (args.lr_scheduler, args.warmup_updates, args.end_learning_rate, args.power) == ("polynomial_decay", 1000, 0.0, 1.0)
    assert (args.max_update, int(args.total_num_update), args.save_interval_updates, args.keep_interval_updates) == (updates, updates, 250, 5)
    assert (args.lr, args.max_tokens, args.encoder_layers, args.encoder_embed_dim, args.dropout) == ([1e-3], 4096, 3, 256, 0.3)
    assert not hasattr(args, "warmup_init_lr")  # polynomial_decay refuses it: dropped from `small`
    assert args.arch == "transformer_rope_wmt_en_de"


def test_size_resolution():
    table = {"common": {"flags": ["--a", "1", "--b", "x", "y", "--c"]},
             "size": {"s": {"arch": {"en-de": "tiny"}, "flags": ["--b", "z", "--d", "4"]},
                      "t": {"like": "s", "drop": ["--d"], "flags": ["--e"]},
                      "u": {"like": "v", "flags": []}, "v": {"like": "u", "flags": []}}}
    assert merge_flags(table["common"]["flags"], ["--b", "z", "--e", "5"]) == ["--a", "1", "--b", "z", "--c", "--e", "5"]
    assert size_entry(table, "t") == {"arch": {"en-de": "tiny"}, "flags": ["--b", "z", "--e"]}
    with pytest.raises(ValueError, match="cycle"):
        size_entry(table, "u")
    with pytest.raises(ValueError, match="unknown size 'w'; sizes: s, t, u, v"):
        size_entry(table, "w")


def test_one_update_freq_in_a_multi_gpu_dry_run(capsys):
    assert launch.main(["train", "sape", "--recipe", "wmt14", "--gpus", "8", "--dry-run"]) == 0
    argv = shlex.split(capsys.readouterr().out.strip().splitlines()[-1])
    assert flag_values(argv)["--update-freq"] == ["1"] and flag_values(argv)["--distributed-world-size"] == ["8"]


def write_named(run, name, lines):
    d = run / "gen" / name
    d.mkdir(parents=True)
    (d / "hyp.detok.de").write_text("".join(x + "\n" for x in lines))
    (d / "hyp.detok.de.meta.json").write_text(json.dumps({"pe_signature": "pe:x", "checkpoints": ["checkpoint_1_6.pt"]}))


def test_named_decodes_are_recorded_and_reported(tmp_path, capsys):
    into = tmp_path / "rec"
    for method, avg, last in (("sape", GOOD, GOOD[1:] + GOOD[:1]), ("nope", BAD, BAD[::-1])):
        run = write_run(tmp_path, method, 1, avg, 60)
        write_named(run, "last", last)
        assert launch.main(["record", str(run), "--into", str(into)]) == 0
        rec = into / run.name
        assert (rec / "last" / "hyp.detok.de").read_text() == "".join(x + "\n" for x in last)
        meta = json.loads((rec / "last" / "hyp.detok.de.meta.json").read_text())
        assert meta["checkpoints"] == ["checkpoint_1_6.pt"] and meta["training"]["updates"] == 6
    (tmp_path / "ref.de").write_text("".join(x + "\n" for x in REF))
    capsys.readouterr()
    assert launch.main(["report", "--recipe", "multi30k", "--results", str(into), "--ref", str(tmp_path / "ref.de"),
                        "--decode", "last", "--out-dir", str(tmp_path / "out"), "--", "--n-samples", "50"]) == 0
    printed = capsys.readouterr().out
    assert f"--prefix results_last --baseline sape={into / 'sape.en-de.small.seed1' / 'last' / 'hyp.detok.de'}" in printed
    assert (tmp_path / "out" / "results_last.md").is_file()
    # a run recorded without the decode is named, with the fix
    run = write_run(tmp_path, "rope", 1, GOOD, 60)
    assert launch.main(["record", str(run), "--into", str(into)]) == 0
    assert launch.main(["report", "--recipe", "multi30k", "--results", str(into), "--ref", str(tmp_path / "ref.de"),
                        "--decode", "last", "--out-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "rope.en-de.small.seed1: no decode 'last'" in err and "pe-generate RUN --name last" in err


def test_a_named_decode_older_than_the_last_checkpoint_is_refused(tmp_path, capsys):
    import os

    run = write_run(tmp_path, "sape", 1, GOOD, 60)
    write_named(run, "last", GOOD)
    t = (run / "checkpoint_last.pt").stat().st_mtime
    os.utime(run / "gen" / "hyp.detok.de", (t + 10, t + 10))  # the default decode came after the last update
    os.utime(run / "gen" / "last" / "hyp.detok.de", (t - 10, t - 10))  # the named one before it
    assert launch.main(["record", str(run), "--into", str(tmp_path / "rec")]) == 2
    assert f"decode it again with pe-generate {run} --name last" in capsys.readouterr().err
    assert not (tmp_path / "rec").exists()


@pytest.mark.parametrize("name", ["Last", "1st", "a/b", "", "x" * 40])
def test_decode_names_are_checked(name, tmp_path, capsys):
    with pytest.raises(SystemExit):
        launch.main(["generate", str(tmp_path), "--name", name])
    assert "a decode name is lowercase letters" in capsys.readouterr().err


def test_updates_of_reads_the_count_without_tensors_or_code(tmp_path):
    """checkpoint_files.updates_of against torch's own load of the same file; a cut file and a pickle that would run
    code (a file created on load) read as None and run nothing."""
    import pathlib

    import torch

    from pe_tools.checkpoint_files import updates_of

    save_checkpoint(tmp_path / "c.pt", 7)
    assert updates_of(tmp_path / "c.pt") == torch.load(tmp_path / "c.pt", weights_only=False)[
        "optimizer_history"][-1]["num_updates"] == 7
    data = (tmp_path / "c.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])
    assert updates_of(tmp_path / "cut.pt") is None and updates_of(tmp_path / "none.pt") is None

    class Trap:
        def __reduce__(self):
            return pathlib.Path.touch, (tmp_path / "ran",)

    torch.save({"optimizer_history": [{"num_updates": Trap()}]}, tmp_path / "trap.pt")
    assert updates_of(tmp_path / "trap.pt") is None and not (tmp_path / "ran").exists()


def test_a_finished_run_is_not_trained_again(tmp_path):
    """fairseq-train resumed at its --max-update trains one more update; pe-train must not start it then. Finished
    is what checkpoint_last.pt holds, whatever the log says: a run killed after its last checkpoint, before fairseq
    logged "done training", has finished."""
    run = tmp_path / "run"
    run.mkdir()
    argv = ["d", "--max-update", "6"]
    assert not finished(run, argv)  # no checkpoint_last.pt
    save_checkpoint(run / "checkpoint_last.pt", 6)
    assert finished(run, argv)  # no train.log at all
    assert not finished(run, ["d", "--max-update", "8"])  # a longer budget resumes
    save_checkpoint(run / "checkpoint_last.pt", 5)
    assert not finished(run, argv)
    save_checkpoint(run / "checkpoint_last.pt", 6)
    data = (run / "checkpoint_last.pt").read_bytes()
    (run / "checkpoint_last.pt").write_bytes(data[:-100])  # cut short: fairseq cannot resume from it either
    assert not finished(run, argv)


def test_valid_curve_reads_each_validation_once():
    log = "\n".join(f"2026-01-01 10:00:0{i} | INFO | valid | epoch 001 | valid on 'valid' subset | loss {l} | "
                    f"nll_loss {n} | ppl 9 | wps 1 | wpb 2 | bsz 3 | num_updates {u}" + (" | best_loss 1" if i else "")
                    for i, (l, n, u) in enumerate([(9.5, 9.1, 100), (8.25, 8.0, 200), (8.5, 8.2, 200)]))
    assert valid_curve(log) == [{"updates": 100, "loss": 9.5, "nll_loss": 9.1},
                                {"updates": 200, "loss": 8.5, "nll_loss": 8.2}]  # a resumed run's repeat: the last


VALID_LINE = ("2026-01-01 10:00:00 | INFO | valid | epoch 001 | valid on 'valid' subset | loss {nll} | nll_loss {nll} | "
              "ppl 9 | wps 1 | wpb 2 | bsz 3 | num_updates {u}\n")


def write_curve(results, method, seed, size, points, pair="en-de"):
    """A recorded run's command.json and a train.log of its validations ``points`` [(updates, nll_loss)]."""
    run = results / f"{method}.{pair}.{size}.seed{seed}"
    run.mkdir(parents=True)
    (run / "command.json").write_text(json.dumps({"method": method, "pair": pair, "size": size, "seed": seed}))
    (run / "train.log").write_text("".join(VALID_LINE.format(nll=n, u=u) for u, n in points))


def test_curves_keep_the_asked_seed(tmp_path):
    from pe_tools.recipes.curves import curves

    write_curve(tmp_path, "sape", 1, "annealed", [(250, 5.0)])
    write_curve(tmp_path, "sape", 2, "annealed", [(250, 4.0)])
    write_curve(tmp_path, "sape", 1, "annealed", [(250, 3.0)], pair="en-fr")
    assert [(r["seed"], r["nll_loss"]) for r in curves(tmp_path, "en-de", 2, None)] == [(2, 4.0)]
    assert [(r["seed"], r["nll_loss"]) for r in curves(tmp_path, "en-de", None, None)] == [(1, 5.0), (2, 4.0)]


def test_curves_without_a_run_name_the_pair_and_seed(tmp_path, capsys):
    from pe_tools.recipes import curves

    write_curve(tmp_path, "sape", 1, "annealed", [(250, 5.0)])
    for seed, said in (["--seed", "3"], "no recorded run of en-de seed 3 with"), ([], "no recorded run of en-fr with"):
        assert curves.main(["--results", str(tmp_path), *seed, "--out", str(tmp_path / "c.png"),
                            "--pair", "en-de" if seed else "en-fr"]) == 2
        assert said in capsys.readouterr().err
    assert not (tmp_path / "c.png").exists()


def test_curves_plot_one_panel_per_size_and_a_line_per_method(tmp_path, monkeypatch):
    """Each size a panel, each method its points in its system_style, small markers (at most 3 pt, as the other
    figures' curves: ngram.py, length_buckets.py; matplotlib's 6 pt default hides a curve's shape), and the y axis
    cut above the highest loss after 500 updates."""
    from pe_tools.recipes import curves
    from pe_tools.scoring.style import system_style

    figures = []
    monkeypatch.setattr(curves, "png_bytes", lambda fig, **kw: figures.append(fig) or b"png")
    write_curve(tmp_path, "sape", 1, "small", [(250, 9.0), (500, 4.0), (750, 3.0)])
    write_curve(tmp_path, "rope", 1, "small", [(250, 8.0), (500, 4.5)])
    write_curve(tmp_path, "rope", 1, "annealed", [(500, 2.0)])
    assert curves.main(["--results", str(tmp_path), "--sizes", "small", "annealed", "--out", str(tmp_path / "c.png")]) == 0
    assert (tmp_path / "c.png").read_bytes() == b"png"
    small, annealed = figures[0].axes
    assert (small.get_title(), annealed.get_title()) == ("small", "annealed")
    drawn = {ax.get_title(): [(line.get_label(), list(line.get_xdata()), list(line.get_ydata()), line.get_color(),
                               line.get_marker()) for line in ax.get_lines()] for ax in (small, annealed)}
    sape, rope = system_style(0), system_style(1)  # SAPE first: the baseline
    assert drawn == {"small": [("sape", [250, 500, 750], [9.0, 4.0, 3.0], sape["color"], sape["marker"]),
                               ("rope", [250, 500], [8.0, 4.5], rope["color"], rope["marker"])],
                     "annealed": [("rope", [500], [2.0], rope["color"], rope["marker"])]}
    assert all(0 < line.get_markersize() <= 3 for ax in (small, annealed) for line in ax.get_lines())
    assert small.get_ylim()[1] == pytest.approx(4.5 * 1.05)


def test_a_short_or_changed_run_gets_a_panel_titled_with_its_updates_and_flags(tmp_path, monkeypatch):
    """A 200-update trial of size small (flags changed after pe-train's --) is not drawn as "small" beside the
    recipe's 1500-update runs: its panel's title names its updates and its changed flags."""
    from pe_tools.recipes import curves

    figures = []
    monkeypatch.setattr(curves, "png_bytes", lambda fig, **kw: figures.append(fig) or b"png")
    for method, updates, extra in (("sape", 1500, []), ("rope", 1500, []), ("rope", 200, ["--max-update", "200"])):
        write_curve(tmp_path, method, 1 if updates == 1500 else 2, "small", [(100, 5.0), (200, 4.0)])
        command = tmp_path / f"{method}.en-de.small.seed{1 if updates == 1500 else 2}" / "command.json"
        record = json.loads(command.read_text())
        command.write_text(json.dumps(dict(record, argv=["x", "--max-update", "1500", *extra], extra=extra)))
    assert curves.main(["--results", str(tmp_path), "--out", str(tmp_path / "c.png")]) == 0
    titles = [ax.get_title() for ax in figures[0].axes]
    assert titles == ["small, 1500 updates", "small, 200 updates\n(flags: --max-update 200)"]
    assert [line.get_label() for line in figures[0].axes[1].get_lines()] == ["rope"]

def test_agreement_maps_a_renamed_system(tmp_path):
    from pe_tools.scoring import agreement

    def report(scores):
        return {"metrics": {"bleu": {"label": "BLEU"}},
                "systems": [{"name": k, "summary": {"bleu": {"mean": v}}, "runs": []} for k, v in scores.items()]}

    old = {"a": 1.0, "b_old": 2.0, "c": 3.0, "d": 4.0}
    new = {"a": 10.0, "b": 20.0, "c": 40.0, "d": 30.0}
    for name, r in (("old.json", report(old)), ("new.json", report(new))):
        (tmp_path / name).write_text(json.dumps(r))
    argv = [str(tmp_path / "old.json"), str(tmp_path / "new.json"), "--out", str(tmp_path / "out.md")]
    assert agreement.main(argv) == 0
    assert json.loads((tmp_path / "out.md.json").read_text())["rows"][0]["n"] == 3  # b_old and b are not matched
    assert agreement.main(argv + ["--rename", "b_old=b"]) == 0
    row = json.loads((tmp_path / "out.md.json").read_text())["rows"][0]
    # a < b < c < d against a < b < d < c: one discordant pair of six, tau = (5 - 1) / 6
    assert row["n"] == 4 and row["kendall_tau"] == pytest.approx(4 / 6) and row["systems"] == ["a", "b", "c", "d"]
    with pytest.raises(SystemExit):
        agreement.main(argv + ["--rename", "b_old"])


def test_a_misspelt_method_gets_the_closest_names(capsys):
    assert launch.main(["train", "posnet_embd", "--recipe", "multi30k", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "unknown method 'posnet_embd'; did you mean posnet_embed," in err and "Valid methods: " in err


def test_train_help_lists_the_methods(capsys):
    with pytest.raises(SystemExit):
        launch.main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for recipe in ("multi30k", "wmt14"):
        assert f"{recipe}: " + ", ".join(load_table(recipe)["method"]) in out


@pytest.mark.parametrize("other", ["pair", "seed", "size", "method"])
def test_curves_keep_only_the_asked_runs_by_each_key(tmp_path, other):
    """pe_tools/recipes/curves.curves filters by pair, seed, sizes and methods: a run that differs from the asked
    one in any single key is left out (survivor: the sizes filter dropped from the guard)."""
    from pe_tools.recipes.curves import curves

    asked = {"method": "sape", "seed": 1, "size": "annealed", "pair": "en-de"}
    write_curve(tmp_path, points=[(250, 5.0)], **asked)
    write_curve(tmp_path, points=[(250, 9.0)], **dict(asked, **{other: {"pair": "en-fr", "seed": 2, "size": "small",
                                                                         "method": "rope"}[other]}))
    rows = curves(tmp_path, asked["pair"], asked["seed"], [asked["size"]], [asked["method"]])
    assert [(r["method"], r["size"], r["seed"], r["nll_loss"]) for r in rows] == [("sape", "annealed", 1, 5.0)]


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

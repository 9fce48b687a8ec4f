"""The WMT14 recipe: pe_tools/recipes/wmt14/methods.toml against the registry, scripts/launch.py (train.sh,
generate.sh) end to end on the tiny corpus, and the multi-process path (two gloo ranks on CPU equal one
process with twice the update frequency)."""
import json
import logging
import os
import re
import shlex
import socket
import subprocess
import sys
import time

import pytest

from pe_runs import stand_in_checkpoint
from pe_shell import NASTY, bash_argv
from pe_testing import PLUGIN, REPO

from pe_tools.recipes import all_pairs, launch, load_table, table_pairs, training_log
from pe_tools.recipes.train import train_argv

from pe_plugin.encodings import PE_REGISTRY  # noqa: E402

TABLE = load_table("wmt14")
TINY_RUN = ["--max-tokens", "200", "--update-freq", "1", "--save-interval-updates", "2", "--cpu",
            "--dropout", "0", "--num-workers", "0", "--log-interval", "1"]


def shell(script, *args):
    env = dict(os.environ, PYTHON=sys.executable, PYTHONWARNINGS="ignore")
    return subprocess.run(["bash", str(REPO / "examples" / "wmt14" / script), *map(str, args)], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_methods_table_is_the_registry():
    methods = TABLE["method"]
    assert set(PE_REGISTRY) <= set(methods), f"no recipe entry for {set(PE_REGISTRY) - set(methods)}"
    for name, entry in methods.items():
        assert entry.get("pe", name) in PE_REGISTRY, f"{name}: encoding {entry.get('pe', name)!r} is not registered"
        assert name in PE_REGISTRY or "pe" in entry, f"{name}: a variant must name its encoding with pe = ..."
        n_flags = sum(1 for x in entry["flags"] if x.startswith("--"))  # values of flags not counted
        assert n_flags <= 5, f"{name}: {n_flags} extra flags; methods.toml allows 0-5 per method"


@pytest.mark.parametrize("size", ["tiny", "base", "big"])
@pytest.mark.parametrize("method", list(TABLE["method"]))
def test_every_entry_parses_with_fairseq(method, size, tmp_path):
    from fairseq import options

    pair = "en-fr" if size == "big" else "en-de"
    argv = train_argv(TABLE, method, pair, size, 1, tmp_path, tmp_path / "run", extra=["--cpu"])
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    assert args.user_dir == PLUGIN and args.pe == TABLE["method"][method].get("pe", method)
    assert args.adam_eps == 1e-9 and args.lr == [7e-4] and args.label_smoothing == 0.1
    if method == "posnet_embed_released":
        assert args.posnet_sides == "encoder" and args.max_source_positions == 512


@pytest.mark.slow
def test_recipe_posnet_models_have_the_papers_parameter_deltas(tmp_path):
    """Table 1 of Zhang et al. (2023), base En-De: PosNet-Embed 66.49M and PosNet-Attn 64.11M against SAPE's
    63.08M, i.e. +3.41M and +1.03M. The recipe's entries, built from their own flags at base size with a
    40,000-symbol joined dictionary (as the README's parameter table), give those deltas within 0.01M. Before the
    recipe set L_max they had fairseq's 1024 positions: +16.91M and +4.19M."""
    import torch
    from fairseq import options, tasks

    for lang in ("en", "de"):  # fairseq's Dictionary adds its 4 special symbols
        (tmp_path / f"dict.{lang}.txt").write_text("".join(f"w{i} 1\n" for i in range(40000 - 4)))
    total = {}
    for method in ("sape", "posnet_embed", "posnet_attn"):
        argv = train_argv(TABLE, method, "en-de", "base", 1, tmp_path, tmp_path / "run", extra=["--cpu"])
        args = options.parse_args_and_arch(options.get_training_parser(), argv)
        assert args.arch == f"transformer_{method}_wmt_en_de"
        with torch.device("meta"):  # parameter counts only: no storage, no initialisation
            model = tasks.setup_task(args).build_model(args)
        total[method] = sum(p.numel() for p in model.parameters())
        del model
    paper = {"posnet_embed": 66.49 - 63.08, "posnet_attn": 64.11 - 63.08}  # Table 1, millions
    for method, delta in paper.items():
        assert abs((total[method] - total["sape"]) / 1e6 - delta) <= 0.01 + 1e-9, (method, total[method] - total["sape"])


def test_dry_run_prints_the_paper_command(capsys):
    assert launch.main(["train", "posnet_embed", "--seed", "3", "--dry-run"]) == 0
    cmd = capsys.readouterr().out
    for flag in ["--arch transformer_posnet_embed_wmt_en_de ", "--adam-betas '(0.9, 0.98)'", "--adam-eps 1e-9",
                 "--lr 7e-4 --lr-scheduler inverse_sqrt --warmup-updates 4000 --warmup-init-lr 1e-7",
                 "--criterion label_smoothed_cross_entropy --label-smoothing 0.1", "--max-tokens 4096 --update-freq 8",
                 "--share-all-embeddings", "--clip-norm 0", "--weight-decay 0", "--max-update 150000",
                 "--save-interval-updates 1000 --keep-interval-updates 10", "--seed 3",
                 "--save-dir runs/posnet_embed.en-de.base.seed3"]:
        assert flag in cmd, flag


def test_gpus_keep_the_effective_batch(capsys):
    assert launch.main(["train", "sape", "--gpus", "8", "--size", "big", "--pair", "en-fr", "--dry-run"]) == 0
    cmd = capsys.readouterr().out.split()
    assert cmd[cmd.index("--arch") + 1] == "transformer_sape_wmt_en_fr_big"
    assert cmd[cmd.index("--distributed-world-size") + 1] == "8"
    assert cmd[len(cmd) - 1 - cmd[::-1].index("--update-freq") + 1] == "1"  # the last one wins in argparse
    assert launch.main(["train", "sape", "--gpus", "3", "--dry-run"]) == 2
    assert "--gpus 3: 32,768 tokens per update cannot be shared equally" in capsys.readouterr().err


def test_unknown_method_and_missing_data(capsys, tmp_path):
    assert launch.main(["train", "posnet", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "unknown method 'posnet'" in err and all(name in err for name in PE_REGISTRY)
    assert launch.main(["train", "sape", "--data", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "nowhere") in err and "prepare.sh" in err


def test_pairs_are_the_tables_pairs(capsys):
    """--pair offers the pairs of the recipe tables (both recipes: en-de and en-fr, in methods.toml's sizes and
    corpora.toml's [pair.*]); an unknown pair is refused naming them."""
    import tomllib

    assert all_pairs() == ["en-de", "en-fr"]
    for recipe in ("wmt14", "multi30k"):
        with open(REPO / "pe_tools" / "recipes" / recipe / "corpora.toml", "rb") as f:
            assert list(tomllib.load(f)["pair"]) == table_pairs(load_table(recipe)) == ["en-de", "en-fr"], recipe
    for cmd in (["train", "sape", "--dry-run"], ["report", "--out-dir", "out"]):
        with pytest.raises(SystemExit) as e:
            launch.main([*cmd, "--pair", "en-xx"])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert "--pair: invalid choice: 'en-xx' (choose from 'en-de', 'en-fr')" in err, err
    with pytest.raises(ValueError, match="unknown pair 'de-en' for this recipe; its pairs: en-de, en-fr"):
        train_argv(TABLE, "sape", "de-en", "base", 1, "data", "run")


@pytest.mark.parametrize("n", ["0", "-2"])
def test_generate_refuses_checkpoint_counts_below_one(n, capsys, tmp_path):
    """--checkpoints 0 once averaged every checkpoint ([-0:]) and -N all but the oldest N."""
    with pytest.raises(SystemExit) as e:
        launch.main(["generate", str(tmp_path), "--checkpoints", n])
    assert e.value.code == 2
    assert f"argument --checkpoints: must be at least 1 (got {n})" in capsys.readouterr().err
    # the command itself, called without the parser
    from argparse import Namespace

    from pe_tools.recipes.generate import generate

    (tmp_path / "command.json").write_text(json.dumps({"data": "d", "pair": "en-de"}))
    (tmp_path / "checkpoint_1_2.pt").write_bytes(b"")
    assert generate(Namespace(run_dir=str(tmp_path), data=None, checkpoints=int(n))) == 2
    assert f"--checkpoints: the number of checkpoints must be at least 1 (got {n})" in capsys.readouterr().err
    assert not (tmp_path / "gen").exists()  # nothing averaged or decoded


def test_last_checkpoints_are_the_newest_updates(tmp_path):
    from pe_tools.checkpoint_files import last_checkpoints, numbered_checkpoints

    for name in ("checkpoint_1_2.pt", "checkpoint_2_10.pt", "checkpoint_1_4.pt", "checkpoint_last.pt",
                 "checkpoint3.pt", "checkpoint_best.pt", "checkpoint.avg2.pt", "xcheckpoint_1_6.pt"):
        (tmp_path / name).write_bytes(b"")
    assert [p.name for p in last_checkpoints(tmp_path, 2)] == ["checkpoint_1_4.pt", "checkpoint_2_10.pt"]
    assert [p.name for p in last_checkpoints(tmp_path, 5)] == ["checkpoint_1_2.pt", "checkpoint_1_4.pt",
                                                              "checkpoint_2_10.pt"]
    assert [p.name for p in numbered_checkpoints(tmp_path, "epoch")] == ["checkpoint3.pt"]
    for n in (0, -1):
        with pytest.raises(ValueError, match="at least 1"):
            last_checkpoints(tmp_path, n)


@pytest.mark.parametrize("flag", ["--num-update-checkpoints", "--num-epoch-checkpoints"])
def test_average_refuses_checkpoint_counts_below_one(flag, capsys, tmp_path):
    from pe_tools import average

    for n in ("0", "-1"):
        with pytest.raises(SystemExit) as e:
            average.main(["--inputs", str(tmp_path), "--output", str(tmp_path / "avg.pt"), flag, n])
        assert e.value.code == 2
        assert f"argument {flag}: must be at least 1 (got {n})" in capsys.readouterr().err


def test_average_is_the_mean_of_its_inputs(tmp_path, capsys):
    """pe-average of the newest 3 of 4 checkpoints: each floating-point tensor is the mean of the inputs' (torch's
    own mean of the stacked tensors, in float64), in the input's dtype; integer tensors and the other state are the
    newest checkpoint's."""
    import torch

    from pe_tools import average

    gen = torch.Generator().manual_seed(0)
    models = []
    for u in (2, 4, 6, 8):
        model = {"w": torch.randn(3, 5, generator=gen), "b": torch.randn(5, generator=gen).half(),
                 "steps": torch.tensor([u, u + 1])}
        models.append(model)
        torch.save({"model": model, "extra_state": {"num_updates": u}}, tmp_path / f"checkpoint_1_{u}.pt")
    out = tmp_path / "avg.pt"
    assert average.main(["--inputs", str(tmp_path), "--num-update-checkpoints", "3", "--output", str(out)]) == 0
    assert "averaged 3 checkpoints" in capsys.readouterr().out
    avg = torch.load(out, weights_only=True)
    for k in ("w", "b"):
        mean = torch.stack([m[k].double() for m in models[1:]]).mean(0)
        assert avg["model"][k].dtype == models[0][k].dtype
        assert torch.allclose(avg["model"][k].double(), mean, atol=1e-3 if k == "b" else 1e-6)
        assert not torch.allclose(avg["model"][k].double(), models[-1][k].double(), atol=1e-2)  # not a copy
    assert torch.equal(avg["model"]["steps"], models[-1]["steps"]) and avg["extra_state"] == {"num_updates": 8}


@pytest.mark.parametrize("odd", ["an_extra_parameter_later", "a_parameter_missing_later", "one_renamed"])
def test_average_refuses_checkpoints_of_different_models(odd, tmp_path, capsys):
    """Checkpoints whose models hold different parameters (another encoding's, one more layer, a renamed one) are
    not averaged, whichever of them holds more: the error names the odd file and the first, and no output is
    written. (Averaged anyway, a parameter missing from some inputs would be divided by all of them.)"""
    import torch

    from pe_tools import average

    base = {"embed.weight": torch.ones(4, 2), "layers.0.w": torch.ones(2, 2)}
    other = {"an_extra_parameter_later": {**base, "layers.0.rpe_table": torch.ones(3, 2)},
             "a_parameter_missing_later": {"embed.weight": torch.ones(4, 2)},
             "one_renamed": {"embed.weight": torch.ones(4, 2), "layers.1.w": torch.ones(2, 2)}}[odd]
    for u, model in ((2, base), (4, base), (6, other)):
        torch.save({"model": model, "extra_state": {"num_updates": u}}, tmp_path / f"checkpoint_1_{u}.pt")
    out = tmp_path / "avg.pt"
    with pytest.raises(SystemExit, match=r"checkpoint_1_6\.pt has different parameters than \S*checkpoint_1_2\.pt; "
                                         "average one model only"):
        average.main(["--inputs", str(tmp_path), "--num-update-checkpoints", "3", "--output", str(out)])
    assert not out.exists()


def test_a_missing_table_is_named_by_its_kind():
    """load_table's error says which table is missing: a methods table is the 'recipe table', corpora.toml the
    'corpora table' (__init__.py: kind == "methods")."""
    from pe_tools.file_io import TomlError

    for kind, label in (("methods", "recipe table"), ("corpora", "corpora table")):
        with pytest.raises(TomlError, match=rf"^{label} \S*nowhere[/\\]{kind}\.toml not found$"):
            load_table("nowhere", kind)


def generate_run(tmp_path, checkpoints, reached=None, max_update=None):
    """A finished run directory: command.json, ``checkpoints`` empty update checkpoints (nothing to decode) every 2
    updates, and a checkpoint_last.pt holding update ``reached`` of ``max_update`` (default: the last one's)."""
    run = tmp_path / "run"
    run.mkdir()
    last = 2 * checkpoints
    (run / "command.json").write_text(json.dumps({"data": str(tmp_path / "data"), "pair": "en-de",
                                                  "argv": ["--max-update", str(max_update or last)]}))
    for u in range(1, checkpoints + 1):
        (run / f"checkpoint_1_{2 * u}.pt").write_bytes(b"")
    stand_in_checkpoint(run / "checkpoint_last.pt", last if reached is None else reached)
    return run


def generate_args(run, checkpoints, partial=False):
    from argparse import Namespace

    return Namespace(run_dir=str(run), data=None, checkpoints=checkpoints, subset="test", name=None,
                     pe_beyond_max="clamp", no_detok=True, partial=partial)


@pytest.mark.parametrize("case, refusal", [
    ("finished", None),
    ("short", "has not finished training: checkpoint_last.pt holds update 2 of 4"),
    ("training", "is still training (checkpoint_last.pt holds update 4 of 4; trainer pid"),
])
@pytest.mark.parametrize("partial", [False, True])
def test_generate_refuses_an_unfinished_run_unless_partial(case, refusal, partial, tmp_path, capsys, monkeypatch):
    """pe-generate decodes a run ``train.finished`` calls finished, at its last update; any other only with
    --partial, which the meta file records (issue 56: it averaged checkpoints 20-80 of a 100-update run with a
    one-line warning). Seen failing with the guard (generate.py: ``if partial and not a.partial``) removed. A run
    whose trainer is alive (saving its last update) is decoded with --partial beside it, though the trainer holds the
    run's writer lock (RUN/run.lock): a --partial decode takes the run's decode lock alone."""
    from pe_tools.recipes import generate, train

    run = generate_run(tmp_path, 2, reached={"short": 2}.get(case))
    monkeypatch.setattr(generate, "average_into", lambda paths, avg: 0)
    monkeypatch.setattr(generate, "check_positions", lambda *args: {"pe": "rope", "decoder_limit": None})
    monkeypatch.setattr(generate, "fairseq_generate", lambda args, total=None: (0, FAIRSEQ_OUTPUT))
    with train.trainer_lock(run) if case == "training" else open(os.devnull):
        rc = generate.generate(generate_args(run, 2, partial))
    err = capsys.readouterr().err
    meta_file = run / "gen" / "hyp.detok.de.meta.json"
    if refusal and not partial:
        assert rc == 2 and refusal in err and "pass --partial" in err, err
        assert not (run / "gen").exists()  # nothing averaged or decoded
        return
    assert rc == 0, err
    meta = json.loads(meta_file.read_text())
    assert meta["checkpoints"] == ["checkpoint_1_2.pt", "checkpoint_1_4.pt"]
    if refusal:  # --partial: decoded, with a warning, and the meta file says so (pe-record refuses it)
        assert f"warning: --partial: {run}" in err and refusal in meta["partial"]["why"]
        assert meta["partial"] == {"why": meta["partial"]["why"], "updates": 2 if case == "short" else 4,
                                   "max_update": 4}
    else:
        assert "partial" not in meta and "--partial" not in err and "pe-record will refuse" not in err


def test_generate_decodes_with_progress_over_the_splits_sentences(tmp_path, capsys, monkeypatch):
    """pe-generate hands fairseq_generate the split's size that the position check read (its meta file records it
    too), so the decode prints its sentences done of that many."""
    from pe_tools.recipes import generate

    run, seen = generate_run(tmp_path, 2), []
    monkeypatch.setattr(generate, "average_into", lambda paths, avg: 0)
    monkeypatch.setattr(generate, "check_positions", lambda *args: {"pe": "rope", "decoder_limit": None, "sentences": 2})
    monkeypatch.setattr(generate, "fairseq_generate", lambda args, total=None: seen.append(total) or (0, FAIRSEQ_OUTPUT))
    assert generate.generate(generate_args(run, 2)) == 0, capsys.readouterr().err
    assert seen == [2]
    assert json.loads((run / "gen" / "hyp.detok.de.meta.json").read_text())["positions_beyond_max"]["sentences"] == 2


# a progress line of fairseq-train's json log (training_log's format) at update 3
INNER_AT_3 = '2026-01-01 10:00:00 | INFO | train_inner | {"epoch": 1, "update": 0.6, "loss": "9.1", "num_updates": "3"}\n'


@pytest.mark.parametrize("case, says", [
    ("no interval", "has no update checkpoints checkpoint_E_U.pt (train with --save-interval-updates)"),
    ("training", "has no checkpoint yet: training is at update 3 of 10 ("),
    ("training, nothing logged", "has no checkpoint yet: training has started and logged no update yet ("),
    ("not started", "has no checkpoint yet: its training has not started ("),
    ("stopped", "has no checkpoint yet: its training stopped at update 3, before its first update checkpoint "
                "(update 4, --save-interval-updates 4)"),
])
def test_generate_before_the_first_checkpoint_names_where_training_is(case, says, tmp_path, capsys):
    """pe-generate on a run with no update checkpoint: a run that saves them (--save-interval-updates 4) is told
    where its training is (a live trainer at the update its train.log last names, or none: not started or
    stopped), never to add the flag it has; only a command without the flag is told to train with it. A live
    trainer holds the run's writer lock, so this is said before pe-generate asks for it. Seen failing before (every
    case said "train with --save-interval-updates"; the live ones, later, the lock's holder only)."""
    from pe_tools.recipes import generate, train

    run = tmp_path / "run"
    run.mkdir()
    argv = ["--max-update", "10"] + ([] if case == "no interval" else ["--save-interval-updates", "4"])
    (run / "command.json").write_text(json.dumps({"data": str(tmp_path / "data"), "pair": "en-de", "argv": argv}))
    if case in ("training", "stopped"):
        (run / "train.log").write_text("fairseq-train starting\n" + INNER_AT_3)
    with train.trainer_lock(run) if case.startswith("training") else open(os.devnull):
        assert generate.generate(generate_args(run, 2)) == 2
    err = capsys.readouterr().err
    assert not (run / "gen").exists()
    assert f"{run} {says}" in err, err
    assert ("--save-interval-updates)" in err) == (case == "no interval")


@pytest.mark.parametrize("case", ["finished", "training"])
def test_a_decode_is_refused_while_another_decodes_the_run(case, tmp_path, capsys, monkeypatch):
    """Every decode holds the run's decode lock (RUN/decode.lock): a --partial decode beside a live trainer, which
    does not take the run's writer lock, and the run's own decode never write RUN/gen/ at once. A second one is
    refused at once, the holder named, nothing written. Seen failing with the partial path's decode lock dropped."""
    from pe_tools.recipes import generate, train
    from pe_tools.runs.run_dir import RunDir

    run = generate_run(tmp_path, 2)
    monkeypatch.setattr(generate, "fairseq_generate", lambda args, total=None: pytest.fail("decoded"))
    trainer = train.trainer_lock(run) if case == "training" else open(os.devnull)
    with trainer, RunDir(run).decoder("a first decode"):
        rc = generate.generate(generate_args(run, 2, partial=case == "training"))
    err = capsys.readouterr().err
    assert rc == 2 and f"{run / 'decode.lock'} is held by pid {os.getpid()}" in err, err
    assert "(a first decode)" in err
    assert not (run / "gen").exists()


def test_a_decode_of_a_finished_run_is_refused_while_another_process_writes_the_run(tmp_path, capsys, monkeypatch):
    """pe-generate of a finished run writes its result: it takes the run's writer lock (RUN/run.lock), refused at
    once while a queue or another step holds it, the holder named, nothing written. Seen failing with decode's
    writer lock dropped."""
    from pe_tools.recipes import generate
    from pe_tools.runs.run_dir import RunDir

    run = generate_run(tmp_path, 2)
    monkeypatch.setattr(generate, "fairseq_generate", lambda args, total=None: pytest.fail("decoded"))
    with RunDir(run).writer("pe-queue run q.txt"):
        rc = generate.generate(generate_args(run, 2))
    err = capsys.readouterr().err
    assert rc == 2 and f"{run / 'run.lock'} is held by pid {os.getpid()}" in err and "(pe-queue run q.txt)" in err
    assert not (run / "gen").exists()


def test_generate_warns_when_the_newest_checkpoint_is_not_the_last_update(tmp_path, capsys, monkeypatch):
    """A finished run whose --max-update (5) is not a multiple of --save-interval-updates (2): its newest update
    checkpoint is update 4. pe-generate decodes it with a warning (pe-demo's odd --updates), pe-record refuses it."""
    from pe_tools.recipes import generate

    run = generate_run(tmp_path, 2, reached=5, max_update=5)
    monkeypatch.setattr(generate, "average_into", lambda paths, avg: 7)
    assert generate.generate(generate_args(run, 2)) == 7
    assert (f"warning: {run}: its newest update checkpoint, checkpoint_1_4.pt, is not its last update 5 "
            "(checkpoint_last.pt): its --max-update is not a multiple of --save-interval-updates; pe-record will "
            "refuse this decode") in capsys.readouterr().err


def test_generate_warns_only_when_there_are_fewer_checkpoints_than_asked(tmp_path, capsys, monkeypatch):
    """2 checkpoints and --checkpoints 2: no warning; --checkpoints 3: averaging 2, fewer than asked
    (generate.py: len(paths) < a.checkpoints)."""
    from pe_tools.recipes import generate

    run = generate_run(tmp_path, 2)
    averaged = []
    monkeypatch.setattr(generate, "average_into", lambda paths, avg: averaged.append(paths) or 7)  # pe-average fails
    for asked, warned in ((2, False), (3, True)):
        assert generate.generate(generate_args(run, asked)) == 7  # the averaging's status, nothing decoded
        err = capsys.readouterr().err
        assert ("warning: averaging" in err) == warned, (asked, err)
        assert "warning: averaging 2 checkpoints, fewer than the 3 asked for" in err or not warned
    assert averaged == [[str(run / "checkpoint_1_2.pt"), str(run / "checkpoint_1_4.pt")]] * 2


def test_generate_decodes_in_fp16_on_a_gpu_and_on_the_cpu_without_one(tmp_path, monkeypatch):
    """fairseq-generate's precision flag: --fp16 where CUDA is available (the recipes train in fp16 there), --cpu
    otherwise (fairseq-generate would look for a GPU first)."""
    from pe_tools.recipes import generate

    run = generate_run(tmp_path, 1)
    monkeypatch.setattr(generate, "average_into", lambda paths, avg: 0)
    monkeypatch.setattr(generate, "check_positions", lambda *args: {"pe": "rope"})
    cmds = []
    monkeypatch.setattr(generate, "fairseq_generate", lambda args, total=None: cmds.append(args) or (3, ""))
    for gpu in (True, False):
        monkeypatch.setattr(generate, "cuda", lambda: gpu)
        assert generate.generate(generate_args(run, 1)) == 3  # fairseq-generate's status
    assert [("--fp16" in c, "--cpu" in c) for c in cmds] == [(True, False), (False, True)]


def test_fairseq_generate_in_process_returns_its_status_and_leaves_the_process_as_it_was(tmp_path, capsys,
                                                                                          monkeypatch):
    """pe-generate runs fairseq-generate in its own process: an argument error is argparse's status 2 and message,
    a failure inside fairseq (a data folder without a language pair) status 1 with its traceback. With a bare root
    logger (nothing configured it), fairseq-generate's basicConfig sends its log lines to the output it returns,
    and its handler is gone after the call; sys.argv and the root logger's level are ours again."""
    import logging

    from pe_tools.recipes.generate import fairseq_generate

    root, argv = logging.getLogger(), sys.argv[:]
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(root, "level", logging.ERROR)
    assert fairseq_generate([str(tmp_path), "--no-such-flag"])[0] == 2
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err
    rc, out = fairseq_generate([str(tmp_path), "--path", str(tmp_path / "gone.pt"), "--cpu"])
    assert rc == 1 and "Exception: Could not infer language pair" in capsys.readouterr().err
    assert "| INFO | fairseq_cli.generate | {'_name'" in out  # fairseq-generate's configuration, its first log line
    assert (sys.argv, root.handlers, root.level) == (argv, [], logging.ERROR)


def test_fairseq_generate_in_process_returns_status_0_and_what_it_printed(monkeypatch):
    """A decode that ends normally: status 0, and what fairseq-generate printed on stdout (here its cli_main
    replaced by one that prints two lines and checks the command line it was given)."""
    from fairseq_cli import generate as fairseq_cli_generate

    from pe_tools.recipes.generate import fairseq_generate

    def cli_main():
        assert sys.argv == ["fairseq-generate", "data", "--beam", "4"]
        print("H-0\t-0.1\tein mann")
        print("Generate test with beam=4: BLEU4 = 1.00")

    monkeypatch.setattr(fairseq_cli_generate, "cli_main", cli_main)
    assert fairseq_generate(["data", "--beam", 4]) == (0, "H-0\t-0.1\tein mann\nGenerate test with beam=4: BLEU4 = 1.00\n")


def test_only_hypotheses_longer_than_the_decoders_positions_are_named(capsys):
    """Under clamp, the hypotheses past the decoder's positions: a best hypothesis of exactly that many tokens
    (end of sentence included, its P- line) is within them; one token more is named."""
    from pe_tools.recipes.generate import count_long_hypotheses

    text = "P-0\t-0.1 -0.2 -0.3\nP-1\t-0.1 -0.2 -0.3 -0.4\nP-2\t-0.1\n"
    limits = {"decoder_limit": 3}
    count_long_hypotheses(text, limits)
    assert limits["hypotheses"] == [1]
    assert "1 of 3 hypotheses are longer than the 3 target positions" in capsys.readouterr().err


def test_an_averaging_error_ends_pe_generate_with_its_message(tmp_path, capsys):
    """pe-average runs inside pe-generate: its error (here a checkpoint that is gone) is printed as pe-average prints
    it, and pe-generate returns its status 1 without writing the average."""
    from pe_tools.recipes.generate import average_into

    assert average_into([str(tmp_path / "gone.pt")], tmp_path / "avg.pt") == 1
    assert f"error: {tmp_path / 'gone.pt'} does not exist" in capsys.readouterr().err
    assert not (tmp_path / "avg.pt").exists()


def test_generate_refuses_a_missing_split_with_status_2_and_decodes_nothing(tmp_path, capsys, monkeypatch):
    """The position check finds no binarised test split: pe-generate names the files and exits 2, the status of
    every input it refuses (command_line.fail), without running fairseq-generate (generate.py: return 2)."""
    import pe_plugin.decode_limits as decode_limits
    from pe_tools.recipes import generate

    run = generate_run(tmp_path, 1)
    (tmp_path / "data").mkdir()
    monkeypatch.setattr(generate, "average_into", lambda paths, avg: 0)  # averaged (no file: the model is faked below)
    monkeypatch.setattr(decode_limits, "checkpoint_limits",
                        lambda checkpoint, data: decode_limits.Limits("rope", None, None, (1024, 1024)))
    monkeypatch.setattr(generate, "fairseq_generate", lambda args, total=None: pytest.fail(f"decoded: {args}"))
    assert generate.generate(generate_args(run, 1)) == 2
    err = capsys.readouterr().err
    assert "error: no binarised test split of en-de: looked for " in err and str(tmp_path / "data" / "test.en-de.en.idx") in err


FAIRSEQ_OUTPUT = ("S-1\tb\nT-1\tzwei hunde\nH-1\t-0.5\tzwei hunde .\nD-1\t-0.5\tzwei hunde .\nP-1\t-0.1 -0.2 -0.3\n"
                  "S-0\ta\nT-0\tein mann\nH-0\t-0.3\tein mann\nD-0\t-0.3\tein mann\nP-0\t-0.1 -0.2\n")
PE_LOG = ("2026-01-01 10:00:00 | INFO | pe_plugin | arch transformer_rope_tiny | params total 1,234 | pe-only 0 | "
          "pe:rope|side:both\n")


@pytest.mark.parametrize("log, arch, signature", [
    (PE_LOG, "transformer_rope_tiny", "pe:rope|side:both"),  # pe_plugin's summary line
    ("", "transformer_wmt_en_de", "fairseq:transformer_wmt_en_de|positions:sinusoidal"),  # a stock fairseq model
    ("", None, None)])  # neither: no signature, a warning
def test_write_outputs_orders_by_sentence_id_and_records_the_signature(log, arch, signature, tmp_path, capsys):
    """Hypotheses (the third field of H- lines) and references in sentence-id order; the meta file's signature is
    pe_plugin's when the log has one, a stock model's only without it (generate.py lines 124 and 134)."""
    from pe_tools.recipes.generate import write_outputs

    (tmp_path / "train.log").write_text(log)
    command = {"argv": ["--arch", arch]} if arch else None
    assert write_outputs(FAIRSEQ_OUTPUT, tmp_path, "de", tmp_path / "train.log", True, {"checkpoints": ["c"]},
                         command) == 0
    assert (tmp_path / "hyp.detok.de").read_text() == "ein mann\nzwei hunde .\n"
    assert (tmp_path / "ref.detok.de").read_text() == "ein mann\nzwei hunde\n"
    text = (tmp_path / "hyp.detok.de.meta.json").read_text()
    assert text.endswith("}\n")  # a text file, its last line ended like the hypotheses'
    meta = json.loads(text)
    assert meta.get("pe_signature") == signature and meta["checkpoints"] == ["c"]
    assert ("no encoding signature" in capsys.readouterr().err) == (signature is None)


def test_report_looks_for_the_reference_in_the_prepared_data(tmp_path, capsys, monkeypatch):
    """Without --ref, pe-report's reference is DATA/work/raw.test.TGT of the recipe's data folder (launch.py)."""
    monkeypatch.chdir(tmp_path)  # the recipe's data folder is relative: none here
    rec = tmp_path / load_table("multi30k")["results_dir"] / "sape.en-fr.small.seed1"  # a recorded run to report
    rec.mkdir(parents=True)
    (rec / "command.json").write_text(json.dumps({"recipe": "multi30k", "method": "sape", "pair": "en-fr",
                                                  "size": "small", "seed": 1, "argv": ["--max-update", "1"]}))
    (rec / "hyp.detok.fr").write_text("x\n")
    assert launch.main(["report", "--recipe", "multi30k", "--pair", "en-fr", "--out-dir", "out"]) == 2
    err = capsys.readouterr().err
    assert f"reference {os.path.join('data-bin', 'multi30k_en_fr', 'work', 'raw.test.fr')} not found" in err, err


@pytest.mark.slow
def test_train_resume_and_generate(data_bin, raw_corpus, tmp_path):
    runs = tmp_path / "runs"
    started = time.monotonic()
    first = shell("train.sh", "posnet_embed", "--size", "tiny", "--data", data_bin, "--runs-dir", runs,
                  "--", "--max-update", "4", *TINY_RUN)
    train_seconds = time.monotonic() - started
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    run_dir = runs / "posnet_embed.en-de.tiny.seed1"
    saved = json.loads((run_dir / "command.json").read_text())
    assert saved["method"] == "posnet_embed" and saved["argv"][-len(TINY_RUN):] == TINY_RUN
    assert (run_dir / "command.txt").read_text().strip().endswith(" ".join(TINY_RUN))
    assert {"checkpoint_1_2.pt", "checkpoint_1_4.pt", "checkpoint_last.pt"} <= {p.name for p in run_dir.iterdir()}

    started = time.monotonic()
    again = shell("train.sh", "posnet_embed", "--size", "tiny", "--data", data_bin, "--runs-dir", runs,
                  "--", "--max-update", "6", *TINY_RUN)
    train_seconds += time.monotonic() - started
    assert again.returncode == 0, again.stdout[-3000:]
    assert re.search(r"[Ll]oaded checkpoint .*checkpoint_last\.pt \(epoch 1 @ 4 updates\)", again.stdout), again.stdout[-3000:]
    assert (run_dir / "checkpoint_1_6.pt").exists() and not (run_dir / "checkpoint_1_8.pt").exists()

    gen = shell("generate.sh", run_dir, "--no-detok")
    assert gen.returncode == 0, gen.stdout[-3000:] + gen.stderr[-3000:]
    assert "averaging 3 checkpoints, fewer than the 5" in gen.stderr
    ref = (raw_corpus / "test.de").read_text().splitlines()
    hyp = (run_dir / "gen" / "hyp.detok.de").read_text().splitlines()
    assert (run_dir / "gen" / "ref.detok.de").read_text().splitlines() == ref  # original order, every line
    assert len(hyp) == len(ref)
    meta = json.loads((run_dir / "gen" / "hyp.detok.de.meta.json").read_text())
    assert meta["pe_signature"].startswith("pe:posnet_embed|")
    assert not list((run_dir / "gen").glob("*.tmp"))
    # the training summary of both segments, against fairseq's own parameter count and training times
    log = (run_dir / "train.log").read_text()
    fairseq_count = int(re.findall(r"num\. shared model params: ([\d,]+)", log)[-1].replace(",", ""))
    fairseq_seconds = [float(x) for x in re.findall(r"done training in ([\d.]+) seconds", log)]
    t = meta["training"]
    assert (t["updates"], t["max_update"], t["params"], t["arch"]) == (6, 6, fairseq_count, "transformer_posnet_embed_tiny")
    assert t["segments"] == len(fairseq_seconds) == 2 and t["valid_loss"] > 0 and t["threads"] and t["device"]
    # bracketed by fairseq's clock (which starts after the checkpoint and data are loaded) and by the time the two
    # train.sh commands took here (which adds Python's start-up and imports); timestamps have 1 s resolution
    assert sum(fairseq_seconds) - 2 <= t["train_seconds"] <= train_seconds + 2
    assert meta["checkpoints"] == ["checkpoint_1_2.pt", "checkpoint_1_4.pt", "checkpoint_1_6.pt"]
    # recorded as the files a results table needs
    assert launch.main(["record", str(run_dir), "--into", str(tmp_path / "recorded")]) == 0
    rec = tmp_path / "recorded" / run_dir.name
    assert (rec / "hyp.detok.de").read_text() == (run_dir / "gen" / "hyp.detok.de").read_text()
    assert json.loads((rec / "hyp.detok.de.meta.json").read_text()) == meta


@pytest.mark.slow
def test_generate_decodes_a_stock_fairseq_model(data_bin, raw_corpus, tmp_path):
    """The recipes' parity runs are fairseq's own `transformer` (no pe_plugin encoding): pe-generate must decode
    them like any run, with fairseq's position limits and without pe_plugin's --model-overrides (it once failed
    after training, reading the encoder's `pe`)."""
    from pe_plugin.analysis.model_io import load_model
    from pe_plugin.decode_limits import STOCK, model_limits

    runs, tiny = tmp_path / "runs", ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16",
                                     "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
                                     "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2",
                                     "--decoder-attention-heads", "2", "--max-source-positions", "40",
                                     "--max-target-positions", "48"]
    train = shell("train.sh", "fairseq_transformer", "--recipe", "multi30k", "--data", data_bin, "--runs-dir", runs,
                  "--", "--max-update", "2", *TINY_RUN, *tiny)
    assert train.returncode == 0, train.stdout[-3000:] + train.stderr[-3000:]
    run_dir = runs / "fairseq_transformer.en-de.small.seed1"
    model, _ = load_model(str(run_dir / "checkpoint_last.pt"), str(data_bin), cpu=True)
    assert not hasattr(model.encoder, "pe")
    lim = model_limits(model)
    assert (lim.pe, lim.encoder, lim.decoder, lim.fairseq) == (STOCK, None, None, (40, 48)) == (
        STOCK, None, None, tuple(model.max_positions()))
    gen = shell("generate.sh", run_dir, "--no-detok")
    assert gen.returncode == 0, gen.stdout[-3000:] + gen.stderr[-3000:]
    assert "--model-overrides" not in gen.stdout
    hyp = (run_dir / "gen" / "hyp.detok.de").read_text().splitlines()
    assert len(hyp) == len((raw_corpus / "test.de").read_text().splitlines())
    meta = json.loads((run_dir / "gen" / "hyp.detok.de.meta.json").read_text())
    assert meta["pe_signature"] == "fairseq:transformer|positions:sinusoidal" and meta["training"]["arch"] == "transformer"
    assert meta["positions_beyond_max"]["pe"] == STOCK and meta["positions_beyond_max"]["sources"] == []
    assert meta["positions_beyond_max"]["sentences"] == len(hyp)  # the total of pe-generate's progress lines


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _first_update(output: str) -> dict:
    first = next((r for r in training_log.records(output, "train_inner") if r.updates == 1), None)
    assert first is not None, output[-3000:]
    return {k: str(v) for k, v in first.stats.items() if k in ("loss", "nll_loss", "wpb", "bsz", "gnorm")}


@pytest.mark.slow
def test_two_processes_equal_one_with_double_update_freq(data_bin, tmp_path):
    """For every encoding: --gpus 2 (world size 2, update-freq 4) on two gloo ranks on CPU gives the same first
    update as one process with update-freq 8 (loss, words and sentences per update, gradient norm).
    One driver process per rank trains every encoding in turn (see _drive), to pay fairseq's import once."""
    flags = ["--cpu", "--dropout", "0", "--max-update", "1", "--max-tokens", "100", "--log-interval", "1",
             "--disable-validation", "--no-save", "--num-workers", "0"]
    dist = ["--distributed-no-spawn", "--distributed-backend", "gloo", "--ddp-backend", "legacy_ddp",
            "--distributed-init-method", f"tcp://127.0.0.1:{_free_port()}", "--device-id", "0"]
    table, jobs = load_table("wmt14"), {}
    for method in PE_REGISTRY:
        single = train_argv(table, method, "en-de", "tiny", 1, data_bin, tmp_path / "one", 1, flags)
        double = train_argv(table, method, "en-de", "tiny", 1, data_bin, tmp_path / "two", 2, flags + dist)
        assert single[single.index("--update-freq") + 1] == "8" and double[double.index("--update-freq") + 1] == "4"
        assert double.count("--update-freq") == 1 and double[double.index("--distributed-world-size") + 1] == "2"
        jobs[method] = [single] + [double + ["--distributed-rank", str(r)] for r in (0, 1)]
    procs = []
    for k in range(3):
        (tmp_path / f"jobs{k}.json").write_text(json.dumps({m: argvs[k] for m, argvs in jobs.items()}))
        procs.append(subprocess.Popen([sys.executable, __file__, str(tmp_path / f"jobs{k}.json")],
                                      env=dict(os.environ, PYTHONWARNINGS="ignore", PYTHONPATH=str(REPO)), cwd=tmp_path,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=900)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], "\n".join(o[-3000:] for o in outs)
    one, two = _by_method(outs[0]), _by_method(outs[1])
    assert list(one) == list(two) == list(PE_REGISTRY)
    for method in PE_REGISTRY:
        first, second = _first_update(one[method]), _first_update(two[method])
        assert set(first) == {"loss", "nll_loss", "wpb", "bsz", "gnorm"}, method
        assert (first["wpb"], first["bsz"]) == (second["wpb"], second["bsz"]), method  # the same batches
        for key in ("loss", "nll_loss", "gnorm"):  # logged with 3 decimals: allow one unit of rounding
            assert float(first[key]) == pytest.approx(float(second[key]), abs=1.5e-3), (method, key)


def _by_method(output: str) -> dict:
    parts = re.split(r"^@@ method (\w+)$", output, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


@pytest.mark.slow
def test_plugin_destroys_a_gloo_group_before_the_interpreter_finalises(tmp_path):
    """fairseq never destroys its process group; a gloo group torn down in interpreter finalisation can abort a
    rank that trained to the end (pe_plugin/gloo_exit.py). A hook registered before pe_plugin's runs after it
    (atexit is last in, first out) and must find the group gone; without the plugin's hook it is still there."""
    probe = (
        "import atexit, sys, torch.distributed as dist\n"
        "atexit.register(lambda: print('group at exit:', dist.is_initialized()))\n"
        "if sys.argv[1] == 'plugin':\n"
        "    import pe_plugin  # noqa: F401\n"
        f"dist.init_process_group('gloo', init_method='file://{tmp_path}/' + sys.argv[1], rank=0, world_size=1)\n"
        "dist.barrier()\n"
    )
    outs = {}
    for mode in ("plugin", "bare"):
        p = subprocess.run([sys.executable, "-c", probe, mode], env=dict(os.environ, PYTHONPATH=str(REPO)),
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        outs[mode] = p.stdout.strip().splitlines()[-1]
    assert outs == {"plugin": "group at exit: False", "bare": "group at exit: True"}


def _drive(jobs_file: str) -> int:
    """Train each {method: argv} of ``jobs_file`` in this process (fairseq keeps one process group)."""
    from fairseq import distributed_utils, options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli import train

    # fairseq-train's own log format (its basicConfig at import is a no-op once anything has logged), so that the
    # lines read like a train.log
    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s", datefmt="%Y-%m-%d %H:%M:%S",
                        level=logging.INFO, stream=sys.stdout, force=True)
    for method, argv in json.loads(open(jobs_file).read()).items():
        print(f"@@ method {method}", flush=True)
        args = options.parse_args_and_arch(options.get_training_parser(), argv)
        distributed_utils.call_main(convert_namespace_to_omegaconf(args), train.main)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_drive(sys.argv[1]))


def test_the_exit_hook_leaves_a_process_without_a_process_group_alone():
    """pe_plugin/gloo_exit.destroy_gloo_group in a process that never joined a group (every test's, a CPU decode)
    does nothing and says so (survivor: ``is_available() and is_initialized()`` -> ``is_available()``, which asks
    an absent group for its backend and raises at exit)."""
    import torch.distributed as dist

    from pe_plugin.gloo_exit import destroy_gloo_group

    assert not (dist.is_available() and dist.is_initialized())  # the test's own process: no group
    assert destroy_gloo_group() is False


# ---- the exit hook: a torch without distributed support ------------------------------------------------------
def test_the_exit_hook_does_nothing_in_a_torch_built_without_distributed_support(monkeypatch):
    """In a torch built without distributed support (USE_DISTRIBUTED=0: ``torch.distributed.is_available()`` is
    False and the module has no ``is_initialized`` or ``get_backend``), pe_plugin's atexit hook,
    gloo_exit.destroy_gloo_group, asks nothing more and returns False: a program's exit raises nothing."""
    import torch.distributed as dist

    from pe_plugin.gloo_exit import destroy_gloo_group

    monkeypatch.setattr(dist, "is_available", lambda: False)
    for name in ("is_initialized", "get_backend", "destroy_process_group"):
        monkeypatch.delattr(dist, name, raising=False)
    assert destroy_gloo_group() is False


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
    monkeypatch.setattr(generate, "fairseq_generate", lambda args, total=None: decoded.append(list(args)) or (5, ""))
    a = generate_args(run, 1)
    a.data = str(other) if given else None
    assert generate.generate(a) == 5  # fairseq-generate's status: nothing written after it
    want = str(other) if given else recorded
    assert recorded != str(other) and checked == [want]
    (args,) = decoded
    assert args[0] == want  # fairseq-generate's first argument (after python -m fairseq_cli.generate)


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
    monkeypatch.setattr(generate, "fairseq_generate", lambda args, total=None: decoded.append(list(args)) or (5, ""))
    a = generate_args(run, 1)
    a.pe_beyond_max = mode
    assert generate.generate(a) == 5
    (args,) = decoded
    printed = shlex.split(capsys.readouterr().out.splitlines()[-1])
    assert printed[3:] == args
    override = ["--model-overrides", "{'pe_beyond_max': 'clamp'}"]
    assert (args[-2:] == override) == overridden and ("--model-overrides" in args) == overridden


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


# Moses' rules for an apostrophe differ by language, and each language the recipes ship (en-de, en-fr, and English
# as a source) is tokenised and detokenised with its own: French keeps an elided article with the word before it
# (l' homme), English a clitic with the word after it ('s), German splits both sides. Spelled out here per language.
DETOKENISED = {  # language: (fairseq-generate's tokens, the text pe-generate writes)
    "fr": ("l' homme est là , c' est l' été !", "l'homme est là, c'est l'été !"),
    "en": ("it 's John 's car , I can 't go .", "it's John's car, I can't go."),
    "de": ("Er sagt : „ Hallo “ ! Ein Haus .", "Er sagt: „Hallo“! Ein Haus."),
}


@pytest.mark.parametrize("lang", sorted(DETOKENISED))
def test_pe_generate_detokenises_each_target_language_by_its_own_rules(lang, tmp_path):
    """pe-generate's hyp.detok.LANG and ref.detok.LANG: fairseq-generate's tokens (H- and T- lines) detokenised by
    Moses' rules of the target language (French: ``l' homme`` -> ``l'homme``, a space kept before ``!``)."""
    from pe_tools.recipes import generate

    tokens, text = DETOKENISED[lang]
    out = tmp_path / "gen"
    out.mkdir()
    fairseq_output = f"S-0\tx\nT-0\t{tokens}\nH-0\t-0.5\t{tokens}\nD-0\t-0.5\t{tokens}\nP-0\t-0.1\n"
    assert generate.write_outputs(fairseq_output, out, lang, tmp_path / "train.log", no_detok=False) == 0
    assert (out / f"hyp.detok.{lang}").read_text(encoding="utf-8") == text + "\n"
    assert (out / f"ref.detok.{lang}").read_text(encoding="utf-8") == text + "\n"


@pytest.mark.parametrize("flag", ["--num-update-checkpoints", "--num-epoch-checkpoints"])
@pytest.mark.parametrize("inputs", ["two_run_directories", "a_checkpoint_file"])
def test_average_counts_take_exactly_one_run_directory(flag, inputs, tmp_path):
    """--num-update/epoch-checkpoints N names the newest N checkpoints of one run directory: two directories (the
    second's checkpoints would be left out) or a checkpoint file are refused, and nothing is written."""
    import torch

    from pe_tools import average

    runs = [tmp_path / "run1", tmp_path / "run2"]
    for run in runs:
        run.mkdir()
        for name in ("checkpoint_1_2.pt", "checkpoint1.pt"):
            torch.save({"model": {"w": torch.ones(2)}, "extra_state": {}}, run / name)
    given = [str(r) for r in runs] if inputs == "two_run_directories" else [str(runs[0] / "checkpoint_1_2.pt")]
    out = tmp_path / "avg.pt"
    with pytest.raises(SystemExit, match=r"^error: --num-\*-checkpoints takes one run directory as --inputs$"):
        average.main(["--inputs", *given, "--output", str(out), flag, "1"])
    assert not out.exists()


@pytest.mark.parametrize("lost", ["T-1\t", "H-1\t", "T-0\t", "H-0\t"])
def test_write_outputs_refuses_output_missing_a_reference_or_a_hypothesis(lost, tmp_path, capsys):
    """fairseq-generate's output must hold a hypothesis and a reference of every sentence id 0..N-1: one missing on
    either side (a line lost from its output) is refused, naming the output, and nothing is written (the
    references would otherwise be shifted against the hypotheses)."""
    from pe_tools.recipes.generate import write_outputs

    text = "".join(line + "\n" for line in FAIRSEQ_OUTPUT.splitlines() if not line.startswith(lost))
    (tmp_path / "train.log").write_text(PE_LOG)
    assert write_outputs(text, tmp_path, "de", tmp_path / "train.log", True) != 0
    assert "ids not 0..N-1" in capsys.readouterr().err
    assert not (tmp_path / "hyp.detok.de").exists() and not (tmp_path / "ref.detok.de").exists()

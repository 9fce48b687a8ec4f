"""A new user's mistakes, each answered with its cause and its fix, and nothing written (docs/troubleshooting.md).

Bad input in, the message's key words out: pe-evaluate on fairseq-generate's raw output (missing sentence ids and
the flag that dropped them, the order restored) and on a file of the wrong length; pe-evaluate's program name;
a misspelt architecture (`python -m pe_plugin NAME`, the hub); the hub given a checkpoint file, and its checkpoint
lists in numeric order; pe-average on a folder of epoch checkpoints; a test sentence longer than L_max in
fairseq-generate and fairseq-interactive; a --model-overrides that changes a parameter's size; the probe figures'
size and title. fairseq's own messages quoted by docs/troubleshooting.md are checked against fairseq itself.

The slow tests train one tiny PosNet-Embed model (L_max 8, two updates) on the shared tiny corpus.
"""
import contextlib
import io
import json
import os
import random
import re
import subprocess
import sys

import pytest
from pe_testing import PLUGIN, REPO, TINY_POSNET_LMAX, call_main, run

from pe_plugin import hub as pe_hub
from pe_tools import average as average_cli
from pe_tools.scoring import cli as scoring_cli

TROUBLESHOOTING = (REPO / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
L_MAX = TINY_POSNET_LMAX


# ------------------------------------------------------------------------------------------------
# pe-evaluate and fairseq-generate's raw output

def generate_output(hyps, order, keep=None, config=None, scores=True):
    """What fairseq-generate prints for hypotheses ``hyps`` (corpus order), decoded in batch ``order``: its
    configuration line (``config``: the dataset settings shown), S-/T-/H-/D-/P- lines per sentence, log lines and
    the BLEU line; ``keep``: the ids it printed (the others dropped)."""
    lines = []
    if config is not None:
        lines.append("2026-11-25 16:00:00 | INFO | fairseq_cli.generate | {'_name': None, 'dataset': {"
                     + ", ".join(f"'{k}': {v!r}" for k, v in config.items()) + "}}")
    for i in order:
        if keep is not None and i not in keep:
            continue
        lines += [f"S-{i}\tsource {i}", f"T-{i}\treference {i}", f"H-{i}\t-0.25\t{hyps[i]}",
                  f"D-{i}\t-0.25\t{hyps[i]}" if scores else f"D-{i}", f"P-{i}\t-0.1 -0.2 -0.3"]
    lines += ["INFO:fairseq_cli.generate:NOTE: hypothesis and token scores are output in base 2",
              f"INFO:fairseq_cli.generate:Translated {len(keep or order)} sentences (99 tokens) in 0.5s",
              "Generate test with beam=4: BLEU4 = 12.34, 50.0/20.0/10.0/5.0 (BP=1.000, ratio=1.0, syslen=9, reflen=9)"]
    return "\n".join(lines) + "\n"


@pytest.fixture()
def corpus(tmp_path, monkeypatch):
    rng = random.Random(5)
    # German words, as --trg-lang de says: pe-evaluate refuses hypotheses that read as another language
    words = "der ein haus auto ist gross klein und nicht sehr gut mann frau kind geht sieht".split()
    ref = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) for _ in range(30)]
    hyp = [" ".join(w for w in line.split() if rng.random() > 0.2) or "der" for line in ref]
    base = [" ".join(w for w in line.split() if rng.random() > 0.4) or "ein" for line in ref]
    (tmp_path / "ref.de").write_text("\n".join(ref) + "\n")
    (tmp_path / "hyp.de").write_text("\n".join(hyp) + "\n")
    (tmp_path / "base.de").write_text("\n".join(base) + "\n")
    monkeypatch.chdir(tmp_path)
    order = sorted(range(30), key=lambda i: (len(ref[i].split()), -i))  # batches by length, as fairseq's
    return tmp_path, ref, hyp, base, order


def evaluate(out, *argv):
    """pe-evaluate of files without meta files (--allow-unchecked)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = scoring_cli.main(["--ref", "ref.de", "--trg-lang", "de", "--out-dir", str(out), "--n-samples", "50",
                                 "--allow-unchecked", *argv])
    return code, err.getvalue()


def test_raw_generate_output_scores_as_the_ordered_file(corpus):
    """The raw output, in batch order with log lines around it, scores exactly as the hypotheses in corpus order."""
    d, ref, hyp, base, order = corpus
    (d / "gen.out").write_text(generate_output(hyp, order, config={"required_batch_size_multiple": 1}))
    assert order != list(range(30))  # the order is restored, not already there
    assert evaluate(d / "raw", "--baseline", "base=base.de", "--system", "posnet=gen.out")[0] == 0
    assert evaluate(d / "plain", "--baseline", "base=base.de", "--system", "posnet=hyp.de")[0] == 0
    raw, plain = (json.loads((d / o / "results.json").read_text()) for o in ("raw", "plain"))
    score = lambda r: [s["runs"][0]["scores"] for s in r["systems"] if s["name"] == "posnet"][0]  # noqa: E731
    assert score(raw) == score(plain)
    # the control: the same lines in batch order score differently
    (d / "batch_order.de").write_text("".join(hyp[i] + "\n" for i in order))
    assert evaluate(d / "control", "--baseline", "base=base.de", "--system", "posnet=batch_order.de")[0] == 0
    assert score(json.loads((d / "control" / "results.json").read_text())) != score(plain)


def nbest_output(blocks, order, kinds=("H", "D")):
    """fairseq-generate's lines with --nbest N: per id (in batch ``order``) its S-/T- lines, then for each of its
    hypotheses (best first) the lines of ``kinds``; ``blocks[i]``: [(tokenised H- text, decoded D- text), ...]."""
    lines = []
    for i in order:
        lines += [f"S-{i}\tsource {i}", f"T-{i}\treference {i}"]
        for rank, (h, d) in enumerate(blocks[i]):
            text = {"H": h, "D": d}
            lines += [f"{k}-{i}\t{-0.25 * (rank + 1)}\t{text[k]}" for k in kinds] + [f"P-{i}\t-0.1 -0.2"]
    return "\n".join(lines + ["Generate test with beam=4: BLEU4 = 12.34, 50.0/20.0/10.0/5.0 (BP=1.000)"]) + "\n"


def tokenised(line):
    """What the H- line shows of a D- line with --tokenizer moses and --bpe: tokens split, joiners marked."""
    return " ".join(w[:2] + "@@ " + w[2:] if len(w) > 3 else w for w in line.split()) + " &apos;"


def test_decoded_d_lines_are_scored_not_the_tokenised_h_lines(corpus):
    """The D- line (decoded) is the translation; the H- line (tokenised) is not: they differ here, and the raw
    output scores as the D- text in corpus order."""
    from pe_tools.scoring import generate_output as reader

    d, ref, hyp, base, order = corpus
    text = nbest_output({i: [(tokenised(h), h)] for i, h in enumerate(hyp)}, order)
    assert all(tokenised(h) != h for h in hyp)
    assert reader.hypotheses("gen.out", text, len(ref), "ref.de") == hyp
    (d / "gen.out").write_text(text)
    assert evaluate(d / "raw", "--baseline", "base=base.de", "--system", "posnet=gen.out")[0] == 0
    assert evaluate(d / "plain", "--baseline", "base=base.de", "--system", "posnet=hyp.de")[0] == 0
    raw, plain = (json.loads((d / o / "results.json").read_text()) for o in ("raw", "plain"))
    scores = lambda r: [[run["scores"] for run in s["runs"]] for s in r["systems"]]  # noqa: E731
    assert scores(raw) == scores(plain)


@pytest.mark.parametrize("kinds", [("H", "D"), ("H",)])
def test_the_first_of_several_hypotheses_per_id_is_kept(corpus, kinds):
    """--nbest 3: an id's first hypothesis is its best, the one scored (D- lines, or H- lines where the file has
    only those); the other two differ from it."""
    from pe_tools.scoring import generate_output as reader

    d, ref, hyp, base, order = corpus
    blocks = {i: [(h, h), (f"second {i}", f"second {i}"), (f"third {i}", f"third {i}")] for i, h in enumerate(hyp)}
    assert reader.hypotheses("gen.out", nbest_output(blocks, order, kinds), len(ref), "ref.de") == hyp


@pytest.mark.parametrize("config, named, not_named", [
    ({"required_batch_size_multiple": 8, "skip_invalid_size_inputs_valid_test": False},
     ["--required-batch-size-multiple was 8", "--required-batch-size-multiple 1"], ["--skip-invalid"]),
    ({"required_batch_size_multiple": 1, "skip_invalid_size_inputs_valid_test": True},
     ["--skip-invalid-size-inputs-valid-test was on", "pe_beyond_max"], ["--required-batch-size-multiple"]),
    (None, ["--required-batch-size-multiple 1", "--skip-invalid-size-inputs-valid-test"], []),
])
def test_missing_ids_are_named_with_the_flag_that_dropped_them(corpus, config, named, not_named):
    d, ref, hyp, base, order = corpus
    keep = set(order[:24])  # the last batch, the six longest sentences, dropped
    (d / "gen.out").write_text(generate_output(hyp, order, keep=keep, config=config))
    code, err = evaluate(d / "out", "--baseline", "base=base.de", "--system", "posnet=gen.out")
    assert code == 2 and err.startswith("pe-evaluate: error: gen.out: fairseq-generate output lacks 6 of the 30")
    missing = sorted(set(range(30)) - keep)
    assert f"ids {', '.join(map(str, missing))}." in err
    for words in named:
        assert words in err, err
    for words in not_named:
        assert words not in err, err
    assert not (d / "out").exists()


def test_ids_beyond_the_reference_are_refused(corpus):
    d, ref, hyp, base, order = corpus
    (d / "gen.out").write_text(generate_output(hyp + ["extra"], order + [30]))
    code, err = evaluate(d / "out", "--baseline", "base=base.de", "--system", "posnet=gen.out")
    assert code == 2 and "sentence ids up to 30" in err and "30 lines" in err and "another test set" in err
    assert not (d / "out").exists()


def test_an_empty_hypothesis_is_kept(corpus):
    """A D- line with an empty hypothesis is a translation (empty), not a missing sentence."""
    d, ref, hyp, base, order = corpus
    hyp = list(hyp)
    hyp[3] = ""
    (d / "gen.out").write_text(generate_output(hyp, order))
    assert evaluate(d / "out", "--baseline", "base=base.de", "--system", "posnet=gen.out")[0] == 0


def test_line_counts_differ_says_why(corpus):
    d, ref, hyp, base, order = corpus
    (d / "short.de").write_text("".join(line + "\n" for line in hyp[:26]))
    code, err = evaluate(d / "out", "--baseline", "base=base.de", "--system", "posnet=short.de")
    assert code == 2 and "line counts differ: short.de has 26 lines, reference ref.de has 30 lines" in err
    for words in ("--required-batch-size-multiple 1", "--skip-invalid-size-inputs-valid-test", "raw output"):
        assert words in err
    assert not (d / "out").exists()


@pytest.mark.parametrize("argv0, prog", [("pe-evaluate", "pe-evaluate"), (str(REPO / "scripts" / "evaluate.py"),
                                                                          "evaluate.py")])
def test_errors_carry_the_program_name(tmp_path, argv0, prog):
    """The console script and the checkout's script, each by the name it is run as (not `cli.py`)."""
    code = ("import sys; from pe_tools.scoring.cli import main; sys.argv[0] = sys.argv.pop(1); sys.exit(main())"
            if argv0 == "pe-evaluate" else None)
    argv = ([sys.executable, "-c", code, argv0] if code else [sys.executable, argv0])
    proc = subprocess.run(argv + ["--ref", "none.de", "--trg-lang", "de", "--out-dir", "out", "--baseline", "b=x",
                                  "--system", "s=y"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith(f"{prog}: error: none.de: file not found"), proc.stderr
    proc = subprocess.run([sys.executable, "-m", "pe_tools.scoring.cli", "--ref", "none.de"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "pe-evaluate: error: the following arguments are required" in proc.stderr


# ------------------------------------------------------------------------------------------------
# architecture names

def test_a_misspelt_architecture_gets_the_closest_names():
    from pe_plugin.__main__ import main  # `python -m pe_plugin`, in this interpreter (test_interface runs the module)

    proc = call_main(main, ["transformer_posnet_tiny"], cwd=REPO)
    assert proc.returncode == 2 and proc.stdout == ""
    last = proc.stderr.strip().split("\n")[-1]
    assert last.startswith("python -m pe_plugin: error: 'transformer_posnet_tiny' is not a pe_plugin architecture")
    assert "did you mean transformer_posnet_embed_tiny" in last or "transformer_posnet_embed_tiny," in last
    assert "transformer_posnet_attn_tiny" in last and len(last) < 300  # not the list of every architecture
    proc = call_main(main, ["zzz"], cwd=REPO)
    assert proc.returncode == 2 and "the names are transformer_<pe>_<size>" in proc.stderr


def test_fairseqs_own_arch_error_is_the_one_quoted():
    """fairseq-train's argparse sees a misspelt --arch first; docs/troubleshooting.md quotes its words."""
    from fairseq import options

    quoted = re.search(r"`(fairseq-train: error: argument --arch/-a: invalid choice: '(\w+)' \(choose from)", TROUBLESHOOTING)
    assert quoted, "docs/troubleshooting.md does not quote fairseq's --arch error"
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit):
        parser = options.get_training_parser()
        parser.prog = "fairseq-train"
        options.parse_args_and_arch(parser, ["data", "--user-dir", PLUGIN, "--arch", quoted[2]])
    assert quoted[1].replace("\n  ", " ") in err.getvalue()
    assert "python -m pe_plugin NAME" in TROUBLESHOOTING


def test_the_hub_names_the_closest_architectures():
    with pytest.raises(ValueError, match=r"--arch transformer_posnet_embd_tiny, which neither fairseq nor pe_plugin "
                                         r"registers \(the closest pe_plugin names: transformer_posnet_embed_tiny"):
        pe_hub.check_architecture({"arch": "transformer_posnet_embd_tiny"}, "ckpt.pt")


# ------------------------------------------------------------------------------------------------
# checkpoint files

def test_hub_checkpoint_lists_are_in_numeric_order(tmp_path):
    for name in ("checkpoint10.pt", "checkpoint2.pt", "checkpoint1.pt", "checkpoint_1_1000.pt", "checkpoint_1_900.pt",
                 "checkpoint_last.pt"):
        (tmp_path / name).write_bytes(b"")
    with pytest.raises(FileNotFoundError) as e:
        pe_hub.from_pretrained(tmp_path, "checkpoint_best.pt")
    assert ("holds checkpoint1.pt, checkpoint2.pt, checkpoint10.pt, checkpoint_1_900.pt, checkpoint_1_1000.pt, "
            "checkpoint_last.pt. Pass one of those as checkpoint_file=") in str(e.value)


def test_hub_given_a_file_and_another_checkpoint_file_says_what_it_wants(tmp_path):
    (tmp_path / "checkpoint_last.pt").write_bytes(b"")
    with pytest.raises(ValueError, match=r"checkpoint_last\.pt is a checkpoint file, and checkpoint_file="
                                         r"'checkpoint3\.pt' names another: pass the folder as the first argument"):
        pe_hub.from_pretrained(tmp_path / "checkpoint_last.pt", "checkpoint3.pt")
    # the file alone: its folder is the run directory (here the file is no checkpoint: that is what is reported)
    with pytest.raises(ValueError, match=r"checkpoint_last\.pt cannot be read as a checkpoint"):
        pe_hub.from_pretrained(tmp_path / "checkpoint_last.pt")


def test_pe_average_on_epoch_checkpoints_names_the_epoch_flag(tmp_path, capsys):
    for epoch in (1, 2, 3, 10):
        (tmp_path / f"checkpoint{epoch}.pt").write_bytes(b"not read")
    out = tmp_path / "avg.pt"
    with pytest.raises(SystemExit) as e:
        average_cli.main(["--inputs", str(tmp_path), "--num-update-checkpoints", "5", "--output", str(out)])
    assert "4 epoch checkpoints (checkpoint1.pt .. checkpoint10.pt): pass --num-epoch-checkpoints 4" in str(e.value.code)
    with pytest.raises(SystemExit) as e:
        average_cli.main(["--inputs", str(tmp_path), "--output", str(out)])
    assert "holds 4 epoch checkpoints (checkpoint1.pt .. checkpoint10.pt): --num-epoch-checkpoints N" in str(e.value.code)
    assert not out.exists() and not list(tmp_path.glob("*.tmp*"))


# ------------------------------------------------------------------------------------------------
# probe figures

def test_probe_figures_have_a_readable_size_and_a_one_line_title():
    from PIL import Image

    from pe_tools.probe import heatmap_png

    maps = __import__("numpy").random.default_rng(0).random((3, 16, 16))
    title = "posnet_embed, encoder self-attention: identical-word probe, L=16"
    png = heatmap_png(maps, ["layer 1", "layer 2", "mean"], title, description="pe:posnet_embed|lmax:256")
    image = Image.open(io.BytesIO(png))
    width, height = image.size
    assert width >= 1000 and height >= 400 and 2 <= width / height <= 4, image.size  # was 584 x 232
    assert image.info.get("Description") == "pe:posnet_embed|lmax:256" and image.info.get("Title") == title


# ------------------------------------------------------------------------------------------------
# fairseq-generate / fairseq-interactive on a tiny trained model (L_max 8)

# (tiny_posnet: conftest.py's session fixture, L_max = L_MAX)

@pytest.mark.slow
def test_a_sentence_beyond_lmax_points_at_pe_beyond_max(tiny_posnet, data_bin, raw_corpus, tmp_path):
    src = (raw_corpus / "test.en").read_text().split("\n")
    first_long = min(i for i, line in enumerate(src) if line and len(line.split()) + 1 > L_MAX)
    gen = run("fairseq_cli.generate", [data_bin, "--user-dir", PLUGIN, "--path", tiny_posnet, "--cpu", "--beam", 2,
                                       "--batch-size", 1, "--required-batch-size-multiple", 1], check=False, cwd=tmp_path)
    assert gen.returncode != 0 and "Size of sample #" in gen.stdout  # fairseq's own exception, as quoted
    hint = gen.stdout.strip().split("\n")[-1]
    assert hint.startswith("pe_plugin: test sentence #"), gen.stdout[-2000:]
    sample = int(re.search(r"#(\d+)", hint)[1])
    assert len(src[sample].split()) + 1 > L_MAX and sample in range(len(src)) and first_long >= 0
    for words in (f"L_max = {L_MAX}", "--max-source-positions at training", "pe_beyond_max", "clamp",
                  "do not pass --skip-invalid-size-inputs-valid-test"):
        assert words in hint, hint
    assert not list(tmp_path.iterdir())

    inter = subprocess.run([sys.executable, "-m", "fairseq_cli.interactive", data_bin, "--user-dir", PLUGIN, "--path",
                            tiny_posnet, "--cpu", "--beam", "2"], input=" ".join(["a"] * (L_MAX + 3)) + "\n", text=True,
                           capture_output=True, cwd=tmp_path, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    hint = inter.stderr.strip().split("\n")[-1]
    assert inter.returncode != 0 and hint.startswith(f"pe_plugin: test sentence #0 has {L_MAX + 4} source tokens")
    assert "fairseq-interactive allows" in hint and "pe_beyond_max" in hint, inter.stderr[-2000:]


@pytest.mark.slow
def test_a_sizing_override_is_explained(tiny_posnet, data_bin, tmp_path):
    gen = run("fairseq_cli.generate", [data_bin, "--user-dir", PLUGIN, "--path", tiny_posnet, "--cpu",
                                       "--required-batch-size-multiple", 1,
                                       "--model-overrides", "{'posnet_max_positions': 5}"], check=False, cwd=tmp_path)
    last = gen.stdout.strip().split("\n")[-1]
    assert gen.returncode == 2 and re.match(r"[\w.-]+: error: the checkpoint does not fit", last), gen.stdout[-2000:]
    for words in (f"encoder.pe.kernels.phi is [{L_MAX}, ", "[5, ", "'posnet_max_positions': 5",
                  "leave posnet_max_positions out of --model-overrides", "pe_beyond_max"):
        assert words in last, last
    assert "size mismatch for" not in gen.stdout and not list(tmp_path.iterdir())
    # the hub: the same explanation as an exception
    from pe_plugin.cli_errors import CheckpointSizeError

    with pytest.raises(CheckpointSizeError, match="leave posnet_max_positions out of --model-overrides"):
        pe_hub.from_pretrained(tiny_posnet, data_name_or_path=data_bin, bpe=None, tokenizer=None,
                               posnet_max_positions=5)


@pytest.mark.slow
def test_the_hub_takes_a_checkpoint_file(tiny_posnet, data_bin, caplog):
    with caplog.at_level("INFO", logger="pe_plugin"):
        by_file = pe_hub.from_pretrained(tiny_posnet, data_name_or_path=data_bin, bpe=None, tokenizer=None)
    by_dir = pe_hub.from_pretrained(tiny_posnet.parent, "checkpoint_last.pt", data_name_or_path=data_bin, bpe=None,
                                    tokenizer=None)
    sentence = "w3 w1 w7"  # words of the tiny corpus
    assert by_file.translate(sentence, beam=2) == by_dir.translate(sentence, beam=2)
    # which file was loaded: logged and kept on the hub (the default is checkpoint_best.pt, another file)
    assert by_file.checkpoint_paths == by_dir.checkpoint_paths == [str(tiny_posnet)]
    assert f"pe_plugin.hub: loaded {tiny_posnet}" in caplog.text
    best = pe_hub.from_pretrained(tiny_posnet.parent, data_name_or_path=data_bin, bpe=None, tokenizer=None)
    assert best.checkpoint_paths == [str(tiny_posnet.parent / "checkpoint_best.pt")]


@pytest.mark.parametrize("given", ["checkpoint_best.pt", "checkpoint3.pt"])
def test_the_hub_refuses_a_checkpoint_file_that_contradicts_the_path(given, tmp_path):
    """A path to checkpoint_last.pt with checkpoint_file='checkpoint_best.pt' (the old default, given explicitly)
    is refused, not loaded as `last`."""
    (tmp_path / "checkpoint_last.pt").write_bytes(b"")
    with pytest.raises(ValueError, match=rf"checkpoint_last\.pt is a checkpoint file, and checkpoint_file="
                                         rf"'{re.escape(given)}' names another: pass the folder"):
        pe_hub.from_pretrained(tmp_path / "checkpoint_last.pt", checkpoint_file=given)
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint_last.pt"]


@pytest.mark.parametrize("folder", ["empty", "missing", "."])
def test_the_hub_refuses_a_user_dir_that_is_not_this_plugin(folder, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError) as e:
        pe_hub.from_pretrained(tmp_path, user_dir=str(tmp_path / folder))
    assert f"user_dir={str(tmp_path / folder)!r} is not this pe_plugin ({pe_hub.PLUGIN_DIR})" in str(e.value)
    assert "leave user_dir= out" in str(e.value)
    assert [p.name for p in tmp_path.iterdir()] == ["empty"]


# ------------------------------------------------------------------------------------------------
# the messages themselves, on fairseq's and torch's texts as they print them (no model needed)

@pytest.mark.parametrize("text, sample, side, n, limit", [
    # numpy 2 (what fairseq 0.12 prints with it), and plain integers (numpy 1)
    ("Size of sample #14 is invalid (=(np.int32(7), np.int32(7))) since max_positions=(6, 256), skip this example "
     "with --skip-invalid-size-inputs-valid-test", 14, "source", 7, 6),
    ("Size of sample #3 is invalid (=(5, 12)) since max_positions=(1024, 10), skip this example with "
     "--skip-invalid-size-inputs-valid-test", 3, "target", 12, 10),
])
def test_the_length_hint_reads_fairseqs_message(text, sample, side, n, limit):
    from pe_plugin.cli_errors import length_hint

    hint = length_hint(Exception(text))
    assert hint.startswith(f"pe_plugin: test sentence #{sample} has {n} {side} tokens (end of sentence included), "
                           f"more than the {limit} {side} positions")
    assert "--model-overrides \"{'pe_beyond_max': 'clamp'}\"" in hint and "do not pass --skip-invalid" in hint
    assert length_hint(Exception("Size of sample is fine")) is None
    assert text.split(" (=")[0].replace("#14", "#ID").replace("#3", "#ID") in TROUBLESHOOTING.replace("\n  ", " ")


def test_the_size_mismatch_message_names_the_sizing_override_only():
    from pe_plugin.cli_errors import size_mismatch_message

    torch_text = ("Error(s) in loading state_dict for PETransformerModel:\n\tsize mismatch for encoder.pe.kernels.phi: "
                  "copying a param with shape torch.Size([256, 16, 16]) from checkpoint, the shape in current model is "
                  "torch.Size([5, 16, 16]).\n\tsize mismatch for decoder.pe.kernels.phi: copying a param with shape "
                  "torch.Size([256, 16, 16]) from checkpoint, the shape in current model is torch.Size([5, 16, 16]).")
    message = size_mismatch_message(RuntimeError(torch_text), {"posnet_max_positions": 5, "data": "DATA",
                                                               "bpe": None, "user_dir": "pe_plugin", "beam": 4})
    assert message.startswith("the checkpoint does not fit the model built from its settings: encoder.pe.kernels.phi "
                              "is [256, 16, 16] in the checkpoint and [5, 16, 16] in the model and 1 more parameter.")
    assert "The overrides ('posnet_max_positions': 5)" in message and "leave posnet_max_positions out" in message
    assert "'data'" not in message and "user_dir" not in message
    assert "trained with other model settings" in size_mismatch_message(RuntimeError(torch_text), None)
    assert size_mismatch_message(RuntimeError("Missing key(s) in state_dict: x"), {}) is None


@pytest.mark.slow
def test_piping_the_architecture_listing_into_head_prints_no_traceback():
    """docs/design.md pipes `python -m pe_plugin ARCH` into head: head stops reading, which is no error."""
    proc = subprocess.run(["bash", "-c", f"{sys.executable} -m pe_plugin transformer_posnet_embed_wmt_en_de | head -1; "
                                         "exit ${PIPESTATUS[0]}"], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0 and proc.stdout.startswith("transformer_posnet_embed_wmt_en_de: ")
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr, proc.stderr


@pytest.mark.slow
def test_a_user_dir_without_the_plugin_ends_as_troubleshooting_says(tiny_posnet, data_bin, tmp_path):
    """Only fairseq sees fairseq-generate's --user-dir: an empty folder ends in the unpickling error that
    docs/troubleshooting.md quotes, next to the fix (pass pe_plugin's folder)."""
    (tmp_path / "empty").mkdir()
    proc = run("fairseq_cli.generate", [data_bin, "--user-dir", tmp_path / "empty", "--path", tiny_posnet, "--cpu",
                                        "--required-batch-size-multiple", 1], check=False)
    assert proc.returncode != 0
    quoted = "Weights only load failed ... Unsupported global: GLOBAL argparse.Namespace"
    head, tail = quoted.split(" ... ")
    assert head in proc.stdout and tail in proc.stdout, proc.stdout[-2000:]
    entry = re.sub(r"\s+", " ", TROUBLESHOOTING.split("**`--user-dir` that is not pe_plugin**")[1].split("\n- **")[0])
    assert quoted in entry and "Pass the folder `pe_plugin`" in entry
    assert [p.name for p in tmp_path.iterdir()] == ["empty"]


# ---- fairseq-generate's raw output (pe_tools.scoring.generate_output) ----------------------------------------
def _generate_block(i, tokens, detok=None):
    """One sentence of fairseq-generate's output: S-, T-, H- (tokens), D- (detokenised, if given), P- lines."""
    lines = [f"S-{i}\tsource {i}", f"T-{i}\treference {i}", f"H-{i}\t-0.25\t{tokens}"]
    if detok is not None:
        lines.append(f"D-{i}\t-0.25\t{detok}")
    return lines + [f"P-{i}\t-0.1 -0.2 -0.3"]


def test_generate_output_takes_the_detokenised_d_lines_over_the_h_lines():
    """fairseq-generate with --tokenizer moses writes H- (tokens) and D- (detokenised text): the D- text is the
    translation; a file of H- lines only (a grep) is read from its H- lines. Blocks come in batch order."""
    from pe_tools.scoring.generate_output import hypotheses

    both = _generate_block(1, "ein Haus .", "ein Haus.") + _generate_block(0, "Hallo , Welt !", "Hallo, Welt!")
    text = "\n".join(["2024-01-01 | INFO | fairseq_cli.generate | loading", *both, "Generate test with beam=5"]) + "\n"
    assert hypotheses("gen.out", text, 2, "ref.de") == ["Hallo, Welt!", "ein Haus."]
    h_only = "\n".join(_generate_block(1, "ein Haus .") + _generate_block(0, "Hallo , Welt !")) + "\n"
    assert hypotheses("gen.out", h_only, 2, "ref.de") == ["Hallo , Welt !", "ein Haus ."]


def test_generate_output_with_one_id_past_the_reference_is_refused():
    """ids 0..N-1 belong to an N-line reference: id N (one too many) means another test set, even when none of
    0..N-1 is missing."""
    from pe_tools.scoring.errors import InputError
    from pe_tools.scoring.generate_output import hypotheses

    text = "\n".join(sum((_generate_block(i, f"satz {i}", f"Satz {i}") for i in (2, 0, 1)), [])) + "\n"
    assert hypotheses("gen.out", text, 3, "ref.de") == ["Satz 0", "Satz 1", "Satz 2"]
    with pytest.raises(InputError, match=r"sentence ids up to 2, but reference ref\.de has 2 lines \(ids 0-1\)"):
        hypotheses("gen.out", text, 2, "ref.de")


def test_generate_output_missing_ids_are_listed_the_first_twenty_then_a_count():
    """The error names the missing ids: all of them when there are at most 20, else the first 20 and 'and K
    more'."""
    from pe_tools.scoring.errors import InputError
    from pe_tools.scoring.generate_output import hypotheses, id_list

    def missing_message(present, n_ref):
        text = "\n".join(sum((_generate_block(i, f"s {i}", f"S {i}") for i in present), [])) + "\n"
        with pytest.raises(InputError) as e:
            hypotheses("gen.out", text, n_ref, "ref.de")
        return str(e.value)

    msg = missing_message([0, 2], 5)
    assert "lacks 3 of the 5 sentence ids of reference ref.de: ids 1, 3, 4. " in msg
    assert "--required-batch-size-multiple" in msg  # no logged configuration: both flags are named
    twenty = ", ".join(str(i) for i in range(5, 25))  # exactly 20 missing: all shown, no count
    assert f"lacks 20 of the 25 sentence ids of reference ref.de: ids {twenty}. " in missing_message(range(5), 25)
    assert f"lacks 21 of the 26 sentence ids of reference ref.de: ids {twenty} and 1 more. " \
        in missing_message(range(5), 26)
    assert id_list([7]) == "7" and id_list([]) == ""
    assert id_list(list(range(4)), shown=3) == "0, 1, 2 and 1 more" and id_list([1, 2, 3], shown=3) == "1, 2, 3"


@pytest.mark.parametrize("logged", ["multiple", "skip", "both", "neither"])
def test_dropping_flags_name_what_the_log_shows_and_both_only_when_it_shows_neither(logged):
    """pe_tools/scoring/generate_output.dropping_flags (survivor: ``multiple is None and skip is None`` ->
    ``skip is None``): a log whose configuration holds one of the two settings is judged on it alone; both flags
    are named only when it holds neither."""
    from pe_tools.scoring.generate_output import dropping_flags

    text = {"multiple": "'required_batch_size_multiple': 8,", "skip": "'skip_invalid_size_inputs_valid_test': True,",
            "neither": ""}
    text["both"] = text["multiple"] + " " + text["skip"]
    found = dropping_flags(text[logged])
    named = {flag for flag in ("--required-batch-size-multiple", "--skip-invalid-size-inputs-valid-test")
             if any(line.startswith(flag) for line in found)}
    want = {"multiple": {"--required-batch-size-multiple"}, "skip": {"--skip-invalid-size-inputs-valid-test"}}
    assert named == want.get(logged, {"--required-batch-size-multiple", "--skip-invalid-size-inputs-valid-test"})
    assert (logged == "neither") == any("(default 8)" in line for line in found)

"""fairseq's hub interface on this plugin's checkpoints (docs/hub.md): ``pe_plugin.hub.from_pretrained`` and
fairseq's own ``TransformerModel.from_pretrained(..., user_dir=...)`` translate raw text exactly as
fairseq-generate translates the same sentences, and bad input gets an error that names the argument to fix.

The slow tests train a tiny PosNet-Embed model (L_max 64) on the synthetic grammar corpus, capitalised and
with full stops so that Moses tokenisation changes the text, prepared by pe-prepare (Moses tokens, subword-nmt
codes learnt here, fairseq-preprocess), and a tiny stock fairseq ``transformer_tiny``. Nothing is downloaded.
"""
import json
import os
import re
import subprocess
import sys

import pytest
import torch

import pe_testing
from pe_lengths import LIMS, L_SRC, TINY, hub, tokens
from pe_testing import PLUGIN, REPO, SAFE_ENV, fairseq_train, run

from pe_plugin import hub as pe_hub
from pe_plugin.safe_load import load_checkpoint

DECODING = {"beam": 4, "lenpen": 0.6, "max_len_a": 1, "max_len_b": 10}  # pinned on both sides
L_MAX = 64


def write_text_corpus(out):
    """The grammar corpus as running text: capitalised, a full stop at the end (commas are the grammar's)."""
    from pe_tools.synthetic.grammar import write_corpus

    write_corpus(out, n_train=2000, n_valid=50, n_test=20, seed=3)
    for path in out.iterdir():
        lines = path.read_text().splitlines()
        path.write_text("".join(line[0].upper() + line[1:] + ".\n" for line in lines))
    return out


# fairseq-train's flags here (after pe_testing's): dropout on, so that a hub left in training mode would differ
HUB_TRAINING = ["--max-tokens", 2000, "--lr", "3e-3", "--dropout", "0.1", "--max-source-positions", L_MAX,
                "--max-target-positions", L_MAX, "--no-epoch-checkpoints"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub")
    raw = write_text_corpus(root / "raw")
    data = root / "data"
    run("pe_tools.data.cli", ["raw", "--src", "en", "--tgt", "de", "--train", raw / "train", "--valid", raw / "valid",
                              "--test", raw / "test", "--out", data, "--bpe-merges", 200, "--workers", 1], cwd=REPO)
    posnet, stock = root / "posnet", root / "stock"
    # each in a process of its own: fairseq keeps the best validation loss across runs in one process
    # (checkpoint_utils.save_checkpoint.best), so a second run there would save no checkpoint_best.pt
    fairseq_train(data, posnet, "--arch", "transformer_posnet_embed_tiny", "--max-update", 150, *HUB_TRAINING,
                  own_process=True)
    fairseq_train(data, stock, "--arch", "transformer_tiny", "--max-update", 10, *HUB_TRAINING, "--source-lang", "en",
                  "--target-lang", "de", own_process=True)
    gen = run("fairseq_cli.generate", [
        data, "--user-dir", PLUGIN, "--path", posnet / "checkpoint_best.pt", "--cpu", "--beam", DECODING["beam"],
        "--lenpen", DECODING["lenpen"], "--max-len-a", DECODING["max_len_a"], "--max-len-b", DECODING["max_len_b"],
        "--batch-size", 1, "--required-batch-size-multiple", 1, "--source-lang", "en", "--target-lang", "de",
        "--tokenizer", "moses", "--bpe", "subword_nmt", "--bpe-codes", data / "text" / "bpe.codes"]).stdout
    detok = {int(m[1]): m[2] for m in re.finditer(r"^D-(\d+)\t\S+\t(.*)$", gen, re.M)}
    src = (raw / "test.en").read_text().splitlines()
    assert sorted(detok) == list(range(len(src))), gen[-2000:]  # every test sentence decoded
    return {"root": root, "raw": raw, "data": data, "posnet": posnet, "stock": stock, "src": src,
            "generate": [detok[i] for i in range(len(src))]}


def load(trained, **kwargs):
    return pe_hub.from_pretrained(trained["posnet"], data_name_or_path=trained["data"], **kwargs)


@pytest.mark.slow
def test_hub_translates_raw_text_like_fairseq_generate(trained):
    src, expected = trained["src"], trained["generate"]
    hub = load(trained)  # BPE codes: DATA/text/bpe.codes; languages: the data's (the checkpoint names none)
    assert isinstance(hub, pe_hub.GeneratorHubInterface)
    assert (hub.tokenizer.tok.lang, hub.tokenizer.detok.lang) == ("en", "de")  # not English on both sides
    assert not hub.models[0].training
    got = [hub.translate(s, **DECODING) for s in src]
    assert got == expected
    # the comparison can fail: distinct non-empty sentences, detokenised hypotheses that differ from each other
    assert len(set(src)) == len(src) and all(got)
    assert len(set(got)) >= len(got) // 2, got
    # Moses-detokenised (no space before a full stop or a comma) and BPE removed
    assert not any(" ." in h or " ," in h or "@@" in h for h in got), got
    assert sum(h.endswith(".") for h in got) >= len(got) // 2, got
    longest = max(range(len(src)), key=lambda i: len(expected[i]))
    assert hub.translate(src[longest], **{**DECODING, "max_len_a": 0, "max_len_b": 3}) != expected[longest]


@pytest.mark.slow
def test_fairseq_from_pretrained_with_user_dir_in_a_fresh_process(trained):
    """fairseq's own TransformerModel.from_pretrained, pe_plugin not imported by the caller: user_dir= makes it
    import the plugin (and its checkpoint allow-list) before reading the checkpoint; without it torch refuses
    the file. Without source_lang / target_lang the Moses tokenizer is English on both sides."""
    codes, n = trained["data"] / "text" / "bpe.codes", 5
    script = f"""
import json, pickle, sys
from fairseq.models.transformer import TransformerModel
assert "pe_plugin" not in sys.modules
common = dict(checkpoint_file="checkpoint_best.pt", data_name_or_path={str(trained["data"])!r}, tokenizer="moses",
              bpe="subword_nmt", bpe_codes={str(codes)!r})
try:
    TransformerModel.from_pretrained({str(trained["posnet"])!r}, **common)
    refused = None
except pickle.UnpicklingError as e:
    refused = str(e)
hub = TransformerModel.from_pretrained({str(trained["posnet"])!r}, user_dir={PLUGIN!r}, source_lang="en",
                                       target_lang="de", **common)
english = TransformerModel.from_pretrained({str(trained["posnet"])!r}, user_dir={PLUGIN!r}, **common)
print("RESULT", json.dumps({{
    "refused": refused, "langs": [hub.tokenizer.tok.lang, hub.tokenizer.detok.lang],
    "default_langs": [english.tokenizer.tok.lang, english.tokenizer.detok.lang],
    "hyps": [hub.translate(s, **{DECODING!r}) for s in {trained["src"][:n]!r}]}}))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=SAFE_ENV, cwd=trained["root"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.split("RESULT ", 1)[1])
    assert out["refused"] and "argparse.Namespace" in out["refused"]
    assert out["langs"] == ["en", "de"] and out["default_langs"] == ["en", "en"]
    assert out["hyps"] == trained["generate"][:n]


@pytest.mark.slow
def test_a_sentence_longer_than_l_max_is_named(trained):
    hub = load(trained)
    long = " ".join(trained["src"][:8])
    with pytest.raises(ValueError) as e:
        hub.translate(["A dog sees the cat.", long], **DECODING)
    n = hub.encode(long).numel()
    assert n > L_MAX
    message = str(e.value)
    for part in (f"sentence 1 is {n} tokens", f"the {L_MAX} source positions", "pe 'posnet_embed'",
                 f"L_max = {L_MAX}", "--max-source-positions", "pe_beyond_max='clamp'"):
        assert part in message, message
    # fairseq's own option drops the sentence: fewer translations than sentences (docs/hub.md says so)
    assert len(hub.translate(["A dog sees the cat.", long], skip_invalid_size_inputs=True, **DECODING)) == 1
    clamped = load(trained, pe_beyond_max="clamp")
    assert clamped.translate(long, **DECODING)
    assert clamped.translate(trained["src"][0], **DECODING) == trained["generate"][0]  # short ones unchanged


@pytest.mark.slow
def test_a_stock_fairseq_checkpoint_is_translated(trained, caplog):
    with caplog.at_level("INFO", logger="pe_plugin"):
        hub = pe_hub.from_pretrained(trained["stock"], data_name_or_path=trained["data"])
    assert "--arch transformer_tiny is fairseq's own" in caplog.text
    assert type(hub.models[0]).__name__ == "TransformerModel"
    assert isinstance(hub.translate(trained["src"][0], **DECODING), str)
    with pytest.raises(ValueError, match=rf"more than the {L_MAX} source positions .*max_source_positions="):
        hub.translate(" ".join(trained["src"][:8]))


@pytest.mark.slow
def test_bad_paths_name_the_argument(trained, tmp_path):
    run_dir, data = trained["posnet"], trained["data"]
    with pytest.raises(FileNotFoundError, match=r"checkpoint_5\.pt does not exist \(checkpoint_file='checkpoint_5\.pt'"
                                                r"\); .* holds checkpoint_best\.pt, checkpoint_last\.pt"):
        pe_hub.from_pretrained(run_dir, "checkpoint_5.pt", data_name_or_path=data)
    with pytest.raises(FileNotFoundError, match=r"no fairseq dictionaries .* \(data_name_or_path= was not given"):
        pe_hub.from_pretrained(run_dir)
    raw = re.escape(str(trained["raw"]))
    with pytest.raises(FileNotFoundError, match=rf"no fairseq dictionaries \(dict.LANG.txt\) in {raw} "
                                                r"\(data_name_or_path=\)"):
        pe_hub.from_pretrained(run_dir, data_name_or_path=trained["raw"])
    with pytest.raises(FileNotFoundError, match=r"dict\.fr\.txt not found .*holds dict\.de\.txt, dict\.en\.txt"):
        pe_hub.from_pretrained(run_dir, data_name_or_path=data, source_lang="fr")
    missing = re.escape(str(tmp_path / "none.codes"))
    with pytest.raises(FileNotFoundError, match=rf"BPE file {missing} not found \(bpe_codes=\)"):
        pe_hub.from_pretrained(run_dir, data_name_or_path=data, bpe_codes=tmp_path / "none.codes")
    bare = tmp_path / "bare"  # the data without pe-prepare's text/ folder: no codes to default to
    bare.mkdir()
    for name in ("dict.en.txt", "dict.de.txt"):
        (bare / name).write_text((data / name).read_text())
    with pytest.raises(FileNotFoundError, match=r"no subword_nmt file: bpe_codes= was not given and none of "
                                                r".*/code, .*/bpecodes, .*/text/bpe\.codes exists"):
        pe_hub.from_pretrained(run_dir, data_name_or_path=bare, source_lang="en", target_lang="de")


@pytest.mark.slow
def test_an_architecture_of_another_plugin_is_named(trained, tmp_path):
    state = load_checkpoint(str(trained["stock"] / "checkpoint_best.pt"))
    state["cfg"]["model"].arch = state["cfg"]["model"]._name = "transformer_of_another_plugin"
    (tmp_path / "run").mkdir()
    torch.save(state, tmp_path / "run" / "checkpoint_best.pt")
    with pytest.raises(ValueError, match="trained with --arch transformer_of_another_plugin, which neither fairseq "
                                         "nor pe_plugin registers"):
        pe_hub.from_pretrained(tmp_path / "run", data_name_or_path=trained["data"])


def test_files_that_are_no_checkpoint_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"run directory .*nowhere does not exist"):
        pe_hub.from_pretrained(tmp_path / "nowhere")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "checkpoint_best.pt")
    with pytest.raises(ValueError, match=r"checkpoint_best\.pt is not a fairseq checkpoint"):
        pe_hub.from_pretrained(tmp_path)
    (tmp_path / "checkpoint_best.pt").write_text("not a checkpoint\n")
    with pytest.raises(ValueError, match=r"checkpoint_best\.pt cannot be read as a checkpoint"):
        pe_hub.from_pretrained(tmp_path)


def test_moses_kwargs_of_other_fairseq_versions_are_refused(tmp_path):
    with pytest.raises(TypeError, match=r"moses_target_lang= is not read .* pass target_lang="):
        pe_hub.from_pretrained(tmp_path, moses_target_lang="de")


def test_the_plugin_folder_is_what_fairseq_imports():
    import pe_plugin

    assert pe_hub.PLUGIN_DIR == os.path.dirname(pe_plugin.__file__) == PLUGIN


# ---- the hub: why a sentence is too long ---------------------------------------------------------------------
@pytest.mark.parametrize("learned", [False, True])
def test_the_hub_blames_learned_positions_only_for_stock_learned_models(data_bin, learned):
    """A source sentence one token over the limit of a stock fairseq transformer: with learned positions
    (--encoder-learned-pos) the hub says they have one row per position; with sinusoids it says a larger limit
    loads. pe_plugin encodings without a limit of their own: tests/test_length_limits.py."""
    extra = TINY + LIMS + (["--encoder-learned-pos", "--decoder-learned-pos"] if learned else [])
    task, model, args = pe_testing.build_model(data_bin, "transformer_wmt_en_de", extra)
    assert not hasattr(model.encoder, "pe")  # fairseq's own model
    with pytest.raises(ValueError) as e:
        hub(task, model, args).check_lengths([tokens(task, L_SRC + 1)[0]])
    message = str(e.value)
    assert f"is {L_SRC + 1} tokens long" in message
    assert ("fairseq's learned positions have one row per position" in message) == learned, message
    assert (f"max_source_positions={2 * L_SRC}" in message) == (not learned), message


# ---- the hub: leaving long sentences out when asked ----------------------------------------------------------
def test_the_hub_leaves_sentences_over_the_limit_out_when_told_to_skip_them(data_bin):
    """``generate(..., skip_invalid_size_inputs=True)`` on the hub of a model with 7 source positions: a sentence
    of 8 tokens between two of 7 and 2 is left out (fairseq's skipping: two translations, the others' in their
    order) rather than refused; without the flag the same call raises, naming it."""
    task, model, args = pe_testing.build_model(data_bin, "transformer_rope_wmt_en_de", TINY + LIMS)
    h = hub(task, model.eval(), args)
    fits, over, short = tokens(task, L_SRC)[0], tokens(task, L_SRC + 1)[0], tokens(task, 2)[0]
    decoding = dict(beam=1, max_len_b=3, max_len_a=0)
    alone = [h.generate([s], **decoding)[0][0]["tokens"] for s in (fits, short)]
    out = h.generate([fits, over, short], skip_invalid_size_inputs=True, **decoding)
    assert len(out) == 2
    for hypos, want in zip(out, alone):
        assert torch.equal(hypos[0]["tokens"], want)
    with pytest.raises(ValueError, match=rf"sentence 1 is {L_SRC + 1} tokens long"):
        h.generate([fits, over, short], **decoding)


# ---- the checkpoint allow-list on numpy 1.x ------------------------------------------------------------------
def test_the_checkpoint_allow_list_takes_numpy_core_where_there_is_no_numpy_underscore_core(monkeypatch):
    """On a numpy without ``numpy._core`` (numpy 1.x, where the module is ``numpy.core``; simulated here by hiding
    the attribute, numpy 2 keeping ``numpy.core`` as its alias), safe_load's allow-list still admits the array
    reconstructor and the scalar constructor of BLEU-count arrays in a checkpoint: the same functions as numpy 2's
    ``numpy._core.multiarray``."""
    import warnings

    import numpy as np

    from pe_plugin.safe_load import checkpoint_safe_globals

    want = [np._core.multiarray._reconstruct, np._core.multiarray.scalar]
    monkeypatch.delattr(np, "_core")
    assert getattr(np, "_core", None) is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # numpy 2: numpy.core is deprecated
        allowed = checkpoint_safe_globals()
    assert all(any(a is w for a in allowed) for w in want)


@pytest.fixture
def empty_allow_list():
    """torch's process-wide allow-list of the safe unpickler emptied for one test, and given back after it: what
    the test loads is admitted by the globals it registers itself, none left by earlier tests."""
    saved = torch.serialization.get_safe_globals()
    torch.serialization.clear_safe_globals()
    yield
    torch.serialization.clear_safe_globals()
    torch.serialization.add_safe_globals(saved)


DTYPES = ["float64", "float32", "float16", "int64", "int32", "int16", "int8", "uint8", "bool"]


def test_a_checkpoint_holding_numpy_arrays_and_scalars_of_each_dtype_loads_safely(empty_allow_list, tmp_path):
    """fairseq's --eval-bleu keeps numpy BLEU counts in a checkpoint (int64 arrays, float64 scalars); numpy >= 1.25
    pickles each dtype by its own class (numpy.dtypes.Float64DType, ...). A checkpoint holding an array and a scalar
    of each common dtype loads with weights_only=True and the plugin's allow-list, each value and dtype kept; without
    the allow-list the same file is refused, so the allow-list is what admits it."""
    import numpy as np

    from pe_plugin.safe_load import load_checkpoint

    state = {"extra_state": {dt: {"array": np.arange(3).astype(dt), "scalar": np.dtype(dt).type(1)} for dt in DTYPES}}
    path = tmp_path / "checkpoint_last.pt"
    torch.save(state, path)
    with pytest.raises(Exception, match="weights_only"):
        torch.load(path, weights_only=True)
    loaded = load_checkpoint(str(path))["extra_state"]
    for dt in DTYPES:
        array, scalar = loaded[dt]["array"], loaded[dt]["scalar"]
        assert array.dtype == np.dtype(dt) and array.tolist() == np.arange(3).astype(dt).tolist(), dt
        assert type(scalar) is np.dtype(dt).type and scalar == 1, dt


# ---- the hub's languages, fast: a tiny model built in-process, French source and German target -----------------
# Moses tokenises and detokenises these three languages differently (apostrophes, the space before "?"), so the
# language each side of the hub's tokenizer got shows in its output; the reference is sacremoses itself, called
# with the language that side should have.
MOSES_SENTENCE = "L'homme, c'est bien?"
MOSES_TOKENS = "l&apos; homme , c &apos;est bien ?"  # a hypothesis: detokenised differently by fr, de and en


def moses_reference(lang, text, detok=False):
    from sacremoses import MosesDetokenizer, MosesTokenizer

    if detok:
        return MosesDetokenizer(lang=lang).detokenize(text.split())
    return MosesTokenizer(lang=lang).tokenize(text, aggressive_dash_splits=True, return_str=True, escape=True)


def test_the_moses_reference_tells_the_three_languages_apart():
    """What the hub tests below rest on: each of fr, de and en tokenises the sentence and detokenises the
    hypothesis in its own way, so a side that got another language (a swap, or fairseq's English default) shows."""
    for texts in ([moses_reference(lang, MOSES_SENTENCE) for lang in ("fr", "de", "en")],
                  [moses_reference(lang, MOSES_TOKENS, detok=True) for lang in ("fr", "de", "en")]):
        assert len(set(texts)) == 3, texts


@pytest.fixture(scope="module")
def tiny_fr_de(tmp_path_factory):
    """A tiny RoPE model built in-process for fr -> de (joined dictionaries holding every token that Moses makes of
    MOSES_SENTENCE and MOSES_TOKENS in fr, de and en), saved untrained as checkpoint_best.pt with the languages in
    its configuration; also a copy of that checkpoint whose configuration names no languages. The data folder has
    dict.{fr,de,en}.txt and no binarised files; ``bare`` is the same with empty binarised files of the pair fr-de,
    the only place the languages can then be read from."""
    root = tmp_path_factory.mktemp("hub-fr-de")
    words = set(MOSES_TOKENS.split())
    for lang in ("fr", "de", "en"):
        words.update(moses_reference(lang, MOSES_SENTENCE).split())
    data, bare = root / "data", root / "bare"
    for folder, langs in ((data, ("fr", "de", "en")), (bare, ("fr", "de"))):
        folder.mkdir()
        for lang in langs:
            (folder / f"dict.{lang}.txt").write_text("".join(f"{w} 10\n" for w in sorted(words)))
    for suffix in ("fr.bin", "fr.idx", "de.bin", "de.idx"):
        (bare / f"train.fr-de.{suffix}").write_bytes(b"")
    task, model, args = pe_testing.build_model(data, "transformer_rope_wmt_en_de",
                                               TINY + ["--source-lang", "fr", "--target-lang", "de"])
    run_dir, unnamed = root / "run", root / "unnamed"
    run_dir.mkdir()
    pe_testing.save_checkpoint(model, args, run_dir / "checkpoint_best.pt")
    state = load_checkpoint(str(run_dir / "checkpoint_best.pt"))
    assert (state["cfg"]["task"]["source_lang"], state["cfg"]["task"]["target_lang"]) == ("fr", "de")
    state["cfg"]["task"]["source_lang"] = state["cfg"]["task"]["target_lang"] = None
    unnamed.mkdir()
    torch.save(state, unnamed / "checkpoint_best.pt")
    return {"run": run_dir, "unnamed": unnamed, "data": data, "bare": bare, "dict": task.source_dictionary}


def assert_moses_sides(h, source, target, dictionary):
    """The hub tokenises as sacremoses does in ``source`` and detokenises as it does in ``target``: its
    ``encode`` gives the dictionary's ids of the reference tokens (no BPE here), its ``decode`` of a hypothesis the
    reference detokenisation, and ``translate`` of the sentence the reference detokenisation of the model's
    hypothesis."""
    assert (h.tokenizer.tok.lang, h.tokenizer.detok.lang) == (source, target)
    assert (h.cfg.task.source_lang, h.cfg.task.target_lang) == (source, target)
    want = dictionary.encode_line(moses_reference(source, MOSES_SENTENCE), add_if_not_exist=False)
    assert dictionary.unk() not in want.tolist()
    assert h.encode(MOSES_SENTENCE).tolist() == want.tolist()
    hypothesis = dictionary.encode_line(MOSES_TOKENS, add_if_not_exist=False)
    assert h.decode(hypothesis) == moses_reference(target, MOSES_TOKENS, detok=True)
    best = h.generate([h.encode(MOSES_SENTENCE)], beam=2, max_len_a=0, max_len_b=6)[0][0]["tokens"]
    assert h.translate(MOSES_SENTENCE, beam=2, max_len_a=0, max_len_b=6) == moses_reference(
        target, dictionary.string(best), detok=True)


def test_the_hub_tokenises_in_the_source_language_and_detokenises_in_the_target_language(tiny_fr_de):
    """Languages read from the checkpoint (--source-lang fr --target-lang de at training): the Moses tokenizer is
    French, the detokenizer German, neither English (fairseq's default) nor swapped."""
    h = pe_hub.from_pretrained(tiny_fr_de["run"], data_name_or_path=tiny_fr_de["data"], bpe=None)
    assert_moses_sides(h, "fr", "de", tiny_fr_de["dict"])


def test_languages_given_to_the_hub_win_over_the_checkpoints(tiny_fr_de):
    h = pe_hub.from_pretrained(tiny_fr_de["run"], data_name_or_path=tiny_fr_de["data"], bpe=None,
                               source_lang="de", target_lang="en")
    assert_moses_sides(h, "de", "en", tiny_fr_de["dict"])
    h = pe_hub.from_pretrained(tiny_fr_de["run"], data_name_or_path=tiny_fr_de["data"], bpe=None,
                               source_lang="en", target_lang="fr")
    assert_moses_sides(h, "en", "fr", tiny_fr_de["dict"])


def test_languages_come_from_the_data_when_the_checkpoint_names_none(tiny_fr_de):
    h = pe_hub.from_pretrained(tiny_fr_de["unnamed"], data_name_or_path=tiny_fr_de["bare"], bpe=None)
    assert_moses_sides(h, "fr", "de", tiny_fr_de["dict"])


@pytest.mark.parametrize("given, want", [
    ({}, ("fr", "de")),  # the checkpoint's
    ({"source_lang": "en"}, ("en", "de")), ({"target_lang": "en"}, ("fr", "en")),
    ({"source_lang": "de", "target_lang": "fr"}, ("de", "fr")),
])
def test_each_language_is_the_given_one_else_the_checkpoints(tiny_fr_de, given, want, tmp_path):
    task = {"source_lang": "fr", "target_lang": "de"}
    assert pe_hub.languages(task, str(tmp_path), given.get("source_lang"), given.get("target_lang")) == want


@pytest.mark.parametrize("given, want", [
    ({}, ("fr", "de")), ({"source_lang": "en"}, ("en", "de")), ({"target_lang": "en"}, ("fr", "en")),
])
def test_each_language_missing_from_the_checkpoint_is_the_datas(tiny_fr_de, given, want):
    for task in ({"source_lang": None, "target_lang": None}, {}):
        assert pe_hub.languages(task, str(tiny_fr_de["bare"]), given.get("source_lang"),
                                given.get("target_lang")) == want
    # one language in the checkpoint, the other from the data
    assert pe_hub.languages({"source_lang": "en"}, str(tiny_fr_de["bare"]), None, None) == ("en", "de")
    assert pe_hub.languages({"target_lang": "en"}, str(tiny_fr_de["bare"]), None, None) == ("fr", "en")


def test_no_languages_anywhere_are_refused(tmp_path):
    with pytest.raises(ValueError, match="pass source_lang= and target_lang="):
        pe_hub.languages({}, str(tmp_path), None, None)
    with pytest.raises(ValueError, match="pass source_lang= and target_lang="):
        pe_hub.languages({}, str(tmp_path), "fr", None)
    with pytest.raises(ValueError, match="pass source_lang= and target_lang="):
        pe_hub.languages({}, str(tmp_path), None, "de")


@pytest.mark.parametrize("side", ["source_lang", "target_lang"])
def test_a_language_without_its_dictionary_is_named(tiny_fr_de, side):
    """Each side's dictionary is looked for: a language the data has no dict.LANG.txt for is named, on either side."""
    langs = {"source_lang": "fr", "target_lang": "de", side: "cs"}
    with pytest.raises(FileNotFoundError, match=r"dict\.cs\.txt not found .*holds dict\.de\.txt, dict\.en\.txt, "
                                                r"dict\.fr\.txt"):
        pe_hub.from_pretrained(tiny_fr_de["run"], data_name_or_path=tiny_fr_de["data"], bpe=None, **langs)


@pytest.mark.parametrize("old", ["moses_source_lang", "moses_target_lang"])
def test_each_moses_kwarg_of_other_fairseq_versions_is_refused(tmp_path, old):
    with pytest.raises(TypeError, match=rf"{old}= is not read .* pass {old.replace('moses_', '')}="):
        pe_hub.from_pretrained(tmp_path, **{old: "de"})


@pytest.mark.parametrize("content, kind", [
    (b"", "EOFError"), (b"not a checkpoint\n", "UnpicklingError"), ("truncated", "RuntimeError")])
def test_each_way_a_checkpoint_file_fails_to_load_is_named(tmp_path, content, kind):
    """An empty file (EOFError), a file of text (the unpickler's error) and a zip checkpoint cut short (torch's
    RuntimeError from its zip reader) each give the hub's ValueError naming the file, not torch's own error."""
    path = tmp_path / "checkpoint_best.pt"
    if content == "truncated":
        torch.save({"cfg": {"task": {}, "model": {}}, "model": {"w": torch.zeros(64)}}, path)
        content = path.read_bytes()[:-40]
    path.write_bytes(content)
    with pytest.raises(Exception) as raw:
        load_checkpoint(str(path), mmap=True)
    assert type(raw.value).__name__ == kind
    with pytest.raises(ValueError, match=r"checkpoint_best\.pt cannot be read as a checkpoint"):
        pe_hub.from_pretrained(tmp_path)


def test_a_checkpoint_file_as_run_dir_takes_its_own_name_and_refuses_another(tmp_path):
    path = tmp_path / "checkpoint7.pt"
    path.write_bytes(b"")
    assert pe_hub.split_checkpoint_path(str(path), None) == (str(tmp_path), "checkpoint7.pt")
    assert pe_hub.split_checkpoint_path(str(path), "checkpoint7.pt") == (str(tmp_path), "checkpoint7.pt")
    with pytest.raises(ValueError, match=r"checkpoint7\.pt is a checkpoint file, and checkpoint_file="
                                         r"'checkpoint_best\.pt' names another"):
        pe_hub.split_checkpoint_path(str(path), "checkpoint_best.pt")
    assert pe_hub.split_checkpoint_path(str(tmp_path), None) == (str(tmp_path), "checkpoint_best.pt")


def test_the_checkpoints_named_are_those_of_the_run_and_of_its_subfolders_in_numeric_order(tmp_path):
    for name in ("checkpoint10.pt", "checkpoint2.pt", "gen/checkpoint.avg5.pt", "gen/deeper/x.pt", "notes.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    assert pe_hub.checkpoints_in(str(tmp_path)) == ["checkpoint2.pt", "checkpoint10.pt",
                                                    os.path.join("gen", "checkpoint.avg5.pt")]


def test_a_legacy_checkpoint_is_read_whole_where_it_cannot_be_memory_mapped(tmp_path):
    """load_checkpoint(mmap=True) (how the hub reads a checkpoint's settings) on a file of torch's legacy format,
    which torch refuses to memory-map: it is read whole instead, its values kept; a zip checkpoint cut short is
    still an error (torch's RuntimeError, not hidden by the retry)."""
    path = tmp_path / "legacy.pt"
    torch.save({"cfg": {"task": {"source_lang": "fr"}}, "w": torch.arange(3)}, path,
               _use_new_zipfile_serialization=False)
    with pytest.raises(RuntimeError, match="mmap"):
        torch.load(path, weights_only=True, mmap=True)
    state = load_checkpoint(str(path), mmap=True)
    assert state["cfg"]["task"]["source_lang"] == "fr" and state["w"].tolist() == [0, 1, 2]
    cut = tmp_path / "cut.pt"
    torch.save({"w": torch.zeros(64)}, cut)
    cut.write_bytes(cut.read_bytes()[:-40])
    with pytest.raises(RuntimeError, match="zip archive"):
        load_checkpoint(str(cut), mmap=True)

"""The Multi30k recipe: pe_tools/recipes/multi30k/{corpora,methods}.toml through the WMT14 recipe's own code.

Download, verification and preparation run offline against single-file .gz fixtures served from
127.0.0.1 (the real files are never needed); the methods table is checked against the registry and
fairseq's own training parser, and its stock `transformer` entry against `transformer_sape_*`.
"""
import gzip
import hashlib
import json
import tomllib

import pytest

from pe_prepare import Server, prepare
from pe_testing import REPO, lines

from pe_tools.recipes import launch, load_table
from pe_tools.recipes.train import train_argv

from pe_plugin.encodings import PE_REGISTRY  # noqa: E402

CORPORA = tomllib.loads((REPO / "pe_tools" / "recipes" / "multi30k" / "corpora.toml").read_text())
METHODS = load_table("multi30k")
URL_PREFIX = "https://raw.githubusercontent.com/multi30k/dataset/master"
COUNTS = {"train": 40, "val": 6, "test_2016_flickr": 5}
WORDS = "a man dog woman child sits runs on the in red green street water ball plays with".split()


def caption(i, lang):
    words = [WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(4 + i % 5)]
    return " ".join(w.capitalize() if lang == "de" else w for w in words) + ("" if lang == "en" else f" {lang}") + "."


def texts():
    """{file name: text}: line-aligned en/de/fr captions per split; train line 3 has a 1:6 length ratio."""
    out = {}
    for split, n in COUNTS.items():
        for lang in ("en", "de", "fr"):
            rows = [caption(i + 100 * len(split), lang) for i in range(n)]
            if split == "train":
                rows[3] = "Dogs." if lang == "en" else "Ein Hund , der sehr schnell rennt , spielt ."
            out[f"{split}.{lang}.gz"] = "".join(r + "\n" for r in rows)
    return out


def fixture_table(corrupt=()):
    """The real table, with the fixture's text_sha256 and line counts (and a wrong digest for `corrupt`)."""
    text = (REPO / "pe_tools" / "recipes" / "multi30k" / "corpora.toml").read_text()
    for name, entry in CORPORA["archive"].items():
        file = entry["url"].rsplit("/", 1)[1]
        digest = "0" * 64 if name in corrupt else hashlib.sha256(texts()[file].encode()).hexdigest()
        text = text.replace(entry["text_sha256"], digest)
    for split, n in COUNTS.items():
        real = {"train": 29000, "val": 1014, "test_2016_flickr": 1000}[split]
        text = text.replace(f"lines = {real} ", f"lines = {n} ")
    return text


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("site")
    folder = root / URL_PREFIX.split("/", 3)[3] / "data" / "task1" / "raw"
    folder.mkdir(parents=True)
    for name, text in texts().items():
        (folder / name).write_bytes(gzip.compress(text.encode(), mtime=0))
    server = Server(root)
    yield server, folder
    server.close()


def test_the_real_table_lists_every_split_of_both_pairs():
    for pair in ("en-de", "en-fr"):
        spec = CORPORA["pair"][pair]
        assert {k: spec[k]["lines"] for k in ("train", "valid", "test")} == {"train": 29000, "valid": 1014, "test": 1000}
        for split in ("train", "valid", "test"):
            for side, lang in (("src", "en"), ("tgt", pair[3:])):
                entry = CORPORA["archive"][spec[split][side]]
                assert entry["url"].startswith(URL_PREFIX + "/data/task1/raw/")
                assert entry["url"].endswith(f".{lang}.gz") and len(entry["text_sha256"]) == 64
    assert CORPORA["prepare"] == {"out": "data-bin/multi30k_{src}_{tgt}", "download_dir": "data-bin/multi30k_archives",
                                  "bpe_merges": 8000, "ratio": 0}


@pytest.mark.slow
def test_download_and_prepare_offline_keep_every_pair(site, tmp_path):
    server, _ = site
    table = tmp_path / "corpora.toml"
    table.write_text(fixture_table())
    server.cut_once.add("/multi30k/dataset/master/data/task1/raw/train.de.gz")
    result = prepare("en-de", "--recipe", "multi30k", "--corpora", table, "--base-url", server.url,
                     "--retry-wait", "0", "--workers", "1", cwd=tmp_path)
    assert result.returncode == 0, result.output
    assert "download of train.de.gz stopped at byte" in result.output  # cut off halfway, then resumed
    out = tmp_path / "data-bin" / "multi30k_en_de"  # the table's defaults: out, download dir, merges, ratio
    assert sorted(p.name for p in (tmp_path / "data-bin" / "multi30k_archives").glob("*.gz")) == sorted(
        f"{s}.{lang}.gz" for s in COUNTS for lang in ("en", "de"))
    want = {name: text.splitlines() for name, text in texts().items()}
    for split, fixture in (("train", "train"), ("valid", "val"), ("test", "test_2016_flickr")):
        for lang in ("en", "de"):
            assert lines(out / "work" / f"raw.{split}.{lang}") == want[f"{fixture}.{lang}.gz"]
        assert len(lines(out / "text" / f"{split}.en")) == COUNTS[fixture]  # nothing cleaned away
    assert lines(out / "text" / "train.en")[3].replace("@@ ", "") == "Dogs ."  # a 1:6 pair that WMT14's ratio 1.5 would drop
    assert json.loads((out / ".stamps" / "learn-bpe.json").read_text())["params"]["merges"] == 8000
    assert (out / "train.en-de.de.bin").exists() and (out / "dict.en.txt").exists()


def test_raw_dir_needs_no_network_and_checks_the_text(site, tmp_path):
    server, folder = site
    table = tmp_path / "corpora.toml"
    table.write_text(fixture_table())
    n = len(server.log)
    ok = prepare("en-fr", "--recipe", "multi30k", "--corpora", table, "--raw-dir", folder, "--out", tmp_path / "o",
                 "--no-binarize", "--workers", "1")
    assert ok.returncode == 0, ok.output
    assert len(server.log) == n  # nothing downloaded
    assert lines(tmp_path / "o" / "work" / "raw.test.fr") == texts()["test_2016_flickr.fr.gz"].splitlines()
    table.write_text(fixture_table(corrupt={"val-fr"}))
    bad = prepare("en-fr", "--recipe", "multi30k", "--corpora", table, "--raw-dir", folder, "--out", tmp_path / "p",
                  "--no-binarize")
    assert bad.returncode == 1
    digest = hashlib.sha256(texts()["val.fr.gz"].encode()).hexdigest()
    assert f"{folder / 'val.fr.gz'} (from --raw-dir) is corrupt: the sha256 of its text is {digest}" in bad.stderr
    assert f"Fix: replace it with a complete copy of {URL_PREFIX}/data/task1/raw/val.fr.gz" in bad.stderr
    assert (folder / "val.fr.gz").exists()  # a --raw-dir file is never moved


def test_a_corrupt_download_is_quarantined_and_named(site, tmp_path):
    server, _ = site
    table = tmp_path / "corpora.toml"
    table.write_text(fixture_table(corrupt={"test2016-de"}))
    result = prepare("en-de", "--recipe", "multi30k", "--corpora", table, "--base-url", server.url,
                     "--download-dir", tmp_path / "dl", "--out", tmp_path / "o", "--no-binarize")
    assert result.returncode == 1
    assert f"{tmp_path / 'dl' / 'test_2016_flickr.de.gz'} is corrupt: the sha256 of its text is" in result.stderr
    assert (tmp_path / "dl" / "test_2016_flickr.de.gz.corrupt").exists()
    assert not (tmp_path / "dl" / "test_2016_flickr.de.gz").exists()


def test_methods_table_is_the_registry_plus_stock_fairseq(capsys):
    methods = METHODS["method"]
    assert set(PE_REGISTRY) | {"fairseq_transformer"} <= set(methods)
    assert methods["fairseq_transformer"]["arch"] == "transformer"
    for name, entry in methods.items():  # variants name their encoding
        assert name in PE_REGISTRY or entry.get("pe") in PE_REGISTRY, name
    assert launch.main(["methods", "--recipe", "multi30k"]) == 0
    assert capsys.readouterr().out.split() == list(methods)


@pytest.mark.parametrize("method", list(METHODS["method"]))
def test_every_entry_parses_as_the_small_model(method, tmp_path):
    from fairseq import options

    argv = train_argv(METHODS, method, "en-de", "small", 1, tmp_path, tmp_path / "run", extra=["--cpu"])
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    assert (args.encoder_layers, args.decoder_layers, args.encoder_embed_dim, args.encoder_ffn_embed_dim) == (3, 3, 256, 1024)
    assert (args.encoder_attention_heads, args.decoder_attention_heads, args.dropout) == (4, 4, 0.3)
    assert (args.lr, args.warmup_updates, args.max_tokens, args.update_freq, args.max_update) == ([1e-3], 1000, 4096, [1], 1500)
    pe = METHODS["method"][method].get("pe", method)
    assert args.arch == (METHODS["method"][method].get("arch") or f"transformer_{pe}_wmt_en_de")


def test_stock_entry_builds_the_same_model_as_sape(data_bin, tmp_path):
    """fairseq's `transformer` and transformer_sape_* with the recipe's flags: the same parameters, the same
    initial values under one seed (the parity check the real-data runs rely on)."""
    import torch
    from fairseq import options, tasks

    data, models = data_bin, {}
    for method in ("fairseq_transformer", "sape"):
        argv = train_argv(METHODS, method, "en-de", "small", 1, data, tmp_path / method, extra=["--cpu"])
        args = options.parse_args_and_arch(options.get_training_parser(), argv)
        torch.manual_seed(1)
        models[method] = tasks.setup_task(args).build_model(args).state_dict()
    stock, ours = models["fairseq_transformer"], models["sape"]
    assert stock.keys() == ours.keys()
    for name in stock:
        torch.testing.assert_close(ours[name], stock[name], rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("method, recorded", [("posnet_embed", "posnet_embed_lmax256"),
                                              ("posnet_embed_user", "posnet_embed_user")])
def test_recorded_posnet_runs_are_the_models_the_recipe_builds(method, recorded, data_bin, tmp_path):
    """docs/results.md's evidence for PosNet-Embed's default (L_max capped at 256) is the recorded
    posnet_embed_lmax256 runs; `pe-train posnet_embed` must build that very encoding today (signature and
    encoding parameters of the recorded meta files), and posnet_embed_user the pre-cap default it pins."""
    from fairseq import options, tasks

    from pe_plugin.models.validation import pe_parameter_count, pe_signature

    argv = train_argv(METHODS, method, "en-de", "small", 1, data_bin, tmp_path / "run", extra=["--cpu"])
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    model = tasks.setup_task(args).build_model(args)
    for seed in (1, 2, 3):
        meta = json.loads((REPO / "examples" / "multi30k" / "results" / f"{recorded}.en-de.small.seed{seed}" /
                           "hyp.detok.de.meta.json").read_text())
        assert meta["pe_signature"] == pe_signature(model)
        assert meta["training"]["pe_params"] == pe_parameter_count(model)


def test_dry_run_uses_the_recipe_defaults(capsys):
    assert launch.main(["train", "sape", "--recipe", "multi30k", "--dry-run"]) == 0
    cmd = capsys.readouterr().out
    assert "data-bin/multi30k_en_de --user-dir" in cmd and "--save-dir runs/multi30k/sape.en-de.small.seed1" in cmd
    # two ranks share the recipe's 4,096 tokens per update; three cannot share them equally
    assert launch.main(["train", "sape", "--recipe", "multi30k", "--gpus", "2", "--dry-run"]) == 0
    assert "--max-tokens 2048 --update-freq 1" in capsys.readouterr().out
    assert launch.main(["train", "sape", "--recipe", "multi30k", "--gpus", "3", "--dry-run"]) == 2
    assert "--gpus 3: 4,096 tokens per update cannot be shared equally" in capsys.readouterr().err
    assert launch.main(["train", "sape", "--recipe", "nope", "--dry-run"]) == 2
    assert "unknown recipe 'nope'; recipes: multi30k, wmt14" in capsys.readouterr().err

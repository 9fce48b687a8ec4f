"""pe-prepare --max-train-source-words N: the training pairs whose tokenised source has at most N words, kept
before BPE; valid and test untouched (issue 29: length generalisation on real text).

A tiny generated parallel corpus, no network. The end-to-end runs stop before fairseq-preprocess
(--no-binarize), except the one marked slow."""
import random
from pathlib import Path

import pytest

from pe_tools.data import cli, text
from pe_tools.data.files import PrepareError

WORDS = "the house is small red car dog cat sees big old new tree river green fast slow walks eats".split()


def write(path: Path, lines) -> None:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def read(path: Path) -> list:
    return path.read_text(encoding="utf-8").splitlines()


def corpus(seed: int, n: int, lo: int = 1, hi: int = 20):
    """n pairs; the target of pair i is the source in capitals with the pair's index, so alignment shows."""
    rng = random.Random(seed)
    src = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi))) for _ in range(n)]
    tgt = [f"P{i} " + s.upper() for i, s in enumerate(src)]
    return src, tgt


# ------------------------------------------------------------------------------------ the filter itself
def test_longer_sources_are_dropped_and_pairs_stay_aligned(tmp_path, capsys):
    src = ["a", "a b c", "a b c d", "a  b\tc", "", "a b c d e f g", "x y z"]
    tgt = [f"T{i} " + "w " * (9 - i) for i in range(len(src))]  # long targets do not matter
    write(tmp_path / "in.en", src)
    write(tmp_path / "in.de", tgt)
    stats = text.filter_source_words(tmp_path / "in.en", tmp_path / "in.de", tmp_path / "out.en",
                                     tmp_path / "out.de", 3)
    keep = [0, 1, 3, 4, 6]  # at the limit (3 words, whitespace runs count once) kept; an empty source kept
    assert read(tmp_path / "out.en") == [src[i] for i in keep]  # lines as they were, not re-spaced
    assert read(tmp_path / "out.de") == [tgt[i] for i in keep]
    assert (stats["kept"], stats["dropped"], stats["longest_kept"]) == (5, 2, 3)
    assert "7 pairs in, 5 kept, 2 dropped (source longer than 3 words)" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.de", "in.en", "out.de", "out.en"]  # no temporaries


@pytest.mark.parametrize("n", [0, -3])
def test_a_limit_below_one_is_refused(tmp_path, n):
    write(tmp_path / "in.en", ["a b"])
    write(tmp_path / "in.de", ["x y"])
    with pytest.raises(PrepareError, match="--max-train-source-words"):
        text.filter_source_words(tmp_path / "in.en", tmp_path / "in.de", tmp_path / "o.en", tmp_path / "o.de", n)
    assert not (tmp_path / "o.en").exists()


def test_no_pair_short_enough_is_an_error_and_writes_nothing(tmp_path):
    write(tmp_path / "in.en", ["a b c", "a b"])
    write(tmp_path / "in.de", ["x", "y"])
    with pytest.raises(PrepareError, match="no training pair"):
        text.filter_source_words(tmp_path / "in.en", tmp_path / "in.de", tmp_path / "o.en", tmp_path / "o.de", 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.de", "in.en"]


def test_misaligned_input_is_refused(tmp_path):
    write(tmp_path / "in.en", ["a", "b"])
    write(tmp_path / "in.de", ["x"])
    with pytest.raises(PrepareError, match="misaligned"):
        text.filter_source_words(tmp_path / "in.en", tmp_path / "in.de", tmp_path / "o.en", tmp_path / "o.de", 5)


# ------------------------------------------------------------------------------------ the command line
def test_cli_refuses_a_limit_below_one(tmp_path, capsys):
    rc = cli.main(["raw", "--src", "en", "--tgt", "de", "--train", str(tmp_path / "t"), "--valid-split",
                   "--test", str(tmp_path / "t"), "--out", str(tmp_path / "o"), "--max-train-source-words", "0"])
    assert rc == 1
    assert "--max-train-source-words 0: must be a whole number, at least 1" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_recipe_pair_gets_its_own_output_folder():
    a = cli.build_parser().parse_args(["en-de", "--recipe", "multi30k", "--max-train-source-words", "12"])
    cli.check_args(a)
    assert a.out == "data-bin/multi30k_en_de_short12"  # never the full corpus's data-bin/multi30k_en_de
    a = cli.build_parser().parse_args(["en-de", "--recipe", "multi30k", "--max-train-source-words", "12",
                                       "--out", "mine"])
    cli.check_args(a)
    assert a.out == "mine"
    a = cli.build_parser().parse_args(["en-de", "--recipe", "multi30k"])
    cli.check_args(a)
    assert a.out == "data-bin/multi30k_en_de" and a.max_train_source_words is None


def prepare(tmp_path: Path, *flags) -> Path:
    out = tmp_path / "o"
    rc = cli.main(["raw", "--src", "en", "--tgt", "de", "--train", str(tmp_path / "train"), "--valid",
                   str(tmp_path / "valid"), "--test", str(tmp_path / "test"), "--out", str(out), "--ratio", "0",
                   "--bpe-merges", "20", "--workers", "1", *flags])
    assert rc == 0
    return out


def make_corpus(tmp_path: Path):
    splits = {}
    for seed, split, n in ((1, "train", 60), (2, "valid", 12), (3, "test", 12)):
        splits[split] = corpus(seed, n)
        write(tmp_path / f"{split}.en", splits[split][0])
        write(tmp_path / f"{split}.de", splits[split][1])
    return splits


def test_train_only_is_filtered_before_bpe_and_a_new_limit_redoes_the_steps(tmp_path, capsys):
    splits = make_corpus(tmp_path)
    src, tgt = splits["train"]
    out = prepare(tmp_path, "--max-train-source-words", "8", "--no-binarize")
    log = capsys.readouterr().out
    keep = [i for i, s in enumerate(src) if len(s.split()) <= 8]
    assert 0 < len(keep) < len(src)
    assert f"{len(src)} pairs in, {len(keep)} kept, {len(src) - len(keep)} dropped" in log
    assert read(out / "work" / "filtered.train.en") == [src[i] for i in keep]
    assert read(out / "work" / "filtered.train.de") == [tgt[i] for i in keep]
    train_en, train_de = read(out / "text" / "train.en"), read(out / "text" / "train.de")
    assert len(train_en) == len(train_de) == len(keep)
    assert [s.replace("@@ ", "") for s in train_en] == [src[i] for i in keep]  # BPE on the kept pairs
    assert [s.replace("@@ ", "").split()[0] for s in train_de] == [f"P{i}" for i in keep]
    for split in ("valid", "test"):  # untouched: every pair, long ones included
        assert [s.replace("@@ ", "") for s in read(out / "text" / f"{split}.en")] == splits[split][0]
        assert max(len(s.split()) for s in splits[split][0]) > 8
    assert "train sources: at most 8 tokenised words" in log

    prepare(tmp_path, "--max-train-source-words", "8", "--no-binarize")
    log = capsys.readouterr().out
    assert "filter-train: done before, skipped" in log and "learn-bpe: done before, skipped" in log

    prepare(tmp_path, "--max-train-source-words", "12", "--no-binarize")  # a changed N is not a finished step
    log = capsys.readouterr().out
    keep = [i for i, s in enumerate(src) if len(s.split()) <= 12]
    assert "filter-train: done before" not in log and "learn-bpe: done before" not in log
    assert len(read(out / "text" / "train.en")) == len(keep)

    prepare(tmp_path, "--no-binarize")  # the limit removed: every pair again
    log = capsys.readouterr().out
    assert "filter-train" not in log and "learn-bpe: done before" not in log
    assert len(read(out / "text" / "train.en")) == len(src)


def test_words_are_counted_after_tokenisation(tmp_path):
    """`the dog's car` is 3 words as written but 4 tokens (the dog &apos;s car): over a limit of 3."""
    write(tmp_path / "train.en", ["the dog's car", "the red car", "a b c d", "one"] * 2)  # twice: BPE needs
    write(tmp_path / "train.de", ["x1", "x2", "x3", "x4"] * 2)  # a pair of symbols seen twice
    for split in ("valid", "test"):
        write(tmp_path / f"{split}.en", ["the dog's car"])
        write(tmp_path / f"{split}.de", ["x"])
    out = prepare(tmp_path, "--max-train-source-words", "3", "--no-binarize")
    assert read(out / "work" / "filtered.train.en") == ["the red car", "one"] * 2
    assert read(out / "work" / "filtered.train.de") == ["x2", "x4"] * 2


@pytest.mark.slow
def test_filtered_corpus_binarises_for_fairseq(tmp_path):
    splits = make_corpus(tmp_path)
    out = prepare(tmp_path, "--max-train-source-words", "8")
    from fairseq.data import data_utils

    kept = sum(len(s.split()) <= 8 for s in splits["train"][0])
    for split, n in (("train", kept), ("valid", 12), ("test", 12)):
        for lang in ("en", "de"):
            data = data_utils.load_indexed_dataset(str(out / f"{split}.en-de.{lang}"), None)
            assert len(data) == n

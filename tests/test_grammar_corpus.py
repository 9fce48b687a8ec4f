"""The demo's synthetic corpus: every pair equals a second, independent translator written here from the
rules in the generator's docstring; the corpus is deterministic, its splits are disjoint, and word order
decides the translation (the same bag of source words has several translations)."""
import collections
import subprocess
import sys

import pytest
from pe_testing import REPO, call_main

import pe_tools.synthetic.grammar as gc

NOM = {"the": {"m": "der", "f": "die", "n": "das"}, "a": {"m": "ein", "f": "eine", "n": "ein"}}
ACC = {"the": {"m": "den", "f": "die", "n": "das"}, "a": {"m": "einen", "f": "eine", "n": "ein"}}
DAT = {"the": {"m": "dem", "f": "der", "n": "dem"}, "a": {"m": "einem", "f": "einer", "n": "einem"}}
VERB_3SG = {three: target for (three, _), target in gc.VERBS.items()}
VERB_BASE = {base: target for (_, base), target in gc.VERBS.items()}


def parse_np(words, i, articles, nouns):
    """DET ADJ* NOUN starting at words[i] -> (target words, next index)."""
    det, j = words[i], i + 1
    adjs = []
    while words[j] in gc.ADJECTIVES:
        adjs.append(gc.ADJECTIVES[words[j]])
        j += 1
    noun, gender = nouns[words[j]]
    return [articles[det][gender], noun] + adjs[::-1], j + 1


def running(words) -> str:
    return " ".join(words).replace(" ,", ",")


def translate(sentence: str) -> str:
    """A reference translator: parse the English sentence and apply the rules of the docstring."""
    words = sentence.replace(",", " ,").split()

    def clause(ws):
        subj, i = parse_np(ws, 0, NOM, gc.NOUNS)
        negated = ws[i] == "does"
        verb = VERB_BASE[ws[i + 2]] if negated else VERB_3SG[ws[i]]
        obj, i = parse_np(ws, i + (3 if negated else 1), ACC, gc.NOUNS)
        pp, adv = [], []
        if i < len(ws) and ws[i] in gc.PREPOSITIONS:
            prep = gc.PREPOSITIONS[ws[i]]
            place, i = parse_np(ws, i + 1, DAT, gc.PLACES)
            pp = [prep] + place
        if i < len(ws):
            adv = [gc.ADVERBS[ws[i]]]
            i += 1
        assert i == len(ws), ws
        return subj, [verb], obj, adv + pp + (["nicht"] if negated else [])

    def trailing(ws):
        """Subordinate clauses after the main clause, each CONJ CLAUSE -> , CONJ' S O MID V."""
        cuts = [k for k, w in enumerate(ws) if w in gc.CONJUNCTIONS] + [len(ws)]
        out = []
        for a, b in zip(cuts, cuts[1:]):
            s, v, o, m = clause(ws[a + 1:b])
            out += [",", gc.CONJUNCTIONS[ws[a]]] + s + o + m + v
        return out

    if words[0] in gc.CONJUNCTIONS:  # fronted subordinate clause, then verb-first main clause
        comma = words.index(",")
        s1, v1, o1, m1 = clause(words[1:comma])
        rest = words[comma + 1:]
        end = next((k for k, w in enumerate(rest) if w in gc.CONJUNCTIONS), len(rest))
        s2, v2, o2, m2 = clause(rest[:end])
        return running([gc.CONJUNCTIONS[words[0]]] + s1 + o1 + m1 + v1 + [","] + v2 + s2 + o2 + m2
                       + trailing(rest[end:]))
    end = next((k for k, w in enumerate(words) if w in gc.CONJUNCTIONS), len(words))
    s, v, o, m = clause(words[:end])
    return running(s + v + o + m + trailing(words[end:]))


@pytest.fixture(scope="module")
def corpus():
    return gc.generate(3000, 200, 200, seed=1)


def test_hand_written_examples():
    assert translate("the big black dog sees a cat") == "der hund schwarz gross sieht eine katze"
    assert translate("a cat sees the dog") == "eine katze sieht den hund"
    assert translate("because the dog does not see the cat, the man calls the child in the garden today") == (
        "weil der hund die katze nicht sieht, ruft der mann das kind heute in dem garten")
    assert translate("a cat sees the dog because the man calls the child that the woman greets a king") == (
        "eine katze sieht den hund, weil der mann das kind ruft, dass die frau einen koenig gruesst")


def test_every_pair_follows_the_rules(corpus):
    for split, pairs in corpus.items():
        for src, tgt in pairs:
            assert translate(src) == tgt, (split, src)


def test_every_construction_occurs(corpus):
    pairs = corpus["train"]
    src = " ".join(s for s, _ in pairs)
    tgt = " ".join(t for _, t in pairs)
    for marker in ("does not", ", ", " that ", "because "):
        assert marker in src
    for word in ("nicht", "den", "einen", "dem", "einer", "dass"):
        assert f" {word} " in f" {tgt} "


def test_deterministic_and_disjoint(corpus, tmp_path):
    assert gc.generate(3000, 200, 200, seed=1) == corpus
    assert gc.generate(3000, 200, 200, seed=2) != corpus
    sources = [{s for s, _ in pairs} for pairs in corpus.values()]
    assert sum(map(len, sources)) == len(set.union(*sources)) == 3400  # no sentence twice, in or across splits
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "grammar_corpus.py"), str(tmp_path), "--train",
                          "3000", "--valid", "200", "--test", "200", "--seed", "1"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    for split, pairs in corpus.items():
        assert (tmp_path / f"{split}.en").read_text().splitlines() == [s for s, _ in pairs]
        assert (tmp_path / f"{split}.de").read_text().splitlines() == [t for _, t in pairs]
    assert not list(tmp_path.glob("*.tmp"))


def test_word_order_decides_the_translation(corpus):
    """Sentences with the same bag of source words but different translations: a model blind to order
    cannot get them all right. And most targets are not a monotone word-by-word translation."""
    by_bag = collections.defaultdict(set)
    for src, tgt in gc.generate(0, 0, 20000, seed=3)["test"]:
        by_bag[tuple(sorted(src.replace(",", " ,").split()))].add(tgt)
    assert sum(len(t) > 1 for t in by_bag.values()) >= 20
    lexicon = {**{k: v for k, (v, _) in gc.NOUNS.items()}, **{k: v for k, (v, _) in gc.PLACES.items()},
               **gc.ADJECTIVES, **VERB_3SG, **gc.ADVERBS}
    reordered = 0
    for src, tgt in corpus["train"]:
        t = tgt.split()
        positions = [t.index(lexicon[w]) for w in src.split() if w in lexicon and t.count(lexicon[w]) == 1]
        reordered += positions != sorted(positions)
    assert reordered > 0.5 * len(corpus["train"])


def test_bad_sizes_are_rejected(tmp_path):
    out = call_main(gc.main, [tmp_path, "--test", "0"], prog="grammar_corpus.py")  # the script's main, here
    assert out.returncode == 2 and "--test must be at least 1" in out.stderr


def words(sentence: str) -> int:
    """Words of an English sentence, commas not counted."""
    return len(sentence.replace(",", " ").split())


@pytest.fixture(scope="module")
def short_long():
    return gc.generate(2000, 100, 100, seed=1, max_train_words=12, n_long=150, long_clauses=3)


def test_train_short_test_long(short_long):
    """--max-train-words N: train, valid and test have at most N words, the long split more than N; the rules
    hold in every split, and the long split's deeper grammar chains up to three clauses."""
    assert [len(short_long[k]) for k in ("train", "valid", "test", "long")] == [2000, 100, 100, 150]
    for split in ("train", "valid", "test"):
        assert max(words(s) for s, _ in short_long[split]) <= 12
    assert min(words(s) for s, _ in short_long["long"]) > 12
    for split, pairs in short_long.items():
        for src, tgt in pairs:
            assert translate(src) == tgt, (split, src)
    clauses = collections.Counter(1 + sum(w in gc.CONJUNCTIONS for w in s.split()) for s, _ in short_long["long"])
    assert set(clauses) == {2, 3}  # more than 12 words needs two clauses; three occur only in the long split
    assert all(sum(w in gc.CONJUNCTIONS for w in s.split()) <= 1 for s, _ in short_long["train"])
    sources = [{s for s, _ in pairs} for pairs in short_long.values()]
    assert sum(map(len, sources)) == len(set.union(*sources))  # disjoint


def test_long_split_is_deterministic_and_leaves_the_short_splits_alone(short_long):
    assert gc.generate(2000, 100, 100, seed=1, max_train_words=12, n_long=150, long_clauses=3) == short_long
    assert gc.generate(2000, 100, 100, seed=2, max_train_words=12, n_long=150, long_clauses=3) != short_long
    without = gc.generate(2000, 100, 100, seed=1, max_train_words=12)
    assert without == {k: v for k, v in short_long.items() if k != "long"}
    same_grammar = gc.generate(200, 10, 10, seed=1, max_train_words=12, n_long=100)["long"]
    assert max(sum(w in gc.CONJUNCTIONS for w in s.split()) for s, _ in same_grammar) == 1  # two clauses at most


def test_long_split_on_the_command_line(tmp_path):
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "grammar_corpus.py"), str(tmp_path), "--train",
                          "300", "--valid", "20", "--test", "20", "--max-train-words", "10", "--long", "30",
                          "--long-clauses", "3"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    expect = gc.generate(300, 20, 20, seed=1, max_train_words=10, n_long=30, long_clauses=3)
    for split, pairs in expect.items():
        assert (tmp_path / f"{split}.en").read_text().splitlines() == [s for s, _ in pairs]
        assert (tmp_path / f"{split}.de").read_text().splitlines() == [t for _, t in pairs]
    for argv, message in ((["--long", "5"], "--long needs --max-train-words"),
                          (["--max-train-words", "4"], "--max-train-words 4: at least 5"),
                          (["--max-train-words", "33", "--long", "5"], "no sentence of more than 33 words")):
        out = call_main(gc.main, [tmp_path / "x", "--train", "10", "--valid", "1", "--test", "1", *argv],
                        prog="grammar_corpus.py")
        assert out.returncode == 2 and message in out.stderr, out.stderr

"""The demo's synthetic corpus: every pair equals a second, independent translator written here from the
rules in the generator's docstring; the corpus is deterministic, its splits are disjoint, and word order
decides the translation (the same bag of source words has several translations)."""
import collections
import subprocess
import sys

import pytest
from pe_testing import REPO

sys.path.insert(0, str(REPO / "scripts"))
import grammar_corpus as gc  # noqa: E402

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

    if words[0] in gc.CONJUNCTIONS:  # fronted subordinate clause, then verb-first main clause
        comma = words.index(",")
        s1, v1, o1, m1 = clause(words[1:comma])
        s2, v2, o2, m2 = clause(words[comma + 1:])
        return running([gc.CONJUNCTIONS[words[0]]] + s1 + o1 + m1 + v1 + [","] + v2 + s2 + o2 + m2)
    cut = next((k for k, w in enumerate(words) if w in gc.CONJUNCTIONS), None)
    if cut is None:
        s, v, o, m = clause(words)
        return running(s + v + o + m)
    s1, v1, o1, m1 = clause(words[:cut])
    s2, v2, o2, m2 = clause(words[cut + 1:])
    return running(s1 + v1 + o1 + m1 + [",", gc.CONJUNCTIONS[words[cut]]] + s2 + o2 + m2 + v2)


@pytest.fixture(scope="module")
def corpus():
    return gc.generate(3000, 200, 200, seed=1)


def test_hand_written_examples():
    assert translate("the big black dog sees a cat") == "der hund schwarz gross sieht eine katze"
    assert translate("a cat sees the dog") == "eine katze sieht den hund"
    assert translate("because the dog does not see the cat, the man calls the child in the garden today") == (
        "weil der hund die katze nicht sieht, ruft der mann das kind heute in dem garten")


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
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "grammar_corpus.py"), str(tmp_path), "--test", "0"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "--test must be at least 1" in out.stderr

"""A deterministic synthetic parallel corpus that cannot be translated without word order.

A small English grammar is translated by rule into a German-like target language:

* **case from position**: the first noun phrase of a clause is the subject (nominative article
  ``der/die/das``, ``ein/eine``), the second the object (accusative ``den/die/das``, ``einen/eine``).
  ``the dog sees the cat`` and ``the cat sees the dog`` contain the same words, and only their order says
  which noun gets ``der`` and which ``den``;
* **adjective-noun swap**: adjectives follow the noun, in mirrored order
  (``the big black dog`` -> ``der hund schwarz gross``);
* **verb-final subordinate clauses**: ``... because the dog sees the cat`` -> ``..., weil der hund die
  katze sieht``;
* **inverted main clause after a fronted subordinate clause** (verb second):
  ``because the dog sees the cat, the man calls the child`` ->
  ``weil der hund die katze sieht, ruft der mann das kind``;
* **negation and adverbials move**: ``does not`` becomes ``nicht`` at the end of the clause's middle field,
  the adverb comes before the prepositional phrase (``the man calls the child in the garden today`` ->
  ``der mann ruft das kind heute in dem garten``).

Sentences are drawn with a seeded ``random.Random``, so a seed gives the same corpus on every machine and
Python version. Splits are disjoint: a source sentence appears in one split only.

    python scripts/grammar_corpus.py OUT_DIR [--train 20000 --valid 500 --test 500 --seed 1]

writes ``OUT_DIR/{train,valid,test}.{en,de}`` (one sentence per line, line-aligned) and prints a summary.

**Train short, test long** (length generalisation):

    python scripts/grammar_corpus.py OUT_DIR --max-train-words 15 --long 500 [--long-clauses 3]

keeps train, valid and test to sentences of at most 15 words (words: whitespace-separated tokens of the English
sentence; a comma sticks to its word) and adds ``OUT_DIR/long.{en,de}``, sentences of more than 15 words. The
long split comes from the same grammar (at most two clauses: the same constructions, only longer), or with
``--long-clauses K`` from one that chains up to K clauses: further verb-final subordinate clauses, each
``..., CONJ S O MID V``, after the sentence. The short splits are the same with or without ``--long``.
"""
import argparse
import random
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

# English noun -> (target noun, gender m/f/n)
NOUNS: Dict[str, Tuple[str, str]] = {
    "dog": ("hund", "m"), "cat": ("katze", "f"), "child": ("kind", "n"), "man": ("mann", "m"),
    "woman": ("frau", "f"), "teacher": ("lehrer", "m"), "bird": ("vogel", "m"), "horse": ("pferd", "n"),
    "girl": ("maedchen", "n"), "farmer": ("bauer", "m"), "doctor": ("aerztin", "f"), "king": ("koenig", "m"),
    "mouse": ("maus", "f"), "student": ("student", "m"), "baby": ("baby", "n"), "queen": ("koenigin", "f"),
}
# places for prepositional phrases: English noun -> (target noun, gender)
PLACES: Dict[str, Tuple[str, str]] = {
    "garden": ("garten", "m"), "house": ("haus", "n"), "street": ("strasse", "f"), "forest": ("wald", "m"),
    "city": ("stadt", "f"), "school": ("schule", "f"),
}
PREPOSITIONS = {"in": "in", "near": "bei", "behind": "hinter"}  # all take the dative here
ADJECTIVES = {
    "big": "gross", "small": "klein", "old": "alt", "young": "jung", "red": "rot", "black": "schwarz",
    "happy": "froh", "tired": "muede", "clever": "klug", "quiet": "leise",
}
# English 3rd person singular, English base form -> target 3rd person singular
VERBS = {
    ("sees", "see"): "sieht", ("likes", "like"): "mag", ("follows", "follow"): "folgt",
    ("finds", "find"): "findet", ("calls", "call"): "ruft", ("helps", "help"): "hilft",
    ("visits", "visit"): "besucht", ("hears", "hear"): "hoert", ("feeds", "feed"): "fuettert",
    ("knows", "know"): "kennt", ("paints", "paint"): "malt", ("greets", "greet"): "gruesst",
}
ADVERBS = {"today": "heute", "often": "oft", "again": "wieder", "quickly": "schnell"}
CONJUNCTIONS = {"because": "weil", "when": "wenn", "although": "obwohl", "that": "dass"}
FRONTABLE = ("because", "when", "although")  # "that" never starts a sentence
MIN_WORDS = 5  # the shortest sentence: DET NOUN VERB DET NOUN
# articles by (determiner, case, gender); English determiners "the" and "a"
ARTICLES = {
    ("the", "nom"): {"m": "der", "f": "die", "n": "das"},
    ("the", "acc"): {"m": "den", "f": "die", "n": "das"},
    ("the", "dat"): {"m": "dem", "f": "der", "n": "dem"},
    ("a", "nom"): {"m": "ein", "f": "eine", "n": "ein"},
    ("a", "acc"): {"m": "einen", "f": "eine", "n": "ein"},
    ("a", "dat"): {"m": "einem", "f": "einer", "n": "einem"},
}


def noun_phrase(rng: random.Random, case: str, nouns=NOUNS, max_adjectives: int = 2) -> Tuple[List[str], List[str]]:
    """DET ADJ* NOUN -> DET' NOUN' ADJ'* (adjectives mirrored); the article agrees in case and gender."""
    det = rng.choice(("the", "the", "a"))
    noun = rng.choice(sorted(nouns))
    n_adj = rng.choices(range(max_adjectives + 1), weights=(6, 3, 1)[: max_adjectives + 1])[0]
    adjs = rng.sample(sorted(ADJECTIVES), n_adj)
    target_noun, gender = nouns[noun]
    src = [det, *adjs, noun]
    tgt = [ARTICLES[det, case][gender], target_noun, *(ADJECTIVES[a] for a in reversed(adjs))]
    return src, tgt


def clause(rng: random.Random) -> Dict[str, List[str]]:
    """One transitive clause, as its English words and the target's fields (subject, verb, object,
    middle field), which the sentence rule puts in order."""
    subj, subj_t = noun_phrase(rng, "nom")
    obj, obj_t = noun_phrase(rng, "acc")
    (verb_3sg, verb_base), verb_t = rng.choice(sorted(VERBS.items()))
    negated = rng.random() < 0.25
    pp, pp_t = [], []
    if rng.random() < 0.3:
        prep = rng.choice(sorted(PREPOSITIONS))
        place, place_t = noun_phrase(rng, "dat", nouns=PLACES, max_adjectives=1)
        pp, pp_t = [prep, *place], [PREPOSITIONS[prep], *place_t]
    adv = [rng.choice(sorted(ADVERBS))] if rng.random() < 0.3 else []
    verb = ["does", "not", verb_base] if negated else [verb_3sg]
    # English: S V O [PP] [ADV]; target middle field: [ADV] [PP] [nicht]
    middle = [ADVERBS[a] for a in adv] + pp_t + (["nicht"] if negated else [])
    return {"src": subj + verb + obj + pp + adv, "subj": subj_t, "verb": [verb_t], "obj": obj_t, "mid": middle}


def main_order(c) -> List[str]:
    """Main clause, verb second: S V O MID."""
    return c["subj"] + c["verb"] + c["obj"] + c["mid"]


def subordinate_order(c) -> List[str]:
    """Subordinate clause, verb final: S O MID V."""
    return c["subj"] + c["obj"] + c["mid"] + c["verb"]


def inverted_order(c) -> List[str]:
    """Main clause after a fronted subordinate clause, verb first: V S O MID."""
    return c["verb"] + c["subj"] + c["obj"] + c["mid"]


def text(words: List[str]) -> str:
    """Words as running text: a comma sticks to the word before it."""
    return " ".join(words).replace(" ,", ",")


def sentence(rng: random.Random, max_clauses: int = 2) -> Tuple[str, str]:
    """One sentence pair: a main clause (40%), main + subordinate (35%) or fronted subordinate + main (25%).
    With ``max_clauses`` K > 2, 0 to K - (clauses so far) further subordinate clauses follow (uniformly), each
    verb-final after a comma and its conjunction; K = 2 draws exactly what the two-clause grammar draws."""
    kind = rng.choices(("main", "trailing", "fronted"), weights=(40, 35, 25))[0]
    first = clause(rng)
    if kind == "main":
        src, tgt = first["src"], main_order(first)
    else:
        second = clause(rng)
        if kind == "trailing":
            conj = rng.choice(sorted(CONJUNCTIONS))
            src = first["src"] + [conj] + second["src"]
            tgt = main_order(first) + [",", CONJUNCTIONS[conj]] + subordinate_order(second)
        else:
            conj = rng.choice(FRONTABLE)
            src = [conj] + first["src"] + [","] + second["src"]
            tgt = [CONJUNCTIONS[conj]] + subordinate_order(first) + [","] + inverted_order(second)
    if max_clauses > 2:
        for _ in range(rng.randint(0, max_clauses - (1 if kind == "main" else 2))):
            conj, more = rng.choice(sorted(CONJUNCTIONS)), clause(rng)
            src = src + [conj] + more["src"]
            tgt = tgt + [",", CONJUNCTIONS[conj]] + subordinate_order(more)
    return text(src), text(tgt)


def max_words(clauses: int) -> int:
    """The longest sentence of that many clauses: each DET ADJ ADJ NOUN does not VERB DET ADJ ADJ NOUN PREP DET
    ADJ NOUN ADV (16 words), joined by conjunctions."""
    return 16 * clauses + clauses - 1


def n_words(src: str) -> int:
    """Length of an English sentence in words: whitespace-separated tokens (a comma sticks to its word)."""
    return len(src.split())


def generate(n_train: int, n_valid: int, n_test: int, seed: int = 1, max_train_words: Optional[int] = None,
             n_long: int = 0, long_clauses: int = 2) -> Dict[str, List[Tuple[str, str]]]:
    """Disjoint splits of sentence pairs: test and valid are drawn first, and a source sentence already
    drawn is drawn again, never kept twice. With ``max_train_words`` N, test, valid and train keep only
    sentences of at most N words, and a last split ``long`` (``n_long`` pairs, drawn after train from the
    grammar of up to ``long_clauses`` clauses) only sentences of more than N words."""
    if n_long and max_train_words is None:
        raise ValueError("a long split needs max_train_words: its sentences are those longer than that")
    if max_train_words is not None and max_train_words < MIN_WORDS:
        raise ValueError(f"max_train_words {max_train_words}: the shortest sentence has {MIN_WORDS} words")
    if long_clauses < 2:
        raise ValueError(f"long_clauses {long_clauses}: at least 2 (the training grammar's)")
    if n_long and max_train_words >= max_words(long_clauses):
        raise ValueError(f"no sentence of more than {max_train_words} words: with {long_clauses} clauses the "
                         f"grammar's longest has {max_words(long_clauses)} (lower max_train_words or add clauses)")
    short = (lambda src: True) if max_train_words is None else (lambda src: n_words(src) <= max_train_words)
    plan = [("test", n_test, 2, short), ("valid", n_valid, 2, short), ("train", n_train, 2, short)]
    if n_long:
        plan.append(("long", n_long, long_clauses, lambda src: n_words(src) > max_train_words))
    rng = random.Random(seed)
    seen = set()
    splits = {}
    for split, n, clauses, keep in plan:
        pairs, draws = [], 0
        while len(pairs) < n:
            src, tgt = sentence(rng, clauses)
            draws += 1
            if keep(src) and src not in seen:
                seen.add(src)
                pairs.append((src, tgt))
            elif draws > 100 * n + 100000:
                raise ValueError(f"{split}: only {len(pairs)} of {n} pairs after {draws:,} draws; the grammar has too "
                                 f"few distinct sentences of that length (change max_train_words or long_clauses)")
        splits[split] = pairs
    return splits


def write_corpus(out_dir, n_train: int = 20000, n_valid: int = 500, n_test: int = 500, seed: int = 1,
                 src: str = "en", tgt: str = "de", max_train_words: Optional[int] = None, n_long: int = 0,
                 long_clauses: int = 2) -> Path:
    """Write OUT_DIR/{train,valid,test}.{src,tgt} (and long.{src,tgt} with ``n_long``); each file goes to a
    temporary name and is renamed whole."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for split, pairs in generate(n_train, n_valid, n_test, seed, max_train_words, n_long, long_clauses).items():
        for side, lang in ((0, src), (1, tgt)):
            path = out_dir / f"{split}.{lang}"
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text("".join(p[side] + "\n" for p in pairs), encoding="utf-8")
            tmp.replace(path)
    return out_dir


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out_dir")
    p.add_argument("--train", type=int, default=20000, help="training pairs (default: 20000)")
    p.add_argument("--valid", type=int, default=500, help="validation pairs (default: 500)")
    p.add_argument("--test", type=int, default=500, help="test pairs (default: 500)")
    p.add_argument("--seed", type=int, default=1, help="random seed (default: 1)")
    p.add_argument("--max-train-words", type=int, metavar="N",
                   help="train, valid and test: sentences of at most N words only")
    p.add_argument("--long", type=int, default=0, metavar="PAIRS",
                   help="also write long.{en,de}: PAIRS sentences of more than --max-train-words words")
    p.add_argument("--long-clauses", type=int, default=2, metavar="K",
                   help="the long split's grammar chains up to K clauses (default: 2, the training grammar)")
    a = p.parse_args(argv)
    for flag in ("train", "valid", "test"):
        if getattr(a, flag) < 1:
            p.error(f"--{flag} must be at least 1")
    if a.long and a.max_train_words is None:
        p.error("--long needs --max-train-words (the long split holds the sentences longer than that)")
    if a.max_train_words is not None and a.max_train_words < MIN_WORDS:
        p.error(f"--max-train-words {a.max_train_words}: at least {MIN_WORDS} (the shortest sentence)")
    if a.long < 0 or a.long_clauses < 2:
        p.error("--long must be at least 0 and --long-clauses at least 2")
    try:
        write_corpus(a.out_dir, a.train, a.valid, a.test, a.seed, max_train_words=a.max_train_words, n_long=a.long,
                     long_clauses=a.long_clauses)
    except ValueError as e:
        p.error(str(e))
    example = (Path(a.out_dir) / "test.en").read_text().splitlines()[0]
    splits = "train,valid,test" + (",long" if a.long else "")
    counts = "/".join(map(str, [a.train, a.valid, a.test] + ([a.long] if a.long else [])))
    print(f"wrote {a.out_dir}/{{{splits}}}.{{en,de}}: {counts} pairs, e.g. {example!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

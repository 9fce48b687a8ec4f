"""A cheap check that a hypothesis file is in the reference's language: the share of its words that are common
function words of each language this knows (a short stop-word list per language, no word in two lists). French
scored against a German reference gives a BLEU near 0 with marks that look like results; this catches it before
anything is scored. Standard library only.

A text is *identified* as a language when at least ``MIN_WORDS`` of its words are on that language's list, at
least ``MIN_DISTINCT`` of them different (the degenerate output of an untrained model, "the the the", is not a
language), they are at least ``MIN_SHARE`` of all its words, and at least ``RATIO`` times the share of every other
language's list; otherwise it is not identified (too short, another script, a language without a list), and
nothing is refused on its account."""
import re
from typing import Dict, Iterable, Optional

STOP_WORDS: Dict[str, frozenset] = {
    "de": frozenset("der die das und ist nicht ein eine einen einem einer mit auf im zu von den dem sich auch es "
                    "sind wird am vor zwei drei beim vom zum zur bei einen".split()),
    "fr": frozenset("le la les et est une un du dans sur pour avec au aux ce qui que pas il elle sont deux trois "
                    "son sa ses leur devant pendant".split()),
    "en": frozenset("the and is are of to with on at for it this that from two three his her their while "
                    "who".split()),
    "cs": frozenset("na že ve jsou jako pro ale jsem jeho které který která".split()),
    "ro": frozenset("și este cu pe sunt pentru din această acest".split()),
}
MIN_WORDS, MIN_DISTINCT, MIN_SHARE, RATIO = 20, 5, 0.08, 3.0
WORD = re.compile(r"[^\W\d_]+", re.UNICODE)


def shares(lines: Iterable[str]) -> Dict[str, float]:
    """{language: share of the words of ``lines`` on its list} (and ``_words``: how many words there are,
    ``_hits``: {language: words on its list}, ``_distinct``: {language: different words of its list})."""
    words = [w.lower() for line in lines for w in WORD.findall(line)]
    n = len(words) or 1
    hits = {lang: sum(w in stop for w in words) for lang, stop in STOP_WORDS.items()}
    distinct = {lang: len(stop.intersection(words)) for lang, stop in STOP_WORDS.items()}
    return {"_words": len(words), "_hits": hits, "_distinct": distinct, **{lang: h / n for lang, h in hits.items()}}


def identify(lines: Iterable[str]) -> Optional[str]:
    """The language ``lines`` are in (a key of STOP_WORDS), or None when the words do not tell (module docstring)."""
    s = shares(lines)
    best = max(STOP_WORDS, key=lambda lang: s[lang])
    rest = max(s[lang] for lang in STOP_WORDS if lang != best)
    if s["_hits"][best] >= MIN_WORDS and s["_distinct"][best] >= MIN_DISTINCT and s[best] >= MIN_SHARE \
            and s[best] >= RATIO * rest:
        return best
    return None


def language_problem(hyp_lines, ref_lines, trg_lang: str, hyp_name: str, ref_name: str) -> Optional[str]:
    """Why ``hyp_lines`` are not in the reference's language, or None: the hypothesis is identified as a language
    other than ``trg_lang`` (when this knows ``trg_lang``) or other than the one the reference is identified as."""
    hyp = identify(hyp_lines)
    if hyp is None:
        return None
    ref = identify(ref_lines)
    if trg_lang in STOP_WORDS and hyp != trg_lang:
        return f"{hyp_name} reads as {hyp!r}, not the target language --trg-lang {trg_lang}"
    if ref is not None and hyp != ref:
        return f"{hyp_name} reads as {hyp!r}, the reference {ref_name} as {ref!r}"
    return None

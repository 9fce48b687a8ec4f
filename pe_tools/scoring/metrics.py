"""The metrics the report scores, each with a sacrebleu signature: sacreBLEU (13a), chrF++ (character order 6,
word order 2) and compound-split BLEU (Moses tokens, ``a ##AT##-##AT## b``, BLEU-4 with tokenize='none')."""
import functools
import re
from dataclasses import dataclass
from typing import Any, Callable, List, Sequence, Tuple

from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.metrics.base import Metric

AT_SPLIT = re.compile(r"(\S)-(\S)")


@dataclass(frozen=True)
class MetricSpec:
    key: str  # column prefix in CSV/JSON
    label: str  # column title in the markdown table
    build: Callable[[str, List[List[str]]], Metric]  # (target language, [reference lines]) -> metric
    tokenised: bool  # True: scored on compound-split tokens, not on the raw lines


METRICS: Tuple[MetricSpec, ...] = (
    MetricSpec("bleu", "sacreBLEU", lambda lang, refs: BLEU(trg_lang=lang, references=refs), False),
    MetricSpec("chrf", "chrF++", lambda lang, refs: CHRF(word_order=2, references=refs), False),
    MetricSpec("bleu_cs", "BLEU (compound split)",
               lambda lang, refs: BLEU(tokenize="none", force=True, references=refs), True),
)


@functools.lru_cache(maxsize=None)
def moses_tokenizer(lang: str) -> Any:
    from sacremoses import MosesTokenizer

    return MosesTokenizer(lang=lang)  # building one takes about a second: build it once


def compound_split(lines: Sequence[str], lang: str, aggressive: bool = True) -> List[str]:
    """Moses-tokenise (like ``tokenizer.perl [-a] -l LANG``), then split ``a-b`` as ``a ##AT##-##AT## b``."""
    tok = moses_tokenizer(lang)
    return [
        AT_SPLIT.sub(r"\1 ##AT##-##AT## \2",
                     tok.tokenize(line, aggressive_dash_splits=aggressive, escape=True, return_str=True))
        for line in lines
    ]


def compound_split_tag(lang: str, aggressive: bool) -> str:
    return f"moses-{lang}{'-a' if aggressive else ''}+compound-split"

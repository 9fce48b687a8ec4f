"""Figure 4 of the PosNet paper: the gap to the baseline as the n-gram order grows (chrF character order 1..30,
chrF word order 1..8, BLEU order 1..8)."""
import statistics
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.metrics.base import Metric

from ..figures import png_bytes, pyplot
from .inputs import Inputs
from .style import system_style


@dataclass(frozen=True)
class Sweep:
    key: str
    title: str
    orders: range
    build: Callable[[int, str, Optional[List[List[str]]]], Metric]  # (order, language, refs) -> metric
    select: Callable[[List[float], int], List[float]]  # corpus statistics of the top order -> those of order n


def _bleu_stats(stats: List[float], n: int) -> List[float]:
    top = (len(stats) - 2) // 2  # [hyp_len, ref_len, correct_1..top, total_1..top]
    return stats[:2 + n] + stats[2 + top: 2 + top + n]


NGRAM_SWEEPS: Tuple[Sweep, ...] = (
    # the paper's "n-gram character F2 and 2-gram word F2": character order n plus word 1- and 2-grams
    Sweep("chrf_char", "chrF, character order n (word order 2)", range(1, 31),
          lambda n, lang, refs: CHRF(char_order=n, word_order=2, references=refs),
          # [hyp, ref, match] per character order 1..30, then per word order 1..2 (the last 6 values)
          lambda stats, n: stats[:3 * n] + stats[-6:]),
    Sweep("chrf_word", "chrF, word order n (character order 6)", range(1, 9),
          lambda n, lang, refs: CHRF(char_order=6, word_order=n, references=refs),
          lambda stats, n: stats[:3 * (6 + n)]),  # the 6 character orders, then the word orders
    Sweep("bleu", "sacreBLEU, n-gram order n", range(1, 9),
          lambda n, lang, refs: BLEU(max_ngram_order=n, trg_lang=lang, references=refs), _bleu_stats),
)


def ngram_gaps(inputs: Inputs, lang: str) -> List[Dict[str, Any]]:
    """For every sweep, order and system: mean score over runs, mean of the paired baseline runs, gap.

    Statistics are extracted once per run at the top order of a sweep; the score of order n is computed
    from the slice of them that order n uses. With one reference this equals scoring at order n directly
    (tests/test_evaluate.py checks every order)."""
    rows = []
    for sweep in NGRAM_SWEEPS:
        top = sweep.build(sweep.orders[-1], lang, [inputs.ref])

        def corpus_stats(run: List[str]) -> List[float]:
            return [sum(col) for col in zip(*top._extract_corpus_statistics(run, None))]

        base_stats = [corpus_stats(run) for run in inputs.baseline.runs]
        sys_stats = {s.name: [corpus_stats(run) for run in s.runs] for s in inputs.systems}
        for n in sweep.orders:
            metric = sweep.build(n, lang, None)
            metric.num_refs = top.num_refs  # what passing the references would have set, for the signature
            sig = metric.get_signature()
            if isinstance(metric, BLEU):
                sig.update("ngram", n)  # sacrebleu leaves max_ngram_order out of the signature
            base_scores = [metric._compute_score_from_stats(sweep.select(st, n)).score for st in base_stats]
            for s in inputs.systems:
                scores = [metric._compute_score_from_stats(sweep.select(st, n)).score for st in sys_stats[s.name]]
                paired = [base_scores[inputs.paired_baseline_run(r)] for r in range(len(s.runs))]
                rows.append({
                    "analysis": sweep.key, "order": n, "system": s.name, "baseline": inputs.baseline.name,
                    "runs": len(s.runs), "system_score": statistics.fmean(scores),
                    "baseline_score": statistics.fmean(paired),
                    "gap": statistics.fmean(a - b for a, b in zip(scores, paired)),
                    "signature": sig.format(),
                })
    return rows


def plot_ngram_gaps(rows: List[Dict[str, Any]], baseline: str) -> bytes:
    plt = pyplot()
    size = (4.2 * len(NGRAM_SWEEPS), 3.6)  # inches  # pragma: no mutate (styling: no value or text depends on it)
    fig, axes = plt.subplots(1, len(NGRAM_SWEEPS), figsize=size)
    for ax, sweep in zip(axes, NGRAM_SWEEPS):
        mine = [r for r in rows if r["analysis"] == sweep.key]
        for i, name in enumerate(dict.fromkeys(r["system"] for r in mine)):
            pts = [(r["order"], r["gap"]) for r in mine if r["system"] == name]
            ax.plot(*zip(*pts), markersize=3, label=name, **system_style(i))
        ax.axhline(0.0, color="grey", linewidth=0.8)  # pragma: no mutate (styling)
        ax.set(title=sweep.title, xlabel="n", ylabel=f"score - {baseline}")
        ax.title.set_fontsize(9)  # pragma: no mutate (styling)
    axes[-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))  # pragma: no mutate (beside the panels)
    fig.tight_layout()
    return png_bytes(fig, dpi=120, bbox_inches="tight")  # pragma: no mutate (styling)

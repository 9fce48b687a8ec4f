"""Word-swap probes of a translation model (after Chen et al. 2023 §3.5; docs/analysis.md §Word-swap probes).

For a source sentence x with the model's own beam output y = T(x), and a word-order perturbation x' of x:
  * output change   Δout = 100 - chrF++(T(x'), y)  (sacrebleu CHRF(word_order=2), corpus level; also BLEU with
                     effective order, so that outputs shorter than 4 tokens do not score 0)
  * likelihood change  ΔNLL = (NLL(y | x') - NLL(y | x)) / |y|  by forced decoding (|y| counts the EOS)
Perturbations act on words (a BPE word is its "@@"-joined pieces, kept together; the EOS stays last):
  * local:   the words of one window of 3-5 consecutive words permuted (a permutation that changes the text)
  * global:  two distant spans of 1-3 words exchanged (a gap between them; starts at least half the
             sentence apart), a stand-in for Chen et al.'s agent/patient swap without a parser
  * shuffle: a random full permutation of the words (control: an upper bound on the change)
A model without any encoder position signal must give Δout = 0 and ΔNLL = 0 (up to float summation order)
for every permutation (docs/encodings.md §no-PE).
"""
import random
from argparse import Namespace
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import torch
from fairseq.data import data_utils
from sacrebleu.metrics import BLEU, CHRF

NOISE = 1e-5  # changes below this (float summation order) count as zero in the sensitivity ratio
Perturb = Callable[[int, random.Random], Optional[List[int]]]  # n words -> new order (indices) or None


def word_groups(symbols: Sequence[str]) -> List[List[int]]:
    """Token indices grouped into words: a token ending in "@@" continues into the next one."""
    groups, current = [], []
    for i, s in enumerate(symbols):
        current.append(i)
        if not s.endswith("@@"):
            groups.append(current)
            current = []
    if current:
        groups.append(current)
    return groups


def local_order(n: int, rng: random.Random, sizes=(3, 4, 5)) -> Optional[List[int]]:
    """Permute a window of 3-5 consecutive words (window size drawn among those that fit)."""
    fitting = [k for k in sizes if k <= n]
    if not fitting:
        return None
    k = rng.choice(fitting)
    start = rng.randint(0, n - k)
    window = list(range(start, start + k))
    perm = window[:]
    while perm == window:
        rng.shuffle(perm)
    return list(range(start)) + perm + list(range(start + k, n))


def global_order(n: int, rng: random.Random, max_span: int = 3) -> Optional[List[int]]:
    """Exchange two spans of m words (m <= max_span) with at least one word between them whose starts are at
    least n/2 apart; all such (a, b, m) are equally likely."""
    cands = [(a, b, m) for m in range(1, max_span + 1) for a in range(n) for b in range(a + m + 1, n - m + 1)
             if 2 * (b - a) >= n]
    if not cands:
        return None
    a, b, m = rng.choice(cands)
    idx = list(range(n))
    return idx[:a] + idx[b:b + m] + idx[a + m:b] + idx[a:a + m] + idx[b + m:]


def shuffle_order(n: int, rng: random.Random) -> Optional[List[int]]:
    """A random permutation of all words (not the identity)."""
    if n < 2:
        return None
    idx = list(range(n))
    perm = idx[:]
    while perm == idx:
        rng.shuffle(perm)
    return perm


PERTURBATIONS: Dict[str, Perturb] = {"local": local_order, "global": global_order, "shuffle": shuffle_order}


def perturb(tokens: torch.Tensor, dictionary, kind: str, rng: random.Random, tries: int = 10) -> Optional[torch.Tensor]:
    """``tokens`` (T,) ending in EOS, with its words reordered by perturbation ``kind``; None when the sentence
    is too short or no draw changes the token sequence (e.g. a window of one repeated word)."""
    body = tokens[:-1].tolist()
    groups = word_groups([dictionary[t] for t in body])
    for _ in range(tries):
        order = PERTURBATIONS[kind](len(groups), rng)
        if order is None:
            return None
        new = [body[i] for g in order for i in groups[g]]
        if new != body:
            return torch.tensor(new + [tokens[-1].item()], dtype=tokens.dtype)
    return None


# ---- model calls ---------------------------------------------------------------------------------------

def _source_batch(srcs: List[torch.Tensor], pad: int, eos: int, device) -> Dict[str, torch.Tensor]:
    return {
        # (B, S), left-padded as fairseq's translation task does
        "src_tokens": data_utils.collate_tokens(srcs, pad, eos, left_pad=True).to(device),
        "src_lengths": torch.tensor([len(s) for s in srcs], device=device),
    }


@torch.no_grad()
def translate(model, task, srcs: List[torch.Tensor], beam: int, max_len_a: float, max_len_b: int,
              batch_size: int = 32) -> List[torch.Tensor]:
    """Best beam hypothesis of each source (tokens ending in EOS)."""
    gen = task.build_generator([model], Namespace(beam=beam, max_len_a=max_len_a, max_len_b=max_len_b, min_len=1))
    device = next(model.parameters()).device
    src_dict = task.source_dictionary
    out = []
    for start in range(0, len(srcs), batch_size):
        chunk = srcs[start:start + batch_size]
        net_input = _source_batch(chunk, src_dict.pad(), src_dict.eos(), device)
        sample = {"id": torch.arange(len(chunk)), "net_input": net_input}
        out += [hyps[0]["tokens"].cpu() for hyps in gen.generate([model], sample)]
    return out


@torch.no_grad()
def forced_nll(model, task, srcs: List[torch.Tensor], tgts: List[torch.Tensor], batch_size: int = 32) -> np.ndarray:
    """Summed negative log-likelihood (nats) of each target (ending in EOS) given its source."""
    device = next(model.parameters()).device
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    pad, eos = tgt_dict.pad(), tgt_dict.eos()
    out = []
    for start in range(0, len(srcs), batch_size):
        s_chunk, t_chunk = srcs[start:start + batch_size], tgts[start:start + batch_size]
        net = _source_batch(s_chunk, src_dict.pad(), src_dict.eos(), device)
        target = data_utils.collate_tokens(t_chunk, pad, eos, left_pad=False).to(device)  # (B, T)
        prev = data_utils.collate_tokens(t_chunk, pad, eos, left_pad=False, move_eos_to_beginning=True).to(device)
        logits, extra = model(net["src_tokens"], net["src_lengths"], prev)
        lprobs = model.get_normalized_probs((logits, extra), log_probs=True).double()  # (B, T, V)
        token_lp = lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1).masked_fill(target.eq(pad), 0.0)  # (B, T)
        out += (-token_lp.sum(dim=1)).tolist()
    return np.array(out)


# ---- the probe -----------------------------------------------------------------------------------------

def swap_probe(model, task, srcs: List[torch.Tensor], kinds=("local", "global", "shuffle"), seed: int = 1,
               beam: int = 5, max_len_a: float = 0.0, max_len_b: int = 200, batch_size: int = 32,
               n_examples: int = 3) -> Dict[str, object]:
    """Δout and ΔNLL of each perturbation kind over ``srcs`` (token tensors ending in EOS). Returns the report
    dict (without the model signature, which the caller adds)."""
    model.eval()
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    text = lambda toks, d: d.string(toks, bpe_symbol="subword_nmt")  # noqa: E731 (BPE removed)
    hyps = translate(model, task, srcs, beam, max_len_a, max_len_b, batch_size)
    refs = [text(h, tgt_dict) for h in hyps]
    base_nll = forced_nll(model, task, srcs, hyps, batch_size)
    chrf, bleu = CHRF(word_order=2), BLEU(effective_order=True)  # short outputs: no 0 for missing 4-grams
    report = {"n_sentences": len(srcs), "perturbations": {}}
    for kind in kinds:
        ids, swapped = [], []
        for i, src in enumerate(srcs):
            new = perturb(src, src_dict, kind, random.Random(f"{seed}-{kind}-{i}"))
            if new is not None:
                ids.append(i)
                swapped.append(new)
        if not ids:
            report["perturbations"][kind] = {"n": 0}
            continue
        new_hyps = [text(h, tgt_dict) for h in translate(model, task, swapped, beam, max_len_a, max_len_b, batch_size)]
        kept_refs = [refs[i] for i in ids]
        nll = forced_nll(model, task, swapped, [hyps[i] for i in ids], batch_size)
        lengths = np.array([len(hyps[i]) for i in ids], dtype=np.float64)
        dnll = (nll - base_nll[ids]) / lengths
        sent_chrf = np.array([chrf.sentence_score(h, [r]).score for h, r in zip(new_hyps, kept_refs)])
        report["perturbations"][kind] = {
            "n": len(ids),
            "delta_out_chrf": 100.0 - chrf.corpus_score(new_hyps, [kept_refs]).score,
            "delta_out_bleu": 100.0 - bleu.corpus_score(new_hyps, [kept_refs]).score,
            "delta_out_chrf_sentence_mean": float(np.mean(100.0 - sent_chrf)),
            "delta_nll_per_token": float(dnll.mean()),
            "delta_nll_per_token_abs_max": float(np.abs(dnll).max()),
            "delta_nll_token_weighted": float((nll - base_nll[ids]).sum() / lengths.sum()),
            "changed_outputs": float(np.mean([h != r for h, r in zip(new_hyps, kept_refs)])),
            "examples": [
                {"id": i, "src": text(srcs[i], src_dict), "src_swapped": text(s, src_dict),
                 "out": refs[i], "out_swapped": h}
                for i, s, h in list(zip(ids, swapped, new_hyps))[:n_examples]
            ],
            "per_sentence": {"id": ids, "delta_nll_per_token": dnll.tolist(),
                             "delta_out_chrf": (100.0 - sent_chrf).tolist()},
        }
    pert = report["perturbations"]
    if pert.get("local", {}).get("n") and pert.get("global", {}).get("n"):
        # a denominator at float-noise level (a model without positions) gives no ratio
        ratio = lambda a, b: a / b if abs(b) > NOISE else float("nan")  # noqa: E731
        report["sensitivity_ratio_global_over_local"] = {
            "delta_out_chrf": ratio(pert["global"]["delta_out_chrf"], pert["local"]["delta_out_chrf"]),
            "delta_nll_per_token": ratio(pert["global"]["delta_nll_per_token"], pert["local"]["delta_nll_per_token"]),
        }
    report["metric_signatures"] = {"chrf": str(chrf.get_signature()), "bleu": str(bleu.get_signature())}
    return report

"""Identical-word probing of self-attention (Wang et al. 2021 §4.2; Chen et al. 2023 App. A.1).

A "sentence" made of one word w repeated has constant content terms, so its self-attention map shows only
positional structure. Encoder input: [w] x L + [EOS]; decoder input: [EOS] + [w'] x (L-1) under the causal mask
(the decoder's encoder input is the encoder probe of the paired word, which matters from layer 2 on). Maps
are averaged over heads and over the probe words, per layer and over all layers (Chen et al. style). The
"without special" variant drops the EOS row and column and re-normalises the rows (Wang's "w/o special
tokens"). Indicators: ``pe_plugin.analysis.indicators``. Conventions: docs/analysis.md §Identical-word probing.
"""
import contextlib
import random
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
from fairseq.modules import MultiheadAttention

from ..modules.pe_attention import PEAttention
from . import indicators

SIDES = ("encoder", "decoder")


# ---- capturing head-wise attention probabilities -------------------------------------------------------

@contextlib.contextmanager
def capture_self_attention(model) -> Iterator[Dict[Tuple[str, int], List[torch.Tensor]]]:
    """Record the head-wise self-attention probabilities of every encoder and decoder layer.

    Yields a dict ``{(side, layer): [probs (B,H,Tq,Tk), ...]}`` with one entry per forward call, filled while
    the block runs. The model computes exactly what it computes otherwise:
      * ``PEAttention``: ``capture_weights`` keeps ``last_weights``, read after each call.
      * fairseq's ``MultiheadAttention``: its fused path (``F.multi_head_attention_forward``) returns only
        head-averaged weights, so each call is re-routed to the module's Python path (the same arithmetic)
        by setting ``skip_embed_dim_check`` and asking for ``need_head_weights``; the caller still receives
        the weights it asked for (None for fairseq's layers, which pass ``need_weights=False``).
    Hooks and flags are removed on exit, also after an error.
    """
    captured: Dict[Tuple[str, int], List[torch.Tensor]] = {}
    handles, restore = [], []

    def record(key, probs):  # probs (B,H,Tq,Tk)
        captured.setdefault(key, []).append(probs.detach().float().cpu())

    for side in SIDES:
        for idx, layer in enumerate(getattr(model, side).layers):
            mod, key = layer.self_attn, (side, idx)
            if isinstance(mod, PEAttention):
                restore.append((mod, "capture_weights", mod.capture_weights))
                mod.capture_weights = True
                handles.append(mod.register_forward_hook(lambda m, args, out, key=key: record(key, m.last_weights)))
            elif isinstance(mod, MultiheadAttention):
                restore.append((mod, "skip_embed_dim_check", mod.skip_embed_dim_check))
                mod.skip_embed_dim_check = True  # forces the Python path, which returns per-head weights
                asked = {}

                def pre(m, args, kwargs, asked=asked):
                    asked["weights"] = kwargs.get("need_weights", True) or kwargs.get("need_head_weights", False)
                    asked["heads"] = kwargs.get("need_head_weights", False)
                    return args, {**kwargs, "need_weights": True, "need_head_weights": True}

                def post(m, args, kwargs, out, key=key, asked=asked):
                    attn, weights = out  # weights (H,B,Tq,Tk)
                    record(key, weights.transpose(0, 1))
                    if not asked["weights"]:
                        return attn, None
                    return attn, weights if asked["heads"] else weights.mean(dim=0)

                handles.append(mod.register_forward_pre_hook(pre, with_kwargs=True))
                handles.append(mod.register_forward_hook(post, with_kwargs=True))
            else:
                raise TypeError(f"{side} layer {idx}: cannot capture attention of {type(mod).__name__}")
    try:
        yield captured
    finally:
        for h in handles:
            h.remove()
        for mod, name, value in restore:
            setattr(mod, name, value)
        for side in SIDES:
            for layer in getattr(model, side).layers:
                if isinstance(layer.self_attn, PEAttention):
                    layer.self_attn.last_weights = None


# ---- probe words ---------------------------------------------------------------------------------------

# word rules, strictest first; the first that yields enough words is used (tiny test dictionaries relax)
WORD_RULES = [
    ("whole word, alphabetic, length >= 2", lambda s: "@@" not in s and s.isalpha() and len(s) >= 2),
    ("whole word, has a letter, length >= 2", lambda s: "@@" not in s and any(c.isalpha() for c in s) and len(s) >= 2),
    ("whole word", lambda s: "@@" not in s),
    ("any symbol", lambda s: True),
]


def probe_words(dictionary, n: int, max_rank: int = 5000, seed: int = 0,
                prefer: Optional[np.ndarray] = None) -> Tuple[List[int], Dict[str, object]]:
    """Up to ``n`` random word ids from ``dictionary`` (sorted by frequency, as fairseq builds it) among the
    ``max_rank`` most frequent non-special entries. The strictest rule of ``WORD_RULES`` with at least ``n``
    candidates is used, else the rule with the most. ``prefer``: a boolean mask over the dictionary (e.g.
    "more frequent on the source side"); used whenever it leaves at least one candidate.
    Returns the ids and a description of the choice (for the report)."""
    specials = set(range(dictionary.nspecial))
    pool = [i for i in range(len(dictionary)) if i not in specials
            and not dictionary[i].startswith("madeupword")][:max_rank]
    if prefer is not None and any(prefer[i] for i in pool):
        pool = [i for i in pool if prefer[i]]
    best = None
    for rule, ok in WORD_RULES:
        cands = [i for i in pool if ok(dictionary[i])]
        if best is None or len(cands) > len(best[1]):
            best = (rule, cands)
        if len(cands) >= n:
            best = (rule, cands)
            break
    rule, cands = best
    chosen = sorted(random.Random(seed).sample(cands, min(n, len(cands))))
    info = {"requested": n, "used": len(chosen), "rule": rule, "max_rank": max_rank,
            "language_filter": prefer is not None, "sample": [dictionary[i] for i in chosen[:10]]}
    return chosen, info


# ---- the probe -----------------------------------------------------------------------------------------

@torch.no_grad()
def identical_word_maps(model, src_words: Sequence[int], tgt_words: Sequence[int], length: int, eos: int,
                        batch_size: int = 25) -> Dict[str, np.ndarray]:
    """Head- and word-averaged self-attention maps per layer: ``{"encoder": (N, L+1, L+1) (EOS last),
    "decoder": (N, L, L) (EOS first)}`` in float64. Word k of ``src_words`` is paired with word k of
    ``tgt_words`` (the lists are cycled to the longer one). The model is put in eval mode."""
    model.eval()
    n = max(len(src_words), len(tgt_words))
    pairs = [(src_words[k % len(src_words)], tgt_words[k % len(tgt_words)]) for k in range(n)]
    sums: Dict[str, Optional[torch.Tensor]] = {s: None for s in SIDES}
    device = next(model.parameters()).device
    for start in range(0, n, batch_size):
        chunk = torch.tensor(pairs[start:start + batch_size], device=device)  # (B, 2)
        b = chunk.size(0)
        src = torch.cat([chunk[:, :1].expand(b, length), chunk.new_full((b, 1), eos)], dim=1)  # (B, L+1)
        prev = torch.cat([chunk.new_full((b, 1), eos), chunk[:, 1:].expand(b, length - 1)], dim=1)  # (B, L)
        lengths = torch.full((b,), length + 1, dtype=torch.long, device=device)
        with capture_self_attention(model) as cap:
            model(src, lengths, prev)
        for side in SIDES:
            layers = [cap[(side, i)][-1] for i in range(len(getattr(model, side).layers))]
            maps = torch.stack([p.double().mean(dim=1).sum(dim=0) for p in layers])  # (N, T, T): heads mean, words sum
            sums[side] = maps if sums[side] is None else sums[side] + maps
    return {side: (sums[side] / n).numpy() for side in SIDES}


def variants(side: str, layer_maps: np.ndarray) -> Dict[str, np.ndarray]:
    """The (N+1, T, T) maps per variant: layers 1..N and their mean (last), with and without the EOS."""
    stacked = np.concatenate([layer_maps, layer_maps.mean(axis=0, keepdims=True)])
    eos = layer_maps.shape[-1] - 1 if side == "encoder" else 0
    return {
        "with_special": stacked,
        "without_special": np.stack([indicators.drop_position(m, eos) for m in stacked]),
    }


def layer_names(n_layers: int) -> List[str]:
    return [f"layer{i + 1}" for i in range(n_layers)] + ["mean"]


def indicator_table(maps: Dict[str, np.ndarray], db_range: int = 20, first_k: int = 20) -> Dict[str, object]:
    """``{side: {variant: {layerK|mean: {indicator: value}}}}`` for the maps of ``identical_word_maps``."""
    table = {}
    for side, layer_maps in maps.items():
        names = layer_names(len(layer_maps))
        table[side] = {
            variant: {name: indicators.all_indicators(m, side == "decoder", db_range, first_k)
                      for name, m in zip(names, stacked)}
            for variant, stacked in variants(side, layer_maps).items()
        }
    return table

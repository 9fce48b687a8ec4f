"""The interface every positional encoding implements.

Axis legend used in every shape comment of this package:
  B batch (x beam), T length, Tq queries, Tk keys, C model dim, H heads, d head dim (C / H).

A ``PositionalEncoding`` is built once per stack side ("encoder" or "decoder") from its config dataclass
and the model dimensions. It contributes through hooks; each defaults to "no contribution" and a subclass
overrides only the ones it needs (docs/extending.md walks through writing one).

Once per stack pass (a full pass, or one decoding step), with the pass's ``Positions``:
  embed(x, pos)                      embedding level: (B,T,C) -> (B,T,C); applied before the embedding
                                     dropout, or after it when ``embed_after_dropout`` is True
  position_bias(pos)                 a term added to the (scaled) logits that depends on positions alone,
                                     (1,H,Tq,Tk) or (H,Tq,Tk), or None (T5, ALiBi, AT5, KERPLE). The attention
                                     folds it with the causal and padding masks into one float mask per pass
  prepare(pos, dtype)                what the layers' hooks below share in one pass, handed to each of them as
                                     ``ctx``; by default ``pos`` itself (RoPE: its cos / sin in ``dtype``)
In each self-attention layer ``layer`` it applies to (``applies_to_layer``), with ``ctx`` = ``prepare``'s result:
  transform_qk(q, k, ctx, layer)     maps the new queries and keys (B,H,T,d) and returns (q, k); applied before
                                     the keys are cached, so the cache holds transformed keys. q is already
                                     scaled by d^-1/2, so the map should be linear (a rotation, say)
  score_bias(q, ctx, layer)          a term added to the logits that depends on q, broadcastable to
                                     (B,H,Tq,Tk), or None (Shaw's key term)
  transform_values(v, ctx, layer)    maps the new values (B,H,T,d) before they are cached and used
  value_bias(probs, ctx, layer)      a term (B,H,Tq,d) added to the attention output, or None; ``probs`` are
                                     the dropped-out attention weights in the compute dtype
  attention_core(q, k, v, masks, dropout_p, ctx, layer)
                                     the encoding's own attention product (B,H,Tq,d), or None; used by the fast
                                     path (no weights requested) in place of the explicit product that
                                     score_bias and value_bias describe, which it must equal. ``masks``: the
                                     pass's float masks, each broadcastable to (B,H,Tq,Tk) (Shaw's, with a
                                     backward that keeps no (B,H,Tq,Tk) tensor)

Attention-level hooks are applied in self-attention only, by ``pe_plugin.modules.pe_attention`` on every
path (training, validation, incremental decoding). Positions are absolute 0-based indices of real tokens,
computed from the padding mask (``Positions``), never from column indices; in self-attention the new keys
stand where the queries stand (``pos.q``). The stack computes what is per pass once and hands it to every
layer (``modules.pass_context``); an encoding never caches anything across layers itself.

No hook asks the device for a value: a GPU step stalls whenever Python reads a tensor's value (``int(t)``,
``bool(t)``, ``nonzero``). Shapes and the ``Positions`` host facts (``bound``, ``start``) carry what the
code needs to know on the host; the only value read is a length check on a batch longer than an
encoding's limit (``limits.BoundedPositions``), which fairseq's own length filter makes rare.
Forward code here imports only torch.
"""
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Dict, List, Optional, Tuple, Union

import torch
from torch import nn


@dataclass
class Dims:
    """Model dimensions an encoding is built for (one stack side)."""

    embed_dim: int
    num_heads: int
    num_layers: int
    max_positions: int
    padding_idx: int
    side: str  # "encoder" or "decoder"
    # the larger of the encoder's and decoder's max_positions, for modules the two sides share (None: unknown)
    max_positions_model: Optional[int] = None

    @property
    def head_dim(self) -> int:
        return self.embed_dim // self.num_heads

    @property
    def causal(self) -> bool:
        return self.side == "decoder"


class Positions:
    """Positions of the queries and keys of one attention call (or of the tokens of one embedding call).

    q:      (B|1, Tq) absolute 0-based positions of the query tokens (pads get 0)
    k:      (B|1, Tk) absolute 0-based positions of the key tokens (pads get 0)
    rel:    (Tq, Tk) key minus query, j - i. For positions made from a padding mask it is the column difference:
            pads are contiguous at one end of a row, so it equals the real-token distance for every pair of real
            tokens, for any padding side. For positions given as values, k - q of their first row.
    nonpad: (B, Tq) bool mask of the real query tokens, or None when there is no padding
    Host facts, known without reading the device:
    bound:  every position is below it (the padded key length for positions made from a mask)
    start:  when q is one range start..start+Tq-1 shared by every row (no padding), its start; else None
    columns: True for positions made from a padding mask: the queries are then the last Tq of the Tk keys and
            ``rel`` is their column difference, so its W = Tq + Tk - 1 distances are -(Tk-1)..Tq-1 in order (a
            function of the distance is a strided view, ``relative.offsets_to_pairs``); False for given values

    Positions made from a padding mask (``from_mask``, ``for_tokens``) compute q and k lazily, so encodings
    that read only ``rel`` (T5, ALiBi, RPE) never pay for them.
    """

    def __init__(self, q: Optional[torch.Tensor], k: Optional[torch.Tensor], nonpad: Optional[torch.Tensor] = None,
                 *, bound: Optional[int] = None, start: Optional[int] = None):
        self._q, self._k, self.nonpad, self._rel = q, k, nonpad, None
        self._bound, self.start = bound, start
        self._key_nonpad: Optional[torch.Tensor] = None  # (B, Tk) mask the lazy q / k come from
        self._shape: Optional[Tuple[int, int, Any]] = None  # (Tq, Tk, device) of lazy positions

    # ---- construction ------------------------------------------------------------------------------
    @staticmethod
    def from_padding(nonpad: Optional[torch.Tensor], length: int, device) -> torch.Tensor:
        """(B, T) positions p = cumsum(nonpad) - 1 (0 at pads), or (1, T) arange when there is no mask."""
        if nonpad is None:
            return torch.arange(length, device=device).unsqueeze(0)
        return ((nonpad.long().cumsum(dim=1) - 1).clamp_min(0)) * nonpad.long()  # (B, T)

    @classmethod
    def from_mask(cls, key_nonpad: Optional[torch.Tensor], tq: int, tk: int, device) -> "Positions":
        """Positions of the last ``tq`` of ``tk`` keys (the queries of a self-attention call: all of them in a
        full pass, the new ones in a decoding step), from the (B, Tk) mask of real keys or None (no padding)."""
        if key_nonpad is None:
            return cls(None, None, None, bound=tk, start=tk - tq)._lazy(None, tq, tk, device)
        return cls(None, None, key_nonpad[:, tk - tq:], bound=tk)._lazy(key_nonpad, tq, tk, device)

    @classmethod
    def for_tokens(cls, tokens: torch.Tensor, padding_idx: int, last_only: bool = False) -> "Positions":
        """Positions of (B, T) tokens; with ``last_only`` (incremental decoding) only the last column."""
        t = tokens.size(1)
        return cls.from_mask(tokens.ne(padding_idx), 1 if last_only else t, t, tokens.device)

    def _lazy(self, key_nonpad, tq, tk, device) -> "Positions":
        self._key_nonpad, self._shape = key_nonpad, (tq, tk, device)
        return self

    # ---- values ------------------------------------------------------------------------------------
    @property
    def k(self) -> torch.Tensor:
        if self._k is None:
            _, tk, device = self._shape
            self._k = self.from_padding(self._key_nonpad, tk, device)  # (B|1, Tk)
        return self._k

    @property
    def q(self) -> torch.Tensor:
        if self._q is None:
            tq, tk, _ = self._shape
            self._q = self.k[:, tk - tq:]  # (B|1, Tq)
        return self._q

    @property
    def tq(self) -> int:
        return self._shape[0] if self._q is None else self._q.size(1)

    @property
    def tk(self) -> int:
        return self._shape[1] if self._k is None else self._k.size(1)

    @property
    def device(self):
        return self._shape[2] if self._q is None else self._q.device

    @property
    def bound(self) -> int:
        """Every position is below it. Known on the host for positions made from a mask; for positions given
        as values it is read from them, once (tests and direct calls)."""
        if self._bound is None:
            self._bound = int(self.q.max()) + 1 if self.q.numel() else 0
        return self._bound

    @property
    def columns(self) -> bool:
        return self._shape is not None

    @property
    def rel(self) -> torch.Tensor:
        if self._rel is None:
            if self._shape is None:  # given as values: their difference
                self._rel = self.k[0].unsqueeze(0) - self.q[0].unsqueeze(1)  # (Tq, Tk)
            else:
                tq, tk = self.tq, self.tk
                cols = torch.arange(tk, device=self.device)
                self._rel = cols.unsqueeze(0) - cols[tk - tq:].unsqueeze(1)  # (Tq, Tk)
        return self._rel

    def first_real(self) -> Optional[torch.Tensor]:
        """(B,) column of each row's first real query token (0 for right padding), for positions made from a
        padding mask (they count from it: p = column - first); None otherwise."""
        if self._key_nonpad is None:  # positions given as values, or no padding
            return None
        return self.nonpad.long().argmax(dim=1)  # first maximum: the first real column


def as_positions(pos: Union[Positions, torch.Tensor]) -> Positions:
    """A ``Positions`` for a hook's ``pos`` argument: itself, or a bare (B|1,T) tensor of positions."""
    return pos if isinstance(pos, Positions) else Positions(pos, pos)


ATTENTION_HOOKS = ("transform_qk", "position_bias", "score_bias", "transform_values", "value_bias", "attention_core")
# every hook of the interface, in the order the module docstring documents them (docs/design.md and docs/extending.md
# name the same ones: tests/test_structure.py)
HOOKS = ("embed", "position_bias", "prepare", "transform_qk", "score_bias", "transform_values", "value_bias",
         "attention_core")


class PositionalEncoding(nn.Module):
    """Base class: a null encoding (no position signal). See the module docstring for the hooks."""

    name: ClassVar[str] = ""
    level: ClassVar[str] = "none"  # "embedding", "attention" or "none"
    paper: ClassVar[str] = ""
    order: ClassVar[int] = 100  # position in the method table (README, benchmarks, reports)
    config_cls: ClassVar[type] = None
    embed_after_dropout: ClassVar[bool] = False
    # per-size overrides of config defaults, applied by the architectures ("tiny", "base", "big")
    size_defaults: ClassVar[Dict[str, Dict[str, object]]] = {}

    def __init__(self, cfg, dims: Dims):
        super().__init__()
        self.cfg, self.dims = cfg, dims
        # set by the model from --pe-attention-impl and read by the attention (modules/pe_attention); no hook
        # depends on it: "auto" (per-pass context, fused kernels) or "reference" (the equations, per layer)
        self.attention_impl = "auto"

    # ---- construction ------------------------------------------------------------------------------
    @classmethod
    def build(cls, cfg, dims: Dims, shared: dict) -> Optional["PositionalEncoding"]:
        """Build the encoding of one side; ``shared`` is one dict per model, for modules shared by the
        encoder and decoder. Return None for a side that gets no encoding."""
        return cls(cfg, dims)

    # ---- hooks -------------------------------------------------------------------------------------
    def embed(self, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        return x

    def transform_qk(
        self, q: torch.Tensor, k: torch.Tensor, ctx: Any, layer: int
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        return q, k

    def position_bias(self, pos: Positions) -> Optional[torch.Tensor]:
        return None

    def prepare(self, pos: Positions, dtype: torch.dtype) -> Any:
        return pos

    def score_bias(self, q: torch.Tensor, ctx: Any, layer: int) -> Optional[torch.Tensor]:
        return None

    def transform_values(self, v: torch.Tensor, ctx: Any, layer: int) -> torch.Tensor:
        return v

    def value_bias(self, probs: torch.Tensor, ctx: Any, layer: int) -> Optional[torch.Tensor]:
        return None

    def attention_core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, masks: List[torch.Tensor],
                       dropout_p: float, ctx: Any, layer: int) -> Optional[torch.Tensor]:
        return None

    # ---- what the glue asks -------------------------------------------------------------------------
    @classmethod
    def overrides(cls, hook: str) -> bool:
        """Whether the class implements ``hook`` (it may still contribute nothing: see ``uses``)."""
        return getattr(cls, hook) is not getattr(PositionalEncoding, hook)

    def uses(self, hook: str) -> bool:
        """Whether this instance contributes through ``hook``; a subclass whose settings switch a hook off
        (``--rpe-no-values``) says so here, so that attention can keep its fused kernel."""
        return self.overrides(hook)

    @classmethod
    def has_embedding_hook(cls) -> bool:
        return cls.overrides("embed")

    @classmethod
    def has_attention_hooks(cls) -> bool:
        return any(cls.overrides(h) for h in ATTENTION_HOOKS)

    def applies_to_layer(self, layer: int) -> bool:
        """Whether self-attention layer ``layer`` of this side gets the attention hooks."""
        return self.has_attention_hooks()

    def position_bias_is_shared(self) -> bool:
        """Whether ``position_bias`` is the same in every layer it applies to, within one pass (so it is computed
        once per pass); False for a bias that draws its own dropout per layer (AT5 in training)."""
        return True

    @property
    def max_positions(self) -> int:
        """Longest sequence this encoding supports on its side (fairseq filters longer training pairs)."""
        return int(1e5)

    def signature(self) -> str:
        """One-line description of the settings, e.g. ``pe:rpe|rpe_max_relative_position:16``."""
        parts = [f"pe:{self.name}", f"side:{self.dims.side}"]
        if self.cfg is not None:
            parts += [f"{f.name}:{getattr(self.cfg, f.name)}" for f in fields(self.cfg) if not f.name.startswith("_")]
        return "|".join(parts)

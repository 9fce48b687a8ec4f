"""The interface every positional encoding implements.

Axis legend used in every shape comment of this package:
  B batch (x beam), T length, Tq queries, Tk keys, C model dim, H heads, d head dim (C / H).

A ``PositionalEncoding`` is built once per stack side ("encoder" or "decoder") from its config dataclass
and the model dimensions. It contributes through up to five hooks; each defaults to "no contribution" and a
subclass overrides only the ones it needs:

  embed(x, pos)                      embedding level: (B,T,C) -> (B,T,C); applied before the embedding
                                     dropout, or after it when ``embed_after_dropout`` is True
  transform_qk(q, k, q_pos, layer)   maps the new queries and keys (B,H,T,d) of positions q_pos (B|1,T)
                                     (in self-attention the new keys stand where the queries stand) and
                                     returns (q, k); applied before the keys are cached, so the cache holds
                                     transformed keys and each key is transformed once. q is already scaled
                                     by d^-1/2, so the map should be linear (a rotation, say)
  score_bias(q, pos, layer)          a term added to the (scaled) attention logits, broadcastable to
                                     (B,H,Tq,Tk), or None
  transform_values(v, k_pos, layer)  maps the new values (B,H,T,d) of key positions k_pos (B|1,T) before
                                     they are cached and used
  value_bias(probs, pos, layer)      a term (B,H,Tq,d) added to the attention output, or None

Attention-level hooks are applied in self-attention only, by ``pe_plugin.modules.pe_attention`` on every
path (training, validation, incremental decoding). Positions are always passed in as absolute 0-based
indices of real tokens, computed from the padding mask (``Positions``), never from column indices.
Forward code here imports only torch.
"""
from dataclasses import dataclass, fields
from typing import ClassVar, Dict, Optional, Tuple

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

    q:   (B|1, Tq) absolute 0-based positions of the query tokens (pads get 0)
    k:   (B|1, Tk) absolute 0-based positions of the key tokens (pads get 0)
    rel: (Tq, Tk) key minus query, j - i. Pads are contiguous at one end of a row, so the column difference
         equals the real-token distance for every pair of real tokens, for any padding side.

    nonpad: (B, T) bool mask of real tokens, or None when there is no padding (embedding calls only)
    """

    def __init__(self, q: torch.Tensor, k: torch.Tensor, nonpad: Optional[torch.Tensor] = None):
        self.q, self.k, self.nonpad, self._rel = q, k, nonpad, None

    @property
    def rel(self) -> torch.Tensor:
        if self._rel is None:
            tq, tk = self.q.size(1), self.k.size(1)
            cols = torch.arange(tk, device=self.k.device)
            self._rel = cols.unsqueeze(0) - cols[tk - tq:].unsqueeze(1)  # (Tq, Tk)
        return self._rel

    @staticmethod
    def from_padding(nonpad: Optional[torch.Tensor], length: int, device) -> torch.Tensor:
        """(B, T) positions p = cumsum(nonpad) - 1 (0 at pads), or (1, T) arange when there is no padding."""
        if nonpad is None or bool(nonpad.all()):
            return torch.arange(length, device=device).unsqueeze(0)
        return ((nonpad.long().cumsum(dim=1) - 1).clamp_min(0)) * nonpad.long()

    @classmethod
    def for_tokens(cls, tokens: torch.Tensor, padding_idx: int, last_only: bool = False) -> "Positions":
        """Positions of (B, T) tokens; with ``last_only`` (incremental decoding) only the last column."""
        nonpad = tokens.ne(padding_idx)
        pos = cls.from_padding(nonpad, tokens.size(1), tokens.device)
        if last_only:
            pos, nonpad = pos[:, -1:], nonpad[:, -1:]
        return cls(pos, pos, None if bool(nonpad.all()) else nonpad)


ATTENTION_HOOKS = ("transform_qk", "score_bias", "transform_values", "value_bias")


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
        self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, layer: int
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        return q, k

    def score_bias(self, q: torch.Tensor, pos: Positions, layer: int) -> Optional[torch.Tensor]:
        return None

    def transform_values(self, v: torch.Tensor, k_pos: torch.Tensor, layer: int) -> torch.Tensor:
        return v

    def value_bias(self, probs: torch.Tensor, pos: Positions, layer: int) -> Optional[torch.Tensor]:
        return None

    # ---- what the glue asks -------------------------------------------------------------------------
    @classmethod
    def overrides(cls, hook: str) -> bool:
        return getattr(cls, hook) is not getattr(PositionalEncoding, hook)

    @classmethod
    def has_embedding_hook(cls) -> bool:
        return cls.overrides("embed")

    @classmethod
    def has_attention_hooks(cls) -> bool:
        return any(cls.overrides(h) for h in ATTENTION_HOOKS)

    def applies_to_layer(self, layer: int) -> bool:
        """Whether self-attention layer ``layer`` of this side gets the attention hooks."""
        return self.has_attention_hooks()

    @property
    def max_positions(self) -> int:
        """Longest sequence this encoding supports on its side (fairseq filters longer training pairs)."""
        return int(1e5)

    def check_length(self, pos: torch.Tensor) -> None:
        """Raise a clear error when a position exceeds what the encoding supports."""
        if pos.numel() and int(pos.max()) >= self.max_positions:
            raise ValueError(
                f"{self.dims.side} sequence of length {int(pos.max()) + 1} exceeds the {self.max_positions} "
                f"positions that pe '{self.name}' supports; raise --max-{'source' if self.dims.side == 'encoder' else 'target'}"
                f"-positions when training, or shorten the input"
            )

    def signature(self) -> str:
        """One-line description of the settings, e.g. ``pe:rpe|rpe_max_relative_position:16``."""
        parts = [f"pe:{self.name}", f"side:{self.dims.side}"]
        if self.cfg is not None:
            parts += [f"{f.name}:{getattr(self.cfg, f.name)}" for f in fields(self.cfg) if not f.name.startswith("_")]
        return "|".join(parts)

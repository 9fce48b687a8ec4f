"""Embedding-level glue: how an encoding reaches fairseq's encoder and decoder embeddings without copying
their forward code.

fairseq computes, in both ``TransformerEncoderBase.forward_embedding`` and
``TransformerDecoderBase.extract_features_scriptable``:
    x = embed_scale * E[tokens];  x = x + embed_positions(tokens[, incremental_state]);  x = dropout(x)
``PositionSlot`` fills the ``embed_positions`` slot: it computes the tokens' positions from the padding
mask, returns the encoding's additive term for ``embed`` hooks that run before dropout, and keeps the
positions for ``DropoutThenEmbed``, which fills the ``dropout_module`` slot and applies hooks that run after
the dropout (PosNet). Both slots are called once per forward, in that order.
"""
from typing import Optional

import torch
from torch import nn

from ..encoding_parts.base import PositionalEncoding, Positions


class PositionSlot(nn.Module):
    def __init__(self, pe: PositionalEncoding, embed_tokens: nn.Embedding):
        super().__init__()
        # neither is registered: the encoder owns the encoding (``encoder.pe``) and the token embedding
        self._pe, self._embed_tokens = [pe], [embed_tokens]
        self.padding_idx = embed_tokens.padding_idx
        self.current: Optional[Positions] = None

    @property
    def pe(self) -> PositionalEncoding:
        return self._pe[0]

    @property
    def max_positions(self) -> int:
        return self.pe.max_positions

    def forward(self, tokens: torch.Tensor, incremental_state=None) -> Optional[torch.Tensor]:
        # tokens (B, T): the whole prefix in incremental decoding, of which only the last column is embedded
        # positions from the padding mask, lazily and without reading the device (``Positions``)
        pos = Positions.for_tokens(tokens, self.padding_idx, last_only=incremental_state is not None)
        self.current = pos
        if self.pe.embed_after_dropout or not self.pe.has_embedding_hook():
            # nothing to add before dropout (or at all); a (1,1,1) zero rather than None, because the encoder adds the
            # slot's output unconditionally (``embed + embed_positions(tokens)``)
            return self._embed_tokens[0].weight.new_zeros(1, 1, 1)
        # hooks that run before dropout are additive (x + P(pos)), so fairseq's ``x + embed_positions``
        # receives P(pos) = embed(0, pos)
        weight = self._embed_tokens[0].weight
        zeros = weight.new_zeros(tokens.size(0), pos.tq, self.pe.dims.embed_dim)
        return self.pe.embed(zeros, pos)  # (B|1, T, C)


class DropoutThenEmbed(nn.Module):
    def __init__(self, dropout: nn.Module, slot: PositionSlot):
        super().__init__()
        self.dropout = dropout
        self._slot = [slot]

    @property
    def p(self) -> float:
        return self.dropout.p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.dropout(x)  # (B, T, C)
        slot = self._slot[0]
        if slot.current is not None:
            x = slot.pe.embed(x, slot.current)
            slot.current = None
        return x

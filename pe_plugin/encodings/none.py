"""No positional encoding (``nope``): the encoder is permutation-equivariant; the decoder sees order only
through its causal mask."""
from . import register_pe
from ..encoding_parts.base import PositionalEncoding


@register_pe
class NoPositionalEncoding(PositionalEncoding):
    name = "nope"
    order = 0
    level = "none"
    paper = "-"

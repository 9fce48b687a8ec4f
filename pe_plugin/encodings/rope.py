"""RoPE: rotary position embedding of queries and keys (Su et al., 2021, RoFormer), in self-attention only.

Per layer and per head, the first r = 2 floor(f d / 2) dimensions of a head (f = --rope-fraction, default
1: the whole head) form r/2 pairs, each turned by an angle proportional to the position, and the other d - r
dimensions pass through unchanged (partial rotary, as GPT-NeoX with f = 0.25); the equations are above
``rotary_tables`` and ``rotate`` (and in docs/encodings.md §RoPE).
Pair layout: half-split (GPT-NeoX, LLaMA), pair i = (x[i], x[i + r/2]); it is the paper's interleaved layout
(x[2i], x[2i+1]) up to a fixed permutation of the W_Q and W_K columns, i.e. the same model.
Rotations compose, R_m^T R_n = R_{n-m}, so the score of q rotated at its position m and k at its position n
depends on n - m only: no absolute position reaches the model. Positions are the padding
mask's (``Positions``), hence the same for any padding side and any batch. The rotation is linear, so it is
applied after fairseq's d^-1/2 scaling of q. Applied through ``transform_qk`` before the keys are cached:
in incremental decoding a key is rotated once, at its own position, and the cache holds rotated keys.
Values, cross-attention and the embeddings are untouched; there are no parameters. Attention keeps the
fused kernel: nothing is added to the logits, no (Tq,Tk) or (T,T,d) tensor is built.
The rotation is one autograd function (``Rotate``): its forward writes R_p x into one new tensor (no
temporaries), and its backward is the inverse rotation, grad_x = R_p^T grad = R_{-p} grad (the same formula
with -sin), so it saves only the (B,1,T,r/2) cos / sin and no activation (docs/encodings.md §RoPE).
cos / sin tables: one (N, r/2) pair per stack, shared by its layers, computed in float64 (an angle p theta
in float32 is off by up to about 1e-3 rad near p = 1e4) and stored in float32 as non-persistent buffers
(they follow the model's device and dtype). They start at the side's max positions, so training, whose
sentences fairseq filters to that length, never resizes them; longer inputs at inference double them on
demand, so there is no length limit. Whether to grow is decided on the host from the padded length
(``Positions.bound``), and positions without padding read a slice of the tables: no value is read from the
device. The angles are computed once per stack pass (``prepare``) and handed to every layer.
"""
from dataclasses import dataclass, field

import torch
from fairseq.dataclass import FairseqDataclass

from . import register_pe
from ..encoding_parts.base import PositionalEncoding, Positions


@dataclass
class RoPEConfig(FairseqDataclass):
    rope_base: float = field(
        default=10000.0, metadata={"help": "base of the rotation frequencies theta_i = base^(-2i/r) (RoFormer: 10000)"}
    )
    rope_fraction: float = field(
        default=1.0,
        metadata={"help": "fraction of each head's dimensions that is rotated; the rest pass through (NeoX: 0.25)"},
    )


# pair i turns by the angle p theta_i at position p:  theta_i = base^(-2i / r),  i = 0 .. r/2 - 1 (base: --rope-base)
def rotary_tables(num_positions: int, rotary_dim: int, base: float):
    """cos and sin of p theta_i for p = 0..num_positions-1, i = 0..r/2-1: two (N, r/2) float32 tensors."""
    inv_freq = base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)  # (r/2,) theta_i
    angles = torch.arange(num_positions, dtype=torch.float64).unsqueeze(1) * inv_freq  # (N, r/2)
    return torch.cos(angles).float(), torch.sin(angles).float()


#   [x'_i      ]   [cos(p theta_i)  -sin(p theta_i)] [x_i      ]
#   [x'_{i+r/2}] = [sin(p theta_i)   cos(p theta_i)] [x_{i+r/2}],    x'_rest = x_rest
# so that (R_m q) . (R_n k) = q . R_{n-m} k
def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotary_dim: int) -> torch.Tensor:
    """R_p x for x (B,H,T,d), cos / sin (B|1,1,T,r/2), without autograd: one new (B,H,T,d) tensor."""
    half = rotary_dim // 2
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)  # (B,H,T,d), contiguous whatever x's layout
    x1, x2 = x[..., :half], x[..., half:rotary_dim]  # (B,H,T,r/2) each, views
    o1, o2 = out[..., :half], out[..., half:rotary_dim]
    torch.mul(x1, cos, out=o1).addcmul_(x2, sin, value=-1)
    torch.mul(x2, cos, out=o2).addcmul_(x1, sin)
    out[..., rotary_dim:] = x[..., rotary_dim:]
    return out


class Rotate(torch.autograd.Function):
    """y = R_p x with dL/dx = R_p^T dL/dy = R_{-p} dL/dy: saves cos and sin, never x or y."""

    @staticmethod
    def forward(ctx, x, cos, sin, rotary_dim: int):
        ctx.save_for_backward(cos, sin)
        ctx.rotary_dim = rotary_dim
        return rotate(x, cos, sin, rotary_dim)

    @staticmethod
    def backward(ctx, grad):
        cos, sin = ctx.saved_tensors
        return rotate(grad, cos, -sin, ctx.rotary_dim), None, None, None


@register_pe
class RotaryPositionalEncoding(PositionalEncoding):
    name = "rope"
    order = 70
    level = "attention"
    paper = "Su et al. 2021"
    config_cls = RoPEConfig

    def __init__(self, cfg, dims):
        super().__init__(cfg, dims)
        d, f = dims.head_dim, cfg.rope_fraction
        if not 0 < f <= 1:
            raise ValueError(f"--rope-fraction must be in (0, 1], got {f}")
        self.rotary_dim = 2 * int(f * d // 2)
        if self.rotary_dim < 2:
            raise ValueError(
                f"--rope-fraction {f} rotates no pair of the {d} dimensions of a head; "
                f"raise it to at least {2 / d:g}"
            )
        if cfg.rope_base <= 1:
            raise ValueError(f"--rope-base must be above 1 (RoFormer: 10000), got {cfg.rope_base}")
        cos, sin = rotary_tables(max(dims.max_positions, 1), self.rotary_dim, cfg.rope_base)
        self.register_buffer("cos", cos, persistent=False)  # (N, r/2)
        self.register_buffer("sin", sin, persistent=False)  # (N, r/2)

    def _angles(self, pos: Positions, dtype):
        """cos and sin at positions ``pos.q`` (B|1,T): two (B|1,1,T,r/2) tensors in ``dtype``. The tables grow
        to the host bound ``pos.bound`` (doubling: no length limit); no value is read from the device."""
        if pos.bound > self.cos.size(0):
            cos, sin = rotary_tables(max(pos.bound, 2 * self.cos.size(0)), self.rotary_dim, self.cfg.rope_base)
            self.cos, self.sin = cos.to(self.cos), sin.to(self.sin)
        if pos.start is not None:  # one range for every row: a slice of the tables, no gather
            rows = slice(pos.start, pos.start + pos.tq)
            cos, sin = self.cos[rows].unsqueeze(0), self.sin[rows].unsqueeze(0)  # (1,T,r/2)
        else:
            cos, sin = self.cos[pos.q], self.sin[pos.q]  # (B,T,r/2)
        return cos.unsqueeze(1).to(dtype), sin.unsqueeze(1).to(dtype)  # (B|1,1,T,r/2)

    def rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """R_p x for x (B,H,T,d): pairs (x_i, x_{i+r/2}) of the first r dimensions rotated, the rest kept."""
        return Rotate.apply(x, cos, sin, self.rotary_dim)  # (B,H,T,d)

    def prepare(self, pos, dtype):
        return self._angles(pos, dtype)  # once per pass: what every layer's transform_qk receives

    def transform_qk(self, q, k, angles, layer):
        cos, sin = angles  # (B|1,1,T,r/2) each, from ``prepare``
        return self.rotate(q, cos, sin), self.rotate(k, cos, sin)

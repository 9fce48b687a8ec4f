"""PosNet's shared pieces (Zhang et al., ACL 2023): the positional kernel product, kernel initialisation, the
flags common to posnet_embed and posnet_attn, and their side selection / encoder-decoder sharing / L_max.

The kernel product (Eq. 16, above ``positional_matmul``) is one batched matmul over positions, memory O(T B d); the
released ``U.unsqueeze(2).matmul(phi[:T])`` broadcasts phi to a (B,T,d,d) copy, and its backward builds a phi
gradient of that size (docs/encodings.md §PosNet-Embed, §D6).

Flags (docs/encodings.md §PosNet-Embed, §Defects, §Choices):
  --posnet-sides {both,encoder,decoder}  default both (the paper's text); the other side gets no encoding
  --posnet-share {enc-dec,none}          default enc-dec: one module for both sides (the released code)
  --posnet-init {released,per-matrix}    xavier_normal_ on the 3-D phi, std sqrt(2/(d^2 + L_max d)) (released),
                                         or on each phi_p, std d^-1/2
  --posnet-dropout P                     Dropout_pk of the branch, default 0 (the released value)
  --posnet-max-positions N               cap on L_max, default 256
L_max = min(--posnet-max-positions, the side's --max-source/target-positions); a module shared by both sides
takes the larger side's (fairseq still filters each side by its own limit). Longer inputs raise
``check_length``'s error, or with --pe-beyond-max clamp (for decoding) their positions >= L_max use the last
kernel phi_{L_max-1} (``limits``). The cap's default 256: the paper's parameter counts fit L_max = 200 for
PosNet-Embed and about 250 for PosNet-Attn, not fairseq's default 1024 (the WMT14 recipe sets 200 and 251),
and on Multi30k PosNet-Embed at L_max 1024 trails SAPE where 256 does not (docs/encodings.md §PosNet-Embed:
rows beyond the longest sentence are never trained; L_max changes the released initialisation's scale).
"""
from dataclasses import dataclass, field
from typing import NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from torch import Tensor, nn

from .base import PositionalEncoding, Positions, as_positions
from .limits import BoundedPositions


def kernel_rows(phi: Tensor, start: int, count: int) -> Tensor:
    """The kernels of positions start..start+count-1, (count,d,e); positions >= L use phi[L-1] (a view when
    every position is < L)."""
    size = phi.size(0)
    if start + count <= size:
        return phi.narrow(0, start, count)
    inside = phi[start:size]  # (max(0, L-start), d, e)
    last = phi[size - 1:].expand(start + count - max(start, size), -1, -1)  # the rest reuse the last kernel
    return torch.cat([inside, last]) if inside.size(0) else last


# [U (x) phi]_j = u_j phi_{p_j}  (Eq. 16): each token's row times its position's kernel
def positional_matmul(u: Tensor, phi: Tensor, pos, rotation: Optional[Tuple[Tensor, Tensor]] = None) -> Tensor:
    """y[t,b,n] = u[t,b,n] phi[min(p[b,t], L-1)] for u (T,B,N,d), phi (L,d,e) and the positions p = ``pos.q``
    (B|1,T) of a ``Positions`` (or a bare tensor); returns (T,B,N,e). Positions >= L reuse the last kernel
    (``--pe-beyond-max clamp``; the encoding has checked them first). No value is read from the device:

    * one range for every row (no padding; ``pos.start`` is a host fact): one bmm with phi[start:start+T];
    * positions made from a padding mask (either side), T > 1: each row is rotated by its number of leading
      pads (``Positions.first_real``) so that the token of position p sits in slot p of a position-major
      (T,B,N,d) buffer (pads take the slots after the row's last token), one bmm with phi[:T], and the
      inverse rotation brings the products back. Pads get some kernel; their outputs are masked downstream.
      ``rotation`` is ``rotation_index(pos)``, given by a caller that computes it once for several products
      (PosNet-Attn: once per pass for all its layers);
    * otherwise (one decoding step with padding; positions given as values): ``_kernel_sums``, each token's row
      times its kernel read in place from phi, no (B,T,d,e) copy of the kernels (a decoding step has B tokens).
    """
    pos = as_positions(pos)
    t, b, n, d = u.shape
    if pos.start is not None:
        kernels = kernel_rows(phi, pos.start, t)  # (T,d,e)
        return torch.bmm(u.reshape(t, b * n, d), kernels).view(t, b, n, -1)
    rotation = rotation if rotation is not None else rotation_index(pos)
    if rotation is not None:
        return _rotated_matmul(u, phi, rotation)
    return _kernel_sums(u, phi, pos.q.clamp_max(phi.size(0) - 1))


def _kernel_sums(u: Tensor, phi: Tensor, p: Tensor) -> Tensor:
    """y[t,b,n] = u[t,b,n] phi[p[b,t]] for u (T,B,N,d), phi (L,d,e), p (B|1,T) < L: row d' of phi[p] weighted by
    u[t,b,n,d'] and summed, phi viewed as (L*d, e) rows (``embedding_bag``, which reads them in place), where
    gathering the kernels would copy B*T*d*e values (a decoding step's B kernels, for 512 beams at
    d = e = 128: 32 MiB) and multiply them one token at a time. Computed in phi's dtype, returned in u's."""
    t, b, n, d = u.shape
    rows = p.t().unsqueeze(-1) * d + torch.arange(d, device=p.device)  # (T,B|1,d): phi's rows of each token
    rows = rows.unsqueeze(2).expand(t, b, n, d).reshape(-1, d)  # (T*B*N, d)
    weights = u.reshape(-1, d).to(phi.dtype)  # (T*B*N, d)
    y = F.embedding_bag(rows, phi.reshape(-1, phi.size(-1)), per_sample_weights=weights, mode="sum")  # (T*B*N, e)
    return y.to(u.dtype).view(t, b, n, -1)  # (T,B,N,e)


def rotation_index(pos) -> Optional[Tuple[Tensor, Tensor]]:
    """For positions made from a padding mask with T > 1 (and not one shared range), the two (T*B,) row indices of
    the rotated product: row b's token of position p stands in column p + first[b]; else None.
        column[s, b] = (s + first[b]) mod T   the token column held by buffer slot s of row b
        slot[c, b]   = (c - first[b]) mod T   the buffer slot of the token in column c of row b
    flattened as s * B + b over a (T,B) layout. Each is a permutation: the index_select backward adds each
    gradient row once (no two writes to one row, so no contention and the same sum in any order)."""
    pos = as_positions(pos)
    first = pos.first_real() if pos.start is None else None  # (B,) leading pads of each row
    t = pos.tq
    if first is None or t <= 1:
        return None
    b = first.size(0)
    cols, rows = torch.arange(t, device=first.device).unsqueeze(1), torch.arange(b, device=first.device)  # (T,1), (B,)
    column = ((cols + first) % t) * b + rows  # (T,B)
    slot = ((cols - first) % t) * b + rows  # (T,B)
    return column.view(-1), slot.view(-1)


def _rotated_matmul(u: Tensor, phi: Tensor, rotation: Tuple[Tensor, Tensor]) -> Tensor:
    """The per-row case of ``positional_matmul``, with ``rotation_index``'s indices."""
    t, b, n, d = u.shape
    column, slot = rotation
    buf = u.reshape(t * b, n * d).index_select(0, column)  # (T*B, N*d), position-major
    y = torch.bmm(buf.view(t, b * n, d), kernel_rows(phi, 0, t))  # (T, B*N, e): slot s uses phi[s]
    return y.reshape(t * b, -1).index_select(0, slot).view(t, b, n, -1)  # (T,B,N,e)


class RotatedPositions(NamedTuple):
    """What the layers of one pass share (PosNet-Attn's ``prepare``): the positions and ``rotation_index``."""

    pos: Positions
    rotation: Optional[Tuple[Tensor, Tensor]]


def init_kernels(phi: Tensor, how: str) -> None:
    """Initialise one (L, d, e) kernel tensor in place (see the module docstring)."""
    with torch.no_grad():
        if how == "released":
            nn.init.xavier_normal_(phi)  # fan_in d*e, fan_out L*d
        else:
            phi.normal_(0.0, (2.0 / (phi.size(-2) + phi.size(-1))) ** 0.5)


@dataclass
class PosNetConfig(FairseqDataclass):
    posnet_sides: ChoiceEnum(["both", "encoder", "decoder"]) = field(
        default="both", metadata={"help": "stacks that get PosNet (the released script: encoder; the other gets none)"}
    )
    posnet_share: ChoiceEnum(["enc-dec", "none"]) = field(
        default="enc-dec", metadata={"help": "one PosNet module for encoder and decoder (released) or one per side"}
    )
    posnet_init: ChoiceEnum(["released", "per-matrix"]) = field(
        default="released", metadata={"help": "xavier_normal on the 3-D kernel tensor (released) or per kernel"}
    )
    posnet_dropout: float = field(default=0.0, metadata={"help": "dropout of the PosNet branch (released: 0)"})
    posnet_max_positions: int = field(
        default=256, metadata={"help": "cap on L_max, the positions with a kernel: L_max = min(this, "
                                       "--max-source/target-positions); 256 fits the paper's parameter counts"})


class PosNetBase(BoundedPositions, PositionalEncoding):
    """Side selection, encoder-decoder sharing and L_max of both PosNet variants."""

    def __init__(self, cfg, dims, kernels: nn.ParameterDict):
        super().__init__(cfg, dims)
        self.kernels = kernels  # shared: the same module under encoder.pe and decoder.pe
        self.dropout = nn.Dropout(cfg.posnet_dropout)

    @classmethod
    def build(cls, cfg, dims, shared):
        if cfg.posnet_sides not in ("both", dims.side):
            return None
        if cfg.posnet_max_positions < 1:
            raise ValueError(f"--posnet-max-positions must be at least 1 (got {cfg.posnet_max_positions})")
        both = cfg.posnet_sides == "both" and cfg.posnet_share == "enc-dec"
        # L_max = min(cap, side's max positions); a module shared by both sides takes the larger side's
        lmax = min(cfg.posnet_max_positions,
                   max(dims.max_positions, dims.max_positions_model or 0) if both else dims.max_positions)
        kernels = shared.get(cls.name) if both else None
        if kernels is None:
            kernels = cls.make_kernels(cfg, dims, lmax)
            if both:
                shared[cls.name] = kernels
        cls.check_shareable(kernels, dims)
        return cls(cfg, dims, kernels)

    @classmethod
    def make_kernels(cls, cfg, dims, lmax: int) -> nn.ParameterDict:
        """The parameters (including the kernels "phi", (..., L_max, d, e)) of one side, or of both when shared."""
        raise NotImplementedError

    @classmethod
    def check_shareable(cls, kernels: nn.ParameterDict, dims) -> None:
        """Raise when kernels built for one side do not fit the other."""

    @property
    def max_positions(self) -> int:
        return self.kernels["phi"].size(-3)

    def limit_flag(self) -> str:
        if self.max_positions == self.cfg.posnet_max_positions:
            return "--posnet-max-positions"
        return super().limit_flag()

    def signature(self) -> str:
        """The settings with L_max as built (lmax:N) in place of the cap it came from (the recorded runs made
        before the cap existed read the same)."""
        parts = [p for p in super().signature().split("|") if not p.startswith("posnet_max_positions:")]
        return "|".join(parts + [f"lmax:{self.max_positions}"])

"""fairseq glue: the ``pe_transformer`` model, a stock Transformer whose positional signal comes from one
registered encoding (``--pe``).

Everything is done by subclassing and overriding builder hooks:
  * ``build_encoder`` / ``build_decoder`` build each side's encoding (before the stack, so parameter
    initialisation consumes the random stream in the same order as fairseq's own ``embed_positions``), and
    build the stack with fairseq's positional embedding switched off.
  * the stacks put a ``PositionSlot`` in fairseq's ``embed_positions`` slot (and, for encodings that act
    after the embedding dropout, a ``DropoutThenEmbed`` in ``dropout_module``), see ``pe_embedding``;
  * ``build_encoder_layer`` / ``build_decoder_layer`` swap the self-attention of the layers the encoding
    acts on for ``PEAttention``, initialised from the stock module's weights.
Cross-attention is never touched.

The encoder's ``forward`` and the decoder's ``extract_features`` build one ``PassContext`` per pass and hand it to
each PE attention layer (``modules/pass_context``). ``--pe-attention-impl {auto,reference,triton}`` selects the
per-pass context with the fused kernels, or the reference formulation recomputed in every layer, or auto with an
encoding's Triton kernels where it has them (``modules/pe_attention``); a checkpoint saved without the flag gets
``auto``.
``--pe-beyond-max {error,clamp}`` (``encoding_parts.limits``) sets what encodings with a position limit do beyond
it; under ``clamp`` both stacks' ``max_positions()`` report no limit, so that fairseq-generate decodes every
sentence instead of stopping before the first one that does not fit.
"""
import argparse
import copy
import logging

from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.models import register_model
from fairseq.models.transformer import TransformerConfig, TransformerDecoderBase, TransformerEncoderBase, TransformerModel

from .. import cli_errors
from ..encodings import PE_REGISTRY, config_from_args, get_pe_class
from ..encoding_parts.base import Dims
from ..encoding_parts.limits import BEYOND_MAX_CHOICES, UNLIMITED
from ..encodings.none import NoPositionalEncoding
from ..modules.pass_context import PassContext
from ..modules.pe_attention import PEAttention
from ..modules.pe_embedding import DropoutThenEmbed, PositionSlot
from . import validation

logger = logging.getLogger(__name__)
ATTENTION_IMPLS = ("auto", "reference", "triton")  # --pe-attention-impl, see modules/pe_attention.py


def _stack_cfg(args):
    """A private copy of the config with fairseq's own positional embedding off (ours replaces it)."""
    cfg = copy.deepcopy(TransformerConfig.from_namespace(args))
    cfg.no_token_positional_embeddings = True
    return cfg


class _PEStack:
    """Mixin for TransformerEncoderBase / TransformerDecoderBase: owns the side's encoding as ``self.pe``."""

    def _attach_pe_before_init(self, pe):
        # layers are built inside fairseq's __init__, so the encoding must be reachable before it runs
        object.__setattr__(self, "_pending_pe", pe)
        object.__setattr__(self, "_num_built_layers", 0)

    def _attach_pe_after_init(self):
        pe = self.__dict__.pop("_pending_pe")
        self.pe = pe
        self.embed_positions = PositionSlot(pe, self.embed_tokens)
        if pe.embed_after_dropout and pe.has_embedding_hook():
            self.dropout_module = DropoutThenEmbed(self.dropout_module, self.embed_positions)

    # whether targets are right-padded (fairseq's default, --left-pad-target off): set on the decoder by the model
    right_padded = False

    def _one_pass(self, run):
        """Run one forward pass of the stack with one ``PassContext`` handed to each of its PE attention layers:
        what they share is built once, by the first of them (modules/pass_context)."""
        context = PassContext(self.pe, right_padded=self.right_padded)
        layers = [m for m in self.layers.modules() if isinstance(m, PEAttention)]
        for attention in layers:
            attention.context = context
        try:
            return run()
        finally:
            for attention in layers:
                attention.context = None

    def max_positions(self):
        """fairseq's limit (--max-source/target-positions, and the encoding's), or none under ``clamp``."""
        if getattr(self.pe, "beyond_max", "error") == "clamp":
            return UNLIMITED
        return super().max_positions()

    def _install_pe_attention(self, layer, embed_dim, num_heads, attention_dropout):
        pe, idx = self.__dict__["_pending_pe"], self.__dict__["_num_built_layers"]
        object.__setattr__(self, "_num_built_layers", idx + 1)
        if pe.applies_to_layer(idx):
            stock = layer.self_attn
            layer.self_attn = PEAttention(embed_dim, num_heads, pe, idx, dropout=attention_dropout)
            layer.self_attn.load_state_dict(stock.state_dict())
        return layer


class PETransformerEncoder(_PEStack, TransformerEncoderBase):
    def __init__(self, cfg, dictionary, embed_tokens, pe):
        self._attach_pe_before_init(pe)
        super().__init__(cfg, dictionary, embed_tokens)
        self._attach_pe_after_init()

    def forward(self, *args, **kwargs):
        return self._one_pass(lambda: super(PETransformerEncoder, self).forward(*args, **kwargs))

    def build_encoder_layer(self, cfg):
        layer = super().build_encoder_layer(cfg)
        return self._install_pe_attention(
            layer, cfg.encoder.embed_dim, cfg.encoder.attention_heads, cfg.attention_dropout
        )


class PETransformerDecoder(_PEStack, TransformerDecoderBase):
    def __init__(self, cfg, dictionary, embed_tokens, pe, no_encoder_attn=False):
        self._attach_pe_before_init(pe)
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn)
        self._attach_pe_after_init()

    def extract_features(self, *args, **kwargs):
        # one pass: the full target in training, or one step of incremental decoding
        return self._one_pass(lambda: super(PETransformerDecoder, self).extract_features(*args, **kwargs))

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        layer = super().build_decoder_layer(cfg, no_encoder_attn)
        return self._install_pe_attention(
            layer, cfg.decoder.embed_dim, cfg.decoder.attention_heads, cfg.attention_dropout
        )


@register_model("pe_transformer")
class PETransformerModel(TransformerModel):
    """Transformer with a pluggable positional encoding; architectures ``transformer_<pe>_<size>``."""

    # one dict per model build, for modules an encoding shares between encoder and decoder
    _shared = None

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        group = parser  # fairseq's model-specific group (argument_default=SUPPRESS)
        group.add_argument("--pe", choices=sorted(PE_REGISTRY), metavar="NAME",
                           help="positional encoding: " + ", ".join(sorted(PE_REGISTRY)))
        # encodings of one family may share flags (one config base class): each flag is added once
        staging = argparse.ArgumentParser(add_help=False, argument_default=argparse.SUPPRESS,
                                          conflict_handler="resolve")
        for pe_cls in PE_REGISTRY.values():
            if pe_cls.config_cls is not None:
                gen_parser_from_dataclass(staging, pe_cls.config_cls(), delete_default=True)
        for action in staging._actions:
            group._add_action(action)
        group.add_argument("--pe-attention-impl", choices=ATTENTION_IMPLS, default="auto",
                           help="self-attention of the encodings: auto (what the layers share is built once per "
                                "pass; fused attention with no mask, is_causal or one aligned float mask where the "
                                "encoding adds nothing after the softmax) or reference (every layer recomputes "
                                "everything and runs the explicit product as the equations read; auto is tested "
                                "against it) or triton (auto, with an encoding's fused Triton kernels where it has "
                                "them: Shaw's RPE on CUDA, without attention dropout; not yet timed on a GPU)")
        group.add_argument("--pe-beyond-max", choices=BEYOND_MAX_CHOICES, default="error",
                           help="positions beyond what LAPE / PosNet support (--max-source/target-positions): "
                                "error (stop; fairseq-generate stops before decoding) or clamp (reuse the last "
                                "row, for decoding; fairseq-generate: --model-overrides "
                                "\"{'pe_beyond_max': 'clamp'}\")")

    @classmethod
    def build_model(cls, args, task):
        cls._shared = {}
        try:
            validation.check_args(args, task)
            model = super().build_model(args, task)
        except validation.PEConfigError as e:
            cli_errors.report(e)  # in fairseq-train/-generate/-interactive: argparse's one-line error, exit 2
            raise
        finally:
            cls._shared = None
        validation.log_model_summary(model, args)
        return model

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        try:
            return super().load_state_dict(state_dict, strict, model_cfg, args)
        except RuntimeError as e:  # a size mismatch (--model-overrides of a sizing flag): named with its fix
            cli_errors.size_mismatch(e)
            raise

    @classmethod
    def _build_pe(cls, args, cfg, side, embed_tokens):
        pe_cls = get_pe_class(args.pe)
        sub = cfg.encoder if side == "encoder" else cfg.decoder
        max_positions = cfg.max_source_positions if side == "encoder" else cfg.max_target_positions
        dims = Dims(sub.embed_dim, sub.attention_heads, sub.layers, max_positions, embed_tokens.padding_idx, side,
                    max(cfg.max_source_positions, cfg.max_target_positions))
        pe_cfg = config_from_args(pe_cls, args)
        try:
            pe = pe_cls.build(pe_cfg, dims, cls._shared if cls._shared is not None else {})
        except ValueError as e:  # an encoding rejects its settings with a ValueError that names the flag
            raise validation.PEConfigError(str(e)) from e
        pe = pe if pe is not None else NoPositionalEncoding(None, dims)
        pe.beyond_max = getattr(args, "pe_beyond_max", None) or "error"  # encoding_parts.limits
        pe.attention_impl = getattr(args, "pe_attention_impl", None) or "auto"
        return pe

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        cfg = _stack_cfg(args)
        pe = cls._build_pe(args, cfg, "encoder", embed_tokens)
        return PETransformerEncoder(cfg, src_dict, embed_tokens, pe)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        cfg = _stack_cfg(args)
        pe = cls._build_pe(args, cfg, "decoder", embed_tokens)
        decoder = PETransformerDecoder(cfg, tgt_dict, embed_tokens, pe, no_encoder_attn=cfg.no_cross_attention)
        decoder.right_padded = not getattr(args, "left_pad_target", False)  # is_causal is exact (pass_context)
        return decoder

"""Checks of a model's flags before it is built, and the summary logged once it is.

Every error names the flag (or the file) at fault and the fix.
"""
import logging

from ..encodings import PE_REGISTRY, config_fields, get_pe_class
from ..naming import arch_name

logger = logging.getLogger("pe_plugin")


class PEConfigError(ValueError):
    pass


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_args(args, task) -> None:
    pe = getattr(args, "pe", None)
    if pe is None:
        raise PEConfigError(
            f"no positional encoding chosen: pass --pe NAME or an --arch transformer_<pe>_<size>; "
            f"valid names: {', '.join(sorted(PE_REGISTRY))}"
        )
    pe_cls = get_pe_class(pe)
    if getattr(args, "no_token_positional_embeddings", False):
        raise PEConfigError(
            "--no-token-positional-embeddings conflicts with pe_plugin's encodings; "
            "for a model without positions use --arch transformer_nope_<size> (or --pe nope)"
        )
    for side in ("encoder", "decoder"):
        if getattr(args, f"{side}_learned_pos", False):
            raise PEConfigError(
                f"--{side}-learned-pos conflicts with pe_plugin's encodings; "
                f"for learned absolute positions use --arch transformer_lape_<size> (or --pe lape)"
            )
    if getattr(args, "cross_self_attention", False) or getattr(args, "quant_noise_pq", 0):
        raise PEConfigError("--cross-self-attention and --quant-noise-pq are not supported by pe_plugin models")
    own = set(config_fields(pe_cls))
    for other in PE_REGISTRY.values():
        if other is pe_cls:
            continue
        for name in config_fields(other):
            if name not in own and hasattr(args, name):
                raise PEConfigError(
                    f"{_flag(name)} is a flag of pe '{other.name}', which pe '{pe}' does not support; "
                    f"drop it or choose --arch {arch_name(other.name, '<size>')}"
                )
    if getattr(args, "share_all_embeddings", False) and task.source_dictionary != task.target_dictionary:
        raise PEConfigError(
            "--share-all-embeddings needs one dictionary for both languages, but the data directory has two "
            "(dict.SRC.txt and dict.TGT.txt differ). Re-run fairseq-preprocess with --joined-dictionary "
            "(or pass --srcdict and --tgtdict the same file), or drop --share-all-embeddings"
        )


def _count(modules) -> int:
    seen = {}
    for m in modules:
        for p in m.parameters():
            seen[id(p)] = p.numel()
    return sum(seen.values())


def pe_parameter_count(model) -> int:
    """Parameters that belong to the positional encodings (shared ones counted once)."""
    return _count([model.encoder.pe, model.decoder.pe])


def pe_signature(model) -> str:
    """The model's encoding settings on one line: ``pe:sape|side:both`` when encoder and decoder have the same
    encoding with the same settings, else both sides' signatures, e.g.
    ``pe:posnet_embed|side:encoder|... ; pe:nope|side:decoder`` (the released PosNet configuration)."""
    enc, dec = model.encoder.pe.signature(), model.decoder.pe.signature()
    both = enc.replace("|side:encoder", "|side:both", 1)
    return both if both == dec.replace("|side:decoder", "|side:both", 1) else f"{enc} ; {dec}"


def log_model_summary(model, args) -> None:
    total = _count([model])
    pe = pe_parameter_count(model)
    logger.info(
        "arch %s | params total %s | pe-only %s | %s",
        getattr(args, "arch", "?"), f"{total:,}", f"{pe:,}", pe_signature(model),
    )

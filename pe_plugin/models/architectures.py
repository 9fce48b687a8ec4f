"""Named architectures ``transformer_<pe>_<size>``, registered in a loop from one table.

Every registered encoding gets one architecture per architecture suffix (``naming.CLASS_OF_SUFFIX``); the names
appear literally in the README's method table and are listed by ``architecture_names()``. For example:
transformer_sape_tiny, transformer_sape_wmt_en_de, transformer_sape_wmt_en_de_big, transformer_sape_wmt_en_fr_big,
transformer_nope_*, transformer_lape_*, and likewise for every other name in PE_REGISTRY.

A suffix has fairseq's parent architecture (``PARENTS``) and the size class whose encoding defaults apply
(``PositionalEncoding.size_defaults``). As in fairseq, defaults are applied with ``getattr`` so that
flags given on the command line win.
"""
from fairseq.models import register_model_architecture
from fairseq.models.transformer import transformer_legacy as stock

from .. import cli_errors
from ..encodings import PE_REGISTRY
from ..naming import CLASS_OF_SUFFIX, arch_name  # noqa: F401  (arch_name: re-exported)
from .validation import PEConfigError

PARENTS = {  # architecture suffix -> fairseq's parent architecture (its size class: naming.CLASS_OF_SUFFIX)
    "tiny": stock.tiny_architecture,
    "wmt_en_de": stock.transformer_wmt_en_de,
    "wmt_en_de_big": stock.transformer_wmt_en_de_big,
    "wmt_en_fr_big": stock.transformer_vaswani_wmt_en_fr_big,
}
assert set(PARENTS) == set(CLASS_OF_SUFFIX), "pe_plugin.naming.CLASS_OF_SUFFIX and PARENTS must name the same sizes"


def architecture_names():
    return [arch_name(pe, suffix) for pe in PE_REGISTRY for suffix in CLASS_OF_SUFFIX]


def _make_architecture(pe: str, parent, size: str):
    def architecture(args):
        chosen = getattr(args, "pe", pe)
        if chosen != pe:
            error = PEConfigError(
                f"--arch {args.arch} fixes the encoding to '{pe}' but --pe {chosen} was given; "
                f"drop --pe or use --arch {arch_name(chosen, args.arch.split(pe + '_', 1)[-1])}"
            )
            cli_errors.report(error)  # in a fairseq tool: argparse's one-line error, exit 2
            raise error
        args.pe = pe
        for key, value in PE_REGISTRY[pe].size_defaults.get(size, {}).items():
            setattr(args, key, getattr(args, key, value))
        parent(args)

    return architecture


@register_model_architecture("pe_transformer", "pe_transformer")
def pe_transformer_base(args):
    """The model's default architecture: base size; the encoding comes from --pe."""
    stock.transformer_wmt_en_de(args)


for _pe in PE_REGISTRY:
    for _suffix, _size in CLASS_OF_SUFFIX.items():
        register_model_architecture("pe_transformer", arch_name(_pe, _suffix))(
            _make_architecture(_pe, PARENTS[_suffix], _size)
        )

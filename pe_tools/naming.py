"""A copy of ``pe_plugin/naming.py``, the names pe_plugin registers, for the tools (which build commands and
reports): the baseline encoding, the architecture sizes and ``transformer_<pe>_<size>`` names.

A copy because importing anything under pe_plugin runs ``pe_plugin/__init__``, which imports fairseq and torch,
and ``pe_tools.naming`` must not; and pe_plugin imports nothing from pe_tools, so that the folder pe_plugin/
alone works as a fairseq ``--user-dir``. tests/test_standalone.py checks that this copy equals the plugin's:
change ``pe_plugin/naming.py`` first, then this file."""

BASELINE = "sape"  # the encoding every report compares with (sinusoidal absolute positions)

# architecture suffix -> size class (whose encoding defaults apply, ``PositionalEncoding.size_defaults``)
SIZES = {
    "tiny": "tiny",
    "wmt_en_de": "base",
    "wmt_en_de_big": "big",
    "wmt_en_fr_big": "big",
}


def arch_name(pe: str, suffix: str) -> str:
    """The registered architecture of encoding ``pe`` at size ``suffix``: ``transformer_<pe>_<suffix>``."""
    return f"transformer_{pe}_{suffix}"


def is_pe_arch(arch: str) -> bool:
    """Whether ``arch`` has the form of ``arch_name`` (a pe_plugin architecture), not a stock fairseq one such as
    ``transformer`` or ``transformer_wmt_en_de``."""
    return any(arch.startswith("transformer_") and arch.endswith(f"_{suffix}") and
               len(arch) > len("transformer_") + len(suffix) + 1 for suffix in SIZES)


# size class -> the first architecture suffix of that class ("base" -> "wmt_en_de", "big" -> "wmt_en_de_big")
SUFFIX_OF_CLASS = {}
for _suffix, _size in SIZES.items():
    SUFFIX_OF_CLASS.setdefault(_size, _suffix)

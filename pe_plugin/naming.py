"""The names pe_plugin registers, as plain data: the baseline encoding, the architecture sizes and
``transformer_<pe>_<size>`` names. pe_plugin/models/architectures.py registers one architecture per encoding and
architecture suffix.

Plain Python that imports nothing: the tools execute this file by its path (``pe_tools/plugin_modules.py``), as
importing anything under pe_plugin runs ``pe_plugin/__init__``, which imports fairseq.
"""

BASELINE = "sape"  # the encoding every report compares with (sinusoidal absolute positions)
PROGRESS_LOGGER = "pe_plugin.progress"  # the logger of the lines after a run's first updates (first_updates.py)

# architecture suffix -> size class (whose encoding defaults apply, ``PositionalEncoding.size_defaults``)
CLASS_OF_SUFFIX = {
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
               len(arch) > len("transformer_") + len(suffix) + 1 for suffix in CLASS_OF_SUFFIX)


# size class -> the first architecture suffix of that class ("base" -> "wmt_en_de", "big" -> "wmt_en_de_big")
SUFFIX_OF_CLASS = {}
for _suffix, _size in CLASS_OF_SUFFIX.items():
    SUFFIX_OF_CLASS.setdefault(_size, _suffix)

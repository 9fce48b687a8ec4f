"""The names pe_plugin registers, for the tools (which build commands and reports): those of
``pe_plugin/naming.py``, loaded without importing pe_plugin (``plugin_modules``)."""
from .plugin_modules import load

_names = load("naming")
BASELINE = _names.BASELINE  # the encoding every report compares with (sinusoidal absolute positions)
PROGRESS_LOGGER = _names.PROGRESS_LOGGER  # the logger of pe_plugin's lines after a run's first updates
CLASS_OF_SUFFIX = _names.CLASS_OF_SUFFIX  # architecture suffix -> size class (whose encoding defaults apply)
SUFFIX_OF_CLASS = _names.SUFFIX_OF_CLASS  # size class -> its first architecture suffix
arch_name = _names.arch_name  # transformer_<pe>_<suffix>
is_pe_arch = _names.is_pe_arch  # whether an --arch has that form

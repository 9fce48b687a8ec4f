"""The names pe_plugin registers, for the tools (which build commands and reports): the baseline encoding, the
architecture sizes and ``transformer_<pe>_<size>`` names. Their one home is ``pe_plugin/naming.py``.

That file imports nothing, and this module executes it by its path instead of importing ``pe_plugin.naming``:
importing anything under pe_plugin runs ``pe_plugin/__init__``, which imports fairseq and torch, and
``pe_tools.naming`` must not; pe_plugin, for its part, imports nothing from pe_tools, so that the folder
pe_plugin/ alone works as a fairseq ``--user-dir``. The two packages are installed side by side (the checkout,
or site-packages), so the file is found next to this package. tests/test_standalone.py checks that the names
here are the plugin's and that no torch or fairseq module is imported.
"""
import importlib.util
from pathlib import Path

_SOURCE = Path(__file__).resolve().parents[1] / "pe_plugin" / "naming.py"
if not _SOURCE.is_file():
    raise ImportError(f"pe_tools needs pe_plugin/naming.py beside it ({_SOURCE} is missing); reinstall the package "
                      f"(pip install .) so that pe_plugin and pe_tools are installed together")
_spec = importlib.util.spec_from_file_location("pe_tools._plugin_naming", _SOURCE)
_names = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_names)

BASELINE = _names.BASELINE  # the encoding every report compares with (sinusoidal absolute positions)
SIZES = _names.SIZES  # architecture suffix -> size class (whose encoding defaults apply)
SUFFIX_OF_CLASS = _names.SUFFIX_OF_CLASS  # size class -> its first architecture suffix
arch_name = _names.arch_name  # transformer_<pe>_<suffix>
is_pe_arch = _names.is_pe_arch  # whether an --arch has that form

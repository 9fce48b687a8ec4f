"""pe_plugin's torch-free modules for the tools, executed by their path: its names (``naming.py``) and its
log-noise literals (``log_noise.py``), which ``pe_tools.naming`` and ``pe_tools.log_noise`` hand on.

Importing anything under pe_plugin runs ``pe_plugin/__init__``, which imports fairseq and torch; the tools'
text-only modules must not. pe_plugin, for its part, imports nothing from pe_tools, so that the folder pe_plugin/
alone works as a fairseq ``--user-dir``. So each file is executed on its own, once, as a module of its own name;
the files import only the standard library (tests/test_standalone.py checks it). The two packages are installed
side by side (the checkout, or site-packages), so the files are found next to this package.
"""
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

PLUGIN_DIR = Path(__file__).resolve().parents[1] / "pe_plugin"


def load(name: str) -> ModuleType:
    """pe_plugin/NAME.py, executed once as the module ``pe_tools.plugin_modules.NAME`` (not ``pe_plugin.NAME``)."""
    key = f"{__name__}.{name}"
    if key not in sys.modules:
        source = PLUGIN_DIR / f"{name}.py"
        if not source.is_file():
            raise ImportError(f"pe_tools needs pe_plugin/{name}.py beside it ({source} is missing); reinstall the "
                              f"package (pip install .) so that pe_plugin and pe_tools are installed together")
        spec = importlib.util.spec_from_file_location(key, source)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[key] = module
    return sys.modules[key]

"""pe_plugin: positional encodings for fairseq NMT. Load with ``--user-dir pe_plugin``."""
__version__ = "0.1.0"

from .checkpoints import register_safe_globals

register_safe_globals()

from . import encodings  # noqa: E402,F401  (fills the registry)
from .models import pe_transformer, architectures  # noqa: E402,F401  (fairseq registrations)

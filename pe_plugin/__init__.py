"""pe_plugin: positional encodings for fairseq NMT. Load with ``--user-dir pe_plugin``."""
import sys

__version__ = "0.1.0"
PYTHON_FLOOR = (3, 11)  # setup.py python_requires, scripts/setup_env.sh and README.md say the same

if sys.version_info < PYTHON_FLOOR:
    raise ImportError(
        f"pe_plugin needs Python {PYTHON_FLOOR[0]}.{PYTHON_FLOOR[1]} or newer, this is {sys.version.split()[0]}; "
        f"create the environment with `make setup` (see README.md)"
    )

from .log_noise import drop_tensorboardx_notice  # noqa: E402

drop_tensorboardx_notice()  # before the imports below import fairseq

from .safe_load import register_safe_globals  # noqa: E402

register_safe_globals()

from .gloo_exit import register as register_gloo_exit  # noqa: E402

register_gloo_exit()

from .resume_batches import register as register_resumable_translation  # noqa: E402

register_resumable_translation()

from .first_updates import register as register_first_updates  # noqa: E402

register_first_updates()  # after the resumable task, which it extends

from . import encodings  # noqa: E402,F401  (fills the registry)
from .models import pe_transformer, architectures  # noqa: E402,F401  (fairseq registrations)

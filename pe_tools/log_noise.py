"""The one fairseq log line this project drops: "Please install tensorboardX" (docs/fairseq.md §Log noise).
``pe_tools.process`` drops the printed line from the output of fairseq's command-line tools, which log it before
they load ``--user-dir``; the literals are ``pe_plugin/log_noise.py``'s, loaded without importing pe_plugin
(``plugin_modules``)."""
from .plugin_modules import load

_noise = load("log_noise")
LOGGER = _noise.LOGGER  # the logger that emits the notice
NOTICE = _noise.NOTICE
PRINTED_NOTICE = _noise.PRINTED_NOTICE  # the printed form, under fairseq's format or logging's default one

"""The one fairseq log line this project drops: "Please install tensorboardX".

fairseq imports all of its tasks whenever it is imported, and its text-to-speech task logs this notice at import
when tensorboardX is missing. Translation never uses tensorboardX, so the line is noise (docs/fairseq.md
§Log noise). Two places drop it, from the same literals: ``pe_plugin.log_noise`` filters the logging
record inside a process that imports pe_plugin first, and ``pe_tools.process`` drops the printed line
from the output of fairseq's command-line tools, which log it before they load ``--user-dir``.

The literals are a copy of those in ``pe_plugin/log_noise.py``: pe_plugin imports nothing from pe_tools (the
folder pe_plugin/ alone is a fairseq ``--user-dir``), and this module must not import pe_plugin (whose
``__init__`` imports fairseq and torch). tests/test_standalone.py checks that the copies are equal.
"""
import re

LOGGER = "fairseq.tasks.text_to_speech"
NOTICE = "Please install tensorboardX"

# the printed form, under fairseq's format ("... | fairseq.tasks.text_to_speech | Please ...") or logging's
# default one ("INFO:fairseq.tasks.text_to_speech:Please ...")
PRINTED_NOTICE = re.compile(re.escape(LOGGER) + r" ?[|:] ?" + re.escape(NOTICE))

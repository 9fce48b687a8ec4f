"""The one fairseq log line that pe_plugin drops: "Please install tensorboardX".

fairseq imports all of its tasks whenever it is imported, and its text-to-speech task logs this notice at
import when tensorboardX is missing. Translation never uses tensorboardX (``--tensorboard-logdir`` goes
through ``torch.utils.tensorboard`` and warns on its own if that is missing), so the line is noise. Importing
pe_plugin before fairseq (as our scripts do) installs a filter on exactly that logger and message; every other
record, of that logger too, passes. fairseq's command-line tools log the notice before they load
``--user-dir``, so ``pe_tools.process`` drops the same line from their output. See docs/fairseq.md
§Log noise.

The literals live here; ``pe_tools/log_noise.py`` hands them on, this file executed by its path
(``pe_tools/plugin_modules.py``): it imports only the standard library.
"""
import logging
import re

LOGGER = "fairseq.tasks.text_to_speech"
NOTICE = "Please install tensorboardX"

# the printed form, under fairseq's format ("... | fairseq.tasks.text_to_speech | Please ...") or logging's
# default one ("INFO:fairseq.tasks.text_to_speech:Please ...")
PRINTED_NOTICE = re.compile(re.escape(LOGGER) + r" ?[|:] ?" + re.escape(NOTICE))


class DropTensorboardXNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name == LOGGER and record.getMessage().startswith(NOTICE))


def drop_tensorboardx_notice() -> None:
    """Install the filter (once) on the logger that emits the notice."""
    logger = logging.getLogger(LOGGER)
    if not any(isinstance(f, DropTensorboardXNotice) for f in logger.filters):
        logger.addFilter(DropTensorboardXNotice())

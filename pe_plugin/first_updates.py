"""A log line after each of a run's first updates, before fairseq-train's first progress line.

fairseq-train logs its progress every --log-interval updates (``train_inner``); from "Start iterating over samples"
to that first line it prints nothing, which at a large model's pace is many minutes (100 updates at 13 s each).
The plugin's translation task logs one line, under the logger ``pe_plugin.progress``, after the optimizer step of
the updates in ``FIRST_UPDATES`` of each process (a resumed run's too), naming the run's updates done:

    2026-01-01 10:00:03 | INFO | pe_plugin.progress | num_updates 5

A tool that reads the log (pe-train, through pe_tools/recipes/training_log.py) turns them into updates done, a pace
and a finish estimate. Only the process whose logging is at INFO writes them (fairseq sets every other rank of a
multi-GPU run to WARNING). Importing pe_plugin puts ``FirstUpdatesTask`` under the name ``translation`` in fairseq's
task registry, above the plugin's ResumableTranslationTask; a translation task of another plugin is left in place.
"""
import logging

from fairseq import tasks

from .naming import PROGRESS_LOGGER
from .resume_batches import TASK, ResumableTranslationTask

FIRST_UPDATES = (1, 2, 5, 10)  # the updates after which a line is logged
logger = logging.getLogger(PROGRESS_LOGGER)


class FirstUpdatesTask(ResumableTranslationTask):
    steps = 0  # the optimizer steps this task has taken (this process's updates)

    def optimizer_step(self, optimizer, model, update_num):
        super().optimizer_step(optimizer, model, update_num)
        self.steps += 1
        if self.steps in FIRST_UPDATES:
            logger.info(f"num_updates {update_num + 1}")  # update_num: the run's updates before this step


def register() -> None:
    """The ``translation`` task is FirstUpdatesTask from here on, where it is the plugin's ResumableTranslationTask."""
    if tasks.TASK_REGISTRY.get(TASK) is ResumableTranslationTask:
        tasks.TASK_REGISTRY[TASK] = FirstUpdatesTask

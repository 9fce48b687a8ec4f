"""A run resumed in epoch k trains on the batches an uninterrupted run trains on.

fairseq 0.12 groups the training set into batches once, when a run's first training iterator is built, and then
only shuffles the order of those batches in each epoch (``FairseqTask.get_batch_iterator`` with a reusable
iterator). The grouping depends on the epoch the iterator is built in: ties between sentences of equal length are
broken by a permutation drawn under ``numpy_seed(seed + epoch)``. An uninterrupted run builds its batches in epoch
1. A run resumed from a checkpoint of epoch k >= 2 builds them in epoch k, so from its first update on it trains
on batches of other sentences than the run it continues (same sizes, other contents), and a killed or preempted
run no longer reproduces the uninterrupted one. Resumes within epoch 1 are unaffected.

``ResumableTranslationTask`` is fairseq's translation task with that one difference removed: when the iterator is
one that fairseq reuses across epochs, its batches are built with the seed of epoch 1 whatever the epoch, and the
order of the batches in each epoch is shuffled as before (``seed + epoch``). An uninterrupted run is unchanged;
a resumed run continues with the batches of the run it resumes. Iterators that fairseq rebuilds every epoch
(``--update-epoch-batch-itr``, sharded data) already draw their batches per epoch, identically on resume, and are
left alone. Importing pe_plugin puts the class under the name ``translation`` in fairseq's task registry, so
``--task translation`` (fairseq's default) uses it: an argv and its checkpoints stay what they were.
(``--update-ordered-indices-seed`` makes the trainer's seed itself depend on the epoch; with it, resumes past
epoch 1 still differ, as in fairseq.) See docs/fairseq.md §Resuming a run.
"""
from fairseq import tasks
from fairseq.tasks.translation import TranslationTask

TASK = "translation"


class ResumableTranslationTask(TranslationTask):
    def get_batch_iterator(self, dataset, *args, seed=1, epoch=1, disable_iterator_cache=False,
                           update_epoch_batch_itr=False, **kwargs):
        built_once = not disable_iterator_cache and not update_epoch_batch_itr and self.can_reuse_epoch_itr(dataset)
        # fairseq draws the batches under numpy_seed(seed + epoch): seed - (epoch - 1) makes that seed + 1, epoch 1's
        first_epoch_seed = seed - (epoch - 1) if built_once else seed
        itr = super().get_batch_iterator(dataset, *args, seed=first_epoch_seed, epoch=epoch,
                                         disable_iterator_cache=disable_iterator_cache,
                                         update_epoch_batch_itr=update_epoch_batch_itr, **kwargs)
        itr.seed = seed  # each epoch's order of the batches: shuffled under seed + epoch, as in fairseq
        return itr


def register() -> None:
    """fairseq's ``translation`` task is ResumableTranslationTask from here on (``register_task`` would keep the
    first class registered under a name, so the registry entry is replaced)."""
    if tasks.TASK_REGISTRY.get(TASK) is TranslationTask:
        tasks.TASK_REGISTRY[TASK] = ResumableTranslationTask

"""A run resumed after epoch 1 trains on the batches of the uninterrupted run (pe_plugin/resume_batches.py):
fairseq-train's iterators built exactly as it builds them, once in epoch 1 and carried into epoch 2 (the
uninterrupted run), and once in epoch 2 in a new task (a run resumed from a checkpoint saved at the end of epoch 1);
fairseq's own task, which the plugin replaces, gives the resumed run batches of other sentences."""
import pytest
from fairseq import tasks
from fairseq.tasks.translation import TranslationTask

from pe_testing import parse_train_args

from pe_plugin.resume_batches import ResumableTranslationTask
import pe_testing

EPOCHS = 3


def batches_by_epoch(task_class, args, start_epoch: int) -> dict:
    """{epoch: [sorted sentence ids of each batch, in training order]} from ``start_epoch`` to EPOCHS, read from
    one iterator built as fairseq-train's trainer builds it at ``start_epoch`` (Trainer.get_train_iterator)."""
    cfg = tasks.setup_task(args).cfg  # the plugin's registered task builds the config
    task = task_class.setup_task(cfg)
    task.load_dataset("train", epoch=start_epoch)
    itr = task.get_batch_iterator(dataset=task.dataset("train"), max_tokens=args.max_tokens,
                                  max_positions=(1024, 1024), required_batch_size_multiple=8, seed=args.seed,
                                  epoch=start_epoch)
    out = {}
    for _ in range(start_epoch, EPOCHS + 1):
        epoch_itr = itr.next_epoch_itr(shuffle=True)
        out[itr.epoch] = [sorted(s["id"].tolist()) for s in epoch_itr]
    return out


@pytest.fixture(scope="module")
def args(data_bin):
    return parse_train_args(data_bin, "transformer_sape_tiny", ["--max-tokens", "200", "--seed", "3"])


def test_the_plugin_is_fairseqs_translation_task(args):
    assert isinstance(tasks.setup_task(args), ResumableTranslationTask) and args.task == "translation"


@pytest.mark.parametrize("start", [2, 3])
def test_a_resumed_run_trains_on_the_uninterrupted_runs_batches(args, start):
    whole = batches_by_epoch(ResumableTranslationTask, args, 1)
    assert whole[1] != whole[2] and sorted(whole[1]) == sorted(whole[2])  # one set of batches, reshuffled
    assert batches_by_epoch(ResumableTranslationTask, args, start) == {e: whole[e] for e in range(start, EPOCHS + 1)}


def test_fairseqs_own_task_rebuilds_other_batches_on_resume(args):
    """The reference that makes the test above able to fail: the same sizes, other sentences."""
    whole, resumed = batches_by_epoch(TranslationTask, args, 1), batches_by_epoch(TranslationTask, args, 2)
    assert whole[1] == batches_by_epoch(ResumableTranslationTask, args, 1)[1]  # an uninterrupted run is unchanged
    assert sorted(map(len, resumed[2])) == sorted(map(len, whole[2])) and sorted(resumed[2]) != sorted(whole[2])


def test_the_translation_task_of_another_plugin_is_left_in_place(monkeypatch):
    """pe_plugin/resume_batches.register replaces fairseq's own `translation` task only (survivor: its guard
    removed, which would replace another plugin's task too)."""
    from fairseq import tasks

    from pe_plugin import resume_batches

    class OtherPlugins(tasks.TASK_REGISTRY[resume_batches.TASK]):
        pass

    monkeypatch.setitem(tasks.TASK_REGISTRY, resume_batches.TASK, OtherPlugins)
    resume_batches.register()
    assert tasks.TASK_REGISTRY[resume_batches.TASK] is OtherPlugins


# ---- the translation task: iterators fairseq rebuilds every epoch are left alone ---------------------------------
def test_a_dataset_that_cannot_reuse_its_iterator_gets_fairseqs_batches_in_every_epoch(data_bin):
    """A training set whose iterator fairseq rebuilds every epoch (``can_reuse_epoch_itr_across_epochs`` False, as
    for a dataset whose contents depend on the epoch) draws its batches per epoch, so a resumed run already gets the
    uninterrupted run's: the plugin's translation task builds, in epochs 1 to 3, exactly the batches (sentence ids,
    in training order) of fairseq's own TranslationTask, which differ between epochs."""
    from fairseq import tasks
    from fairseq.tasks.translation import TranslationTask

    from pe_plugin.resume_batches import ResumableTranslationTask

    args = pe_testing.parse_train_args(data_bin, "transformer_sape_tiny", ["--max-tokens", "200", "--seed", "3"])
    cfg = tasks.setup_task(args).cfg
    batches = {}
    for task_class in (ResumableTranslationTask, TranslationTask):
        task = task_class.setup_task(cfg)
        task.load_dataset("train", epoch=1)
        dataset = task.dataset("train")
        dataset.__class__ = type("PerEpoch", (type(dataset),),
                                 {"can_reuse_epoch_itr_across_epochs": property(lambda self: False)})
        assert not task.can_reuse_epoch_itr(dataset)
        for epoch in (1, 2, 3):
            itr = task.get_batch_iterator(dataset=dataset, max_tokens=200, max_positions=(1024, 1024),
                                          required_batch_size_multiple=8, seed=3, epoch=epoch)
            batches[task_class, epoch] = [sorted(s["id"].tolist()) for s in itr.next_epoch_itr(shuffle=True)]
    for epoch in (1, 2, 3):
        assert batches[ResumableTranslationTask, epoch] == batches[TranslationTask, epoch], epoch
    assert sorted(batches[TranslationTask, 2]) != sorted(batches[TranslationTask, 3])  # other groupings

"""Progress on long commands: pe-train's lines from a run's first updates on (pe_plugin/first_updates.py, read by
pe_tools/recipes/training_log.py and train.Progress)."""
import logging
import time

from pe_testing import fairseq_train

from pe_tools.recipes import training_log
from pe_tools.recipes.train import Progress

FORMAT = "%(asctime)s | %(levelname)s | %(name)s | %(message)s"  # fairseq-train's log format


def log_lines(records):
    """The log records as fairseq-train's handler writes them."""
    formatter = logging.Formatter(FORMAT, datefmt="%Y-%m-%d %H:%M:%S")
    return [formatter.format(r) for r in records]


def test_pe_train_prints_a_progress_line_within_its_first_updates(data_bin, tmp_path, caplog):
    """A tiny run trained in this process, fairseq logging every 100 updates (so nothing of its own before the
    end): the plugin logs updates 1, 2 and 5 of its 6, and pe-train's Progress reads them into lines with the
    updates done, the pace and the finish estimate, from update 2 on (the first one's pace holds the start-up).
    The pace here is this test's own arithmetic on a fake clock: update 2 at 32 s after update 1 at 30 s."""
    caplog.set_level(logging.INFO)
    fairseq_train(data_bin, tmp_path / "ck", "--arch", "transformer_sape_tiny", "--max-update", "6",
                  "--log-interval", "100", "--no-save", "--disable-validation")
    lines = log_lines(caplog.records)
    first = [x for x in lines if (r := training_log.parse_line(x)) is not None and r.kind == "first"]
    assert [training_log.parse_line(x).updates for x in first] == [1, 2, 5]
    inner = [r.updates for r in map(training_log.parse_line, lines) if r is not None and r.kind == "train_inner"]
    assert inner == []  # fairseq itself said nothing of its progress: these lines are the only ones
    now = [0.0]
    progress = Progress(6, 0, clock=lambda: now[0])
    notes = []
    for line, t in zip(first, (30.0, 32.0, 38.0)):
        now[0] = t
        notes.append(progress.note(line))
    assert notes[0].startswith("[pe-train] update 1 of 6 (17%), 30.00 s/update")  # launch to update 1
    assert notes[1].startswith("[pe-train] update 2 of 6 (33%), 2.00 s/update, finish ~ ")
    assert notes[1].endswith("(in 8 s)")  # 4 updates left at 2 s
    assert notes[2].startswith("[pe-train] update 5 of 6 (83%), 2.00 s/update") and notes[2].endswith("(in 2 s)")


class _Optimizer:
    def __init__(self):
        self.steps = 0

    def step(self):
        self.steps += 1


def test_the_plugin_logs_a_process_s_first_updates_only_with_the_run_s_count(caplog):
    """A resumed run (500 updates done) logs after its process's 1st, 2nd, 5th and 10th update, naming the run's
    updates (501, 502, 505, 510), and nothing after (fairseq's own lines take over); each step is the optimizer's."""
    from pe_plugin.first_updates import FirstUpdatesTask

    caplog.set_level(logging.INFO)
    task, optimizer = FirstUpdatesTask.__new__(FirstUpdatesTask), _Optimizer()
    for done in range(500, 512):
        task.optimizer_step(optimizer, None, done)
    assert optimizer.steps == 12
    assert [r.getMessage() for r in caplog.records if r.name == "pe_plugin.progress"] == [
        "num_updates 501", "num_updates 502", "num_updates 505", "num_updates 510"]


def test_the_translation_task_is_the_one_that_logs_the_first_updates():
    """Importing pe_plugin makes fairseq's ``translation`` task the plugin's, with the first-update lines; the
    resumable batches stay (it extends that task)."""
    from fairseq import tasks

    import pe_plugin  # noqa: F401
    from pe_plugin.first_updates import FirstUpdatesTask
    from pe_plugin.resume_batches import ResumableTranslationTask

    assert tasks.TASK_REGISTRY["translation"] is FirstUpdatesTask
    assert issubclass(FirstUpdatesTask, ResumableTranslationTask)


def test_a_first_update_line_reads_as_its_update_and_nothing_else_does():
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    r = training_log.parse_line(f"{stamp} | INFO | pe_plugin.progress | num_updates 5\n")
    assert r.kind == "first" and r.updates == 5
    assert training_log.parse_line(f"{stamp} | INFO | pe_plugin.progress | something else") is None
    assert training_log.parse_line(f"{stamp} | INFO | pe_plugin | num_updates 5") is None
    assert training_log.last_update(f"{stamp} | INFO | pe_plugin.progress | num_updates 5\n") == 5


def test_pe_generate_prints_the_sentences_decoded_every_interval_of_decoding(capsys):
    """pe-generate's stdout sink counts the H- lines fairseq-generate writes a batch at a time and prints a line
    when a batch comes 30 s or more (exactly 30 included) after the last line, on a fake clock; all it was given
    is kept. The counts are this test's own: 4, then 3 (7 of 10 at 30 s), 2 at 59.9 s (29.9 s after: none), 1 at
    60 s (10 of 10)."""
    from pe_tools.recipes.generate import DecodeProgress

    now = [100.0]
    sink = DecodeProgress(10, every=30, clock=lambda: now[0])
    text = []
    for t, ids in ((110.0, range(0, 4)), (130.0, range(4, 7)), (159.9, range(7, 9)), (160.0, range(9, 10))):
        now[0] = t
        batch = "".join(f"S-{i}\tx\nH-{i}\t-0.5\ty\nD-{i}\t-0.5\ty\nP-{i}\t-0.5\n" for i in ids)
        text.append(batch)
        sink.write(batch)
    assert capsys.readouterr().err.splitlines() == ["[pe-generate] decoded 7 of 10 sentences (70%) in 30 s",
                                                    "[pe-generate] decoded 10 of 10 sentences (100%) in 60 s"]
    assert sink.getvalue() == "".join(text)


def test_pe_generate_prints_a_line_every_interval_while_one_batch_takes_longer(capfd):
    """Inside ``ticking`` a thread prints the line when it is due though no batch comes (a batch of a large model
    can take minutes): on a fake clock, nothing at 29.9 s, a line at 30 s; then, on the real clock with lines due
    every 0.05 s, lines come with no write at all, and none once the block has ended."""
    import time

    from pe_tools.recipes.generate import DecodeProgress

    now = [0.0]
    sink = DecodeProgress(10, every=30, clock=lambda: now[0])
    for now[0] in (29.9, 30.0):
        sink.tick()
    assert capfd.readouterr().err.splitlines() == ["[pe-generate] decoded 0 of 10 sentences (0%) in 30 s"]
    sink = DecodeProgress(10, every=0.05)
    with sink.ticking():
        deadline = time.monotonic() + 30
        while capfd.readouterr().err.count("[pe-generate] decoded 0 of 10") < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert time.monotonic() < deadline  # a line came while nothing was written
    capfd.readouterr()
    time.sleep(0.2)
    assert "[pe-generate]" not in capfd.readouterr().err  # the thread ended with the block


def test_pe_generate_ticks_while_fairseq_generate_has_written_nothing(monkeypatch, capsys):
    """fairseq_generate decodes inside the sink's ``ticking``: a line comes while fairseq-generate is still at its
    first batch (here it waits for that line before it prints anything)."""
    import threading

    from fairseq_cli import generate as fairseq_cli_generate

    from pe_tools.recipes import generate

    ticked, tick = threading.Event(), generate.DecodeProgress.tick

    def noted_tick(self):
        tick(self)
        if self.last > self.start:
            ticked.set()

    def cli_main():
        assert ticked.wait(30), "no progress line while the first batch was decoding"
        print("H-0\t-0.1\tein mann")

    monkeypatch.setattr(generate.DecodeProgress, "tick", noted_tick)
    monkeypatch.setattr(fairseq_cli_generate, "cli_main", cli_main)
    monkeypatch.setattr(generate, "PROGRESS_SECONDS", 0.05)
    assert generate.fairseq_generate(["data"], total=1) == (0, "H-0\t-0.1\tein mann\n")
    assert "[pe-generate] decoded 0 of 1 sentences (0%)" in capsys.readouterr().err


def test_pe_generate_decodes_with_progress_lines_and_returns_the_whole_output(monkeypatch, capsys):
    """fairseq_generate with the split's size: fairseq-generate's stdout goes through the progress sink (here every
    0 s, so a line after each print) and comes back whole; without a size (pe-bench) no line is printed."""
    from fairseq_cli import generate as fairseq_cli_generate

    from pe_tools.recipes import generate

    def cli_main():
        for i in range(3):
            print(f"H-{i}\t-0.1\tein mann")
        print("Generate test with beam=4: BLEU4 = 1.00")

    monkeypatch.setattr(fairseq_cli_generate, "cli_main", cli_main)
    monkeypatch.setattr(generate, "PROGRESS_SECONDS", 0)
    whole = "".join(f"H-{i}\t-0.1\tein mann\n" for i in range(3)) + "Generate test with beam=4: BLEU4 = 1.00\n"
    assert generate.fairseq_generate(["data"], total=3) == (0, whole)
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("[pe-generate] decoded")]
    # print writes a line, then its newline: a progress line after each of the two
    assert [x.split(" in ")[0] for x in lines][:3] == [f"[pe-generate] decoded {i} of 3 sentences ({share})"
                                                      for i, share in ((1, "33%"), (1, "33%"), (2, "67%"))]
    assert generate.fairseq_generate(["data"]) == (0, whole)
    assert "[pe-generate]" not in capsys.readouterr().err

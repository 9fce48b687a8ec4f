"""pe-bench train-speed, the one training-speed harness (pe_tools/bench/train_speed.py), and pe-bench wmt-corpus: the
per-update peak read before fairseq resets it, the host split, rounds and their verdicts, and one real run on the CPU."""
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

from pe_testing import REPO
from pe_tools.bench import _common, train_speed, wmt_corpus


# ------------------------------------------------------------------------------------------------
# the corpus

@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("wmt_shaped")
    return out, wmt_corpus.generate(out, sentences_n=20_000, valid_n=200, vocab=1000, seed=3)


def test_the_corpus_has_wmt14s_lengths(corpus):
    out, record = corpus
    src = record["stats"]["train.en"]
    assert src["sentences"] == 20_000
    assert 25.5 <= src["mean"] <= 28.5 and 19 <= src["median"] <= 25  # about 27 BPE tokens, median below the mean
    assert src["p99"] >= 3 * src["mean"] and src["max"] <= wmt_corpus.MAX_TOKENS  # a long tail, cut at 250
    sizes = {}
    for lang in ("en", "de"):
        idx = (out / f"train.en-de.{lang}.idx").read_bytes()
        assert idx[:9] == wmt_corpus.MAGIC and struct.unpack("<QBQ", idx[9:26]) == (1, wmt_corpus.UINT16, 20_000)
        sizes[lang] = np.frombuffer(idx[26:26 + 4 * 20_000], dtype=np.int32)
        tokens = np.frombuffer((out / f"train.en-de.{lang}.bin").read_bytes(), dtype=np.uint16)
        assert len(tokens) == sizes[lang].sum()
        ends = np.cumsum(sizes[lang]) - 1
        assert (tokens[ends] == wmt_corpus.EOS).all() and (tokens == wmt_corpus.EOS).sum() == 20_000
        body = np.delete(tokens, ends)
        assert body.min() >= wmt_corpus.SPECIALS and body.max() < 1000
        assert np.bincount(body)[4] > 20 * np.bincount(body)[500]  # Zipf: the first word far above the 497th
    ratio = (sizes["de"] - 1) / (sizes["en"] - 1)
    assert ratio.max() <= wmt_corpus.MAX_RATIO and ratio.min() >= 1 / wmt_corpus.MAX_RATIO
    assert (out / "dict.en.txt").read_text() == (out / "dict.de.txt").read_text()
    assert len((out / "dict.en.txt").read_text().splitlines()) == 1000 - wmt_corpus.SPECIALS


def test_fairseq_reads_the_corpus(corpus):
    from fairseq.data import Dictionary, data_utils

    out, record = corpus
    d = Dictionary.load(str(out / "dict.en.txt"))
    assert len(d) == 1000
    ds = data_utils.load_indexed_dataset(str(out / "train.en-de.en"), d)
    assert len(ds) == 20_000 and ds[0][-1] == d.eos() and ds.sizes.mean() == pytest.approx(record["stats"]["train.en"]["tokens"] / 20_000)


def test_the_corpus_is_deterministic_and_reused(tmp_path, corpus):
    out, _ = corpus
    again = wmt_corpus.generate(tmp_path / "a", sentences_n=20_000, valid_n=200, vocab=1000, seed=3)
    assert (tmp_path / "a" / "train.en-de.de.bin").read_bytes() == (out / "train.en-de.de.bin").read_bytes()
    stamp = (tmp_path / "a" / "train.en-de.de.bin").stat().st_mtime_ns
    assert wmt_corpus.generate(tmp_path / "a", sentences_n=20_000, valid_n=200, vocab=1000, seed=3) == again
    assert (tmp_path / "a" / "train.en-de.de.bin").stat().st_mtime_ns == stamp  # complete: left as it is
    wmt_corpus.generate(tmp_path / "a", sentences_n=100, valid_n=200, vocab=1000, seed=3)  # other settings: rewritten
    assert json.loads((tmp_path / "a" / "wmt_shaped.json").read_text())["stats"]["train.en"]["sentences"] == 100
    with pytest.raises(ValueError, match="--vocab 70000"):
        wmt_corpus.generate(tmp_path / "b", vocab=70_000)


# ------------------------------------------------------------------------------------------------
# ------------------------------------------------------------------------------------------------
# the per-update peak: read before fairseq's reset

class FakeCudaCounter:
    """torch.cuda's allocated bytes and peak counter, faked: what fairseq's trainer sees on a GPU."""

    def __init__(self, at_rest: int):
        self.allocated = self.peak = at_rest

    def allocate(self, n: int):
        self.allocated += n
        self.peak = max(self.peak, self.allocated)

    def max_memory_allocated(self, *args):
        return self.peak

    def reset_peak_memory_stats(self, *args):
        self.peak = self.allocated


def fairseq_train_step_tail(counter, activations: int):
    """What one fairseq Trainer.train_step does to the counter on CUDA: forward and backward allocate and free the
    activations, then (fairseq/trainer.py, to log gb_free) ``torch.cuda.reset_peak_memory_stats()``, looked up on
    torch.cuda at call time as fairseq does."""
    import torch

    counter.allocate(activations)
    counter.allocate(-activations)
    torch.cuda.max_memory_allocated()
    torch.cuda.reset_peak_memory_stats()


def test_the_cuda_peak_is_read_before_fairseqs_reset(monkeypatch):
    import torch

    counter = FakeCudaCounter(at_rest=1_400_000_000)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", counter.max_memory_allocated)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", counter.reset_peak_memory_stats)
    meter = train_speed.PeakMeter.for_device(cuda=True)
    meter.open()
    try:
        for activations in (40_000_000_000, 9_000_000_000):  # two updates, each its own peak
            meter.start()
            fairseq_train_step_tail(counter, activations)
            today = torch.cuda.max_memory_allocated()  # the read after train_step returns: memory at rest
            assert today == 1_400_000_000
            assert meter.read() == 1_400_000_000 + activations
    finally:
        meter.close()
    assert torch.cuda.reset_peak_memory_stats == counter.reset_peak_memory_stats  # unwrapped when closed


class FakeTrainer:
    """What Window reads of fairseq's Trainer: its config and its task's train_step and optimizer_step."""

    def __init__(self, step):
        from types import SimpleNamespace as NS

        self.cfg = NS(dataset=NS(max_tokens=128, num_workers=1), optimization=NS(update_freq=[2]),
                      common=NS(fp16=False), model=NS(arch="transformer_sape_tiny"))
        self.task = NS(train_step=step, optimizer_step=lambda: None)


def test_the_cpu_peak_is_the_updates_own_high_water_mark():
    """On a CPU the same fields: an update that touches 200 MB and frees them, then resets the high-water mark (the
    stand-in of fairseq's CUDA reset, through the module attribute the meter wraps), still reads 200 MB over the
    RSS it started from; the next update, which allocates nothing, does not."""
    import torch

    if not _common.reset_peak_rss():
        pytest.skip("no /proc/self/clear_refs here")

    def forward_backward(big):
        if big:
            x = torch.ones(50_000_000)  # 200 MB, written
            del x

    trainer = FakeTrainer(forward_backward)
    window = train_speed.Window(warmup=0, timed=2, profiled=0, cuda=False)
    peaks = []
    for big in (True, False):
        window.begin(trainer)
        before = _common.current_rss_bytes()
        trainer.task.train_step(big)
        _common.reset_peak_rss()  # the stand-in of fairseq's reset at the end of its train_step
        today = _common.peak_rss_bytes()  # what a read after train_step sees
        trainer.task.optimizer_step()
        window.end([{"ntokens": 7}, {"ntokens": 5}], {})
        peaks.append((window.updates[-1]["peak_bytes"] - before, today - before))
    (big_peak, big_today), (small_peak, _) = peaks
    assert big_peak >= 190_000_000 > big_today
    assert small_peak < 100_000_000
    u = window.updates[-1]
    assert u["words"] == 12 and u["phase"] == "timed"
    assert u["wall_s"] == pytest.approx(u["wait_s"] + u["fwd_bwd_s"] + u["optimizer_s"] + u["bookkeeping_s"])
    assert window.done and _common.reset_peak_rss.__name__ == "reset_peak_rss"  # unwrapped once the window closed


# ------------------------------------------------------------------------------------------------
# rounds, ratios and verdicts

def test_the_one_timer_charges_each_call_returned_or_raised(monkeypatch):
    """_common.timing (the host split's and the batch wait's timer): every call's seconds reach its slot."""
    clock = iter([0.0, 0.25, 1.0, 1.5])
    monkeypatch.setattr(_common.time, "perf_counter", lambda: next(clock))
    spent = []

    def fail():
        raise KeyError("x")

    assert _common.timing(lambda: 7, spent.append)() == 7
    with pytest.raises(KeyError):
        _common.timing(fail, spent.append)()
    assert spent == [0.25, 0.5]


def test_rounds_rotate_the_order():
    assert _common.rotated(["a", "b", "c"], 3) == [("a", 1), ("b", 1), ("c", 1), ("b", 2), ("c", 2), ("a", 2),
                                                   ("c", 3), ("a", 3), ("b", 3)]


def test_a_spread_that_covers_the_bound_is_within_noise():
    s = _common.spread([1.08, 1.12, None, 1.09])
    assert (s["median"], s["min"], s["max"], s["n"]) == (1.09, 1.08, 1.12, 3)
    assert _common.verdict(s, 1.10, at_least=False) == "within noise"
    assert _common.verdict(s, 1.20, at_least=False) == "meets"
    assert _common.verdict(s, 1.05, at_least=False) == "misses"
    assert _common.verdict(_common.spread([3.9, 4.2]), 4.0, at_least=True) == "within noise"
    assert _common.verdict({}, 4.0, at_least=True) == "n/a"


def run(row, split, k, step, peak, wps, order):
    return {"key": [row, k], "row": row, "pe": row.split("@")[0], "impl": "auto", "size": "base", "split": split,
            "split_how": "given", "max_tokens": int(split.split("x")[0]), "update_freq_n": int(split.split("x")[1]),
            "step_s": step, "peak_bytes": peak, "wps": wps, "order": order, "device_name": "x", "command": "c",
            "num_workers": 1, "fp16": True, "activity": "cuda", "top_kernels": [], "busy_unprofiled": 0.5}


def test_ratios_are_taken_within_a_round():
    ms = [run("sape@4096x8", "4096x8", 1, 1.0, 10, 100, 0), run("sape@32768x1", "32768x1", 1, 0.25, 20, 400, 1),
          run("t5@32768x1", "32768x1", 1, 0.30, 22, 350, 2),
          run("sape@4096x8", "4096x8", 2, 2.0, 10, 50, 0), run("sape@32768x1", "32768x1", 2, 0.5, 20, 210, 1),
          run("t5@32768x1", "32768x1", 2, 0.52, 23, 200, 2)]
    rows = train_speed.round_ratios(ms)
    t5 = [r for r in rows if r["pe"] == "t5"]
    assert [r["step_to_sape"] for r in t5] == [pytest.approx(1.2), pytest.approx(1.04)]
    results = train_speed.summarise(rows, {"speedup": 4.0, "step": 1.10, "peak": 1.05, "busy": 0.8})
    sape = next(r for r in results if r["row"] == "sape@32768x1")
    assert sape["wps_to_first_split"] == {"median": 4.1, "min": 4.0, "max": 4.2, "n": 2}
    assert sape["goals"]["speedup"]["verdict"] == "meets" and sape["goals"]["busy"]["verdict"] == "misses"
    t5 = next(r for r in results if r["pe"] == "t5")
    assert t5["goals"]["step"]["verdict"] == "within noise" and t5["goals"]["peak"]["verdict"] == "misses"
    assert "speedup" not in t5["goals"]  # t5's first split is its only one


# ------------------------------------------------------------------------------------------------
# the command: pe-train's, plus only the window

def test_fairseqs_logging_is_quiet_during_a_run_and_as_it_was_after(monkeypatch):
    """pe-bench train-speed keeps fairseq's and the plugin's loggers at WARNING while it measures, and gives them
    back their levels after, returned or raised: it may share its process with other work (a later fairseq-generate
    there logs its INFO lines again)."""
    import logging

    seen = []

    def measure(args):
        seen.append([logging.getLogger(name).level for name in _common.QUIET_LOGGERS])
        if args == "raise":
            raise RuntimeError("stop")
        return 0

    monkeypatch.setattr(train_speed, "measure", measure)
    for name, level in zip(_common.QUIET_LOGGERS, (logging.NOTSET, logging.INFO, logging.DEBUG, logging.ERROR)):
        monkeypatch.setattr(logging.getLogger(name), "level", level)
    before = [logging.getLogger(name).level for name in _common.QUIET_LOGGERS]
    assert "fairseq_cli" in _common.QUIET_LOGGERS and train_speed.run("args") == 0
    with pytest.raises(RuntimeError):
        train_speed.run("raise")
    assert seen == [[logging.WARNING] * len(before)] * 2
    assert [logging.getLogger(name).level for name in _common.QUIET_LOGGERS] == before


def test_the_command_is_pe_trains_plus_the_window():
    from types import SimpleNamespace

    from pe_tools.recipes import load_table
    from pe_tools.recipes import train as pe_train

    args = SimpleNamespace(data="DATA", recipe="wmt14", pair="en-de", max_update=13, extra=[], save_dir="S")
    argv = train_speed.train_argv("t5", "base", args, "cuda", True, "auto", (4096, 8))
    user = pe_train.train_argv(load_table("wmt14"), "t5", "en-de", "base", 1, "DATA", "S")
    groups = dict(pe_train.flag_groups(argv[1:]))
    for flag, values in pe_train.flag_groups(user[1:]):
        if flag not in ("--max-update",):
            assert groups[flag] == values, flag  # every flag of pe-train's command, as pe-train gives it
    assert "--num-workers" not in argv  # the recipe's data loading: fairseq's default worker
    assert set(groups) - {f for f, _ in pe_train.flag_groups(user[1:])} <= {"--no-save", "--disable-validation",
                                                                             "--fp16"}
    assert groups["--max-update"] == ["13"] and argv.count("--max-update") == 1
    stock = train_speed.train_argv("stock", "base", args, "cpu", False, "auto", (32768, 1))
    assert "--user-dir" not in stock and stock[stock.index("--arch") + 1] == "transformer_wmt_en_de"
    assert dict(pe_train.flag_groups(stock[1:]))["--update-freq"] == ["1"] and "--cpu" in stock


@pytest.mark.slow
def test_a_real_run_on_the_cpu(corpus, tmp_path):
    """Two rows, two rounds of real fairseq-train (tiny, 1,024 tokens an update) through pe-bench: per-update
    records with every field, the recipe's one data worker, the rotated order, medians and spreads."""
    out, _ = corpus
    cmd = [sys.executable, str(REPO / "scripts" / "benchmark.py"), "train-speed", "--data", str(out), "--size",
           "tiny", "--tokens-per-update", "1024", "--rows", "sape@256x4", "t5@256x4", "--device", "cpu", "--warmup", "1",
           "--timed", "2", "--profiled", "1", "--rounds", "2", "--out-dir", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((tmp_path / "train_speed.json").read_text())
    assert data["complete"] and [m["key"] for m in data["measurements"]] == [
        ["sape/tiny@256x4", 1], ["t5/tiny@256x4", 1], ["t5/tiny@256x4", 2], ["sape/tiny@256x4", 2]]
    for m in data["measurements"]:
        assert m["num_workers"] == 1 and [u["phase"] for u in m["updates"]] == ["warmup", "timed", "timed", "profiled"]
        for u in m["updates"]:
            assert u["words"] > 0 and u["peak_bytes"] > 0 and min(u[k] for k in train_speed.HOST) >= 0
        assert m["updates"][-1]["kernels"] > 0
    t5 = next(r for r in data["results"] if r["pe"] == "t5")
    assert t5["rounds"] == 2 and t5["step_to_sape"]["n"] == 2 and t5["peak_to_sape"]["min"] > 0
    assert "| t5/tiny@256x4 |" in (tmp_path / "train_speed.md").read_text()


@pytest.mark.slow
def test_host_syncs_of_a_whole_update_are_counted_exactly(corpus):
    """Every op that reads a value back from the device (a host sync on CUDA) in one whole update, fairseq's trainer
    included, counted on the CPU: SAPE (tiny, recipe wmt14) has 5 a update (the trainer's: gradient norm, loss
    scale, logging) and 4 a micro-batch (the criterion's logged figures); stock fairseq 6 more a micro-batch (its
    padding checks, which the plugin's layers do not make). A sync added to the plugin's forward shows here."""
    from types import SimpleNamespace

    from pe_plugin.encodings import PE_REGISTRY

    out, _ = corpus

    def syncs(pe, split):
        ns = SimpleNamespace(data=str(out), recipe="wmt14", pair="en-de", extra=[], max_update=3)
        argv = train_speed.train_argv(pe, "tiny", ns, "cpu", False, "auto", split)
        rec = train_speed.run_in_process(argv, 1, 1, 1, False, count_syncs=True)
        return [u["syncs"] for u in rec["updates"]]

    assert syncs("sape", (256, 4)) == [{"_local_scalar_dense": 5 + 4 * 4}] * 3
    assert syncs("stock", (1024, 1)) == [{"_local_scalar_dense": 5 + 10}] * 3
    cls = PE_REGISTRY["sape"]
    embed = cls.embed
    try:  # the negative control: a device read in the encoding, once per call (encoder and decoder)
        cls.embed = lambda self, x, *a, **k: (bool(x.abs().sum() >= 0), embed(self, x, *a, **k))[1]
        assert syncs("sape", (1024, 1)) == [{"_local_scalar_dense": 5 + 4 + 2}] * 3
    finally:
        cls.embed = embed


@pytest.mark.slow
def test_compiled_layers_train_the_same(corpus, monkeypatch):
    """train-speed --compile: every encoder and decoder layer under torch.compile trains as the eager model does,
    update for update (fairseq's logged loss, at a learning rate that moves it), on the CPU. Dynamo's own "eager" backend here: the capture and the
    replaced layers are what is tested; inductor's code generation takes minutes on a CPU."""
    from types import SimpleNamespace

    out, _ = corpus
    made = []
    compile_layers = train_speed.compile_layers
    monkeypatch.setattr(train_speed, "compile_layers", lambda model, backend: made.append(compile_layers(model, backend)))

    def losses(backend):
        lr = ["--lr", "0.01", "--warmup-init-lr", "0.01", "--warmup-updates", "1"]  # steps that move the loss
        ns = SimpleNamespace(data=str(out), recipe="wmt14", pair="en-de", extra=lr, max_update=3)
        argv = train_speed.train_argv("sape", "tiny", ns, "cpu", False, "auto", (1024, 1))
        return [u["loss"] for u in train_speed.run_in_process(argv, 0, 2, 1, False, compile_backend=backend)["updates"]]

    eager = losses(None)
    assert len(set(eager)) == 3 and losses("eager") == eager and made == [4]  # tiny: 2 encoder and 2 decoder layers


@pytest.mark.parametrize("goals", [None, "{not json"])
def test_a_goals_file_missing_or_not_json_is_refused_before_anything_runs(goals, tmp_path, capsys):
    """pe-bench train-speed --goals FILE: a file missing or not JSON ends the run with exit 2 naming it, before
    anything is measured or written."""
    from pe_tools.bench import cli

    data = tmp_path / "data"
    data.mkdir()
    (data / "dict.en.txt").write_text("")
    path = tmp_path / "goals.json"
    if goals is not None:
        path.write_text(goals)
    assert cli.main(["train-speed", "--data", str(data), "--goals", str(path), "--device", "cpu",
                     "--out-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and (str(path) in err if goals is None else "Expecting property name" in err)
    assert not (tmp_path / "out").exists()

"""The tokens-per-update arithmetic (pe_tools/recipes/batching.py) and pe-train's use of it: however the ranks and
the micro-batch change, max_tokens x update_freq x world_size stays the recipe's."""
import itertools
import json

import pytest

from pe_tools.recipes import batching, load_table
from pe_tools.recipes.train import train_argv
from pe_tools.recipes.batching import FOOTPRINTS


def last(argv, flag, default=None):
    idx = [i for i, x in enumerate(argv) if x == flag]
    return int(argv[idx[-1] + 1]) if idx else default


def tokens_per_update(argv):
    return last(argv, "--max-tokens") * last(argv, "--update-freq", 1) * last(argv, "--distributed-world-size", 1)


@pytest.mark.parametrize("tokens,world,cap", list(itertools.product(
    [4096, 32768, 6000], [1, 2, 4, 8], [None, 1000, 4096, 32768])))
def test_plan_keeps_tokens_and_fits_the_cap(tokens, world, cap):
    p = batching.plan(tokens, world, cap)
    assert p.tokens_per_update == tokens and p.world_size == world
    if cap is not None:
        assert p.max_tokens <= cap
        # no fewer accumulation steps would fit: brute force over every smaller update_freq
        assert not [f for f in range(1, p.update_freq) if tokens % (world * f) == 0 and tokens // (world * f) <= cap]
    else:
        assert p.update_freq == 1


def test_plan_refuses_what_cannot_keep_the_tokens():
    with pytest.raises(ValueError, match="--gpus 3: 32,768 tokens per update cannot be shared equally"):
        batching.plan(32768, 3)
    with pytest.raises(ValueError, match="--gpus 0"):
        batching.plan(32768, 0)
    with pytest.raises(ValueError, match="--max-tokens 0"):
        batching.plan(32768, 1, 0)



def test_a_micro_batch_may_hold_a_single_token():
    """--max-tokens 1 is the smallest cap plan accepts: every token its own micro-batch (batching.py: cap < 1)."""
    assert batching.plan(6, 1, 1) == batching.BatchPlan(max_tokens=1, update_freq=6, world_size=1)
    assert batching.plan(6, 2, 1) == batching.BatchPlan(max_tokens=1, update_freq=3, world_size=2)


def test_a_plan_cannot_be_changed_after_it_was_checked():
    """BatchPlan is frozen: its tokens per update stay what plan() checked (batching.py: frozen=True)."""
    import dataclasses

    p = batching.plan(32768, 2, 4096)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.update_freq = 1
    assert p.tokens_per_update == 32768 and len({p, batching.BatchPlan(4096, 4, 2)}) == 1  # a value: hashable

@pytest.mark.parametrize("gpus", [1, 2, 4, 8, 16])
def test_wmt14_keeps_the_papers_tokens_per_update(gpus):
    argv = train_argv(load_table("wmt14"), "sape", "en-de", "base", 1, "data", "run", gpus=gpus)
    assert tokens_per_update(argv) == 32768
    assert argv.count("--update-freq") == 1 and argv.count("--max-tokens") == 1


def test_a_methods_own_update_freq_is_shared_by_the_ranks():
    """A method (or size) that sets its own --update-freq: the ranks share its tokens per update, not [common]'s."""
    table = load_table("wmt14")
    table["method"]["sape"] = dict(table["method"]["sape"], flags=[*table["method"]["sape"].get("flags", []),
                                                                  "--update-freq", "4"])
    one = train_argv(table, "sape", "en-de", "base", 1, "data", "run")
    two = train_argv(table, "sape", "en-de", "base", 1, "data", "run", gpus=2)
    assert tokens_per_update(one) == tokens_per_update(two) == 4096 * 4
    assert last(two, "--update-freq") == 2


def test_a_larger_micro_batch_needs_fewer_steps():
    argv = train_argv(load_table("wmt14"), "sape", "en-de", "base", 1, "data", "run", max_tokens=32768)
    assert (last(argv, "--max-tokens"), last(argv, "--update-freq")) == (32768, 1)


# ------------------------------------------------------------------------------------------------
# the micro-batch a GPU holds (batching.choose; pe-train --max-tokens-per-gpu)

GB = batching.GB


def fake_device(free_gb, name="Fake GPU"):
    return lambda: {"free": int(free_gb * GB), "total": int(free_gb * GB), "name": name, "count": 1}


def no_device():
    return None


def test_the_spec_forms():
    assert batching.parse_spec("auto") == ("auto", None)
    assert batching.parse_spec("16384") == ("tokens", 16384)
    assert batching.parse_spec("40GB") == batching.parse_spec("40gb") == ("memory", 40 * GB)
    assert batching.parse_spec("1.5GB") == ("memory", 1_500_000_000)
    for bad in ("0", "-4", "big", "GB", "0GB", "4k"):
        with pytest.raises(ValueError, match="--max-tokens-per-gpu"):
            batching.parse_spec(bad)


@pytest.mark.parametrize("size", sorted(batching.FOOTPRINTS))
@pytest.mark.parametrize("memory_gb", [8, 12, 16, 24, 40, 48, 80, 94, 141])
@pytest.mark.parametrize("world", [1, 2, 8])
def test_a_memory_changes_the_split_never_the_tokens(size, memory_gb, world):
    fp = batching.FOOTPRINTS[size]
    try:
        split, choice = batching.choose_plan(32768, world, f"{memory_gb}GB", size, 4096)
    except ValueError as e:  # only where not even the smallest micro-batch fits
        assert fp.peak(batching.MIN_MICRO_BATCH) > batching.HEADROOM * memory_gb * GB, e
        return
    assert split.tokens_per_update == 32768 and split.world_size == world
    assert choice.how == "memory" and choice.memory_bytes == memory_gb * GB
    # the modelled peak of the chosen micro-batch fits the headroom; the next larger one (half the steps) would not,
    # unless the rank's whole share is already one micro-batch
    assert fp.peak(split.max_tokens) <= batching.HEADROOM * memory_gb * GB
    if split.update_freq > 1:
        assert fp.peak(32768 // world // (split.update_freq // 2)) > batching.HEADROOM * memory_gb * GB


def test_the_arithmetic_of_a_footprint():
    fp = batching.Footprint(fixed=2 * GB, per_token=1_000_000, source="test")
    assert fp.peak(10_000) == 12 * GB
    # 0.8 x 20 GB = 16 GB; (16 - 2) GB / 1 MB = 14,000 tokens
    assert fp.max_tokens_within(20 * GB) == int((batching.HEADROOM * 20 * GB - 2 * GB) // 1_000_000)
    assert batching.HEADROOM == 0.8 and fp.max_tokens_within(20 * GB) == 14_000


def test_more_memory_never_means_a_smaller_micro_batch():
    for size in batching.FOOTPRINTS:
        caps = [batching.memory_cap(size, gb * GB) for gb in range(12, 200)]
        assert caps == sorted(caps)
    assert batching.memory_class_flags("base", 80) == "--max-tokens 32768 --update-freq 1"
    assert batching.memory_class_flags("base", 16) == "--max-tokens 8192 --update-freq 4"


def test_auto_reads_the_device_and_falls_back_to_the_recipe():
    split, choice = batching.choose_plan(32768, 1, "auto", "base", 4096, memory=fake_device(79.2, "NVIDIA H100"))
    assert (split.max_tokens, split.update_freq) == (32768, 1)
    assert choice.how == "memory" and choice.device == "NVIDIA H100" and "79.2 GB free on NVIDIA H100" in choice.note
    assert choice.footprint["per_token"] == batching.FOOTPRINTS["base"].per_token
    split, choice = batching.choose_plan(32768, 1, "auto", "base", 4096, memory=fake_device(20))
    assert (split.max_tokens, split.update_freq) == (16384, 2)
    split, choice = batching.choose_plan(32768, 1, "auto", "base", 4096, memory=no_device)
    assert (split.max_tokens, split.update_freq, choice.how) == (4096, 8, "recipe")
    split, choice = batching.choose_plan(32768, 1, "auto", "tiny", 4096, memory=fake_device(80))
    assert (split.max_tokens, choice.how) == (4096, "recipe") and "no memory footprint for size 'tiny'" in choice.note
    # a resumed run keeps its micro-batch whatever the device; a number given is taken as it is
    split, choice = batching.choose_plan(32768, 1, "auto", "base", 4096, resumed=4096, memory=fake_device(80))
    assert (split.max_tokens, choice.how) == (4096, "resumed")
    split, choice = batching.choose_plan(32768, 2, "8192", "base", 4096, resumed=4096, memory=fake_device(80))
    assert (split.max_tokens, split.update_freq, choice.how) == (8192, 2, "given")
    with pytest.raises(ValueError, match="holds no micro-batch"):
        batching.choose_plan(32768, 1, "auto", "big", 4096, memory=fake_device(4))


def dry_run(capsys, *args):
    from pe_tools.recipes import launch

    assert launch.main(["train", "sape", "--dry-run", "--data", "data", *args]) == 0
    out = capsys.readouterr()
    return out.out.split(), out.err


@pytest.mark.parametrize("size, memory, expected", [("base", "40GB", (32768, 1)), ("base", "24GB", (16384, 2)),
                                                   ("big", "40GB", (8192, 4)), ("base", "12000", (8192, 4))])
def test_pe_train_prints_and_applies_the_choice(capsys, size, memory, expected):
    argv, err = dry_run(capsys, "--size", size, "--max-tokens-per-gpu", memory)
    assert (last(argv, "--max-tokens"), last(argv, "--update-freq")) == expected
    assert tokens_per_update(argv) == 32768 and argv.count("--max-tokens") == 1
    assert "32,768 tokens per update; micro-batch cap:" in err


def test_pe_train_auto_on_a_gpu_and_without_one(capsys, monkeypatch):
    from pe_tools.recipes import train

    monkeypatch.setattr(train, "cuda", lambda: False)
    argv, err = dry_run(capsys)
    assert (last(argv, "--max-tokens"), last(argv, "--update-freq")) == (4096, 8) and "no CUDA device" in err
    monkeypatch.setattr(train, "cuda", lambda: True)
    monkeypatch.setattr(batching, "device_memory", fake_device(140, "NVIDIA H200"))
    argv, err = dry_run(capsys, "--gpus", "2")
    assert (last(argv, "--max-tokens"), last(argv, "--update-freq"), last(argv, "--distributed-world-size")) == (16384, 1, 2)
    assert "on NVIDIA H200" in err
    argv, err = dry_run(capsys, "--", "--max-tokens", "1000")  # flags after -- win: no choice is made
    assert "set by the flags after --" in err and argv[-2:] == ["--max-tokens", "1000"]
    with pytest.raises(SystemExit):
        dry_run(capsys, "--max-tokens-per-gpu", "lots")


def test_a_cpu_size_gets_no_fp16_on_a_machine_with_cuda(capsys, monkeypatch):
    """--fp16 is added where CUDA is, except for a run kept on the CPU by its size's flags (tiny-cpu, which a
    rehearsal submits to a CPU partition) or by the flags after --; fairseq refuses --fp16 with --cpu."""
    from pe_tools.recipes import train

    monkeypatch.setattr(train, "cuda", lambda: True)
    monkeypatch.setattr(batching, "device_memory", fake_device(140, "NVIDIA H200"))
    assert "--fp16" in dry_run(capsys, "--size", "tiny")[0]
    for args in (("--size", "tiny-cpu"), ("--size", "tiny", "--", "--cpu")):
        argv = dry_run(capsys, *args)[0]
        assert "--cpu" in argv and "--fp16" not in argv, args


def test_command_json_records_the_choice_and_a_resumed_run_keeps_it(tmp_path, monkeypatch, capsys):
    from pe_tools.recipes import launch, train

    data = tmp_path / "data"
    data.mkdir()
    (data / "dict.en.txt").write_text("a 1\n")
    monkeypatch.setattr(train, "tee", lambda cmd, log, **kw: 0)
    monkeypatch.setattr(train, "cuda", lambda: True)
    monkeypatch.setattr(batching, "device_memory", fake_device(79))
    args = ["train", "sape", "--data", str(data), "--runs-dir", str(tmp_path / "runs")]
    assert launch.main(args) == 0
    run = tmp_path / "runs" / "sape.en-de.base.seed1"
    saved = json.loads((run / "command.json").read_text())
    assert saved["batch"]["max_tokens"] == 32768 and saved["batch"]["update_freq"] == 1
    assert saved["batch"]["tokens_per_update"] == 32768 and saved["batch"]["chosen_by"] == "memory"
    assert saved["batch"]["memory_bytes"] == 79 * GB and last(saved["argv"], "--max-tokens") == 32768
    # the same run resumed on a smaller GPU keeps its micro-batch under auto (its checkpoint's epoch position
    # counts its batches); without a checkpoint it chooses afresh
    monkeypatch.setattr(batching, "device_memory", fake_device(20))
    (run / "checkpoint_last.pt").write_bytes(b"")
    assert launch.main(args) == 0
    saved = json.loads((run / "command.json").read_text())
    assert (saved["batch"]["max_tokens"], saved["batch"]["chosen_by"]) == (32768, "resumed")
    (run / "checkpoint_last.pt").unlink()
    assert launch.main(args) == 0
    assert json.loads((run / "command.json").read_text())["batch"]["max_tokens"] == 16384
    capsys.readouterr()


@pytest.mark.parametrize("size", sorted(FOOTPRINTS))
def test_a_memory_that_holds_exactly_the_smallest_micro_batch_is_planned(size):
    """pe_tools/recipes/batching.memory_cap at its limit (survivor: ``cap < MIN_MICRO_BATCH`` -> ``<=``): a memory
    whose headroom holds exactly MIN_MICRO_BATCH tokens gives that cap; one token's bytes less is refused. The
    memories are worked out here from the footprint (fixed + tokens x per token = HEADROOM x memory)."""
    from pe_tools.recipes.batching import HEADROOM, MIN_MICRO_BATCH, memory_cap

    fp = FOOTPRINTS[size]
    exactly = (fp.fixed + (MIN_MICRO_BATCH + 0.5) * fp.per_token) / HEADROOM  # half a token's bytes to spare
    assert memory_cap(size, exactly) == MIN_MICRO_BATCH
    with pytest.raises(ValueError, match=f"holds no micro-batch of {MIN_MICRO_BATCH} tokens"):
        memory_cap(size, exactly - fp.per_token / HEADROOM)

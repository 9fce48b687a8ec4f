"""The tokens-per-update arithmetic (pe_tools/recipes/batching.py) and pe-train's use of it: however the ranks and
the micro-batch change, max_tokens x update_freq x world_size stays the recipe's."""
import itertools

import pytest

from pe_tools.recipes import batching, load_table
from pe_tools.recipes.train import train_argv


def last(argv, flag, default=None):
    idx = [i for i, x in enumerate(argv) if x == flag]
    return int(argv[idx[-1] + 1]) if idx else default


def tokens_per_update(argv):
    return last(argv, "--max-tokens") * last(argv, "--update-freq", 1) * last(argv, "--distributed-world-size", 1)


@pytest.mark.parametrize("tokens,world,cap", itertools.product([4096, 32768, 6000], [1, 2, 4, 8], [None, 1000, 4096, 32768]))
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

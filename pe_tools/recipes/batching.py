"""The tokens-per-update arithmetic of a training, in one place.

A fairseq update sums the gradients of ``update_freq`` micro-batches of at most ``max_tokens`` tokens on each of
``world_size`` ranks, so

    tokens per update  T = max_tokens x update_freq x world_size.

A recipe fixes T (the WMT14 recipe: 4,096 x 8 = 32,768, the paper's setting); how T is split between the micro-batch,
the accumulation and the ranks is a matter of the hardware. ``plan`` owns that split: given T, the number of ranks
and the largest micro-batch one rank may take (the recipe's own ``--max-tokens`` unless told otherwise), it returns
the fewest accumulation steps whose micro-batch fits, keeping T exactly. pe-train, the cluster launcher and the
benchmarks use it; nothing else divides ``--update-freq``.
"""
from dataclasses import dataclass
from typing import Optional, Sequence


@dataclass(frozen=True)
class BatchPlan:
    max_tokens: int  # per rank and micro-batch
    update_freq: int  # micro-batches accumulated per update
    world_size: int  # ranks (GPUs, or CPU processes)

    @property
    def tokens_per_update(self) -> int:
        return self.max_tokens * self.update_freq * self.world_size

    def flags(self) -> list:
        """fairseq-train flags of this plan (``--distributed-world-size`` only for several ranks)."""
        world = ["--distributed-world-size", str(self.world_size)] if self.world_size > 1 else []
        return ["--max-tokens", str(self.max_tokens), "--update-freq", str(self.update_freq), *world]

    def describe(self) -> str:
        return (f"{self.max_tokens:,} tokens x {self.update_freq} accumulated x {self.world_size} rank(s) "
                f"= {self.tokens_per_update:,} tokens per update")


def recipe_batch(flags: Sequence[str]) -> BatchPlan:
    """The one-rank plan a resolved flag list states (its last ``--max-tokens`` and ``--update-freq`` win, as in
    fairseq's parser). A flag list without ``--max-tokens`` raises ValueError: tokens per update are then unknown."""
    def last(flag: str) -> Optional[str]:
        idx = [i for i, x in enumerate(flags) if x == flag]
        return flags[idx[-1] + 1] if idx else None

    tokens, freq = last("--max-tokens"), last("--update-freq")
    if tokens is None:
        raise ValueError("the recipe's flags have no --max-tokens, so its tokens per update are unknown")
    return BatchPlan(int(tokens), int(freq) if freq is not None else 1, 1)


def plan(tokens_per_update: int, world_size: int = 1, max_tokens: Optional[int] = None) -> BatchPlan:
    """Split ``tokens_per_update`` over ``world_size`` ranks with micro-batches of at most ``max_tokens`` tokens
    (default: the whole share of a rank): the smallest ``update_freq`` f >= ceil(T / (world_size x max_tokens))
    such that world_size x f divides T. Raises ValueError naming the flag to change when no split keeps T."""
    if world_size < 1:
        raise ValueError(f"--gpus {world_size}: the number of ranks must be at least 1")
    if tokens_per_update % world_size:
        raise ValueError(f"--gpus {world_size}: {tokens_per_update:,} tokens per update cannot be shared equally "
                         f"by {world_size} ranks; use a number of GPUs that divides it (1, 2, 4, 8, ...)")
    share = tokens_per_update // world_size
    cap = share if max_tokens is None else max_tokens
    if cap < 1:
        raise ValueError(f"--max-tokens {cap}: a micro-batch must hold at least one token")
    freq = -(-share // cap)  # ceil
    while share % freq:
        freq += 1
    return BatchPlan(share // freq, freq, world_size)

"""The tokens-per-update arithmetic of a training, in one place.

A fairseq update sums the gradients of ``update_freq`` micro-batches of at most ``max_tokens`` tokens on each of
``world_size`` ranks, so

    tokens per update  T = max_tokens x update_freq x world_size.

A recipe fixes T (the WMT14 recipe: 4,096 x 8 = 32,768, the paper's setting); how T is split between the micro-batch,
the accumulation and the ranks is a matter of the hardware. ``plan`` owns that split: given T, the number of ranks
and the largest micro-batch one rank may take (the recipe's own ``--max-tokens`` unless told otherwise), it returns
the fewest accumulation steps whose micro-batch fits, keeping T exactly. pe-train, the cluster launcher and the
benchmarks use it; nothing else divides ``--update-freq``.

The largest micro-batch a GPU holds (``pe-train --max-tokens-per-gpu auto|N|MEMgb``, ``choose``): one rank's peak
memory in fp16 training is modelled as ``fixed + per_token x max_tokens`` (``FOOTPRINTS``: parameters, gradients,
fp32 master copy and Adam's moments, then the activations and the float32 log-probabilities over the 40k joined
vocabulary of every padded position of the micro-batch), and a micro-batch may fill ``HEADROOM`` of the memory the
device has free at launch (the allocator's cache and fragmentation over changing batch shapes, the CUDA context,
encodings whose peak is up to 1.05x SAPE's). ``plan`` then splits T under that cap, so the GPU's memory changes
how T is split, never T.
"""
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from typing import Callable, Optional, Sequence


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


# ------------------------------------------------------------------------------------------------
# the micro-batch a GPU holds

GB = 10 ** 9
HEADROOM = 0.8  # the fraction of the free device memory a micro-batch's modelled peak may fill
MIN_MICRO_BATCH = 256  # a device whose memory holds fewer tokens than this is refused, not planned for


@dataclass(frozen=True)
class Footprint:
    """One rank's peak memory (bytes) in fp16 training of a model size: ``fixed + per_token x max_tokens``."""
    fixed: int  # independent of the batch: 20 bytes a parameter (fp16 weight and gradient, fp32 copy, its
    #             gradient, Adam's two moments)
    per_token: int  # per padded position of the micro-batch (``--max-tokens`` bounds the padded positions)
    source: str  # measured (where, which commit) or estimated (from what)

    def peak(self, max_tokens: int) -> int:
        return self.fixed + self.per_token * max_tokens

    def max_tokens_within(self, memory_bytes: float) -> int:
        """The largest micro-batch whose modelled peak fits ``HEADROOM`` of ``memory_bytes`` (may be <= 0)."""
        return int((HEADROOM * memory_bytes - self.fixed) // self.per_token)


# base: SAPE's peak of 4.640 GB on a padded batch of 20 x 200 positions (pe-bench models --fp16 --max-tokens 4096,
# L = 200, its largest per position; 4.415 GB for 204 x 20), NVIDIA H100, commit 1142f40,
# examples/benchmarks/gpu/models.json; fixed = 20 B x 64,618,496 parameters.
# big: not yet measured on a GPU. fixed = 20 B x 217,317,376 parameters; per position, base's measured figure x
# big's / base's bytes saved for backward (1,744,397 / 684,109 per position at L = 200: pe_tools.bench.cost.measure,
# float32, CPU), which overstates it (the vocabulary's share does not grow with the model).
FOOTPRINTS = {
    "base": Footprint(fixed=20 * 64_618_496, per_token=837_000,
                      source="measured: pe-bench models --fp16, NVIDIA H100, SAPE at L = 200, commit 1142f40"),
    "big": Footprint(fixed=20 * 217_317_376, per_token=2_134_000,
                     source="estimated: base's per-token peak x big's / base's bytes saved for backward (CPU count)"),
}

# GPU memory classes the README's table shows (GB as vendors state them; a device's free memory is a little less)
MEMORY_CLASSES = [16, 24, 40, 80, 141]  # e.g. V100 or T4; RTX 4090 or A10; A100 40GB; A100 80GB or H100; H200


@dataclass(frozen=True)
class Choice:
    """How the micro-batch cap of ``choose`` was decided: ``cap`` (tokens) and ``how`` (``given``, ``memory``,
    ``recipe``, ``resumed``), with the device memory and footprint it came from, and a line for the log."""
    cap: int
    how: str
    note: str
    memory_bytes: Optional[int] = None
    device: Optional[str] = None
    footprint: Optional[dict] = None


def parse_spec(spec) -> tuple:
    """``--max-tokens-per-gpu``'s value: ``auto`` -> ("auto", None); ``32768`` -> ("tokens", 32768); ``80GB`` or
    ``80gb`` -> ("memory", 80e9). Raises ValueError naming the forms."""
    text = str(spec).strip().lower()
    try:
        if text == "auto":
            return "auto", None
        if text.endswith("gb"):
            value = float(text[:-2])
            if value > 0:
                return "memory", int(value * GB)
        elif int(text) >= 1:
            return "tokens", int(text)
    except ValueError:
        pass
    raise ValueError(f"--max-tokens-per-gpu {spec}: give auto (the free memory of this machine's GPU), a number "
                     f"of tokens (e.g. 16384) or a GPU memory (e.g. 40GB)")


def memory_cap(size: str, memory_bytes: float) -> int:
    """The largest micro-batch of ``size`` (a key of FOOTPRINTS) within ``memory_bytes``; ValueError below
    MIN_MICRO_BATCH."""
    fp = FOOTPRINTS[size]
    cap = fp.max_tokens_within(memory_bytes)
    if cap < MIN_MICRO_BATCH:
        raise ValueError(f"{memory_bytes / GB:.1f} GB holds no micro-batch of {MIN_MICRO_BATCH} tokens at size "
                         f"{size} ({fp.fixed / GB:.1f} GB + {fp.per_token / 1e6:.2f} MB a token, {HEADROOM:.0%} "
                         f"of the memory)")
    return cap


def device_memory() -> Optional[dict]:
    """{"free": bytes, "total": bytes, "name": str, "count": n} of this machine's visible CUDA devices (the smallest
    free memory of them), or None without CUDA. Asked in a child process, so that the caller (pe-train, which lives
    as long as its fairseq-train) holds no CUDA context of its own on the GPU it measures."""
    code = ("import json, torch\n"
            "if not torch.cuda.is_available(): print('null')\n"
            "else:\n"
            " n = torch.cuda.device_count(); m = [torch.cuda.mem_get_info(i) for i in range(n)]\n"
            " print(json.dumps(dict(free=min(f for f, t in m), total=min(t for f, t in m), count=n,\n"
            "                       name=torch.cuda.get_device_name(0))))\n")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                             env=dict(os.environ, PYTHONWARNINGS="ignore"))
        return json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return None


def choose(spec, size: str, recipe_max_tokens: int, resumed: Optional[int] = None,
           memory: Callable[[], Optional[dict]] = device_memory) -> Choice:
    """The micro-batch cap (tokens per rank and micro-batch) for ``plan``:

    - ``spec`` a number of tokens: that number (``given``);
    - ``spec`` a memory (``40GB``): the largest micro-batch of ``size`` whose modelled peak fits it (``memory``);
    - ``auto``: the micro-batch a resumed run started with (``resumed``: a changed micro-batch would change the
      batches an interrupted epoch skips on resume), else the largest within the free memory of this machine's GPU
      (``memory``), else, without CUDA or without a footprint for ``size``, the recipe's own ``--max-tokens``
      (``recipe``).
    Raises ValueError for a bad spec or a memory too small."""
    kind, value = parse_spec(spec)
    if kind == "tokens":
        return Choice(value, "given", f"--max-tokens-per-gpu {value}")
    if kind == "auto" and resumed:
        return Choice(int(resumed), "resumed", f"the micro-batch this run started with ({int(resumed):,} tokens, "
                                               f"its command.json)")
    device = None
    if kind == "auto":
        device = memory()
        if not device:
            return Choice(recipe_max_tokens, "recipe", "no CUDA device: the recipe's own --max-tokens")
        value = int(device["free"])
    if size not in FOOTPRINTS:
        return Choice(recipe_max_tokens, "recipe", f"no memory footprint for size {size!r} (only "
                      f"{', '.join(FOOTPRINTS)}): the recipe's own --max-tokens")
    fp = FOOTPRINTS[size]
    cap = memory_cap(size, value)
    where = f"{value / GB:.1f} GB free on {device['name']}" if device else f"a {value / GB:.0f} GB GPU"
    return Choice(cap, "memory", f"at most {cap:,} tokens fit {where} ({size}: {fp.fixed / GB:.2f} GB + "
                                 f"{fp.per_token / 1e6:.3f} MB a token, {HEADROOM:.0%} of the memory; {fp.source})",
                  memory_bytes=value, device=device["name"] if device else None, footprint=asdict(fp))


def choose_plan(tokens_per_update: int, world_size: int, spec, size: str, recipe_max_tokens: int,
                resumed: Optional[int] = None, memory: Callable[[], Optional[dict]] = device_memory):
    """(BatchPlan, Choice): ``choose``'s cap, then ``plan`` under it (tokens per update unchanged)."""
    choice = choose(spec, size, recipe_max_tokens, resumed, memory)
    return plan(tokens_per_update, world_size, choice.cap), choice


def memory_class_plan(size: str, memory_gb: int, tokens_per_update: int = 32768) -> BatchPlan:
    """The one-GPU plan of ``size`` on a GPU of ``memory_gb`` GB (the README's table)."""
    return plan(tokens_per_update, 1, memory_cap(size, memory_gb * GB))


def memory_class_flags(size: str, memory_gb: int, tokens_per_update: int = 32768) -> str:
    p = memory_class_plan(size, memory_gb, tokens_per_update)
    return f"--max-tokens {p.max_tokens} --update-freq {p.update_freq}"

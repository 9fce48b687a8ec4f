"""The benchmark's models and batches: ``transformer_<pe>_<arch>`` built through fairseq's own parser with the
flags of the encoding's entry in a recipe's methods table, or stock fairseq's ``transformer_<arch>`` (the row
STOCK); the optimizer of the training step (torch's Adam in fp32, fairseq's FP16Optimizer over fairseq's Adam
with ``fp16``); and one padded batch per length, as fairseq batches sentences (docs/benchmarks.md §Batches)."""
import tempfile
from pathlib import Path

from ..command_line import int_at_least
from ..naming import BASELINE, SUFFIX_OF_CLASS, arch_name
from ..recipes import load_table, recipe_names
from ._common import UsageError, add_counts

STOCK = "stock"  # the row of stock fairseq's transformer_<arch> (no plugin, no flags)
PAD, EOS = 1, 2  # fairseq's Dictionary: <s> 0, <pad> 1, </s> 2, <unk> 3; ordinary symbols from 4
SHORTEST = 0.7  # sentence lengths of a batch of length L are drawn from [ceil(0.7 L), L], the longest L


def model_arch(pe: str, size: str) -> str:
    """The architecture of row ``pe`` at ``size``: ``transformer_<pe>_<suffix>``, or stock ``transformer_<suffix>``
    (transformer_tiny, transformer_wmt_en_de, transformer_wmt_en_de_big) for STOCK."""
    return f"transformer_{SUFFIX_OF_CLASS[size]}" if pe == STOCK else arch_name(pe, SUFFIX_OF_CLASS[size])


def recipe_flags(recipe: str, pe: str) -> list:
    """The flags of ``pe``'s entry in pe_tools/recipes/RECIPE/methods.toml ([] for --recipe none, no such entry or
    STOCK)."""
    if recipe == "none" or pe == STOCK:
        return []
    return list(load_table(recipe)["method"].get(pe, {}).get("flags", []))


def build_model(pe: str, size: str, vocab: int, recipe: str, device: str, fp16: bool = False, impl: str = "auto"):
    """(model on ``device``, fairseq's parsed args): ``model_arch(pe, size)`` with ``recipe``'s flags for ``pe``, a
    joined dictionary of ``vocab`` symbols (fairseq's 4 specials included) and shared embeddings, initialised under
    seed 1. STOCK is built without the plugin's ``--user-dir``. The args also carry the optimizer (Adam, lr 1e-4)
    and, with ``fp16``, ``--fp16`` (and ``--fp16-no-flatten-grads`` off CUDA: fairseq's flat fp32 copy is CUDA
    only); the model itself stays in fp32 here (``build_optimizer`` halves it). ``impl``: the plugin rows'
    ``--pe-attention-impl``."""
    import torch
    from fairseq import options, tasks

    from ..fairseq_plugin import plugin_dir

    with tempfile.TemporaryDirectory() as data:
        for lang in ("src", "tgt"):  # fairseq's Dictionary adds its 4 special symbols to these vocab - 4
            Path(data, f"dict.{lang}.txt").write_text("".join(f"w{i} 1\n" for i in range(vocab - 4)))
        plugin = [] if pe == STOCK else ["--user-dir", plugin_dir(), "--pe-attention-impl", impl]
        half = ["--fp16"] + ([] if device == "cuda" else ["--fp16-no-flatten-grads"]) if fp16 else []
        argv = [data, *plugin, "--arch", model_arch(pe, size), "--task", "translation", "-s", "src", "-t", "tgt",
                "--share-all-embeddings", "--cpu",  # --cpu: the model is placed below
                "--optimizer", "adam", "--lr", "1e-4", *half, *recipe_flags(recipe, pe)]
        args = options.parse_args_and_arch(options.get_training_parser(), argv)
        torch.manual_seed(1)
        model = tasks.setup_task(args).build_model(args).to(device)
    return model, args


def build_optimizer(model, args, fp16: bool):
    """The optimizer of the training step. fp32: ``torch.optim.Adam`` (lr 1e-4) over the model's parameters. fp16:
    the model is halved and wrapped as fairseq's trainer does with ``--fp16``: ``FP16Optimizer.build_optimizer``
    keeps an fp32 master copy of every parameter (one flat tensor on CUDA, one per parameter elsewhere) under
    fairseq's Adam, and scales the loss dynamically (initial scale 128)."""
    import torch

    if not fp16:
        return torch.optim.Adam(model.parameters(), lr=1e-4)
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.optim.fp16_optimizer import FP16Optimizer

    model.half()
    params = [p for p in model.parameters() if p.requires_grad]
    return FP16Optimizer.build_optimizer(convert_namespace_to_omegaconf(args), params)


def summed_loss(model, src, lengths, prev, target):
    """The cross-entropy of one teacher-forced forward of ``model``, summed over the real target tokens, in fp32
    (fairseq's criteria upcast the logits before log_softmax)."""
    import torch.nn.functional as F

    logits, _ = model(src, lengths, prev)  # (B, T, V)
    return F.cross_entropy(logits.float().view(-1, logits.size(-1)), target.view(-1), ignore_index=PAD,
                           reduction="sum")


def pe_params(model, pe: str) -> int:
    """Parameters of the positional encodings: the plugin's ``pe_parameter_count``, or for STOCK those of its
    ``embed_positions`` (0: sinusoids are a buffer)."""
    if pe != STOCK:
        from pe_plugin.models.validation import pe_parameter_count

        return pe_parameter_count(model)
    found = {id(p): p for side in (model.encoder, model.decoder) if side.embed_positions is not None
             for p in side.embed_positions.parameters()}
    return sum(p.numel() for p in found.values())


def batch_size(max_tokens: int, length: int) -> int:
    """Sentences per batch at ``length``: ``max_tokens // length`` (fairseq's --max-tokens bound on the padded
    batch, every batch at the longest length)."""
    if length < 1:
        raise ValueError(f"length must be at least 1 (got {length})")
    if max_tokens < length:
        raise ValueError(f"--max-tokens {max_tokens} is smaller than length {length}: not one sentence fits")
    return max_tokens // length


def shortest_length(length: int) -> int:
    """The shortest sentence ``padded_batch`` draws at padded length ``length``: ceil(SHORTEST length)."""
    import math

    return max(1, math.ceil(SHORTEST * length))


def padded_batch(batch: int, length: int, vocab: int, device: str, seed: int = 0):
    """(source tokens (B, L), source lengths (B,), decoder input (B, L), target (B, L)) as fairseq's
    ``language_pair_dataset.collate`` makes them: sentence lengths n (eos included) drawn from
    [ceil(SHORTEST L), L] under ``seed``, the first source and the first target exactly L long; sources are
    words then eos, LEFT-padded; targets words then eos, RIGHT-padded; the decoder input is the target shifted
    right behind eos; rows sorted by source length, longest first. Words are the ordinary symbols 4 .. vocab-1,
    padding PAD."""
    import torch

    g = torch.Generator().manual_seed(seed)
    shortest = shortest_length(length)
    src_len = torch.randint(shortest, length + 1, (batch,), generator=g)  # (B,)
    tgt_len = torch.randint(shortest, length + 1, (batch,), generator=g)  # (B,)
    src_len[0] = tgt_len[0] = length  # the longest sentence sets the padded width
    src_len = src_len.sort(descending=True).values
    src = torch.full((batch, length), PAD)
    prev = torch.full((batch, length), PAD)
    target = torch.full((batch, length), PAD)
    for b, (n, m) in enumerate(zip(src_len.tolist(), tgt_len.tolist())):
        src[b, length - n:] = torch.cat([torch.randint(4, vocab, (n - 1,), generator=g), torch.tensor([EOS])])
        tgt = torch.cat([torch.randint(4, vocab, (m - 1,), generator=g), torch.tensor([EOS])])  # (m,)
        target[b, :m] = tgt
        prev[b, 0], prev[b, 1:m] = EOS, tgt[:-1]
    return src.to(device), src_len.to(device), prev.to(device), target.to(device)


def add_model_args(parser, sizes, lengths, threads: int, always=(BASELINE,), batch: bool = False) -> None:
    """The options of a benchmark of the models on padded batches (models, cost): sizes, rows, lengths, batch,
    vocabulary, recipe and torch threads (``batch``: a fixed ``--batch`` instead of ``--max-tokens``)."""
    from pe_plugin.encodings import PE_REGISTRY

    names = list(PE_REGISTRY) + [STOCK]
    parser.add_argument("--sizes", nargs="+", choices=list(SUFFIX_OF_CLASS), default=sizes, metavar="SIZE",
                        help=f"model sizes from {', '.join(SUFFIX_OF_CLASS)} (default: {' '.join(sizes)})")
    parser.add_argument("--pe", nargs="+", choices=names, metavar="PE",
                        help=f"rows, from {', '.join(names)}; {STOCK}: stock fairseq's transformer_<size> without the "
                             f"plugin (default: all; {' and '.join(always)} always added)")
    parser.add_argument("--lengths", nargs="+", type=int_at_least(1), default=lengths, metavar="L",
                        help="padded batch lengths: sentences of [0.7 L, L] tokens, the longest L (default: "
                             f"{' '.join(map(str, lengths))})")
    group = parser.add_mutually_exclusive_group() if batch else parser
    group.add_argument("--max-tokens", type=int_at_least(1), default=4096,
                       help="padded tokens per batch: max_tokens // L sentences at length L (default: 4096)")
    if batch:
        group.add_argument("--batch", type=int_at_least(1),
                           help="a fixed number of sentences at every length instead of --max-tokens")
    add_counts(parser, [("--vocab", 5, 40000, "joined dictionary size, fairseq's 4 specials included"),
                        ("--threads", 0, threads, "torch threads (0: torch's choice)")])
    parser.add_argument("--recipe", choices=recipe_names("methods") + ["none"], default="wmt14",
                        help="build each encoding with its entry's flags in pe_tools/recipes/RECIPE/methods.toml, e.g. "
                             "PosNet's L_max (default: wmt14); none: the architectures' defaults")


def rows_and_batches(args, always=(BASELINE,)) -> tuple:
    """(rows in registry order, STOCK last, with ``always``; sizes; {length: sentences}) of parsed model
    arguments. Raises UsageError when a length exceeds --max-tokens."""
    from pe_plugin.encodings import PE_REGISTRY

    wanted = set(args.pe or [*PE_REGISTRY, STOCK]) | set(always)
    lengths = list(dict.fromkeys(args.lengths))
    short = [n for n in lengths if n > args.max_tokens]
    if getattr(args, "batch", None):
        batches = {n: args.batch for n in lengths}
    elif short:
        raise UsageError(f"--max-tokens {args.max_tokens} is smaller than --lengths {' '.join(map(str, short))}: not "
                         "one sentence fits; raise --max-tokens" + (" or use --batch" if "batch" in args else ""))
    else:
        batches = {n: batch_size(args.max_tokens, n) for n in lengths}
    return [pe for pe in [*PE_REGISTRY, STOCK] if pe in wanted], list(dict.fromkeys(args.sizes)), batches

"""The benchmark's model and batch: ``transformer_<pe>_<arch>`` built through fairseq's own parser, with the
flags of the encoding's entry in a recipe's methods table, and one fixed random batch."""
import tempfile
from pathlib import Path

from ...naming import SUFFIX_OF_CLASS as SIZES, arch_name
from ...recipes import load_table


def recipe_flags(recipe: str, pe: str) -> list:
    """The flags of ``pe``'s entry in pe_tools/recipes/RECIPE/methods.toml ([] for --recipe none or no such entry)."""
    if recipe == "none":
        return []
    return list(load_table(recipe)["method"].get(pe, {}).get("flags", []))


def build_model(pe: str, size: str, vocab: int, recipe: str, device: str):
    """(model on ``device``, fairseq's parsed args): ``arch_name(pe, SIZES[size])`` with ``recipe``'s flags for
    ``pe``, a joined dictionary of ``vocab`` symbols (fairseq's 4 specials included) and shared embeddings,
    initialised under seed 1."""
    import torch
    from fairseq import options, tasks

    from ...common import plugin_dir

    with tempfile.TemporaryDirectory() as data:
        for lang in ("src", "tgt"):  # fairseq's Dictionary adds its 4 special symbols to these vocab - 4
            Path(data, f"dict.{lang}.txt").write_text("".join(f"w{i} 1\n" for i in range(vocab - 4)))
        argv = [data, "--user-dir", plugin_dir(), "--arch", arch_name(pe, SIZES[size]), "--task", "translation",
                "-s", "src", "-t", "tgt", "--share-all-embeddings", "--cpu",  # --cpu: the model is placed below
                *recipe_flags(recipe, pe)]
        args = options.parse_args_and_arch(options.get_training_parser(), argv)
        torch.manual_seed(1)
        model = tasks.setup_task(args).build_model(args).to(device)
    return model, args


def random_batch(batch: int, length: int, vocab: int, device: str):
    """(source tokens, source lengths, teacher-forced decoder input, target): tokens (B, T) drawn from the
    dictionary's ordinary symbols (no padding), lengths (B,) all T."""
    import torch

    src = torch.randint(4, vocab, (batch, length), device=device)  # (B, T)
    prev = torch.randint(4, vocab, (batch, length), device=device)  # (B, T)
    target = torch.randint(4, vocab, (batch, length), device=device)  # (B, T)
    lengths = torch.full((batch,), length, device=device)  # (B,)
    return src, lengths, prev, target

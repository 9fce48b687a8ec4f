"""A tiny model with short position limits (source L_SRC, target L_TGT) and the token batches its length tests
feed it: the length-limit tests' shared setting, and the hub of such a model."""
import torch

L_SRC, L_TGT = 7, 9
LIMS = ["--max-source-positions", str(L_SRC), "--max-target-positions", str(L_TGT)]
TINY = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
        "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
        "--encoder-attention-heads", "2", "--decoder-attention-heads", "2"]


def tokens(task, n: int, pad: int = 0, left: bool = True) -> torch.Tensor:
    """(1, n + pad): n - 1 words of the dictionary and the end of sentence (n tokens, as fairseq binarises a
    sentence), with ``pad`` padding columns on the left (sources) or the right (targets), as a batch padded to a
    multiple or to a longer sentence that was cut has them."""
    d = task.source_dictionary
    words = torch.arange(d.nspecial, d.nspecial + n - 1) % (len(d) - d.nspecial) + d.nspecial
    padding = torch.full((pad,), d.pad())
    parts = [words, torch.tensor([d.eos()])]
    return torch.cat([padding] + parts if left else parts + [padding]).unsqueeze(0)


def hub(task, model, args):
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    from pe_plugin.hub import PEHubInterface

    return PEHubInterface(convert_namespace_to_omegaconf(args), task, [model])

"""fairseq-generate's raw output as a system of pe-evaluate: its hypotheses in corpus order.

fairseq-generate prints its translations in the order of its batches (by length), one block per sentence id:
``S-ID`` (source), ``T-ID`` (reference), ``H-ID<TAB>score<TAB>tokens`` (the hypothesis as the model wrote it,
BPE removed with --remove-bpe), ``D-ID<TAB>score<TAB>text`` (the hypothesis after --bpe / --tokenizer decoding:
detokenised text when fairseq-generate ran with ``--tokenizer moses``) and ``P-ID`` (scores per token); its log
lines and the final BLEU line go to the same stream. A file with such lines is read here: the D- line of each
id (the H- line where the file has no D- lines, e.g. a grep for H- lines), the first one of an id being its best
(--nbest), sorted by id. Every id 0..N-1 of an N-line reference must be there.

fairseq-generate leaves sentences out in two ways, both silent in its output:
  * ``--required-batch-size-multiple`` (default 8): fairseq 0.12's batch_by_size drops a final batch whose size
    is not a multiple of it (docs/fairseq.md §Generation drops the last batch); decode with
    ``--required-batch-size-multiple 1``.
  * ``--skip-invalid-size-inputs-valid-test``: it skips sentences longer than the model's positions; decode
    without it, with ``--model-overrides "{'pe_beyond_max': 'clamp'}"`` for LAPE and PosNet (docs/design.md
    §Inputs longer than L_max).
The configuration fairseq-generate logs at its start (when the file holds it) tells which of the two was in
effect; the error for missing ids names that flag, or both when the log is not there.
"""
import re
from typing import Dict, List, Sequence

from .errors import InputError

# a hypothesis line of fairseq-generate: kind, id, tab, score, tab, text
HYPOTHESIS = {"D": re.compile(r"^D-(\d+)\t[^\t]*\t(.*)$"), "H": re.compile(r"^H-(\d+)\t[^\t]*\t(.*)$")}
# the settings of fairseq-generate's logged configuration that leave sentences out
BATCH_MULTIPLE = re.compile(r"'required_batch_size_multiple': (\d+)")
SKIP_INVALID = re.compile(r"'skip_invalid_size_inputs_valid_test': (True|False)")


def is_generate_output(text: str) -> bool:
    """Does ``text`` hold fairseq-generate's hypothesis lines (``H-ID`` or ``D-ID``, a tab, a score, a tab)?"""
    return any(line[:1] in HYPOTHESIS and HYPOTHESIS[line[:1]].match(line) for line in text.split("\n"))


def dropping_flags(text: str) -> List[str]:
    """The flags that can have left sentences out, as they were set in the logged configuration; both flags,
    with their fixes, when the configuration is not in ``text``."""
    multiple, skip = BATCH_MULTIPLE.search(text), SKIP_INVALID.search(text)
    fix_multiple = "decode with --required-batch-size-multiple 1"
    fix_skip = ("decode without --skip-invalid-size-inputs-valid-test (LAPE and PosNet: with --model-overrides "
                "\"{'pe_beyond_max': 'clamp'}\")")
    if multiple is None and skip is None:
        return [f"--required-batch-size-multiple (default 8) drops a last batch of another size: {fix_multiple}",
                f"--skip-invalid-size-inputs-valid-test skips sentences longer than the model's positions: {fix_skip}"]
    found = []
    if multiple is not None and int(multiple[1]) != 1:
        found.append(f"--required-batch-size-multiple was {multiple[1]} (the log's configuration), which drops a "
                     f"last batch of another size: {fix_multiple}")
    if skip is not None and skip[1] == "True":
        found.append(f"--skip-invalid-size-inputs-valid-test was on (the log's configuration): {fix_skip}")
    return found


def hypotheses(path: str, text: str, n_ref: int, ref_file: str) -> List[str]:
    """The hypotheses of fairseq-generate output ``text`` (of file ``path``) in corpus order, one per reference
    line; raise InputError naming missing or extra ids and the flag that left ids out."""
    kind = "D" if any(line[:2] == "D-" and HYPOTHESIS["D"].match(line) for line in text.split("\n")) else "H"
    found: Dict[int, str] = {}
    for line in text.split("\n"):
        m = HYPOTHESIS[kind].match(line)
        if m:
            found.setdefault(int(m[1]), m[2].rstrip())  # the first line of an id is its best (--nbest)
    beyond = sorted(i for i in found if i >= n_ref)
    if beyond:
        raise InputError(f"{path}: fairseq-generate output with sentence ids up to {beyond[-1]}, but reference "
                         f"{ref_file} has {n_ref} lines (ids 0-{n_ref - 1}): decoded from another test set?")
    missing = [i for i in range(n_ref) if i not in found]
    if missing:
        flags = dropping_flags(text)
        why = "; ".join(flags) if flags else ("the log's configuration shows neither flag set to drop sentences: "
                                              "is the file cut short?")
        raise InputError(f"{path}: fairseq-generate output lacks {len(missing)} of the {n_ref} sentence ids of "
                         f"reference {ref_file}: ids {id_list(missing)}. "
                         f"fairseq-generate left them out: {why}")
    return [found[i] for i in range(n_ref)]


def id_list(ids: Sequence[int], shown: int = 20) -> str:
    """'3, 7, 9' for the first ``shown`` ids, then how many more."""
    return ", ".join(map(str, ids[:shown])) + (f" and {len(ids) - shown} more" if len(ids) > shown else "")

"""Average the parameters of several fairseq checkpoints (Vaswani et al. 2017: the last 5 or 20).

    pe-average --inputs RUN_DIR --num-update-checkpoints 5 --output RUN_DIR/checkpoint.avg5.pt
    pe-average --inputs a.pt b.pt --output avg.pt

fairseq's own script is not shipped in its wheel and fails on torch >= 2.6 (``weights_only``); this one
loads with ``weights_only=True`` and pe_plugin's allow-list, averages floating-point tensors in float32
(integer tensors are copied from the last checkpoint), keeps the other state of the last checkpoint, and
writes the result under a temporary name that is renamed when complete.
"""
import argparse
import sys
from collections import OrderedDict
from pathlib import Path

import torch

from pe_plugin.safe_load import load_checkpoint

from .checkpoint_files import last_checkpoints, numbered_checkpoints
from .command_line import int_at_least
from .file_io import atomic


EXAMPLES = {"update": "checkpoint_E_U.pt, saved every --save-interval-updates",
            "epoch": "checkpointE.pt, saved at the end of each epoch"}


def newest_checkpoints(directory: Path, n: int, kind: str):
    """The ``n`` newest ``checkpoint_E_U.pt`` (kind "update") or ``checkpointE.pt`` (kind "epoch") files, oldest
    first (so the state kept beside the averaged weights is the newest one's); exits if there are fewer."""
    found = last_checkpoints(directory, n, kind)
    if len(found) < n:
        other = "epoch" if kind == "update" else "update"
        there = numbered_checkpoints(directory, other)
        if there:  # the other kind is there: the flag is the mistake, not the training
            raise SystemExit(
                f"error: {directory} holds {len(found)} {kind} checkpoints ({EXAMPLES[kind]}), {n} requested, and "
                f"{len(there)} {other} checkpoints ({there[0].name} .. {there[-1].name}): pass "
                f"--num-{other}-checkpoints {min(n, len(there))} instead of --num-{kind}-checkpoints {n}"
            )
        flag = "--save-interval-updates N" if kind == "update" else "--save-interval 1"
        keep = f" (and --keep-interval-updates >= {n})" if kind == "update" else ""
        raise SystemExit(
            f"error: {directory} holds {len(found)} {kind} checkpoints ({EXAMPLES[kind]}), {n} requested; "
            f"train with {flag}{keep} or ask for fewer"
        )
    return found


def directory_without_count(directory: Path) -> str:
    """The error for a run directory given without --num-*-checkpoints: what it holds and the flag to pass."""
    counts = {kind: numbered_checkpoints(directory, kind) for kind in ("update", "epoch")}
    held = [f"{len(found)} {kind} checkpoints ({found[0].name} .. {found[-1].name}): --num-{kind}-checkpoints N"
            for kind, found in counts.items() if found]
    if not held:
        return (f"error: {directory} is a directory and holds no numbered checkpoints ({EXAMPLES['update']} or "
                f"{EXAMPLES['epoch']}); pass checkpoint files as --inputs")
    return (f"error: a directory as --inputs needs the number of its newest checkpoints to average; {directory} holds "
            + "; ".join(held))


def average(paths):
    total, last = None, None
    for path in paths:
        state = load_checkpoint(str(path))
        model = state["model"]
        if total is None:
            total = OrderedDict((k, v.float().clone() if v.is_floating_point() else v) for k, v in model.items())
        else:
            if set(model) != set(total):
                raise SystemExit(f"error: {path} has different parameters than {paths[0]}; average one model only")
            for k, v in model.items():
                if v.is_floating_point():
                    total[k] += v.float()
        last = state
    for k, v in total.items():
        if v.is_floating_point():
            total[k] = (v / len(paths)).to(last["model"][k].dtype)
        else:
            total[k] = last["model"][k]
    last["model"] = total
    return last


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inputs", nargs="+", required=True, help="checkpoint files, or one run directory")
    parser.add_argument("--output", required=True)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--num-update-checkpoints", type=int_at_least(1), metavar="N",
                       help="average the last N checkpoint_E_U.pt (N >= 1)")
    group.add_argument("--num-epoch-checkpoints", type=int_at_least(1), metavar="N",
                       help="average the last N checkpointE.pt (N >= 1)")
    args = parser.parse_args(argv)

    inputs = [Path(p) for p in args.inputs]
    for p in inputs:
        if not p.exists():
            raise SystemExit(f"error: {p} does not exist")
    if args.num_update_checkpoints or args.num_epoch_checkpoints:
        if len(inputs) != 1 or not inputs[0].is_dir():
            raise SystemExit("error: --num-*-checkpoints takes one run directory as --inputs")
        kind, n = ("update", args.num_update_checkpoints) if args.num_update_checkpoints else ("epoch", args.num_epoch_checkpoints)
        inputs = newest_checkpoints(inputs[0], n, kind)
    elif any(p.is_dir() for p in inputs):
        raise SystemExit(directory_without_count(next(p for p in inputs if p.is_dir())))

    state = average(inputs)
    out = Path(args.output)
    with atomic(out) as tmp:
        torch.save(state, tmp)
    print(f"averaged {len(inputs)} checkpoints: {', '.join(p.name for p in inputs)} -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

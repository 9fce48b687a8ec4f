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

from pe_plugin.checkpoints import load_checkpoint

from .checkpoint_files import last_checkpoints
from .common import atomic, int_at_least


def newest_checkpoints(directory: Path, n: int, kind: str):
    """The ``n`` newest ``checkpoint_E_U.pt`` (kind "update") or ``checkpointE.pt`` (kind "epoch") files, oldest
    first (so the state kept beside the averaged weights is the newest one's); exits if there are fewer."""
    found = last_checkpoints(directory, n, kind)
    if len(found) < n:
        flag = "--save-interval-updates N" if kind == "update" else "--save-interval 1"
        raise SystemExit(
            f"error: {directory} holds {len(found)} {kind} checkpoints, {n} requested; "
            f"train with {flag} (and --keep-interval-updates >= {n}) or ask for fewer"
        )
    return found


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
        raise SystemExit("error: a directory as --inputs needs --num-update-checkpoints or --num-epoch-checkpoints")

    state = average(inputs)
    out = Path(args.output)
    with atomic(out) as tmp:
        torch.save(state, tmp)
    print(f"averaged {len(inputs)} checkpoints: {', '.join(p.name for p in inputs)} -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

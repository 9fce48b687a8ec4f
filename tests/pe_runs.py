"""Run directories for the tests: the files pe-train leaves, written without training."""
import json
import pickle
import zipfile
from datetime import datetime, timedelta


def stand_in_checkpoint(path, updates: int) -> None:
    """A file laid out as torch.save lays out a fairseq checkpoint (a zip archive holding ARCHIVE/data.pkl) with
    only the update count, in its last optimizer_history entry: what checkpoint_files.updates_of reads."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"optimizer_history": [{"num_updates": updates}]}))


COMMAND = {"recipe": "multi30k", "method": "rope", "pair": "en-de", "size": "small", "seed": 1, "data": "d",
           "argv": ["python", "-m", "fairseq_cli.train", "d", "--arch", "transformer_rope_tiny", "--max-update", "4",
                    "--max-update", "6"], "threads": "1", "device": "Some CPU"}


def run_log(params: int, seconds: int, updates: int) -> str:
    """A one-segment fairseq-train log of ``params`` parameters that ran ``seconds`` to update ``updates``."""
    end = datetime(2026, 1, 1, 10) + timedelta(seconds=seconds)
    return (f"2026-01-01 10:00:00 | INFO | fairseq_cli.train | {{'_name': None}}\n"
            f"2026-01-01 10:00:00 | INFO | pe_plugin | arch transformer_x_tiny | params total {params:,} | pe-only 0 | pe:x\n"
            f"{end:%Y-%m-%d %H:%M:%S} | INFO | train_inner | epoch 001:  1 / 9 loss=5.0, num_updates={updates}, wall=0\n"
            "/venv/lib/python3.11/site-packages/torch/nn/functional.py:6802: UserWarning: deprecated\n")


def write_run(tmp_path, method, seed, hyp_lines, seconds, params=7_000_000, updates=6, max_update=6,
              reached=None, decoded=None, extra=None):
    """A finished, decoded run directory as pe-train and pe-generate leave it: checkpoint_last.pt holds update
    ``reached`` (default ``updates``) and the decode averaged checkpoints ending at ``decoded`` (default: the same),
    no trainer holds it; ``extra``: pe-train's flags after --."""
    reached = updates if reached is None else reached
    decoded = reached if decoded is None else decoded
    run = tmp_path / "runs" / f"{method}.en-de.small.seed{seed}"
    (run / "gen").mkdir(parents=True)
    command = dict(COMMAND, method=method, seed=seed, argv=["--arch", f"transformer_{method}_tiny",
                                                            "--max-update", str(max_update), *(extra or [])],
                   **({"extra": extra} if extra is not None else {}))
    (run / "command.json").write_text(json.dumps(command))
    (run / "train.log").write_text(run_log(params, seconds, updates))
    stand_in_checkpoint(run / "checkpoint_last.pt", reached)
    (run / "gen" / "hyp.detok.de").write_text("".join(x + "\n" for x in hyp_lines))
    checkpoints = [f"checkpoint_1_{u}.pt" for u in range(max(decoded - 2, 1), decoded + 1)]
    (run / "gen" / "hyp.detok.de.meta.json").write_text(json.dumps({"pe_signature": f"pe:{method}",
                                                                    "checkpoints": checkpoints}))
    return run


REF = ["ein mann fährt fahrrad .", "zwei hunde spielen im schnee .", "eine frau liest ein buch im park .",
       "kinder spielen fußball auf der straße ."] * 5


GOOD = ["ein mann fährt ein fahrrad .", "zwei hunde spielen im schnee .", "eine frau liest im park .",
        "kinder spielen fußball auf der straße ."] * 5


BAD = ["mann fahrrad .", "hunde schnee spielen .", "frau buch park .", "straße kinder ."] * 5


def save_checkpoint(path, updates: int) -> None:
    """A checkpoint as fairseq-train saves one (torch's zip archive): tensors, an argparse.Namespace, numpy values,
    and the update count in its last optimizer_history entry."""
    import argparse
    from collections import OrderedDict

    import numpy as np
    import torch

    torch.save({"args": argparse.Namespace(arch="transformer_sape_tiny", max_update=updates),
                "model": OrderedDict(w=torch.ones(3, 2)), "extra_state": {"metrics": {"bleu": np.float64(1.5)}},
                "optimizer_history": [{"num_updates": updates - 2}, {"num_updates": updates, "lr": 1e-3}]}, path)

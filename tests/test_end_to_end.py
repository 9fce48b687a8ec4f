"""End to end: the runs' flags, and a checkpoint trained with --eval-bleu loading everywhere. The per-encoding run
(train a few updates with --user-dir, resume from checkpoint_last.pt, average two checkpoints) is
test_standalone.py's test_a_copy_of_pe_plugin_alone_trains_resumes_and_averages, on a copy of pe_plugin/ alone, so
that each encoding trains once; test_a_copy_of_pe_plugin_alone_decodes_every_checkpoint beam-searches (beam 4) with
every encoding's last checkpoint and average together, in one process.

Checkpoints are read with torch's default ``weights_only=True`` (the variable that switches it off is
removed from the environment), so these runs also show that pe_plugin's checkpoints load safely.
"""
import re

import pytest
from pe_testing import EVERY_TWO_UPDATES, PLUGIN, SAFE_ENV, fairseq_train, n_hypotheses, n_test, run


pytestmark = pytest.mark.slow
EVAL_BLEU = ["--arch", "transformer_sape_tiny", "--eval-bleu", "--eval-bleu-args", '{"beam": 1}', "--eval-bleu-detok",
             "space", "--best-checkpoint-metric", "bleu", "--maximize-best-checkpoint-metric", *EVERY_TWO_UPDATES]


def generate_flags(data_bin, checkpoint, user_dir=PLUGIN):
    # --required-batch-size-multiple 1: fairseq 0.12 drops a last batch whose size is not a multiple of it
    # (default 8), and the toy test split has 13 sentences
    return [data_bin, "--user-dir", user_dir, "--path", checkpoint, "--beam", 4, "--cpu",
            "--batch-size", 8, "--max-len-b", 20, "--required-batch-size-multiple", 1]


def generate(data_bin, checkpoint):
    return run("fairseq_cli.generate", generate_flags(data_bin, checkpoint)).stdout


def test_eval_bleu_checkpoint_loads_safely_everywhere(data_bin, tmp_path):
    """A checkpoint trained with --eval-bleu stores numpy BLEU counts; it loads in fairseq-generate,
    fairseq-interactive and training resume with weights_only=True, and pe_plugin's allow-list is needed."""
    save = tmp_path / "ck"
    fairseq_train(data_bin, save, *EVAL_BLEU, "--max-update", 2, own_process=True)  # (a new interpreter: safe loading)
    ckpt = save / "checkpoint_last.pt"
    probe = (
        "import sys, torch, pickle\n"
        "try:\n"
        f"    torch.load({str(ckpt)!r}, weights_only=True)\n"
        "except pickle.UnpicklingError as e:\n"
        "    print('REJECTED', str(e).splitlines()[0]); sys.exit(0)\n"
        "print('LOADED')\n"
    )
    import subprocess
    import sys

    plain = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=SAFE_ENV).stdout
    assert "REJECTED" in plain  # torch's default refuses it: the allow-list is what makes it load
    assert n_hypotheses(generate(data_bin, ckpt)) == n_test(data_bin)
    inter = subprocess.run(
        [sys.executable, "-m", "fairseq_cli.interactive", data_bin, "--user-dir", PLUGIN, "--path", ckpt,
         "--beam", "4", "--cpu", "--source-lang", "en", "--target-lang", "de"],
        input="w1 w2 w3\nw4 w5\n", capture_output=True, text=True, env=SAFE_ENV)
    assert inter.returncode == 0, inter.stderr[-3000:]
    assert sum(1 for line in inter.stdout.splitlines() if line.startswith("H-")) == 2
    log = fairseq_train(data_bin, save, *EVAL_BLEU, "--max-update", 3, own_process=True).stdout  # (its logs)
    assert re.search(r"Loaded checkpoint .*checkpoint_last\.pt \(epoch \d+ @ 2 updates\)", log)

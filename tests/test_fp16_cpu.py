"""fp16 on a CPU (docs/fairseq.md §fp16 and bf16 on CPU): a gradient overflow ends fairseq-train there, as the
docs say; the flags the docs give (pe_tools.fairseq_plugin.CPU_FP16_FLAGS) keep the project's CPU fp16 runs going; and
the tools that start fairseq-train pass them or stop with an error naming them, writing nothing."""
import re

import pytest
from pe_testing import PLUGIN, REPO, TRAIN_FLAGS, run

from pe_tools.fairseq_plugin import CPU_FP16_FLAGS, cpu_fp16_problem
from pe_tools.recipes import launch

# fairseq's own texts (trainer.py, torch.cuda), which the documents quote
OVERFLOW = "NOTE: gradient overflow detected"
NO_CUDA = "Torch not compiled with CUDA enabled"


def fp16_section() -> str:
    text = (REPO / "docs" / "fairseq.md").read_text()
    return re.sub(r"\s+", " ", text.split("## fp16 and bf16 on CPU")[1].split("\n## ")[0])


@pytest.mark.slow
def test_an_overflow_ends_fp16_training_on_a_cpu_and_the_documented_flags_keep_it_going(data_bin, tmp_path):
    section = fp16_section()
    assert OVERFLOW in section and NO_CUDA in section and f"`{' '.join(CPU_FP16_FLAGS)}`" in section
    common = [data_bin, "--user-dir", PLUGIN, "--arch", "transformer_rpe_tiny", *TRAIN_FLAGS, "--max-update", 3,
              "--no-save", "--save-dir", tmp_path / "ckpt"]
    # a loss scale of 2**20 takes the first backward beyond fp16's range (65504): an overflow for sure
    forced = run("fairseq_cli.train", [*common, "--fp16", "--fp16-no-flatten-grads", "--fp16-init-scale", 2 ** 20],
                 check=False)
    assert forced.returncode != 0, forced.stdout[-3000:]
    assert OVERFLOW in forced.stdout and forced.stdout.rstrip().endswith(f"AssertionError: {NO_CUDA}"), \
        forced.stdout[-3000:]
    kept = run("fairseq_cli.train", [*common, *CPU_FP16_FLAGS]).stdout
    assert "num_updates 3" in kept or "num_updates=3" in kept, kept[-3000:]
    assert "loss_scale" in kept and OVERFLOW not in kept


@pytest.mark.parametrize("extra, words", [
    (["--cpu", "--fp16"], ["--fp16-no-flatten-grads --fp16-init-scale 4", NO_CUDA, "fp16 and bf16 on CPU"]),
    (["--cpu", "--fp16", "--fp16-no-flatten-grads"], ["needs --fp16-init-scale 4:", "leave --fp16 out"]),
    (["--cpu", "--memory-efficient-fp16"], ["needs --fp16-init-scale 4:"]),
])
def test_pe_train_stops_fp16_on_a_cpu_without_the_flags(extra, words, tmp_path, capsys):
    argv = ["train", "sape", "--recipe", "multi30k", "--pair", "en-de", "--size", "annealed",
            "--data", str(tmp_path / "data"), "--runs-dir", str(tmp_path / "runs"), "--", *extra]
    assert launch.main(argv) == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words), err
    assert list(tmp_path.iterdir()) == []  # nothing written
    # with the flags the message names, the same command passes the check (a dry run prints the command)
    assert launch.main(argv[:-len(extra) - 1] + ["--dry-run", "--", *extra[:1], *CPU_FP16_FLAGS]) == 0
    assert list(tmp_path.iterdir()) == []


def test_the_check_reads_the_flags_as_fairseq_does():
    assert cpu_fp16_problem(["--cpu"]) is None and cpu_fp16_problem(CPU_FP16_FLAGS) is None
    assert cpu_fp16_problem(["--fp16", "--fp16-no-flatten-grads", "--fp16-init-scale=2"]) is None
    assert "--fp16-no-flatten-grads" in cpu_fp16_problem(["--fp16", "--fp16-init-scale", "4"])


def test_pe_bench_train_speed_passes_the_flags_on_a_cpu():
    import argparse

    from pe_tools.bench.train_speed import train_argv

    args = argparse.Namespace(data="data", recipe="wmt14", share_all_embeddings=True, max_update=6, max_tokens=400,
                              log_interval=2, extra=[])
    on_cpu = train_argv("t5", "tiny", args, "cpu", True)
    assert on_cpu[-len(CPU_FP16_FLAGS):] == CPU_FP16_FLAGS and cpu_fp16_problem(on_cpu) is None
    assert "--fp16-init-scale" not in train_argv("t5", "tiny", args, "cuda", True)


@pytest.mark.parametrize("user_dir, state", [("{tmp}/empty", "is not this pe_plugin"),
                                             ("{tmp}/missing", "does not exist")])
def test_pe_train_refuses_another_user_dir(user_dir, state, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    folder = user_dir.format(tmp=tmp_path)
    assert launch.main(["train", "sape", "--recipe", "multi30k", "--pair", "en-de", "--size", "annealed",
                        "--data", str(tmp_path / "data"), "--runs-dir", str(tmp_path / "runs"), "--",
                        "--user-dir", folder]) == 2
    err = capsys.readouterr().err
    assert f"--user-dir {folder} {state}" in err and "leave --user-dir out" in err and PLUGIN in err, err
    assert [p.name for p in tmp_path.iterdir()] == ["empty"]  # nothing written

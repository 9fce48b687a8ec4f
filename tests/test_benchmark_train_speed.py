"""pe-bench train-speed: the wps read from fairseq's json log against hand-worked medians, and a real run of
fairseq-train per encoding on a toy corpus the test generates (CPU, tiny size, fp32 and fp16)."""
import json
import os
import subprocess
import sys

import pytest

from pe_testing import REPO

LOG = """2026-01-01 00:00:00 | INFO | fairseq.trainer | begin training epoch 1
2026-01-01 00:00:01 | INFO | train_inner | {"epoch": 1, "update": 0.5, "loss": "9.1", "wps": "100", "ups": "1.0", "num_updates": "2"}
2026-01-01 00:00:02 | INFO | train_inner | {"epoch": 1, "update": 1.0, "loss": "8.0", "wps": "300", "ups": "3.0", "num_updates": "4"}
2026-01-01 00:00:03 | INFO | train | {"epoch": 1, "train_loss": "8.5", "train_wps": "250"}
2026-01-01 00:00:04 | INFO | train_inner | {"epoch": 2, "update": 1.5, "loss": "7.5", "wps": "500", "ups": "5.0", "num_updates": "6"}
2026-01-01 00:00:05 | INFO | train_inner | {"epoch": 2, "update": 2.0, "loss": "7.0", "wps": "200", "ups": "2.0", "num_updates": "8"}
"""


def test_speed_is_the_median_after_the_first_record():
    from pe_tools.bench.train_speed import inner_records, speed

    records = inner_records(LOG)
    assert [r["wps"] for r in records] == [100, 300, 500, 200]  # numbers (training_log); the epoch summary is not one
    s = speed(records)
    assert (s["wps"], s["ups"], s["records"]) == (300.0, 3.0, 3)  # median of 300, 500, 200; the 100 left out
    assert (s["last_loss"], s["last_update"]) == (7.0, 8)
    assert speed(records[:1])["wps"] == 100.0
    with pytest.raises(ValueError, match="no train_inner"):
        speed([])


def bench(*args):
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, str(REPO / "scripts" / "benchmark.py"), "train-speed", *map(str, args)],
                          cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
@pytest.mark.parametrize("half", ["--no-fp16", "--fp16"])
def test_real_runs_on_a_toy_corpus(data_bin, tmp_path, half):
    proc = bench("--data", data_bin, "--sizes", "tiny", "--pe", "t5", "--device", "cpu", half, "--max-update", 6,
                 "--log-interval", 2, "--max-tokens", 400, "--threads", 1, "--out-dir", tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((tmp_path / "train_speed.json").read_text())
    assert data["settings"]["fp16"] is (half == "--fp16") and data["settings"]["device"] == "cpu"
    results = {r["pe"]: r for r in data["results"]}
    assert list(results) == ["sape", "t5", "stock"]  # registry order, sape and stock always added
    for pe, r in results.items():
        assert r["records"] == 2 and r["last_update"] == 6 and r["wps"] > 0  # records at 2, 4, 6; the first out
        assert r["wps_to_stock"] == r["wps"] / results["stock"]["wps"]
        assert ("--user-dir" in r["command"]) is (pe != "stock")
        assert ("--fp16-no-flatten-grads" in r["command"]) is (half == "--fp16")
    assert results["stock"]["wps_to_stock"] == results["sape"]["wps_to_sape"] == 1.0
    assert "transformer_tiny " in results["stock"]["command"] and "transformer_t5_tiny " in results["t5"]["command"]
    assert {p.name for p in tmp_path.iterdir()} == {"train_speed.json", "train_speed.csv", "train_speed.md"}


@pytest.mark.slow
def test_a_folder_without_dictionaries_is_refused(tmp_path):
    proc = bench("--data", tmp_path, "--device", "cpu")
    assert proc.returncode != 0 and "dict" in proc.stderr

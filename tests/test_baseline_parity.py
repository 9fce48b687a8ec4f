"""Fair baselines: pe_plugin's no-PE, SAPE and LAPE architectures give the same loss, step for step, as
fairseq's stock Transformer of the same size and seed (dropout on, so the random streams must agree too)."""
import re

import pytest
from pe_testing import PLUGIN, TRAIN_FLAGS, run

pytestmark = pytest.mark.slow

STOCK_EQUIVALENT = {
    "sape": [],
    "lape": ["--encoder-learned-pos", "--decoder-learned-pos"],
    "nope": ["--no-token-positional-embeddings"],
}


def losses(data_bin, tmp_path, *arch_flags):
    out = run("fairseq_cli.train", [data_bin, *TRAIN_FLAGS, "--dropout", "0.1", "--max-update", 4, "--no-save",
                                    "--save-dir", tmp_path, *arch_flags]).stdout
    # per-update log lines: loss, nll_loss, update number and gradient norm (3 decimals as fairseq logs)
    steps = re.findall(r" loss=([\d.]+), nll_loss=([\d.]+),.* num_updates=(\d+),.* gnorm=([\d.]+)", out)
    assert len(steps) == 4, out[-3000:]
    return steps


@pytest.mark.parametrize("pe", sorted(STOCK_EQUIVALENT))
def test_same_loss_as_stock_fairseq(pe, data_bin, tmp_path):
    ours = losses(data_bin, tmp_path, "--user-dir", PLUGIN, "--arch", f"transformer_{pe}_tiny")
    stock = losses(data_bin, tmp_path, "--arch", "transformer_tiny", *STOCK_EQUIVALENT[pe])
    assert ours == stock

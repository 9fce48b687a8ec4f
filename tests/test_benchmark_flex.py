"""pe-bench flex: T5's buckets against hand-worked values, FlexAttention's forward equal to SDPA's with the same
bias in float32 on the CPU (and unequal when the bias differs: the check can fail), and the CPU run's message."""
import os
import subprocess
import sys

import pytest
import torch

from pe_testing import REPO


def test_t5_buckets_by_hand():
    from pe_tools.bench.flex_bias import t5_buckets

    b = t5_buckets(201)  # 32 buckets, 16 per direction, 8 exact, log-spaced up to distance 128
    # j - i = 0, -3, +3, -8 (first log bucket: 8 + log(8/8)/log(16) * 8 = 8), -128 and -200 (clamped to 15), +200
    assert [int(b[0, 0]), int(b[3, 0]), int(b[0, 3]), int(b[8, 0]), int(b[128, 0]), int(b[200, 0]),
            int(b[0, 200])] == [0, 3, 19, 8, 15, 15, 31]


@pytest.mark.parametrize("bias", ["t5", "alibi"])
def test_flex_forward_equals_sdpa_with_the_same_bias(bias):
    from pe_tools.bench.flex_bias import flex_side, problem, sdpa_side
    from torch.nn.attention.flex_attention import flex_attention

    q, k, v, _, pad, bias_of = problem(bias, 3, 2, 13, 8, "cpu", torch.float32, grad=False)
    assert pad.tolist()[0] == 0 and max(pad.tolist()) > 0  # left padding present
    ref = sdpa_side(q, k, v, pad, bias_of)
    assert torch.allclose(flex_side(q, k, v, pad, bias_of, flex_attention), ref, atol=1e-5)
    # negative control: another bias (twice as steep) or no padding mask gives another output
    steeper = flex_side(q, k, v, pad, lambda h, i, j: 2 * bias_of(h, i, j), flex_attention)
    unmasked = flex_side(q, k, v, torch.zeros_like(pad), bias_of, flex_attention)
    assert (steeper - ref).abs().max() > 1e-3 and (unmasked - ref).abs().max() > 1e-3


@pytest.mark.slow
def test_cpu_run_says_why_no_times():
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "benchmark.py"), "flex", "--device", "cpu",
                           "--lengths", "9", "--max-tokens", "27"], cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "no CUDA here" in proc.stderr and "| t5 | 9 | 3 |" in proc.stdout

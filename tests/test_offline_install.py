"""The offline install (docs/benchmarks.md §Offline install): scripts/gather_wheels.sh gathers every wheel but torch
for this Python into a folder, and the two documented `pip install --no-index` commands install it into a fresh
virtual environment beside torch (taken here from this machine's pip, as a node brings its own); the project then
imports and registers its architectures there."""
import os
import subprocess
import sys
import venv

import pytest

from pe_testing import REPO

PYVER = f"{sys.version_info[0]}.{sys.version_info[1]}"


def sh(*argv, **kw):
    proc = subprocess.run([str(a) for a in argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    assert proc.returncode == 0, f"{' '.join(map(str, argv))}:\n{proc.stdout[-3000:]}"
    return proc.stdout


@pytest.mark.slow
def test_gathered_wheels_install_offline_beside_torch(tmp_path):
    wheels = tmp_path / "wheels"
    sh("bash", REPO / "scripts" / "gather_wheels.sh", PYVER, wheels, env=dict(os.environ, PYTHON=sys.executable))
    names = sorted(p.name for p in wheels.iterdir())
    assert "requirements.txt" in names
    assert any(n.startswith("antlr4_python3_runtime-4.9.3-") and n.endswith(".whl") for n in names)
    assert any(n.startswith("ve_fairseq-0.12.3-") for n in names)
    assert any(n.startswith("pe_plugin-") for n in names)
    assert not [n for n in names if n.lower().startswith(("torch-", "torchaudio-", "nvidia"))]

    env_dir = tmp_path / "node"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    # the node's own torch; not compiled to bytecode (half of this install's time): the test's, not the documented
    # commands', and Python compiles what it imports
    sh(py, "-m", "pip", "install", "-q", "--no-compile", "torch==2.13.0")
    sh(py, "-m", "pip", "install", "-q", "--no-index", "--find-links", wheels, "-r", wheels / "requirements.txt")
    sh(py, "-m", "pip", "install", "-q", "--no-index", "--find-links", wheels, "--no-deps", "ve-fairseq==0.12.3")
    out = sh(py, "-c", "import fairseq, torch, pe_tools; from pe_plugin.encodings import PE_REGISTRY; "
                       "print(fairseq.__version__, torch.__version__, sorted(PE_REGISTRY))", cwd=tmp_path)
    last = out.splitlines()[-1]  # fairseq logs its optional-module notes before it
    assert last.split()[:2] == ["0.12.3", "2.13.0+cpu"] and "'sape'" in last
    assert "train-speed" in sh(env_dir / "bin" / "pe-bench", "--list", cwd=tmp_path)

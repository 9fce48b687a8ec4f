"""pe_tools/recipes/srun.py, the wrapper that turns each srun task into one fairseq-train rank: its rendezvous
address and port, its rank and world size, and the device each rank asks for; the environment of each task is
written here, as SLURM sets it, and scontrol is a stand-in on PATH."""
import os
import shlex

import pytest


# ---- the rendezvous of srun tasks (pe_tools/recipes/srun.py) -------------------------------------------------
@pytest.mark.parametrize("given", [False, True])
def test_an_srun_tasks_rendezvous_is_pe_master_addr_else_the_first_nodes_address(given, tmp_path, monkeypatch):
    """Each srun task's --distributed-init-method is tcp://HOST:PORT with PORT 20000 + job id mod 20000 and HOST
    PE_MASTER_ADDR when set (scontrol not asked), else the NodeAddr scontrol gives for the first node of
    SLURM_JOB_NODELIST. scontrol is a stand-in on PATH that logs each call."""
    from pe_tools.recipes import srun

    calls = tmp_path / "calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f"#!/bin/sh\necho \"$*\" >> {shlex.quote(str(calls))}\n"
                        "case \"$2\" in hostnames) printf 'node1\\nnode2\\n';; "
                        "node) echo \"NodeName=$4 Arch=x86_64 NodeAddr=10.1.2.$4x State=IDLE\";; esac\n")
    scontrol.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    env = {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "20123", "SLURM_LOCALID": "1",
           "SLURM_JOB_NODELIST": "node[1-2]", **({"PE_MASTER_ADDR": "10.9.9.9"} if given else {})}
    flags = srun.rank_flags(["python", "-m", "fairseq_cli.train", "data"], env)
    host = "10.9.9.9" if given else "10.1.2.node1x"
    assert flags[flags.index("--distributed-init-method") + 1] == f"tcp://{host}:20123"
    assert flags[:5] == ["--distributed-world-size", "2", "--distributed-rank", "1", "--distributed-no-spawn"]
    said = calls.read_text().splitlines() if calls.exists() else []
    assert said == ([] if given else ["show hostnames node[1-2]", "show node -o node1"])

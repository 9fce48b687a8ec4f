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


def two_nodes_of_four(rank: int) -> dict:
    """The environment SLURM gives task ``rank`` of a job of 2 nodes x 4 GPUs (8 tasks, 4 per node): its global
    rank SLURM_PROCID, its rank on its own node SLURM_LOCALID, its node SLURM_NODEID, and the job's sizes."""
    return {"SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank % 4), "SLURM_NODEID": str(rank // 4),
            "SLURM_NTASKS": "8", "SLURM_NNODES": "2", "SLURM_NTASKS_PER_NODE": "4", "SLURM_TASKS_PER_NODE": "4(x2)",
            "SLURM_GPUS_ON_NODE": "4", "SLURM_JOB_ID": "777", "SLURM_JOB_NODELIST": "gpu[1-2]",
            "PE_MASTER_ADDR": "10.0.0.1"}


@pytest.mark.parametrize("rank", range(8))
def test_each_task_of_two_nodes_takes_its_global_rank_and_its_nodes_gpu(rank):
    """Two nodes of four GPUs: task ``rank`` is fairseq's distributed rank ``rank`` of 8 (the global SLURM_PROCID,
    over the job's SLURM_NTASKS), on the GPU of its own node numbered by its place on that node (SLURM_LOCALID):
    rank 4, the second node's first task, trains on cuda:0 of that node, not cuda:4 (which does not exist there).
    Every task meets at the same address and port."""
    from pe_tools.recipes import srun

    flags = srun.rank_flags(["python", "-m", "fairseq_cli.train", "data"], two_nodes_of_four(rank))
    value = {flag: flags[flags.index(flag) + 1] for flag in ("--distributed-world-size", "--distributed-rank",
                                                             "--device-id", "--distributed-init-method")}
    gpu_on_its_node = [0, 1, 2, 3, 0, 1, 2, 3][rank]
    assert value == {"--distributed-world-size": "8", "--distributed-rank": str(rank),
                     "--device-id": str(gpu_on_its_node), "--distributed-init-method": "tcp://10.0.0.1:20777"}


def test_on_cpu_every_task_of_two_nodes_uses_device_zero_and_gloo():
    from pe_tools.recipes import srun

    for rank in range(8):
        flags = srun.rank_flags(["python", "-m", "fairseq_cli.train", "data", "--cpu"], two_nodes_of_four(rank))
        value = {flag: flags[flags.index(flag) + 1] for flag in ("--device-id", "--distributed-rank")}
        assert value == {"--device-id": "0", "--distributed-rank": str(rank)}
        assert flags[-4:] == ["--distributed-backend", "gloo", "--ddp-backend", "legacy_ddp"]


@pytest.mark.parametrize("gpus,ok", [(8, True), (9, False)])
def test_pe_train_inside_two_nodes_counts_the_tasks_of_the_whole_job(gpus, ok, monkeypatch):
    """pe-train --gpus N inside the 2 x 4 allocation: the job's 8 tasks (SLURM_NTASKS, not the 4 of one node) take
    --gpus 8, one srun task per rank; --gpus 9 is refused naming both counts and the fix."""
    from pe_tools.recipes import srun
    from pe_tools.recipes.srun import SlurmError

    for name, value in two_nodes_of_four(0).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    cmd = ["python", "-m", "fairseq_cli.train", "data"]
    if ok:
        assert srun.srun_command(cmd, gpus)[:3] == ["srun", "--kill-on-bad-exit=1", "--ntasks=8"]
    else:
        with pytest.raises(SlurmError, match="--gpus 9: this SLURM allocation has 8 task"):
            srun.srun_command(cmd, gpus)


def test_each_srun_task_gets_the_jobs_cpus_per_task_and_no_other_count(monkeypatch):
    """srun does not pass the job's --cpus-per-task on to its tasks (SLURM 22.05 on): pe-train hands it over from
    SLURM_CPUS_PER_TASK, and nothing when the job asked for none (SLURM_CPUS_ON_NODE, the node's count, set as
    SLURM always sets it, is not a per-task count)."""
    from pe_tools.recipes import srun

    for name, value in two_nodes_of_four(0).items():
        monkeypatch.setenv(name, value)
    cmd = ["python", "-m", "fairseq_cli.train", "data"]
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "6")
    monkeypatch.delenv("SLURM_CPUS_ON_NODE", raising=False)
    got = srun.srun_command(cmd, 8)
    assert got[:4] == ["srun", "--kill-on-bad-exit=1", "--ntasks=8", "--cpus-per-task=6"], got
    monkeypatch.delenv("SLURM_CPUS_PER_TASK")
    monkeypatch.setenv("SLURM_CPUS_ON_NODE", "32")
    got = srun.srun_command(cmd, 8)
    assert not [a for a in got if a.startswith("--cpus")] and got[3] == srun.sys.executable, got

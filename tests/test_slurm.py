"""pe-queue on SLURM (pe_tools/recipes/slurm.py), tested against a real single-node SLURM cluster that the tests
start in a temporary folder (tests/pe_slurm.py): the queue's runs as SLURM jobs record what the local queue records,
a requeued run resumes, a two-task srun training equals two hand-launched ranks, and bad input is refused before
anything is submitted. Without root or SLURM these tests skip with how to run them; PE_REQUIRE_SLURM=1 (.ci/run)
makes them fail instead."""
import time

import pytest

import pe_slurm


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    cluster = pe_slurm.cluster_or_skip(tmp_path_factory.mktemp("slurm"))
    yield cluster
    cluster.stop()


def wait_gone(cluster, job: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not cluster.run("squeue", "-h", "-j", job, check=False).stdout.strip():
            return
        time.sleep(0.3)
    raise AssertionError(f"job {job} still queued after {timeout} s")


def test_the_cluster_runs_batch_jobs_and_array_tasks_side_by_side(slurm, tmp_path):
    out = slurm.run("sbatch", "--parsable", "--array=3,5", "-o", str(tmp_path / "%a.out"),
                    "--wrap", "echo $SLURM_ARRAY_TASK_ID $SLURM_JOB_NODELIST; sleep 1").stdout.strip()
    job = out.split(";")[0]
    wait_gone(slurm, job)
    assert {p.name: p.read_text().split() for p in tmp_path.glob("*.out")} == {
        "3.out": ["3", slurm.node], "5.out": ["5", slurm.node]}

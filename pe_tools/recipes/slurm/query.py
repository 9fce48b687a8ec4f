"""pe-queue's questions to SLURM: the cluster's partitions and their nodes' size (``check_cluster``, ``check_fits``),
the states of jobs (squeue: ``job_states``; sacct: ``sacct_states``), each job known by the name it was submitted
under (``job_names``, ``queue_key``), and the paths the nodes may not share (``not_shared``)."""
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

from ..srun import SlurmError
from .options import Shape
from .state import ACTIVE

QUERY_SECONDS = 5  # pe-queue status waits this long for squeue or sacct, then answers from the run directories
WAIT_SECONDS = 120  # what submits or cancels waits this long for SLURM's commands (sbatch, squeue, scancel)
NOT_SHARED = ("/tmp", "/var/tmp", "/dev/shm", "/run")  # node-local on most clusters
SLURM_TOOLS = ("sbatch", "scontrol", "squeue", "sinfo", "scancel")
INSTALL_HINT = ("run pe-queue on a login node of your cluster (where sbatch works), or load SLURM's module "
                "(e.g. `module load slurm`); on Debian/Ubuntu the client is `apt-get install slurm-client`; "
                "--dry-run prints the batch scripts without SLURM")


# ------------------------------------------------------------------------------------------ the cluster's size
def _slurm(*cmd: str, what: str) -> str:
    try:
        out = subprocess.run(list(cmd), capture_output=True, text=True, timeout=WAIT_SECONDS)
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{what}: `{shlex.join(cmd)}` got no answer in {WAIT_SECONDS} s; is the controller up? "
                         f"(`scontrol ping`)") from None
    if out.returncode:
        raise SlurmError(f"{what}: `{shlex.join(cmd)}` failed: {(out.stderr or out.stdout).strip()}")
    return out.stdout


def check_cluster(partition: Optional[str]) -> dict:
    """The partition's nodes, CPUs and GPUs per node; raises SlurmError naming the fix when SLURM's tools are
    missing, the controller does not answer or the partition does not exist."""
    if lacking := [t for t in SLURM_TOOLS if not shutil.which(t)]:
        raise SlurmError(f"--slurm: {', '.join(lacking)} not found on PATH; {INSTALL_HINT}")
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=WAIT_SECONDS)
    if ping.returncode or "DOWN" in ping.stdout:
        raise SlurmError(f"--slurm: the SLURM controller does not answer (`scontrol ping`: "
                         f"{(ping.stdout + ping.stderr).strip()}); wait until it is up, or ask the cluster's admins")
    parts = [p for p in _slurm("sinfo", "-h", "-o", "%P", what="--partition").split()]
    names = [p.rstrip("*") for p in parts]
    if partition is None:
        default = [p.rstrip("*") for p in parts if p.endswith("*")]
        if not default:
            raise SlurmError(f"--partition: the cluster has no default partition; pass one of {', '.join(names)}")
        partition = default[0]
    elif partition not in names:
        raise SlurmError(f"--partition {partition}: no such partition on this cluster; its partitions: "
                         f"{', '.join(names)} (sinfo)")
    rows = _slurm("sinfo", "-h", "-N", "-p", partition, "-o", "%N|%c|%G", what=f"--partition {partition}").split()
    nodes: Dict[str, Tuple[int, int]] = {}
    for row in rows:
        name, cpus, gres = row.split("|")
        gpus = sum(int(m.group(1)) for m in re.finditer(r"gpu(?::[^:,(]+)?:(\d+)", gres))
        nodes[name] = (int(cpus), gpus)
    return {"partition": partition, "nodes": len(nodes),
            "cpus": max((c for c, _ in nodes.values()), default=0),
            "gpus": max((g for _, g in nodes.values()), default=0)}


def check_fits(run, shape: Shape, part: dict) -> None:
    p, where = part["partition"], f"{run.name} (line {run.line})"
    if shape.nodes > part["nodes"]:
        raise SlurmError(f"{where}: asks for {shape.nodes} nodes, partition {p} has {part['nodes']}; give nodes= "
                         f"at most {part['nodes']} (or --partition with more nodes)")
    if not shape.cpu_only and shape.per_node > part["gpus"]:
        raise SlurmError(f"{where}: asks for {shape.per_node} GPUs per node, partition {p}'s nodes have at most "
                         f"{part['gpus']}; give gpus= at most {part['gpus'] * part['nodes']} with enough nodes=, or "
                         f"--partition with GPUs (a recipe with --cpu runs on CPUs alone)")
    if shape.per_node * shape.cpus > part["cpus"]:
        raise SlurmError(f"{where}: asks for {shape.per_node} ranks x {shape.cpus} CPUs per node, partition {p}'s "
                         f"nodes have at most {part['cpus']} CPUs; lower cpus= or gpus=, or raise nodes=")


def not_shared(paths: Dict[str, Path]) -> Optional[str]:
    """A warning naming the paths the jobs need that lie where the nodes of a cluster usually do not share
    (/tmp and the like), or None."""
    local_paths = {}
    for what, path in paths.items():
        resolved = str(Path(path).resolve())
        if any(resolved == top or resolved.startswith(top + "/") for top in NOT_SHARED):
            local_paths.setdefault(resolved, what)
    if not local_paths:
        return None
    return (f"warning: --slurm: {len(local_paths)} path(s) the jobs need lie under {', '.join(NOT_SHARED)}, which "
            f"the nodes of a cluster usually do not share: "
            + "; ".join(f"{what} {path}" for path, what in local_paths.items())
            + ". Put them on storage every node mounts (a home or project folder): runs-dir=, into=, data= on the "
              "queue line, $PE_QUEUE_CODE_ROOT for the code")


# -------------------------------------------------------------------------------------------- the jobs' states
class NoAnswer(SlurmError):
    """SLURM's controller did not answer a query (squeue failed or timed out); the message says which."""


def job_states(job_ids: Sequence[str], timeout: float = QUERY_SECONDS,
               names: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """{array task id "JOB_TASK" or job id: SLURM state} of the jobs SLURM knows: queued, running, or ended less
    than MinJobAge ago (one ``squeue -t all``); {} without squeue or when SLURM knows none of them. ``names``:
    {job id: the job name pe-queue gave it at submission (it holds the queue's key)}; a job SLURM lists under
    another name is another job that got the id since (SLURM's state lost, or its ids wrapped), and is left out.
    Raises NoAnswer when the controller does not answer within ``timeout`` seconds: nobody can then tell whether a
    job lives."""
    job_ids = sorted({j for j in job_ids if j.isdigit()})  # a state file written outside SLURM names job "-"
    if not job_ids or not shutil.which("squeue"):
        return {}
    cmd = ["squeue", "-h", "-r", "-t", "all", "-j", ",".join(job_ids), "-o", "%i|%T|%j"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise NoAnswer(f"`squeue` got no answer from SLURM's controller in {timeout:.0f} s") from None
    if out.returncode:
        if "Invalid job id" in out.stderr:  # squeue -j of a single job SLURM has forgotten
            return {}
        raise NoAnswer(f"`squeue` failed: {(out.stderr or out.stdout).strip()[:300]}")
    names = names or {}
    states = {}
    for line in out.stdout.splitlines():
        task, state, name = (line.split("|", 2) + ["", ""])[:3]  # a name is last: it may hold "|" or spaces
        if task.strip() and names.get(task.split("_")[0], name) == name:
            states[task.strip()] = state
    return states


def active(states: Dict[str, str]) -> Dict[str, str]:
    """Those of ``states`` (``job_states``) still queued or running."""
    return {job: state for job, state in states.items() if state in ACTIVE}


def live_states(job_ids: Sequence[str], names: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """``job_states`` of the jobs still queued or running, for a command that submits or cancels (it waits
    WAIT_SECONDS for the controller)."""
    return active(job_states(job_ids, WAIT_SECONDS, names))


def job_names(jobs: Sequence[dict]) -> Dict[str, str]:
    """{job id: the name pe-queue gave it} of jobs.json's records or RUN/slurm.json's (those that say it)."""
    return {str(j["job"]).split("_")[0]: j["name"] for j in jobs if j.get("job") and j.get("name")}


def queue_key(queue_path: Path) -> str:
    """The key of one submission of a queue file, in its jobs' names: a hash of the file's resolved path and the
    moment, so that a job id SLURM gives again to another job is not taken for this queue's."""
    seed = f"{Path(queue_path).resolve()}\n{time.time_ns()}\n{os.getpid()}"
    return hashlib.sha256(seed.encode()).hexdigest()[:10]


def sacct_states(job_ids: Sequence[str], names: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """{JOB_TASK: state} from SLURM's accounting (sacct), {} where it is off or missing; a job recorded under
    another name than ``names`` gives its id ({job id: name}, as ``job_states``) is another job, left out."""
    if not job_ids or not shutil.which("sacct"):
        return {}
    try:
        out = subprocess.run(["sacct", "-n", "-P", "-X", "-j", ",".join(job_ids), "-o", "JobID,State,JobName"],
                             capture_output=True, text=True, timeout=QUERY_SECONDS)
    except subprocess.TimeoutExpired:
        return {}
    if out.returncode:
        return {}
    names, states = names or {}, {}
    for line in out.stdout.split("\n"):
        job, state, name = (line.split("|", 2) + ["", ""])[:3]
        if state.strip() and names.get(job.split("_")[0], name) == name:
            states[job] = state.split()[0]
    return states

"""A real single-node SLURM cluster for the tests (Debian's slurmctld / slurmd 22.05), in a temporary folder.

Everything it uses lies in that folder: the configuration (the clients find it through SLURM_CONF), the state
and spool folders, the logs and the daemons' pid files, by which it is stopped. It listens on two free ports on
127.0.0.1 (never SLURM's default 6817/6818), needs no munge (auth/none, cred/none), and gives each job the CPUs it
asks for (select/cons_tres), so array tasks run side by side on the node's 2 CPUs.

Starting it needs root and the packages ``slurmctld slurmd slurm-client``; without them the tests that use it
skip with the command that installs them, and under ``PE_REQUIRE_SLURM=1`` (.ci/run) they fail instead."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import pytest

from pe_testing import REPO, SAFE_ENV

REQUIRE = "PE_REQUIRE_SLURM"
HOW_TO = ("the SLURM tests need root and Debian's SLURM 22.05: as root, `apt-get update && apt-get install -y "
          "slurmctld slurmd slurm-client`, then `python -m pytest tests/test_slurm.py` (.ci/run does both and sets "
          f"{REQUIRE}=1, under which these tests fail instead of skipping)")
DAEMONS = ("slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "scontrol", "squeue", "sinfo", "scancel")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def missing() -> List[str]:
    """What this machine lacks to start the cluster (empty when it can)."""
    lack = [f"{p} (not on PATH)" for p in DAEMONS + CLIENTS if not shutil.which(p)]
    if os.geteuid() != 0:
        lack.append("root (slurmd runs jobs as their user)")
    return lack


class Cluster:
    """One controller and one node named after this host, reached at 127.0.0.1; ``env`` is the environment its
    clients need (SLURM_CONF)."""

    def __init__(self, root: Path, cpus: int = 2, min_job_age: int = 300):
        self.root, self.cpus, self.min_job_age = Path(root), cpus, min_job_age
        self.node = socket.gethostname().split(".")[0]
        self.partition = "pe"
        self.conf = self.root / "slurm.conf"
        self.env: Dict[str, str] = dict(os.environ, SLURM_CONF=str(self.conf))
        for k in [k for k in self.env if k.startswith("SLURM_") and k != "SLURM_CONF"]:
            del self.env[k]  # never inherit another allocation's variables

    def pid_file(self, daemon: str) -> Path:
        return self.root / f"{daemon}.pid"

    def write_conf(self, ctld_port: int, slurmd_port: int) -> None:
        r = self.root
        for d in ("state", "spool", "log"):
            (r / d).mkdir(parents=True, exist_ok=True)
        (r / "plugstack.conf").write_text("")
        self.conf.write_text(f"""# written by tests/pe_slurm.py
ClusterName=pe-test
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
AuthInfo=cred_expire=5
StateSaveLocation={r / 'state'}
SlurmdSpoolDir={r / 'spool'}
SlurmctldPidFile={self.pid_file('slurmctld')}
SlurmdPidFile={self.pid_file('slurmd')}
SlurmctldLogFile={r / 'log' / 'slurmctld.log'}
SlurmdLogFile={r / 'log' / 'slurmd.log'}
PlugStackConfig={r / 'plugstack.conf'}
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
# the main scheduling pass every second (default 60 s): a requeued job starts once its BeginTime (cred_expire
# + 1 s) has passed, 6 s after its requeue instead of 13-60 s
SchedulerParameters=sched_interval=1
KillWait=5
MinJobAge={self.min_job_age}
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} State=UNKNOWN
PartitionName={self.partition} Nodes={self.node} Default=YES MaxTime=INFINITE State=UP
""")

    def start(self, timeout: float = 30) -> "Cluster":
        self.write_conf(free_port(), free_port())
        for daemon in DAEMONS:
            subprocess.run([daemon, "-f", str(self.conf)], env=self.env, check=True, capture_output=True, text=True,
                           timeout=30)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = subprocess.run(["sinfo", "-h", "-o", "%t"], env=self.env, capture_output=True, text=True).stdout
            if out.strip() == "idle":
                return self
            time.sleep(0.2)
        raise RuntimeError(f"the test cluster's node is not idle after {timeout:.0f} s (sinfo: {out.strip()!r}); "
                           f"logs in {self.root / 'log'}:\n" + self.logs())

    def logs(self) -> str:
        return "\n".join(f"== {p.name}\n" + p.read_text(errors="replace")[-3000:]
                         for p in sorted((self.root / "log").glob("*.log")))

    def stop(self) -> None:
        """End the daemons named by the pid files (theirs alone), and the jobs' processes with slurmd."""
        subprocess.run(["scancel", "--full", "--user", "root"], env=self.env, capture_output=True, timeout=30)
        # wait (up to 30 s) until the controller lists no job, so that slurmd ends each job's slurmstepd itself
        # rather than leaving one behind when the daemons stop mid-cancel
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            listed = subprocess.run(["squeue", "-h", "-o", "%i"], env=self.env, capture_output=True, text=True,
                                    timeout=30)
            if listed.returncode or not listed.stdout.strip():
                break
            time.sleep(0.5)
        for daemon in reversed(DAEMONS):
            f = self.pid_file(daemon)
            if not f.is_file():
                continue
            pid = int(f.read_text().split()[0])
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            deadline = time.monotonic() + 15
            while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            if Path(f"/proc/{pid}").exists():
                os.kill(pid, signal.SIGKILL)

    def run(self, *cmd, check=True) -> subprocess.CompletedProcess:
        out = subprocess.run([str(c) for c in cmd], env=self.env, capture_output=True, text=True, timeout=120)
        if check and out.returncode:
            raise AssertionError(f"{' '.join(map(str, cmd))} exited {out.returncode}: {out.stdout}{out.stderr}")
        return out


def env_of(cluster) -> dict:
    """The environment of a pe-queue started for ``cluster``: its SLURM_CONF, one thread, this checkout's code."""
    return dict(SAFE_ENV, SLURM_CONF=cluster.env["SLURM_CONF"], OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore",
                PYTHONPATH=str(REPO))


def pe_queue(args, cwd: Path, env: dict, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pe_tools.recipes.queue_cli", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def jobs_of(q: Path) -> list:
    return json.loads((q.with_name(q.name + ".slurm") / "jobs.json").read_text())


def wait_for(what, test, timeout: float = 600):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := test():
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what}: not after {timeout} s")


def cluster_or_skip(root: Path, **conf) -> Cluster:
    """A started cluster (``conf``: Cluster's settings); skips with how to run it when this machine cannot start
    one (fails under PE_REQUIRE_SLURM=1)."""
    required = os.environ.get(REQUIRE) == "1"
    if lack := missing():
        message = f"no SLURM test cluster: missing {', '.join(lack)}; {HOW_TO}"
        if required:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    cluster = Cluster(root, **conf)
    try:
        return cluster.start()
    except (subprocess.SubprocessError, RuntimeError, OSError) as e:
        cluster.stop()
        message = f"the SLURM test cluster in {root} did not start: {e}\n{getattr(e, 'stderr', '') or ''}"
        if required:
            pytest.fail(message, pytrace=False)
        pytest.skip(f"{message}\n{HOW_TO}")

"""One training as one srun task per rank inside a SLURM allocation (``pe-train --gpus N`` in a SLURM job): each task
runs ``python -m pe_tools.recipes.srun -- CMD``, which adds the task's rank, world size and rendezvous from SLURM's
variables to fairseq-train's command. Standard library only; it knows nothing of queues (pe_tools/recipes/slurm/
submits those)."""
import os
import re
import subprocess
import sys
from typing import List, Optional, Sequence

from ..command_line import fail


class SlurmError(ValueError):
    """Bad input or a cluster that cannot take the queue; the message names the flag or line and the fix."""


def in_allocation() -> bool:
    return bool(os.environ.get("SLURM_JOB_ID"))


def srun_command(cmd: Sequence[str], world: int) -> List[str]:
    """``cmd`` (python -m fairseq_cli.train ARGV) as one srun task per rank inside a SLURM allocation; each task
    adds its rank, world size and rendezvous from the SLURM variables (``main``). Raises SlurmError when the
    allocation has fewer tasks than ranks."""
    tasks = int(os.environ.get("SLURM_NTASKS") or 1)
    if tasks < world:
        raise SlurmError(f"--gpus {world}: this SLURM allocation has {tasks} task(s); submit it with "
                         f"--ntasks={world} (one task per GPU), or pass --gpus {tasks}")
    extra = [f"--cpus-per-task={os.environ['SLURM_CPUS_PER_TASK']}"] if os.environ.get("SLURM_CPUS_PER_TASK") else []
    return ["srun", "--kill-on-bad-exit=1", f"--ntasks={world}", *extra, sys.executable, "-m",
            "pe_tools.recipes.srun", "--", *cmd]


def rank_flags(argv: Sequence[str], env=os.environ) -> List[str]:
    """fairseq-train's distributed flags of this srun task: rank and world size from SLURM_PROCID / SLURM_NTASKS,
    the device from SLURM_LOCALID, the rendezvous at the first node of the job (its NodeAddr) on a port taken
    from the job id. On CPU (--cpu): gloo and legacy_ddp (fairseq's c10d DDP wants a GPU)."""
    rank, world = int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"])
    host = env.get("PE_MASTER_ADDR") or first_node_addr(env)
    port = int(env.get("PE_MASTER_PORT") or 20000 + int(env.get("SLURM_JOB_ID", "0")) % 20000)
    flags = ["--distributed-world-size", str(world), "--distributed-rank", str(rank), "--distributed-no-spawn",
             "--distributed-init-method", f"tcp://{host}:{port}", "--device-id",
             "0" if "--cpu" in argv else env.get("SLURM_LOCALID", "0")]
    if "--cpu" in argv:
        flags += ["--distributed-backend", "gloo", "--ddp-backend", "legacy_ddp"]
    return flags


def first_node_addr(env=os.environ) -> str:
    nodes = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    first = subprocess.run(["scontrol", "show", "hostnames", nodes], capture_output=True, text=True
                           ).stdout.split()[:1] or [nodes]
    info = subprocess.run(["scontrol", "show", "node", "-o", first[0]], capture_output=True, text=True).stdout
    m = re.search(r"\bNodeAddr=(\S+)", info)
    return m.group(1) if m else first[0]


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m pe_tools.recipes.srun -- CMD``: exec CMD with this task's distributed flags."""
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd = argv[1:] if argv and argv[0] == "--" else argv
    if not cmd:
        return fail("python -m pe_tools.recipes.srun -- CMD: give the command after --")
    full = cmd + rank_flags(cmd)
    sys.stdout.flush()
    os.execvp(full[0], full)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())

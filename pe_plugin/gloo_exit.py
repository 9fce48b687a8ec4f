"""Destroy a gloo process group while the interpreter is still whole, at exit.

fairseq's ``distributed_main`` ends with a barrier and never destroys its process group. A gloo group (the CPU
ranks of docs/fairseq.md §Distributed training on CPU, a SLURM job's ranks on CPU) is then torn down during
interpreter finalisation, when its worker threads can no longer take the GIL: a rank that trained to the end can
abort there (``terminate called without an active exception``, exit status -6) and fail its job. It happens
rarely, more often on a loaded machine. Importing pe_plugin registers one ``atexit`` hook that destroys a gloo
default group first; a program that destroyed its group itself is unaffected. NCCL groups are left to fairseq
and torch: destroying one whose collectives are still pending can block, and no failure of theirs is known here.
"""
import atexit

import torch.distributed as dist


def destroy_gloo_group() -> bool:
    """Destroy the default process group if it is gloo's; whether one was destroyed."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_backend() != "gloo":
        return False
    dist.destroy_process_group()
    return True


def register() -> None:
    """The atexit hook, once however often pe_plugin is imported or reloaded."""
    atexit.unregister(destroy_gloo_group)
    atexit.register(destroy_gloo_group)

"""The machine a run or benchmark records: the processor's name. Standard library only."""
import platform
from pathlib import Path
from typing import Union


# ------------------------------------------------------------------------------------------------ machine
CPUINFO = "/proc/cpuinfo"


def cpu_model(cpuinfo: str) -> str:
    """The processor's name in the text of /proc/cpuinfo (its first ``model name`` line), or "" if none."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value.strip():
            return value.strip()
    return ""


def cpu_name(cpuinfo: Union[str, Path, None] = None) -> str:
    """This machine's processor, as runs and benchmarks record it: ``cpu_model`` of ``cpuinfo`` (default
    CPUINFO, Linux's), else what the platform module says, else "cpu"."""
    try:
        text = Path(cpuinfo or CPUINFO).read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    return cpu_model(text) or platform.processor() or platform.machine() or "cpu"

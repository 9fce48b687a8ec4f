"""pe_plugin from the tools' side, without importing it (that imports fairseq and torch): its folder (for
``--user-dir``), a digest of its sources, and the checks of a fairseq argv a tool starts (a ``--user-dir`` that is
not this pe_plugin, fp16 on a CPU without the flags that keep it running). Standard library only."""
import os
from pathlib import Path
from typing import Optional


# ------------------------------------------------------------------------------------------- pe_plugin
def plugin_dir() -> str:
    """The folder of the installed pe_plugin package, for ``--user-dir``; found without importing it (importing
    pe_plugin imports fairseq and torch)."""
    import importlib.util

    spec = importlib.util.find_spec("pe_plugin")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("pe_plugin is not installed: pip install . (or make setup)")
    return str(list(spec.submodule_search_locations)[0])


def foreign_user_dir(argv, tool: str) -> Optional[str]:
    """The error for a ``--user-dir`` in a fairseq argv that ``tool`` starts, where it is not this pe_plugin's
    folder: fairseq imports the last one given, so the run would lose the plugin (a folder without it ends in
    fairseq's "Weights only load failed" or "invalid choice" for --arch). None when every --user-dir is ours."""
    ours = os.path.realpath(plugin_dir())
    for i, word in enumerate(argv):
        given = word.split("=", 1)[1] if word.startswith("--user-dir=") else (
            argv[i + 1] if word == "--user-dir" and i + 1 < len(argv) else None)
        if given is not None and os.path.realpath(str(given)) != ours:
            state = "does not exist" if not os.path.exists(str(given)) else "is not this pe_plugin"
            return (f"--user-dir {given} {state} ({ours} is): {tool} passes --user-dir {ours} to fairseq itself; "
                    f"leave --user-dir out")
    return None


# fp16 on a CPU (docs/fairseq.md §fp16 and bf16 on CPU): fairseq's flattened fp16 optimizer needs CUDA, and its
# trainer, on a gradient overflow, calls .cuda() and ends the run; the default loss scale (128) overflows within the
# first updates of the quick start's tiny models, a scale of 4 did not in their 300 updates
CPU_FP16_FLAGS = ["--fp16", "--fp16-no-flatten-grads", "--fp16-init-scale", "4"]


def cpu_fp16_problem(argv) -> Optional[str]:
    """The error for a fairseq-train argv that trains in fp16 on a CPU without the flags that keep it running
    (CPU_FP16_FLAGS); None when it does not train in fp16 or has them."""
    flags = {w.split("=", 1)[0] for w in map(str, argv)}
    if not flags & {"--fp16", "--memory-efficient-fp16"}:
        return None
    missing = [] if "--memory-efficient-fp16" in flags or "--fp16-no-flatten-grads" in flags else [
        "--fp16-no-flatten-grads"]
    missing += [] if "--fp16-init-scale" in flags else ["--fp16-init-scale 4"]
    if not missing:
        return None
    return (f"fp16 on a CPU needs {' '.join(missing)}: without them fairseq-train stops with \"Torch not compiled "
            f"with CUDA enabled\" (at the first gradient overflow, which the default --fp16-init-scale 128 meets "
            f"within a few updates; docs/fairseq.md §fp16 and bf16 on CPU). Add them, or leave --fp16 out (fp32)")


def plugin_digest() -> str:
    """sha256 (first 16 hex digits) of pe_plugin's Python sources, paths and contents: which attention code a
    recording counted (the plugin is being changed while its counts are recorded)."""
    import hashlib

    h = hashlib.sha256()
    root = Path(plugin_dir())
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]

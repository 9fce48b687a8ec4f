"""pe_plugin/ stands alone: a copy of that one folder is a fairseq ``--user-dir``, as a fairseq user would use it.

The plugin imports nothing from pe_tools (checked on the source, lazy imports in functions included, and by
running fairseq-train and fairseq-generate on a copy of pe_plugin/ where ``import pe_tools`` fails). Those runs are
also the end-to-end check of every registered encoding (moved here from test_end_to_end.py, so that each encoding
trains once): train a few updates, resume from checkpoint_last.pt, average two checkpoints, and every encoding's
last checkpoint and average beam-searched (beam 4) together as one ensemble, checkpoints read with torch's default
``weights_only=True``. The tools
get the plugin's names and log-noise literals without importing pe_plugin: ``pe_tools/plugin_modules.py`` executes
``pe_plugin/naming.py`` and ``pe_plugin/log_noise.py`` by their paths, which import neither torch nor fairseq.
"""
import ast
import json
import os
import re
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest
from pe_testing import EVERY_TWO_UPDATES, REPO, SAFE_ENV, call_main, n_hypotheses, n_test, run, train_args

from pe_plugin import log_noise as plugin_log_noise
from pe_plugin import naming as plugin_naming
from pe_plugin.encodings import PE_REGISTRY
from pe_tools import average
from pe_tools import log_noise as tools_log_noise
from pe_tools import naming as tools_naming

PLUGIN_DIR = REPO / "pe_plugin"


# ---- the source: no import reaches outside pe_plugin/ ------------------------------------------------------
def _imports(path):
    """(line, absolute module name) of every import in ``path``, at any depth (lazy imports in functions too),
    relative ones resolved against the file's package, plus string arguments of importlib.import_module and
    __import__ calls."""
    package = list(path.relative_to(REPO).with_suffix("").parts)[:-1]  # P for P/m.py and P/__init__.py alike
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1] if node.level <= len(package) else ["<outside>"]
                found.append((node.lineno, ".".join(base + ([node.module] if node.module else []))))
            else:
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Call):
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            if name in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
                found.append((node.lineno, str(node.args[0].value)))
    return found


def test_the_plugin_imports_nothing_from_pe_tools():
    files = sorted(PLUGIN_DIR.rglob("*.py"))
    assert len(files) > 20 and PLUGIN_DIR / "models" / "validation.py" in files
    bad = [f"{path.relative_to(REPO)}:{line}: {module}" for path in files for line, module in _imports(path)
           if module.split(".")[0] in ("pe_tools", "<outside>", "tests", "scripts")]
    assert not bad, "pe_plugin/ must stand alone:\n" + "\n".join(bad)
    # the resolution of relative imports is right (else the check above could pass on wrong names)
    validation = dict((m, line) for line, m in _imports(PLUGIN_DIR / "models" / "validation.py"))
    assert "pe_plugin.naming" in validation and "pe_plugin.encodings" in validation


def test_the_plugins_names_and_literals_import_neither_torch_nor_fairseq():
    """So that the tools can execute them by their paths (pe_tools.plugin_modules): naming.py imports nothing,
    log_noise.py only the standard library."""
    assert _imports(PLUGIN_DIR / "naming.py") == []
    assert sorted(m for _, m in _imports(PLUGIN_DIR / "log_noise.py")) == ["logging", "re"]


# ---- the tools' names and literals are the plugin's ---------------------------------------------------------
# stock fairseq architectures, ours, and near misses; is_pe_arch must answer the same on each
ARCH_NAMES = [
    "transformer", "transformer_tiny", "transformer_wmt_en_de", "transformer_wmt_en_de_big",
    "transformer_vaswani_wmt_en_fr_big", "transformer_iwslt_de_en", "lstm", "", "sape_tiny", "transformer_sape",
    "transformer__tiny", "transformer_sape_tiny", "transformer_posnet_embed_wmt_en_de",
    "transformer_rope_wmt_en_de_big", "transformer_alibi_wmt_en_fr_big", "transformer_new_encoding_tiny",
]


def test_the_tools_names_are_the_plugins():
    """pe_tools.naming hands on pe_plugin/naming.py itself, executed apart from the pe_plugin package."""
    assert tools_naming._names.__file__ == plugin_naming.__file__ and tools_naming._names is not plugin_naming
    assert tools_naming.BASELINE == plugin_naming.BASELINE
    assert list(tools_naming.CLASS_OF_SUFFIX.items()) == list(plugin_naming.CLASS_OF_SUFFIX.items())  # the order too
    assert tools_naming.SUFFIX_OF_CLASS == plugin_naming.SUFFIX_OF_CLASS
    for pe, suffix in [("sape", "tiny"), ("posnet_embed", "wmt_en_de_big"), ("x", "y"), ("", "")]:
        assert tools_naming.arch_name(pe, suffix) == plugin_naming.arch_name(pe, suffix)
    answers = [plugin_naming.is_pe_arch(name) for name in ARCH_NAMES]
    assert [tools_naming.is_pe_arch(name) for name in ARCH_NAMES] == answers
    assert True in answers and False in answers
    # what the plugin registers is what the names say
    assert plugin_naming.BASELINE in PE_REGISTRY
    assert all(plugin_naming.is_pe_arch(plugin_naming.arch_name(pe, suffix))
               for pe in PE_REGISTRY for suffix in plugin_naming.CLASS_OF_SUFFIX)


def test_the_tools_log_noise_literals_are_the_plugins():
    assert tools_log_noise._noise.__file__ == plugin_log_noise.__file__
    assert tools_log_noise.LOGGER == plugin_log_noise.LOGGER
    assert tools_log_noise.NOTICE == plugin_log_noise.NOTICE
    assert tools_log_noise.PRINTED_NOTICE.pattern == plugin_log_noise.PRINTED_NOTICE.pattern
    assert tools_log_noise.PRINTED_NOTICE.flags == plugin_log_noise.PRINTED_NOTICE.flags


# ---- a copy of pe_plugin/ alone, with pe_tools unimportable ------------------------------------------------
SHIM_MARK = "PE_TOOLS_SHIM_IMPORTED"

# run as ``python -m standalone_probe MODULE ARGS...``: runs MODULE as ``python -m MODULE ARGS...`` would, then
# reports which pe_plugin that process imported, its encodings, and any pe_tools module it holds
PROBE = '''
import atexit, runpy, sys


def report():
    plugin = sys.modules.get("pe_plugin")
    encodings = sys.modules.get("pe_plugin.encodings")
    print("PROBE pe_plugin", getattr(plugin, "__file__", None), flush=True)
    print("PROBE encodings", ",".join(getattr(encodings, "PE_REGISTRY", {})), flush=True)
    print("PROBE pe_tools", ",".join(sorted(n for n in sys.modules if n.split(".")[0] == "pe_tools")), flush=True)


atexit.register(report)
module = sys.argv.pop(1)
runpy.run_module(module, run_name="__main__", alter_sys=True)
'''

# run as ``python -m standalone_probe standalone_drive JOBS.json``: fairseq-train's cli_main for each {name: argv} of
# JOBS.json in this one process (fairseq imported once, not once per run), each run's output after '@@ run NAME'
# and its exit status on '@@ status NAME CODE'; a run that fails does not stop the next
DRIVE = '''
import json, sys, traceback
from fairseq_cli import train

for name, argv in json.load(open(sys.argv[1])).items():
    print(f"@@ run {name}", flush=True)
    sys.argv = ["fairseq-train", *argv]
    try:
        train.cli_main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else int(e.code is not None)
    except Exception:
        traceback.print_exc(file=sys.stdout)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    print(f"@@ status {name} {code}", flush=True)
'''


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    """A copy of pe_plugin/ alone (still named pe_plugin: fairseq imports a --user-dir by its folder name), and
    the environment of the runs: first on PYTHONPATH a pe_tools whose import fails, a working directory outside
    the checkout."""
    root = tmp_path_factory.mktemp("standalone")
    copy = root / "user_dir" / "pe_plugin"
    shutil.copytree(PLUGIN_DIR, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shim = root / "shim"
    (shim / "pe_tools").mkdir(parents=True)
    (shim / "pe_tools" / "__init__.py").write_text(
        f"import sys\nprint({SHIM_MARK!r}, file=sys.stderr, flush=True)\n"
        "raise ImportError('pe_tools is not there: pe_plugin must stand alone')\n")
    (shim / "standalone_probe.py").write_text(PROBE)
    (shim / "standalone_drive.py").write_text(DRIVE)
    cwd = root / "cwd"
    cwd.mkdir()
    # as in test_end_to_end: checkpoints load with torch's default weights_only=True (the copy's allow-list)
    env = {k: v for k, v in SAFE_ENV.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(shim), PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    assert REPO not in cwd.parents and REPO not in copy.parents
    return SimpleNamespace(copy=copy, env=env, cwd=cwd)


def _python(code, standalone, env=None):
    return subprocess.run([sys.executable, "-c", code], cwd=standalone.cwd, env=env or standalone.env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@pytest.mark.slow
def test_the_shim_makes_pe_tools_unimportable(standalone):
    # without the shim, this interpreter finds pe_tools (the editable install): the shim is what removes it
    plain = {k: v for k, v in standalone.env.items() if k != "PYTHONPATH"}
    found = _python("import pe_tools.naming; print('FOUND', pe_tools.naming.__file__)", standalone, env=plain)
    assert found.returncode == 0 and f"FOUND {REPO / 'pe_tools' / 'naming.py'}" in found.stdout, found.stdout
    for module in ("pe_tools", "pe_tools.naming", "pe_tools.log_noise"):
        proc = _python(f"import {module}", standalone)
        assert proc.returncode != 0 and SHIM_MARK in proc.stdout and "ImportError" in proc.stdout, proc.stdout


def _probe(proc_out: str, key: str) -> str:
    found = re.findall(rf"^PROBE {key} ?(.*)$", proc_out, flags=re.M)
    assert len(found) == 1, proc_out[-3000:]
    return found[0]


def _assert_standalone_run(out: str, standalone):
    assert _probe(out, "pe_plugin") == str(standalone.copy / "__init__.py")  # the copy, not the checkout's
    assert _probe(out, "encodings") == ",".join(PE_REGISTRY)  # the copy registers every encoding
    assert _probe(out, "pe_tools") == "" and SHIM_MARK not in out  # nothing even tried to import pe_tools


def _train_all(standalone, data_bin, runs: dict, max_update: int) -> dict:
    """fairseq-train --user-dir COPY (pe_testing.train_args) for each {pe: save dir}, all in one process (the
    probe's, through standalone_drive): {pe: its run, with the exit status and output of that run, the probe's
    report of the process appended}. A process that died leaves its status and whole output to every run it did
    not finish."""
    jobs = {pe: [str(a) for a in train_args(data_bin, save, "--arch", plugin_naming.arch_name(
        pe, plugin_naming.SUFFIX_OF_CLASS["tiny"]), "--max-update", max_update, *EVERY_TWO_UPDATES,
        user_dir=standalone.copy)] for pe, save in runs.items()}
    path = runs[next(iter(runs))].parent / f"jobs{max_update}.json"
    path.write_text(json.dumps(jobs))
    proc = run("standalone_probe", ["standalone_drive", path], cwd=standalone.cwd, env=standalone.env, check=False)
    probe = "".join(line + "\n" for line in proc.stdout.splitlines() if line.startswith("PROBE "))
    out = {}
    for pe in runs:
        part = re.search(rf"^@@ run {pe}\n(.*?)^@@ status {pe} (-?\d+)$", proc.stdout, flags=re.M | re.S)
        out[pe] = (SimpleNamespace(returncode=int(part[2]), stdout=part[1] + probe) if part else
                   SimpleNamespace(returncode=proc.returncode or 1, stdout=proc.stdout))
    return out


@pytest.fixture(scope="module")
def trained(standalone, data_bin, tmp_path_factory):
    """Every registered encoding's tiny architecture trained for four updates by fairseq-train --user-dir COPY
    (a checkpoint every two), all in one process: {pe: (its run, save dir)}; failures are reported by the test of
    that encoding. The tests copy a save dir before they write to it."""
    saves = {pe: tmp_path_factory.mktemp(f"ck_{pe}") for pe in PE_REGISTRY}
    runs = _train_all(standalone, data_bin, saves, max_update=4)
    return {pe: (runs[pe], saves[pe]) for pe in PE_REGISTRY}


@pytest.fixture(scope="module")
def resumed(standalone, trained, data_bin, tmp_path_factory):
    """Each trained run resumed from its checkpoint_last.pt to 6 updates, in a copy of its save dir (the trained
    checkpoints stay as they are), all in a second process, and two of its checkpoints averaged by pe-average (from
    the checkout, its main in this process; test_install runs its console script): {pe: (resumed fairseq-train,
    pe-average's output, the average)}. Encodings whose training failed are left out (their test reports it)."""
    saves = {}
    for pe, (proc, trained_save) in trained.items():
        if proc.returncode == 0:
            saves[pe] = tmp_path_factory.mktemp(f"resumed_{pe}")
            shutil.copytree(trained_save, saves[pe], dirs_exist_ok=True)
    again = _train_all(standalone, data_bin, saves, max_update=6) if saves else {}
    runs = {}
    for pe, save in saves.items():
        avg = save / "avg.pt"
        out = call_main(average.main, ["--inputs", save / "checkpoint_1_2.pt", save / "checkpoint_1_4.pt",
                                       "--output", avg], prog="pe-average", cwd=REPO)
        runs[pe] = (again[pe], out, avg)
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("pe", list(PE_REGISTRY))
def test_a_copy_of_pe_plugin_alone_trains_resumes_and_averages(pe, standalone, trained, resumed):
    """The copy builds and trains (4 updates) and resumes from checkpoint_last.pt to 6 updates; two of its
    checkpoints are averaged. Its average and its checkpoint_last.pt are beam-searched by
    test_a_copy_of_pe_plugin_alone_decodes_every_checkpoint, with every other encoding's, in one process."""
    arch = plugin_naming.arch_name(pe, plugin_naming.SUFFIX_OF_CLASS["tiny"])
    proc, trained_save = trained[pe]
    log = proc.stdout
    assert proc.returncode == 0, log[-4000:]
    _assert_standalone_run(log, standalone)
    assert f"'user_dir': '{standalone.copy}'" in log, log[-3000:]  # fairseq-train's configuration names the copy
    assert re.search(rf"\| pe_plugin \| arch {arch} \| params total \d", log), log[-3000:]  # logged by the copy
    assert f"pe:{pe}|" in log  # the build-time summary with the encoding's signature
    assert re.search(r"num_updates[ =]4\b", log), log[-3000:]
    assert (trained_save / "checkpoint_last.pt").is_file() and (trained_save / "checkpoint_1_4.pt").is_file()

    again, out, avg = resumed[pe]
    log = again.stdout
    assert again.returncode == 0, log[-4000:]
    _assert_standalone_run(log, standalone)
    assert re.search(r"Loaded checkpoint .*checkpoint_last\.pt \(epoch \d+ @ 4 updates\)", log), log[-3000:]
    assert "num_updates 6" in log or "num_updates=6" in log
    assert out.returncode == 0 and "averaged 2 checkpoints" in out.stdout, out.stdout + out.stderr
    assert avg.is_file()


@pytest.mark.slow
def test_a_copy_of_pe_plugin_alone_decodes_every_checkpoint(standalone, trained, resumed, data_bin):
    """One fairseq-generate --user-dir COPY loads every encoding's checkpoint_last.pt and its average of two
    resumed checkpoints (torch's weights_only load with the copy's allow-list) and beam-searches with their
    ensemble, so that each model decodes incrementally; one process rather than two per encoding keeps the test
    short (test_end_to_end decodes a model alone)."""
    checkpoints = [save / "checkpoint_last.pt" for _, save in trained.values()]
    checkpoints += [avg for _, _, avg in resumed.values()]
    assert len(checkpoints) == 2 * len(PE_REGISTRY) and all(c.is_file() for c in checkpoints)
    # --required-batch-size-multiple 1: fairseq 0.12 drops a last batch whose size is not a multiple of it
    paths = os.pathsep.join(map(str, checkpoints))
    gen = run("standalone_probe", [
        "fairseq_cli.generate", data_bin, "--user-dir", standalone.copy, "--path", paths,
        "--beam", 4, "--cpu", "--batch-size", 16, "--max-len-a", 0, "--max-len-b", 12,
        "--required-batch-size-multiple", 1], cwd=standalone.cwd, env=standalone.env).stdout
    _assert_standalone_run(gen, standalone)
    assert f"loading model(s) from {paths}" in gen, gen[-3000:]
    assert n_hypotheses(gen) == n_test(data_bin), gen[-3000:]  # every test sentence decoded
    assert "BLEU4" in [line for line in gen.splitlines() if not line.startswith("PROBE ")][-1]  # the probe's after it

"""Every value that reaches a SLURM batch script (pe_tools/recipes/slurm/submit.py, ``batch_script``) survives a
folder holding a space, both quotes, ``;``, ``$(...)`` and backquotes, in each place it appears.

The values: the working folder (``--chdir`` and ``cd``), the submission folder (``--output``'s logs, the queue's
snapshot in the comment and on the ``exec`` line), the code folder (``PYTHONPATH`` and ``--code``), the code's
commit (``PE_QUEUE_COMMIT``), the Python interpreter, the partition, the account and the extra ``--sbatch``
options. The script that ``pe-queue run --slurm --dry-run`` prints (the one sbatch is given) is checked whole:
``bash -n`` parses it; each ``#SBATCH`` line is one option that reads back (shlex, as the shell) as the value given;
then bash runs it, with a stub in place of Python that records its argument vector, its folder and its
environment, and each record must be the value given, whole; and no command hidden in a value ran (each payload
would leave a file, and none is found anywhere). The reference is the values this file wrote, not the script's own.
"""
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import pe_queue_runs
from pe_testing import code_copy
from pe_tools.recipes import queue_cli

# each payload leaves a file named PWNED* if a shell runs it; the quotes and the space break an unquoted word
NASTY = "a b'c\"d;touch PWNED1;e$(touch PWNED2)f`touch PWNED3`g"
STUB = """#!{python}
import json, os, sys
with open(os.environ["STUB_RECORD"], "w") as f:
    json.dump({{"argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}}, f)
"""


def pwned(*roots):
    return [str(p) for root in roots for p in Path(root).rglob("PWNED*")]


@pytest.fixture
def nasty(tmp_path):
    folder = tmp_path / NASTY
    folder.mkdir()
    return folder


def dry_run_script(nasty, data_bin, monkeypatch, capsys):
    """(the printed script, its sbatch command line, what went in): pe-queue run --slurm --dry-run of a queue file
    in ``nasty``, from ``nasty`` as the working folder, every value that can hold the characters holding them."""
    table = pe_queue_runs.recipe(nasty, data_bin)
    queue_file = nasty / f"queue {NASTY}.txt"
    queue_file.write_text(f"{shlex.quote(str(table))} sape en-de mini 1 "
                          f"{shlex.quote(f'runs-dir={nasty / NASTY}')} {shlex.quote(f'into={nasty / NASTY}')}\n")
    code = code_copy(nasty)
    (code / "COMMIT").write_text(NASTY + "\n")
    python = nasty / f"python {NASTY}"
    python.write_text(STUB.format(python=sys.executable))
    python.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(python))  # the interpreter the job runs: the stub
    monkeypatch.chdir(nasty)
    given = {"partition": f"part {NASTY}", "account": f"acct {NASTY}", "sbatch": f"--comment={NASTY}",
             "code": str(code.resolve()), "commit": NASTY, "python": str(python), "cwd": str(nasty.resolve()),
             "submit_dir": str(queue_file.with_name(queue_file.name + ".slurm").resolve())}
    assert queue_cli.main(["run", str(queue_file), "--slurm", "--dry-run", "--code", str(code), "--partition",
                           given["partition"], "--account", given["account"], f"--sbatch={given['sbatch']}"]) == 0
    out = capsys.readouterr().out
    head, script = out.split("\n", 1)
    assert head.startswith("# ") and "not written by a dry run; without --dry-run it is written there and " \
        "submitted with: sbatch --parsable " in head
    return script, head.split("submitted with: ", 1)[1], given


def test_every_value_in_the_batch_script_survives_a_hostile_folder(nasty, tmp_path, data_bin, monkeypatch, capsys):
    script, submit_line, given = dry_run_script(nasty, data_bin, monkeypatch, capsys)
    path = tmp_path / "job.sh"
    path.write_text(script)
    check = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr

    # the printed sbatch command reads back as sbatch, its flag and the script's path, whole
    words = shlex.split(submit_line)
    assert words[:2] == ["sbatch", "--parsable"] and len(words) == 3
    assert Path(words[2]).parent == Path(given["submit_dir"]) and words[2].endswith(".sh")

    # every #SBATCH line is one option, and each value given reads back whole
    options = {}
    for line in script.splitlines():
        if line.startswith("#SBATCH"):
            directive, option = shlex.split(line)  # exactly two words, or the unpacking fails
            name, _, value = option.partition("=")
            options.setdefault(name, []).append(value)
    assert options["--chdir"] == [given["cwd"]]
    assert options["--output"] == [str(Path(given["submit_dir"]) / "logs" / "%x_%A_%a.out")]
    assert options["--partition"] == [given["partition"]] and options["--account"] == [given["account"]]
    assert options["--comment"] == [NASTY]
    (name,) = options["--job-name"]
    assert re.fullmatch(r"pe-[A-Za-z0-9_.-]+-0", name), name  # the queue file's name, made safe

    # bash runs it from elsewhere: the stub gets every value whole, in the working folder, and nothing else ran
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    record = tmp_path / "record.json"
    env = {"PATH": os.environ["PATH"], "STUB_RECORD": str(record), "SLURM_ARRAY_TASK_ID": "1"}
    run = subprocess.run(["bash", str(path)], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    got = json.loads(record.read_text())
    assert got["cwd"] == given["cwd"]  # the script's cd
    assert got["env"]["PYTHONPATH"] == given["code"] and got["env"]["PE_QUEUE_COMMIT"] == given["commit"]
    argv = got["argv"]
    assert argv[:3] == ["-m", "pe_tools.recipes.slurm", "job"]
    snapshot = Path(argv[3])
    assert snapshot.parent == Path(given["submit_dir"]) and re.fullmatch(r"queue-[0-9a-f]{12}\.txt", snapshot.name)
    assert argv[4:6] == ["--code", given["code"]] and argv[-2:] == ["--line", "1"]
    assert f"of {shlex.quote(str(snapshot))}, one array task" in script.splitlines()[1]  # the comment's path whole
    assert pwned(tmp_path, elsewhere) == [], run.stdout + run.stderr

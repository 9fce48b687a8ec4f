"""pe-train / pe-generate: train and decode a recipe, pe_tools/recipes/RECIPE/methods.toml joined into one fairseq
command (scripts/launch.py and examples/wmt14/{train,generate}.sh call it too).

    pe-train METHOD [--recipe wmt14] [--pair en-de] [--size base] [--seed 1] [--gpus N] [--dry-run] [-- FLAGS]
    pe-generate RUN_DIR [--data DIR] [--subset test] [--checkpoints 5] [--no-detok] [--pe-beyond-max {clamp,error}]
    pe-record RUN_DIR [--into DIR]
    pe-report [--recipe multi30k] [--pair en-de] [--size small] [--ref REF] --out-dir DIR [-- PE-EVALUATE FLAGS]
    python scripts/launch.py {train,generate,record,report,methods} ...        (the same, from a checkout)

A recipe is data: pe_tools/recipes/RECIPE/methods.toml ([common], [size.*], [method.*] and optional defaults
data, runs_dir, results_dir, default_size). wmt14 (the paper's) and multi30k (small enough for a CPU) ship here.

train: one run directory RUNS/METHOD.PAIR.SIZE.seedN holds the checkpoints, train.log (all output) and the resolved
command (command.txt, command.json); re-running the same command resumes from its checkpoint_last.pt.
generate: averages the last update checkpoints, decodes with the paper's settings (beam 4, lenpen 0.6,
max length 1 x source + 50), and writes RUN/gen/hyp.detok.TGT and ref.detok.TGT in the corpus order, with
hyp.detok.TGT.meta.json (the encoding signature) for pe-evaluate.
Every test sentence is translated: before decoding, the sentences longer than the model's positions (LAPE's
and PosNet's L_max) are named in a warning and decoded with the positions beyond L_max reusing the last row
(--pe-beyond-max clamp, the default; hypotheses that run past the target limit are counted after decoding,
and both lists go into the meta file as positions_beyond_max); --pe-beyond-max error names them and stops
before anything is decoded. The meta file also holds the training summary (parameters, updates, losses, training time)
read from train.log.
record / report: a finished run as small files to commit, and the results table made from them
(pe_tools/recipes/results.py).
"""
import argparse
import json
import re
import shlex
import subprocess
import sys
import threading
from pathlib import Path

from ..common import load_toml, plugin_dir, write_atomic
from ..log_noise import PRINTED_NOTICE
from ..naming import arch_name, is_pe_arch
from . import recipe_names, results, table_path

TABLE = table_path("wmt14", "methods")


def recipes() -> list:
    return recipe_names("methods")


def load_table(path=TABLE) -> dict:
    return load_toml(path, "recipe table")


def data_dir(table, recipe: str, pair: str) -> Path:
    """The recipe's prepared data of ``pair``: its ``data`` pattern, else data-bin/RECIPE_SRC_TGT."""
    src, tgt = pair.split("-")
    return Path(table.get("data", "data-bin/{recipe}_{src}_{tgt}").format(recipe=recipe, src=src, tgt=tgt))


def update_freq(table) -> int:
    flags = table["common"]["flags"]
    return int(flags[flags.index("--update-freq") + 1]) if "--update-freq" in flags else 1


def train_argv(table, method, pair, size, seed, data, run_dir, gpus=1, extra=()) -> list:
    """The fairseq-train argv of one run; raises ValueError naming the valid choices."""
    methods, sizes = table["method"], table["size"]
    if method not in methods:
        raise ValueError(f"unknown method {method!r}; valid methods: {', '.join(methods)}")
    if size not in sizes or pair not in sizes[size]["arch"]:
        raise ValueError(f"no size {size!r} for pair {pair!r} in this recipe; sizes: {', '.join(sizes)}")
    freq = update_freq(table)
    if gpus < 1 or freq % gpus:
        raise ValueError(f"--gpus {gpus}: must divide the recipe's --update-freq {freq} to keep its tokens per update")
    entry = methods[method]
    argv = [str(data), "--user-dir", plugin_dir(),
            "--arch", entry.get("arch") or arch_name(entry.get("pe", method), sizes[size]["arch"][pair]),
            "--source-lang", pair.split("-")[0], "--target-lang", pair.split("-")[1],
            *table["common"]["flags"], *sizes[size]["flags"], *entry["flags"], "--seed", str(seed),
            "--save-dir", str(run_dir)]
    if gpus > 1:
        argv += ["--distributed-world-size", str(gpus), "--update-freq", str(freq // gpus)]
    if "--cpu" not in extra and _cuda():
        argv.append("--fp16")
    return argv + list(extra)


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def train(a) -> int:
    if a.recipe not in recipes():
        return _error(f"unknown recipe {a.recipe!r}; recipes: {', '.join(recipes())} (pe_tools/recipes/RECIPE/methods.toml)")
    table = load_table(table_path(a.recipe))
    data = Path(a.data or data_dir(table, a.recipe, a.pair))
    size = a.size or table.get("default_size", "base")
    run_dir = Path(a.runs_dir or table.get("runs_dir", "runs")) / f"{a.method}.{a.pair}.{size}.seed{a.seed}"
    try:
        argv = train_argv(table, a.method, a.pair, size, a.seed, data, run_dir, a.gpus, a.extra)
    except ValueError as e:
        return _error(str(e))
    cmd = [sys.executable, "-m", "fairseq_cli.train", *argv]
    if not a.dry_run and not (data / f"dict.{a.pair.split('-')[0]}.txt").exists():
        return _error(f"data directory {data} has no fairseq dictionary; prepare it with "
                      f"pe-prepare {a.pair} --recipe {a.recipe} (from a checkout: examples/wmt14/prepare.sh "
                      f"{a.pair} --recipe {a.recipe}), or pass --data DIR")
    print(shlex.join(cmd), flush=True)
    if a.dry_run:
        return 0
    run_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(run_dir / "command.txt", shlex.join(cmd) + "\n")
    write_atomic(run_dir / "command.json", json.dumps(
        {"recipe": a.recipe, "method": a.method, "pair": a.pair, "size": size, "seed": a.seed, "data": str(data),
         "argv": cmd, **results.machine()}, indent=1))
    return tee(cmd, run_dir / "train.log")


def tee(cmd, log: Path) -> int:
    """Run ``cmd``, its output to the terminal and appended to ``log`` (a resumed run appends)."""
    with open(log, "a", encoding="utf-8") as f, subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1) as proc:
        for line in proc.stdout:
            if PRINTED_NOTICE.search(line):
                continue
            sys.stdout.write(line)
            f.write(line)
            f.flush()
    return proc.returncode


def run_captured(cmd) -> subprocess.CompletedProcess:
    """Run ``cmd`` with its stdout captured; its stderr goes to ours as it comes, without PRINTED_NOTICE."""
    def relay(stream):
        for line in stream:
            if not PRINTED_NOTICE.search(line):
                sys.stderr.write(line)
                sys.stderr.flush()

    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        errors = threading.Thread(target=relay, args=(proc.stderr,), daemon=True)
        errors.start()
        out = proc.stdout.read()
        proc.wait()
        errors.join()
    return subprocess.CompletedProcess(cmd, proc.returncode, out)


def generate(a) -> int:
    run_dir = Path(a.run_dir)
    if not (run_dir / "command.json").exists():
        return _error(f"{run_dir} has no command.json; is it a run directory of `launch.py train`?")
    meta = json.loads((run_dir / "command.json").read_text())
    data, (src, tgt) = Path(a.data or meta["data"]), meta["pair"].split("-")
    found = sorted((int(m.group(1)), p) for p in run_dir.glob("checkpoint_*_*.pt")
                   if (m := re.search(r"checkpoint_\d+_(\d+)\.pt$", p.name)))
    paths = [str(p) for _, p in found[-a.checkpoints:]]
    if not paths:
        return _error(f"{run_dir} has no update checkpoints checkpoint_E_U.pt (train with --save-interval-updates)")
    if len(paths) < a.checkpoints:
        print(f"warning: averaging {len(paths)} checkpoints, fewer than the {a.checkpoints} asked for", file=sys.stderr)
    out = run_dir / "gen"
    out.mkdir(exist_ok=True)
    avg = out / f"checkpoint.avg{len(paths)}.pt"
    rc = subprocess.call([sys.executable, "-m", "pe_tools.average",
                          "--inputs", *paths, "--output", str(avg)])
    if rc:
        return rc
    limits = check_positions(avg, data, a.subset, src, tgt, a.pe_beyond_max)
    if limits is None:
        return 2
    cmd = [sys.executable, "-m", "fairseq_cli.generate", str(data), "--user-dir", plugin_dir(),
           "--path", str(avg), "--gen-subset", a.subset, "--source-lang", src, "--target-lang", tgt,
           "--beam", "4", "--lenpen", "0.6", "--max-len-a", "1", "--max-len-b", "50", "--batch-size", "128",
           # fairseq 0.12's batch_by_size drops a last batch whose size is not a multiple of
           # --required-batch-size-multiple (default 8): 3 of newstest2014's 3003 sentences would be lost
           "--required-batch-size-multiple", "1", "--remove-bpe"] + (["--fp16"] if _cuda() else ["--cpu"])
    from pe_plugin.decode_limits import STOCK

    if a.pe_beyond_max == "clamp" and limits["pe"] != STOCK:  # every sentence is translated, whatever its length
        cmd += ["--model-overrides", "{'pe_beyond_max': 'clamp'}"]
    print(shlex.join(cmd), flush=True)
    proc = run_captured(cmd)
    write_atomic(out / f"generate.{a.subset}.out", proc.stdout)
    if proc.returncode:
        return proc.returncode
    count_long_hypotheses(proc.stdout, limits)
    return write_outputs(proc.stdout, out, tgt, run_dir / "train.log", a.no_detok,
                         {"positions_beyond_max": limits, "checkpoints": [Path(p).name for p in paths]}, meta)


def check_positions(checkpoint: Path, data: Path, subset: str, src: str, tgt: str, mode: str):
    """Before decoding: the sentences of ``subset`` the checkpoint has no positions for (LAPE, PosNet's L_max;
    pe_plugin/encodings/limits.py). ``error``: print an error naming them and return None (nothing is decoded);
    ``clamp``: warn naming them (they are translated with positions beyond the limit reusing the last row).
    Returns what the meta file records."""
    from pe_plugin.decode_limits import beyond, checkpoint_limits, describe, split_sizes

    lim = checkpoint_limits(str(checkpoint), str(data))
    try:
        src_sizes, tgt_sizes = split_sizes(str(data), subset, src, tgt)
    except FileNotFoundError as e:
        _error(str(e))
        return None
    n = len(src_sizes)
    if mode == "error":  # what fairseq-generate checks, sources and references, before it decodes
        ids = sorted(set(beyond(src_sizes, lim.fairseq[0])) | set(beyond(tgt_sizes, lim.fairseq[1])))
        if ids:
            label = {i: f"{src_sizes[i]} source" + ("" if tgt_sizes is None else f", {tgt_sizes[i]} reference")
                        + " tokens" for i in ids}
            _error(f"{len(ids)} of {n} {subset} sentences are longer than the model's positions "
                   f"(source {lim.fairseq[0]}, target {lim.fairseq[1]}: --max-source/target-positions and pe "
                   f"{lim.pe}'s limits), sentence ids {describe(ids, label)}. Nothing was decoded (fairseq-generate "
                   f"would stop at the first; its --skip-invalid-size-inputs-valid-test would drop them). Translate "
                   f"them with --pe-beyond-max clamp (positions beyond the limit reuse the last row), or retrain "
                   f"with larger --max-source-positions / --max-target-positions (PosNet: --posnet-max-positions)")
            return None
        return {"mode": mode, "pe": lim.pe, "encoder_limit": lim.encoder, "decoder_limit": lim.decoder, "sources": []}
    ids = beyond(src_sizes, lim.encoder)
    if ids:
        print(f"warning: {len(ids)} of {n} {subset} sentences are longer than the {lim.encoder} source positions of "
              f"pe {lim.pe}, sentence ids {describe(ids, {i: f'{src_sizes[i]} tokens' for i in ids})}; they are "
              f"translated with positions >= {lim.encoder} reusing the last row (--pe-beyond-max clamp; "
              f"--pe-beyond-max error stops instead)", file=sys.stderr)
    return {"mode": mode, "pe": lim.pe, "encoder_limit": lim.encoder, "decoder_limit": lim.decoder, "sources": ids}


def count_long_hypotheses(text: str, limits: dict) -> None:
    """After decoding under clamp: warn naming the hypotheses that ran past the decoder's positions."""
    from pe_plugin.decode_limits import describe, hypothesis_lengths

    lengths, top = hypothesis_lengths(text), limits["decoder_limit"]
    ids = sorted(i for i, m in lengths.items() if top is not None and m > top)
    limits["hypotheses"] = ids
    if ids:
        print(f"warning: {len(ids)} of {len(lengths)} hypotheses are longer than the {top} target positions, "
              f"sentence ids {describe(ids, {i: f'{lengths[i]} tokens' for i in ids})}; their tokens beyond "
              f"position {top - 1} were decoded reusing the last row (--pe-beyond-max clamp)", file=sys.stderr)


def write_outputs(text: str, out: Path, tgt: str, train_log: Path, no_detok: bool, extra_meta=None,
                  command=None) -> int:
    """H-/T- lines of fairseq-generate, sorted by sentence id, detokenised, written atomically; the meta file
    holds the encoding signature (``fairseq:ARCH|positions:KIND`` for a stock fairseq model), ``extra_meta``
    and the training summary of ``train_log`` (pe_tools.recipes.results.training_summary)."""
    hyps = {int(m[1]): m[2] for m in re.finditer(r"^H-(\d+)\t[^\t]*\t(.*)$", text, re.M)}
    refs = {int(m[1]): m[2] for m in re.finditer(r"^T-(\d+)\t(.*)$", text, re.M)}
    if not hyps or sorted(hyps) != list(range(len(hyps))) or sorted(refs) != sorted(hyps):
        return _error(f"fairseq-generate output has {len(hyps)} hypotheses, ids not 0..N-1; see {out}")
    detok = (lambda s: s) if no_detok else _detokenizer(tgt)
    for name, lines in (("hyp", hyps), ("ref", refs)):
        write_atomic(out / f"{name}.detok.{tgt}", "".join(detok(lines[i]) + "\n" for i in range(len(lines))))
    log = train_log.read_text(encoding="utf-8") if train_log.exists() else ""
    training = results.training_summary(log, command)
    sig = [m[4] for m in results.PE_SUMMARY.finditer(log)]
    if not sig and training.get("arch") and not is_pe_arch(training["arch"]):
        sig = [results.stock_signature(log, training["arch"])]  # a stock fairseq model (fairseq_transformer)
    if not sig:
        print(f"warning: no encoding signature in {train_log}; meta file left without pe_signature", file=sys.stderr)
    meta = {"pe_signature": sig[-1]} if sig else {}
    meta.update(extra_meta or {})
    meta["training"] = training
    write_atomic(out / f"hyp.detok.{tgt}.meta.json", json.dumps(meta, indent=1) + "\n")
    print(f"wrote {len(hyps)} sentences: {out / f'hyp.detok.{tgt}'}, {out / f'ref.detok.{tgt}'}")
    return 0


def _detokenizer(lang: str):
    from sacremoses import MosesDetokenizer

    md = MosesDetokenizer(lang=lang)
    return lambda s: md.detokenize(s.split())


def _error(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return 2


def main(argv=None, progs=None) -> int:
    """``progs``: the program name a sub-command's usage shows (the console scripts pe-train, pe-generate)."""
    progs = progs or {}
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    named = {cmd: {"prog": prog} for cmd, prog in progs.items()}
    t = sub.add_parser("train", help="train one method (flags after -- go to fairseq-train)", **named.get("train", {}))
    t.add_argument("method")
    t.add_argument("--recipe", default="wmt14", help="pe_tools/recipes/RECIPE/methods.toml: " + ", ".join(recipes()))
    t.add_argument("--pair", choices=["en-de", "en-fr"], default="en-de")
    t.add_argument("--size", help="a size of the recipe (wmt14: base, big, tiny; multi30k: small); default: "
                                  "the recipe's default_size, else base")
    t.add_argument("--seed", type=int, default=1)
    t.add_argument("--gpus", type=int, default=1, help="world size; the recipe's --update-freq is divided by N")
    t.add_argument("--data", help="fairseq data directory (default: the recipe's, data-bin/RECIPE_SRC_TGT)")
    t.add_argument("--runs-dir", help="parent of the run directory (default: the recipe's runs_dir, else runs)")
    t.add_argument("--dry-run", action="store_true", help="print the fairseq command and stop")
    g = sub.add_parser("generate", help="average, decode and detokenise one run", **named.get("generate", {}))
    g.add_argument("run_dir")
    g.add_argument("--data", help="fairseq data directory (default: the one the run trained on)")
    g.add_argument("--subset", default="test")
    g.add_argument("--checkpoints", type=int, default=5, help="average the last N update checkpoints")
    g.add_argument("--no-detok", action="store_true", help="skip Moses detokenisation")
    g.add_argument("--pe-beyond-max", choices=["clamp", "error"], default="clamp",
                   help="sentences longer than the model's positions (LAPE, PosNet's L_max): clamp (default) "
                        "translates them, positions beyond the limit reusing the last row, and names them in a "
                        "warning; error names them and stops before decoding")
    m = sub.add_parser("methods", help="list a recipe's methods, one a line (e.g. for xargs)")
    m.add_argument("--recipe", default="wmt14", choices=recipes())
    r = sub.add_parser("record", help="copy a finished, decoded run's translations, meta file, command and log "
                                      "into the recipe's results folder (to commit)", **named.get("record", {}))
    r.add_argument("run_dir")
    r.add_argument("--into", help="parent folder (default: the recipe's results_dir, e.g. examples/multi30k/results)")
    rp = sub.add_parser("report", help="score every recorded run of a pair and size against the baseline with "
                                      "pe-evaluate (its flags after --)", **named.get("report", {}),
                        epilog="Flags after -- go to pe-evaluate, e.g. -- --ngram-analysis, or -- --source FILE "
                               "--length-buckets 10,15,20 for scores by source length.")
    rp.add_argument("--recipe", default="multi30k", choices=recipes())
    rp.add_argument("--pair", choices=["en-de", "en-fr"], default="en-de")
    rp.add_argument("--size", help="default: the recipe's default_size, else base")
    rp.add_argument("--results", help="folder of recorded runs (default: the recipe's results_dir)")
    rp.add_argument("--ref", help="the test reference, untokenised (default: DATA/work/raw.test.TGT of the "
                                 "recipe's prepared data)")
    rp.add_argument("--out-dir", required=True, help="pe-evaluate's report folder")
    a = p.parse_args(argv)
    a.extra = extra
    if a.cmd == "methods":
        print("\n".join(load_table(table_path(a.recipe))["method"]))
        return 0
    return {"train": train, "generate": generate, "record": record, "report": report}[a.cmd](a)


def record(a) -> int:
    run_dir = Path(a.run_dir)
    try:
        command = results.run_command(run_dir)
        into = Path(a.into or load_table(table_path(command["recipe"])).get("results_dir", "results"))
        dest = results.record(run_dir, into)
    except results.RecordError as e:
        return _error(str(e))
    print(f"recorded {run_dir} -> {dest}")
    return 0


def report(a) -> int:
    from ..scoring import cli as evaluate

    table = load_table(table_path(a.recipe))
    tgt = a.pair.split("-")[1]
    size = a.size or table.get("default_size", "base")
    ref = Path(a.ref or data_dir(table, a.recipe, a.pair) / "work" / f"raw.test.{tgt}")
    if not ref.is_file():
        return _error(f"reference {ref} not found; prepare the data (pe-prepare {a.pair} --recipe {a.recipe}) or "
                      f"pass --ref FILE (the untokenised test reference)")
    try:
        runs = results.recorded_runs(Path(a.results or table.get("results_dir", "results")),
                                     list(table["method"]), a.pair, size)
    except results.RecordError as e:
        return _error(str(e))
    for prefix, systems in results.tables(runs).items():
        argv = results.evaluate_argv(systems, ref, tgt, Path(a.out_dir), prefix, a.extra)
        print("pe-evaluate " + shlex.join(argv), flush=True)
        rc = evaluate.main(argv)
        if rc:
            return rc
    return 0



def train_main() -> int:
    """pe-train: ``launch train``."""
    return main(["train", *sys.argv[1:]], {"train": "pe-train"})


def generate_main() -> int:
    """pe-generate: ``launch generate``."""
    return main(["generate", *sys.argv[1:]], {"generate": "pe-generate"})


def record_main() -> int:
    """pe-record: ``launch record``."""
    return main(["record", *sys.argv[1:]], {"record": "pe-record"})


def report_main() -> int:
    """pe-report: ``launch report``."""
    return main(["report", *sys.argv[1:]], {"report": "pe-report"})


if __name__ == "__main__":
    sys.exit(main())

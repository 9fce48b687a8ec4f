#!/usr/bin/env python
"""Smoke demo: a toy corpus that needs word order, tiny no-PE / SAPE / PosNet-Embed models, beam search
and a significance report. Runs on CPU in a few minutes.

    python scripts/demo.py [--out demo_out] [--updates 300] [--methods nope,sape,posnet_embed]

Every step is skipped when its output already exists, so an interrupted demo resumes.
"""
import argparse
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))
from toy_corpus import write_corpus  # noqa: E402


def step(title: str, argv, log: Path) -> None:
    t0 = time.time()
    print(f"[demo] {title} ...", flush=True)
    with open(log, "w") as f:
        proc = subprocess.run([sys.executable, *map(str, argv)], stdout=f, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise SystemExit(f"[demo] {title} failed (exit {proc.returncode}); see {log}")
    print(f"[demo] {title} done in {time.time() - t0:.0f}s", flush=True)


def main(argv=None) -> int:
    from pe_plugin.encodings import PE_REGISTRY

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="demo_out")
    p.add_argument("--updates", type=int, default=300)
    p.add_argument("--methods", default="nope,sape,posnet_embed")
    a = p.parse_args(argv)
    methods = [m for m in a.methods.split(",") if m]
    unknown = [m for m in methods if m not in PE_REGISTRY]
    if unknown:
        raise SystemExit(f"unknown method(s) {unknown}; valid: {', '.join(PE_REGISTRY)}")
    out = Path(a.out).resolve()
    raw, data = out / "raw", out / "data-bin"
    if not (raw / "test.de").exists():
        write_corpus(raw, n_train=3000, n_valid=100, n_test=200, seed=0, vocab=20, max_len=8)
    if not (data / "dict.en.txt").exists():
        step("binarise", ["-m", "fairseq_cli.preprocess", "--source-lang", "en", "--target-lang", "de",
                          "--trainpref", raw / "train", "--validpref", raw / "valid", "--testpref", raw / "test",
                          "--destdir", data, "--joined-dictionary", "--workers", "1"], out / "preprocess.log")
    systems = []
    for m in methods:
        run_dir = out / "runs" / m
        run_dir.mkdir(parents=True, exist_ok=True)
        if not (run_dir / "checkpoint_last.pt").exists():
            step(f"train {m}", ["-m", "fairseq_cli.train", data, "--user-dir", REPO / "pe_plugin",
                                "--arch", f"transformer_{m}_tiny", "--share-all-embeddings", "--cpu",
                                "--optimizer", "adam", "--lr", "3e-3", "--max-tokens", "2000",
                                "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
                                "--dropout", "0.1", "--max-update", a.updates, "--save-dir", run_dir,
                                "--no-epoch-checkpoints", "--seed", "1", "--no-progress-bar"], run_dir / "train.log")
        hyp = run_dir / "hyp.de"
        if not hyp.exists():
            step(f"beam search {m}", ["-m", "fairseq_cli.generate", data, "--user-dir", REPO / "pe_plugin",
                                      "--path", run_dir / "checkpoint_last.pt", "--beam", "4", "--cpu",
                                      "--batch-size", "64"], run_dir / "generate.log")
            lines = [ln.split("\t") for ln in (run_dir / "generate.log").read_text().splitlines()]
            hyps = sorted((int(x[0][2:]), x[2]) for x in lines if x[0].startswith("H-"))
            tmp = hyp.with_suffix(".tmp")
            tmp.write_text("".join(h + "\n" for _, h in hyps))
            tmp.replace(hyp)
        systems.append((m, hyp))
    base = "sape" if "sape" in methods else methods[0]
    args = ["scripts/evaluate.py", "--ref", raw / "test.de", "--trg-lang", "de", "--out-dir", out / "results"]
    for m, hyp in systems:
        args += ["--baseline" if m == base else "--system", f"{m}={hyp}"]
    step("evaluate", [REPO / args[0], *args[1:]], out / "evaluate.log")
    print((out / "results" / "results.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())

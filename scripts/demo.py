#!/usr/bin/env python
"""The demo: the whole recipe, at toy scale, on a synthetic corpus that needs word order. CPU, minutes.

    make demo                                   # = python scripts/demo.py (after setting up .venv)
    python scripts/demo.py --out demo_out --budget-minutes 14 --updates 400

1. corpus: ``scripts/grammar_corpus.py`` writes 20k/500/500 English -> German-like pairs whose target
   reorders the source (case from position, adjective-noun swap, verb-final subordinate clauses);
2. prepare: ``examples/wmt14/prepare.sh raw`` (Moses normalise and tokenise, joint BPE, clean, binarise);
3. train: ``examples/wmt14/train.sh METHOD --size tiny`` for no-PE, SAPE and PosNet-Embed, then every other
   registered encoding while the time budget allows (each one's cost is estimated from the slowest so far);
4. decode: ``examples/wmt14/generate.sh RUN --checkpoints 3`` (average, beam 4, detokenise);
5. evaluate: ``scripts/evaluate.py`` (BLEU, chrF++, compound-split BLEU, paired bootstrap vs SAPE, n-gram
   gap plot) and ``scripts/probe.py`` (identical-word attention heatmaps of the encoder);
6. prints the Table-1 style report; every file is under ``--out`` (results/, probe/, runs/).

Every step is skipped when its output is complete, so an interrupted demo resumes where it stopped.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))
import grammar_corpus  # noqa: E402

CORE = ("nope", "sape", "posnet_embed")  # always trained: the demo's point is their comparison
SRC, TGT = "en", "de"
# fairseq-train flags of the demo after the recipe's tiny-size flags (the last occurrence of a flag wins):
# one process, no gradient accumulation, a short warm-up and a higher peak rate for a 400-update run.
TRAIN_FLAGS = ["--cpu", "--update-freq", "1", "--lr", "3e-3", "--warmup-updates", "100", "--max-tokens", "4096",
               "--save-interval-updates", "100", "--keep-interval-updates", "3", "--no-epoch-checkpoints",
               "--log-interval", "50"]
AVERAGE = 3  # checkpoints averaged for decoding


class Demo:
    def __init__(self, args):
        self.a = args
        self.out = Path(args.out).resolve()
        self.t0 = time.time()
        self.env = dict(os.environ, PYTHON=sys.executable, PYTHONUNBUFFERED="1")

    def say(self, msg: str) -> None:
        print(f"[demo {self.elapsed() / 60:4.1f} min] {msg}", flush=True)

    def elapsed(self) -> float:
        return time.time() - self.t0

    def call(self, title: str, argv, log: Path, on_line=None) -> None:
        """Run ``argv``; all output to ``log``; ``on_line(line)`` may print progress. Raises on failure."""
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a", encoding="utf-8") as f, subprocess.Popen(
                [str(x) for x in argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                env=self.env, cwd=REPO) as proc:
            for line in proc.stdout:
                f.write(line)
                if on_line:
                    on_line(line)
        if proc.returncode:
            raise SystemExit(f"[demo] {title} failed (exit {proc.returncode}); its output is in {log}")

    def corpus(self) -> Path:
        raw = self.out / "raw"
        if not all((raw / f"{s}.{l}").exists() for s in ("train", "valid", "test") for l in (SRC, TGT)):
            self.say(f"corpus: {self.a.train:,} training pairs from scripts/grammar_corpus.py -> {raw}")
            grammar_corpus.write_corpus(raw, self.a.train, 500, 500, seed=self.a.seed, src=SRC, tgt=TGT)
        return raw

    def prepare(self, raw: Path) -> Path:
        data = self.out / "data"
        self.say(f"prepare: examples/wmt14/prepare.sh raw -> {data}")
        self.call("prepare", ["bash", REPO / "examples/wmt14/prepare.sh", "raw", "--src", SRC, "--tgt", TGT,
                              "--train", raw / "train", "--valid", raw / "valid", "--test", raw / "test",
                              "--out", data, "--bpe-merges", "1000"], self.out / "logs" / "prepare.log")
        return data

    def run_dir(self, method: str) -> Path:
        return self.out / "runs" / f"{method}.{SRC}-{TGT}.tiny.seed{self.a.seed}"

    def train_and_decode(self, method: str, data: Path) -> Path:
        run, hyp = self.run_dir(method), self.run_dir(method) / "gen" / f"hyp.detok.{TGT}"
        if hyp.exists():
            self.say(f"{method}: decoded already ({hyp})")
            return hyp
        t0 = time.time()

        def progress(line: str) -> None:
            m = re.search(r"valid on 'valid' subset \| loss ([\d.]+) \| nll_loss ([\d.]+).*num_updates (\d+)", line)
            if m:
                self.say(f"{method:13s} update {int(m[3]):4d}/{self.a.updates}  valid loss {m[1]}  nll {m[2]}")

        self.say(f"{method}: train transformer_{method}_tiny ({self.a.updates} updates)")
        self.call(f"train {method}", ["bash", REPO / "examples/wmt14/train.sh", method, "--size", "tiny", "--data",
                                      data, "--runs-dir", self.out / "runs", "--seed", self.a.seed, "--",
                                      *TRAIN_FLAGS, "--max-update", self.a.updates],
                  self.out / "logs" / f"train.{method}.log", progress)
        self.call(f"decode {method}", ["bash", REPO / "examples/wmt14/generate.sh", run, "--checkpoints", AVERAGE],
                  self.out / "logs" / f"generate.{method}.log")
        self.say(f"{method}: trained and decoded in {time.time() - t0:.0f} s")
        return hyp

    def evaluate(self, systems: dict) -> Path:
        results = self.out / "results"
        ref = self.run_dir("sape") / "gen" / f"ref.detok.{TGT}"
        argv = [sys.executable, REPO / "scripts/evaluate.py", "--ref", ref, "--trg-lang", TGT, "--out-dir", results,
                "--ngram-analysis", "--baseline", f"sape={systems['sape']}"]
        for method, hyp in systems.items():
            if method != "sape":
                argv += ["--system", f"{method}={hyp}"]
        self.say(f"evaluate: BLEU, chrF++, paired bootstrap (1000 resamples) of {len(systems) - 1} systems vs SAPE")
        self.call("evaluate", argv, self.out / "logs" / "evaluate.log")
        return results

    def probe(self, methods, data: Path) -> None:
        for method in methods:
            out = self.out / "probe" / method
            if (out / "probe.json").exists():
                continue
            self.call(f"probe {method}", [sys.executable, REPO / "scripts/probe.py",
                                          self.run_dir(method) / "checkpoint_last.pt", "--data", data, "--length",
                                          "32", "--words", "50", "--max-rank", "100", "--cpu", "--out", out],
                      self.out / "logs" / f"probe.{method}.log")
        self.say(f"probe: identical-word attention maps and indicators in {self.out / 'probe'}")

    def run(self) -> int:
        from pe_plugin.encodings import PE_REGISTRY

        budget = self.a.budget_minutes * 60
        data = self.prepare(self.corpus())
        systems, costs = {}, []
        extras = [m for m in PE_REGISTRY if m not in CORE] if self.a.extra else []
        for method in [*CORE, *extras]:
            if method not in CORE and costs:
                # reserve: the slowest model so far again, plus evaluation and probing (about 1.5 min)
                needed = self.elapsed() + 1.2 * max(costs) + 90
                if needed > budget:
                    self.say(f"{method}: skipped, it would end past the {self.a.budget_minutes:g}-minute budget "
                             f"(train it with --budget-minutes {needed / 60 + 1:.0f})")
                    continue
            t0 = time.time()
            systems[method] = self.train_and_decode(method, data)
            costs.append(time.time() - t0)
        results = self.evaluate(systems)
        self.probe([m for m in ("nope", "sape", "posnet_embed") if m in systems], data)
        report = json.loads((results / "results.json").read_text())
        print((results / "results.md").read_text(), flush=True)
        self.say(f"done: report {results / 'results.md'}, n-gram plot {results}/*.png, probe maps "
                 f"{self.out / 'probe'}/*/*.png")
        return check_order_matters(report)


def bleu_of(report: dict) -> dict:
    """System name -> mean sacreBLEU of the report (scripts/evaluate.py's JSON)."""
    return {s["name"]: s["summary"]["bleu"]["mean"] for s in report["systems"]}


def check_order_matters(report: dict) -> int:
    """The demo's claim: without position information the model cannot translate this corpus."""
    bleu = bleu_of(report)
    others = {m: b for m, b in bleu.items() if m != "nope"}
    if "nope" not in bleu or not others:
        return 0
    worst = min(others, key=others.get)
    gap = others[worst] - bleu["nope"]
    verdict = "as expected" if gap >= 10 else "UNEXPECTED: the gap should be at least 10 BLEU"
    print(f"no-PE BLEU {bleu['nope']:.1f}; the weakest encoding ({worst}) {others[worst]:.1f}: {gap:+.1f} ({verdict})")
    return 0 if gap >= 10 else 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="demo_out", help="output folder (default: demo_out)")
    p.add_argument("--updates", type=int, default=400, help="training updates per model (default: 400)")
    p.add_argument("--train", type=int, default=20000, help="training sentence pairs (default: 20000)")
    p.add_argument("--budget-minutes", type=float, default=14.0,
                   help="train encodings beyond no-PE, SAPE and PosNet-Embed only while the demo can end within "
                        "this many minutes (default: 14)")
    p.add_argument("--no-extra", dest="extra", action="store_false",
                   help="train only no-PE, SAPE and PosNet-Embed")
    p.add_argument("--seed", type=int, default=1, help="corpus and training seed (default: 1)")
    a = p.parse_args(argv)
    if a.updates < 100 * AVERAGE:
        p.error(f"--updates {a.updates}: at least {100 * AVERAGE} (a checkpoint every 100 updates, {AVERAGE} averaged)")
    return Demo(a).run()


if __name__ == "__main__":
    sys.exit(main())

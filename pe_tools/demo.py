"""pe-demo: the whole recipe, at toy scale, on a synthetic corpus that needs word order. CPU, minutes.

    make demo                                   # = pe-demo = python scripts/demo.py (after setting up .venv)
    pe-demo --out demo_out --budget-minutes 14 --updates 400

1. corpus: ``pe_tools.synthetic.grammar`` writes 20k/500/500 English -> German-like pairs whose target
   reorders the source (case from position, adjective-noun swap, verb-final subordinate clauses);
2. prepare: ``pe-prepare raw`` (what ``examples/wmt14/prepare.sh raw`` runs: Moses normalise and tokenise, joint
   BPE, clean, binarise);
3. train: ``pe-train METHOD --size tiny`` for no-PE, SAPE and PosNet-Embed, then every other
   registered encoding while the time budget allows (each one's cost is estimated from the slowest so far),
   two at a time on two cores;
4. decode: ``pe-generate RUN --checkpoints 3`` (average, beam 4, detokenise);
5. evaluate: ``pe-evaluate`` (BLEU, chrF++, compound-split BLEU, paired bootstrap vs SAPE, n-gram
   gap plot); analyse: ``pe-probe`` (identical-word attention maps and indicators) and
   ``pe-swap-probe`` (output and NLL change under local/global word swaps) for every model;
6. prints the Table-1 style report and the analysis tables; every file is under ``--out`` (results/,
   analysis/, runs/, logs/).

Every step is skipped when its output is complete, so an interrupted demo resumes where it stopped.

``Pipeline`` (corpus -> prepare -> train and decode, resumable, ``--jobs`` at a time within a time budget, with
progress lines) and ``add_pipeline_args`` are shared with ``pe_tools.length_experiment`` (pe-length). Each model is
trained and decoded by pe-queue's chain of one run (``pe_tools.recipes.queue.run_chain``), without its record.
Every step runs the installed modules (``python -m pe_tools...``): no checkout is needed.
"""
import argparse
import json
import os
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from .file_io import write_atomic
from .naming import BASELINE, arch_name
from .process import mains_argv, tee
from .recipes import training_log
from .recipes.queue import decoded, run_chain
from .synthetic import grammar as grammar_corpus
from .tables import markdown_table

CORE = ("nope", BASELINE, "posnet_embed")  # always trained: the demo's point is their comparison
SRC, TGT = "en", "de"
# fairseq-train flags of the demo after the recipe's tiny-size flags (the last occurrence of a flag wins):
# one process, no gradient accumulation, small batches (more updates per minute: the scalar biases of T5 and
# Adaptive-T5 need many Adam steps), a short warm-up and a higher peak rate for an 800-update run.
TRAIN_FLAGS = ["--cpu", "--update-freq", "1", "--lr", "3e-3", "--warmup-updates", "100", "--max-tokens", "2048",
               "--no-epoch-checkpoints", "--log-interval", "50"]
AVERAGE = 3  # checkpoints averaged for decoding: the last 3 of one every updates/4


class Pipeline:
    """The recipe at toy scale: prepare a raw corpus with pe-prepare, then train and decode tiny
    models with pe-train and pe-generate, ``--jobs`` at a time, within ``--budget-minutes``. Every step is
    skipped when its output exists. A subclass writes the corpus and evaluates; ``tag`` names its progress lines
    and ``train_flags`` are its fairseq-train flags after the recipe's tiny-size flags."""

    tag = "demo"

    def __init__(self, args):
        self.a = args
        self.train_flags = list(TRAIN_FLAGS)
        self.out = Path(args.out).resolve()
        # progress lines name the output folder relative to the working directory when it lies inside it
        cwd = Path.cwd()
        self.shown = str(self.out.relative_to(cwd)) if self.out.is_relative_to(cwd) else str(self.out)
        self.t0 = time.time()
        self.lock = threading.Lock()
        self.env = dict(os.environ, PYTHON=sys.executable, PYTHONUNBUFFERED="1")
        if args.jobs > 1:
            # one torch thread per job when several run (training and probing): tiny models gain little from a
            # second thread, and two one-thread runs on two cores train about 1.7x faster than one two-thread run
            self.env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        self.interval = max(1, args.updates // 4)  # checkpoint (and validation) interval in updates

    def say(self, msg: str) -> None:
        # one write per line under a lock: print() writes the text and its newline separately, so lines of
        # two jobs could run together
        with self.lock:
            msg = msg.replace(str(self.out), self.shown)
            sys.stdout.write(f"[{self.tag} {self.elapsed() / 60:4.1f} min] {msg}\n")
            sys.stdout.flush()

    def elapsed(self) -> float:
        return time.time() - self.t0

    def call(self, title: str, argv, log: Path, on_line=None) -> None:
        """Run ``argv``; all output to ``log``; ``on_line(line)`` may print progress. Raises on failure."""
        rc = tee(argv, log, echo=False, on_line=on_line, env=self.env)
        if rc:
            raise SystemExit(f"[{self.tag}] {title} failed (exit {rc}); its output is in {log}")

    def corpus(self, raw: Path, splits=("train", "valid", "test"), **options) -> Path:
        """pe_tools.synthetic.grammar's corpus in ``raw`` (``options``: its write_corpus keywords), unless
        every split is there already."""
        if not all((raw / f"{s}.{l}").exists() for s in splits for l in (SRC, TGT)):
            self.say(f"corpus: {self.a.train:,} training pairs from the grammar corpus -> {raw}")
            grammar_corpus.write_corpus(raw, self.a.train, self.a.heldout, self.a.heldout, seed=self.a.seed,
                                        src=SRC, tgt=TGT, **options)
        return raw

    def prepare(self, raw: Path, test: str = "test") -> Path:
        """pe-prepare raw on raw/{train,valid,TEST}; the test split is decoded."""
        data = self.out / "data"
        self.say(f"prepare: pe-prepare raw -> {data}")
        self.call("prepare", [sys.executable, "-m", "pe_tools.data.cli", "raw", "--src", SRC, "--tgt", TGT,
                              "--train", raw / "train", "--valid", raw / "valid", "--test", raw / test,
                              "--out", data, "--bpe-merges", "1000"], self.out / "logs" / "prepare.log")
        return data

    def run_dir(self, method: str) -> Path:
        return self.out / "runs" / f"{method}.{SRC}-{TGT}.tiny.seed{self.a.seed}"

    def train_and_decode(self, method: str, data: Path) -> Path:
        """pe-queue's chain of one run (``queue.run_chain``: pe-train, then pe-generate of the last AVERAGE
        checkpoints; nothing is recorded), each step's output in logs/; returns the hypothesis file."""
        run, hyp = self.run_dir(method), self.run_dir(method) / "gen" / f"hyp.detok.{TGT}"
        t0 = time.time()

        def progress(line: str) -> None:
            v = training_log.parse_line(line)
            if v and v.kind == "valid" and v.updates % self.interval == 0:  # the checkpoints' validations, not the epochs'
                self.say(f"{method:13s} update {v.updates:4d}/{self.a.updates}  valid loss {v.stats['loss']}  "
                         f"nll {v.stats['nll_loss']}")

        def step(what: str, args) -> int:
            kind = args[0]
            if kind == "train":
                self.say(f"{method}: train {arch_name(method, 'tiny')} ({self.a.updates} updates)")
            log = self.out / "logs" / f"{kind}.{method}.log"
            rc = tee([sys.executable, "-m", "pe_tools.recipes.launch", *args], log, echo=False,
                     on_line=progress if kind == "train" else None, env=self.env)
            if rc:
                self.say(f"{method}: {what} failed (exit {rc}); its output is in {log}")
            return rc

        train = ["train", method, "--size", "tiny", "--data", str(data), "--runs-dir", str(self.out / "runs"),
                 "--seed", str(self.a.seed), "--", *map(str, self.train_flags), "--max-update", str(self.a.updates),
                 "--save-interval-updates", str(self.interval), "--keep-interval-updates", str(AVERAGE)]
        if decoded(run, TGT, None):
            self.say(f"{method}: decoded already ({hyp})")
            return hyp
        state = run_chain(run, TGT, train, step, decodes=[(None, AVERAGE)])
        if state != "decoded":
            raise SystemExit(f"[{self.tag}] {method}: {state}")
        self.say(f"{method}: trained and decoded in {time.time() - t0:.0f} s")
        return hyp

    def evaluate(self, systems: dict, ref: Path, prefix: str = "results", extra=(), what: str = "") -> Path:
        """pe-evaluate: every system of {method: hypothesis file} against SAPE's, on ``ref``; the
        report is results/PREFIX.*, the log logs/evaluate[.PREFIX].log."""
        results = self.out / "results"
        argv = [sys.executable, "-m", "pe_tools.scoring.cli", "--ref", ref, "--trg-lang", TGT, "--out-dir", results,
                "--prefix", prefix, *extra, "--baseline", f"{BASELINE}={systems[BASELINE]}"]
        for method, hyp in systems.items():
            if method != BASELINE:
                argv += ["--system", f"{method}={hyp}"]
        self.say(f"evaluate: BLEU, chrF++, paired bootstrap (1000 resamples) of {len(systems) - 1} systems vs SAPE"
                 + (f" {what}" if what else ""))
        log = "evaluate.log" if prefix == "results" else f"evaluate.{prefix}.log"
        self.call("evaluate", argv, self.out / "logs" / log)
        return results

    def fits(self, costs) -> bool:
        """Would one more model, started now, end within the budget? Its cost is taken as 1.2 x the slowest
        model so far, and 2.5 minutes are kept for evaluation and analysis."""
        return not costs or self.elapsed() + 1.2 * max(costs) + 150 <= self.a.budget_minutes * 60

    def train_all(self, data: Path, order, always) -> dict:
        """Train and decode the methods of ``order``, ``--jobs`` at a time: those in ``always`` whatever the
        time, the others while the budget allows. Returns {method: hypothesis file} in ``order``."""
        pending, running, systems, costs = list(order), {}, {}, []

        def timed(method):
            t0 = time.time()
            return self.train_and_decode(method, data), time.time() - t0

        with ThreadPoolExecutor(self.a.jobs) as pool:
            while pending or running:
                while pending and len(running) < self.a.jobs:
                    method = pending.pop(0)
                    if method in always or self.fits(costs):
                        running[pool.submit(timed, method)] = method
                    else:
                        self.say(f"{method}: skipped, it would end past the {self.a.budget_minutes:g}-minute budget "
                                 f"(raise --budget-minutes to train it)")
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    systems[running.pop(future)], cost = future.result()
                    costs.append(cost)
        return {m: systems[m] for m in order if m in systems}


class Demo(Pipeline):
    """The demo: the comparison of no-PE, SAPE and PosNet-Embed (and the other encodings), then probes."""

    def analyse_one(self, method: str, data: Path) -> None:
        """Identical-word probing (pe-probe) and the word-swap probe (pe-swap-probe) of one model, in one
        interpreter (one import of torch and fairseq), each skipped when its JSON exists; their output in
        logs/probes.METHOD.log."""
        ckpt, out = self.run_dir(method) / "checkpoint_last.pt", self.out / "analysis" / method
        probes = []
        if not (out / "probe.json").exists():
            probes.append(("pe_tools.probe", [ckpt, "--data", data, "--length", "32", "--words", "50",
                                              "--max-rank", "100", "--cpu", "--out", out]))
        if not (out / "swap_probe.json").exists():
            probes.append(("pe_tools.swap_probe", [ckpt, "--data", data, "--max-sentences", "200", "--cpu",
                                                   "--out", out]))
        if probes:
            self.call(f"probes of {method}", mains_argv(probes), self.out / "logs" / f"probes.{method}.log")

    def analyse(self, methods, data: Path) -> Path:
        """Probe every model, ``--jobs`` at a time; their headline numbers as two markdown tables in
        results/analysis.md."""
        self.say(f"analysis: identical-word and word-swap probes of {len(methods)} models")
        with ThreadPoolExecutor(self.a.jobs) as pool:
            for future in [pool.submit(self.analyse_one, method, data) for method in methods]:
                future.result()  # re-raises the first failure
        path = self.out / "results" / "analysis.md"
        write_atomic(path, analysis_tables(self.out / "analysis", methods))
        self.say(f"analysis: attention maps and indicators in {self.out / 'analysis'}, tables in {path}")
        return path

    def run(self) -> int:
        """No-PE, SAPE and PosNet-Embed always, then every other registered encoding while the budget allows."""
        from pe_plugin.encodings import PE_REGISTRY

        data = self.prepare(self.corpus(self.out / "raw"))
        systems = self.train_all(data, [*CORE, *(m for m in PE_REGISTRY if m not in CORE and self.a.extra)], CORE)
        ref = self.run_dir(BASELINE) / "gen" / f"ref.detok.{TGT}"
        results = self.evaluate(systems, ref, extra=["--ngram-analysis"])
        analysis = self.analyse(list(systems), data)
        report = json.loads((results / "results.json").read_text())
        print((results / "results.md").read_text(), analysis.read_text(), sep="\n", flush=True)
        self.say(f"done: {results / 'results.md'}, {analysis}, n-gram gap plot {results}/*.png, attention maps "
                 f"{self.out / 'analysis'}/*/*.png")
        return check_order_matters(report)


def analysis_tables(folder: Path, methods) -> str:
    """Markdown: encoder indicators of identical-word probing (mean over layers, special tokens left out) and
    the word-swap probe's output change and forced-decoding NLL change per perturbation."""
    probe_keys = ("locality", "sym_code", "sym_abs", "aiv", "opr", "sd", "db20")
    lines = ["Identical-word probing, encoder self-attention, mean over layers (pe-probe, L = 32, 50 words):",
             ""]
    rows = []
    for m in methods:
        ind = json.loads((folder / m / "probe.json").read_text())["indicators"]["encoder"]["without_special"]["mean"]
        rows.append([m, *(_num(ind.get(k)) for k in probe_keys)])
    lines.append(markdown_table(["model", *probe_keys], rows, "l" + "r" * len(probe_keys), compact_rule=True))
    swap = json.loads((folder / methods[0] / "swap_probe.json").read_text())
    kinds = list(swap["perturbations"])
    lines += ["", f"Word-swap probe on {swap['n_sentences']} test sentences (pe-swap-probe): "
              "Δout = 100 - chrF++(output of the perturbed source, output of the source); ΔNLL = change of the "
              "forced-decoding NLL per token of the unperturbed output:", ""]
    rows = []
    for m in methods:
        p = json.loads((folder / m / "swap_probe.json").read_text())["perturbations"]
        rows.append([m, *(f"{p[k]['delta_out_chrf']:.2f}" for k in kinds),
                     *(f"{p[k]['delta_nll_per_token']:.3f}" for k in kinds)])
    lines.append(markdown_table(["model", *(f"Δout {k}" for k in kinds), *(f"ΔNLL {k}" for k in kinds)], rows,
                                "l" + "r" * (2 * len(kinds)), compact_rule=True))
    return "\n".join(lines) + "\n"


def _num(x) -> str:
    return "–" if x is None or x != x else f"{x:.3f}"


def bleu_of(report: dict) -> dict:
    """System name -> mean sacreBLEU of the report (pe-evaluate's JSON)."""
    return {s["name"]: s["summary"]["bleu"]["mean"] for s in report["systems"]}


def check_order_matters(report: dict, margin: float = 10.0) -> int:
    """The demo's claim: without position information a model cannot translate this corpus, so no-PE must
    trail every encoding by at least ``margin`` BLEU. Exit status 1 when it does not."""
    bleu = bleu_of(report)
    others = {m: b for m, b in bleu.items() if m != "nope"}
    if "nope" not in bleu or not others:
        return 0
    worst = min(others, key=others.get)
    gap = others[worst] - bleu["nope"]
    verdict = "as expected" if gap >= margin else f"UNEXPECTED: every encoding should lead by {margin:g} BLEU or more"
    print(f"no-PE BLEU {bleu['nope']:.1f}; the weakest encoding ({worst}) {others[worst]:.1f}: {gap:+.1f} ({verdict})")
    return 0 if gap >= margin else 1


def add_pipeline_args(p: argparse.ArgumentParser, out: str, budget: float, budget_help: str) -> None:
    """The flags of ``Pipeline``; ``check_pipeline_args`` validates them."""
    p.add_argument("--out", default=out, help=f"output folder (default: {out})")
    p.add_argument("--updates", type=int, default=800, help="training updates per model (default: 800)")
    p.add_argument("--train", type=int, default=20000, help="training sentence pairs (default: 20000)")
    p.add_argument("--heldout", type=int, default=500, help="validation and test pairs each (default: 500)")
    p.add_argument("--budget-minutes", type=float, default=budget, help=f"{budget_help} (default: {budget:g})")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                   help="models trained at the same time, one torch thread each (default: 2, or 1 on one core)")
    p.add_argument("--seed", type=int, default=1, help="corpus and training seed (default: 1)")


def check_pipeline_args(p: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    if a.updates < AVERAGE:
        p.error(f"--updates {a.updates}: at least {AVERAGE} (the last {AVERAGE} checkpoints are averaged)")
    for flag in ("train", "heldout"):
        if getattr(a, flag) < 10:
            p.error(f"--{flag} {getattr(a, flag)}: at least 10 sentence pairs")
    if a.jobs < 1:
        p.error(f"--jobs {a.jobs}: at least 1")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pipeline_args(p, "demo_out", 14.0, "train encodings beyond no-PE, SAPE and PosNet-Embed only while the "
                                           "demo can end within this many minutes")
    p.add_argument("--no-extra", dest="extra", action="store_false",
                   help="train only no-PE, SAPE and PosNet-Embed")
    a = p.parse_args(argv)
    check_pipeline_args(p, a)
    return Demo(a).run()


if __name__ == "__main__":
    sys.exit(main())

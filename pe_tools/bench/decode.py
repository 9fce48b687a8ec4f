"""pe-bench decode: fairseq-generate's own beam search, in this process, for every registered encoding and stock
fairseq's transformer at the same shape, with the recipe's decode flags (pe-generate's beam, length penalty,
maximum length and batch size), in rotated rounds: sentences/s, tokens/s, time per decoder step (wall and the
process's CPU time), peak memory; ratios to stock in the same round. The models are built once, with random
weights (decoding costs the same whatever the weights), and saved as checkpoints for fairseq-generate to load.
The method: docs/benchmarks.md §Decoding.

    pe-bench decode --recipe multi30k --equal-length 30 --rounds 3 --out-dir runs/decode
    pe-bench decode --recipe wmt14 --size base --data data-bin/wmt14_en_de --subset test --out-dir runs/decode_base
"""
import argparse
import gc
import hashlib
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from ..command_line import fail, int_at_least
from ..fairseq_plugin import plugin_digest, plugin_dir
from ..tables import markdown_table
from . import _common
from ._build import STOCK
from ._common import add_counts, add_device_arg, add_ratios, machine, over_rounds, resolve_device, rotated, \
    spread_cell, verdict
from ._partial_runs import Progress, add_args as add_output_args

NAME = "decode"
HELP = ("fairseq-generate's own beam search for every encoding and stock fairseq, in rotated rounds: sentences/s, "
        "tokens/s, time per decoder step (wall and CPU), peak memory; ratios to stock")
# figure -> its ratio to stock in the same round
RATIOS = {"step_cpu_s": "step_cpu_to_stock", "step_wall_s": "step_wall_to_stock",
          "decoder_cpu_s": "decoder_cpu_to_stock", "peak_bytes": "peak_to_stock"}
# the ratio the goals judge, per device: a CPU's is the CPU time (other processes' load stretches the wall time of a
# shared machine, not the process's own CPU seconds); CUDA's is the wall time (the CPU time does not see the GPU)
BASIS = {"cpu": "step_cpu_to_stock", "cuda": "step_wall_to_stock"}
GOAL, SAPE_GOAL = 1.15, 1.05  # docs/benchmarks.md §Decoding: every encoding, and SAPE (stock's own model)


# ------------------------------------------------------------------------------------------ the meter
class StepMeter:
    """Measures fairseq's beam search while entered: each ``SequenceGenerator._generate`` call (one batch: the
    encoder, every decoder step and the search) is timed (wall and process CPU seconds), each
    ``EnsembleModel.forward_decoder`` call (one decoder step of the whole beam) is counted and its CPU time summed,
    and the hypotheses are counted (sentences; tokens, end-of-sentence included, as fairseq-generate counts them).
    The methods are restored on exit."""

    def __init__(self, cuda: bool = False):
        self.cuda = cuda
        self.batches = self.steps = self.sentences = self.tokens = 0
        self.wall_s = self.cpu_s = self.decoder_cpu_s = 0.0
        self.hypothesis_lengths = []
        self._saved = []

    def _patch(self, owner, name, make):
        self._saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, make(getattr(owner, name)))

    def __enter__(self):
        from fairseq.sequence_generator import EnsembleModel, SequenceGenerator

        meter = self

        def generate(original):
            def wrapped(*args, **kwargs):
                wall, cpu, finalized = _common.timed(lambda: original(*args, **kwargs), meter.cuda)
                meter.batches += 1
                meter.wall_s += wall
                meter.cpu_s += cpu
                for hypos in finalized:
                    meter.sentences += 1
                    meter.hypothesis_lengths.append(len(hypos[0]["tokens"]))
                    meter.tokens += len(hypos[0]["tokens"])
                return finalized
            return wrapped

        def decoder(original):
            def wrapped(*args, **kwargs):
                c0 = time.process_time()
                try:
                    return original(*args, **kwargs)
                finally:
                    meter.steps += 1
                    meter.decoder_cpu_s += time.process_time() - c0
            return wrapped

        self._patch(SequenceGenerator, "_generate", generate)
        self._patch(EnsembleModel, "forward_decoder", decoder)
        return self

    def __exit__(self, *exc):
        while self._saved:
            owner, name, original = self._saved.pop()
            setattr(owner, name, original)

    def figures(self) -> dict:
        per = (lambda v: v / self.steps) if self.steps else (lambda v: None)
        return dict(batches=self.batches, steps=self.steps, sentences=self.sentences, tokens=self.tokens,
                    generate_wall_s=self.wall_s, generate_cpu_s=self.cpu_s,
                    sentences_per_s=self.sentences / self.wall_s if self.wall_s else None,
                    tokens_per_s=self.tokens / self.wall_s if self.wall_s else None,
                    step_wall_s=per(self.wall_s), step_cpu_s=per(self.cpu_s), decoder_cpu_s=per(self.decoder_cpu_s))


# ------------------------------------------------------------------------------------------ models and commands
def model_argv(pe: str, recipe: str, pair: str, size: str, data) -> list:
    """The fairseq-train arguments that build row ``pe``'s model: pe-train's command for the recipe, pair and size
    (STOCK: SAPE's with fairseq's ``transformer_<arch>``, no plugin), as ``pe-bench train-speed`` builds it."""
    from .train_speed import train_argv

    ns = SimpleNamespace(data=str(data), recipe=recipe, pair=pair, extra=[], max_update=1,
                         save_dir=tempfile.gettempdir())
    return train_argv(pe, size, ns, "cpu", fp16=False)


def save_untrained(pe: str, recipe: str, pair: str, size: str, data, path: Path) -> dict:
    """Build row ``pe``'s model (random weights under seed 1) and save it as a fairseq checkpoint at ``path`` that
    fairseq-generate loads; returns its architecture and parameter count."""
    import torch
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from omegaconf import OmegaConf

    from ..file_io import atomic

    args = options.parse_args_and_arch(options.get_training_parser(), model_argv(pe, recipe, pair, size, data))
    torch.manual_seed(1)
    model = tasks.setup_task(args).build_model(args)
    cfg = OmegaConf.to_container(convert_namespace_to_omegaconf(args), resolve=True, enum_to_str=True)
    state = {"args": None, "cfg": cfg, "model": model.state_dict(),  # as fairseq's Trainer.state_dict saves it
             "optimizer_history": [{"criterion_name": "LabelSmoothedCrossEntropyCriterion", "optimizer_name": "Adam",
                                    "lr_scheduler_state": {}, "num_updates": 0}],
             "extra_state": {"train_iterator": {"epoch": 1}}, "last_optimizer_state": None, "task_state": {}}
    with atomic(path) as tmp:
        torch.save(state, tmp)
    return dict(arch=args.arch, params=sum(p.numel() for p in model.parameters()))


def decode_flags(equal_length=None) -> list:
    """pe-generate's decode flags (pe_tools/recipes/generate.py: beam, length penalty, maximum length, batch size);
    ``equal_length`` N: every hypothesis exactly N tokens before its end of sentence (maximum length 0 x source + N
    and ``--min-len`` N, so every encoding takes the same decoder steps)."""
    from ..recipes.generate import DECODE_BATCH, DECODE_FLAGS
    from ..recipes.train import merge_flags

    equal = [] if equal_length is None else ["--max-len-a", "0", "--max-len-b", str(equal_length),
                                             "--min-len", str(equal_length)]
    return merge_flags(DECODE_FLAGS, DECODE_BATCH, equal)


def generate_argv(pe: str, checkpoint, data, subset: str, pair: str, device: str, equal_length=None, extra=()) -> list:
    """fairseq-generate's arguments for row ``pe`` (``--user-dir`` for the plugin's rows, none for STOCK): the
    decode flags, ``--cpu`` on a CPU or ``--fp16`` on CUDA as pe-generate decodes, then ``extra`` (they win)."""
    from ..recipes.train import merge_flags

    src, tgt = pair.split("-")
    plugin = [] if pe == STOCK else ["--user-dir", plugin_dir()]
    flags = merge_flags(["--path", str(checkpoint), "--gen-subset", subset, "--source-lang", src,
                         "--target-lang", tgt], decode_flags(equal_length),
                        ["--cpu"] if device == "cpu" else ["--fp16"], list(extra))
    return [str(data), *plugin, *flags]


# torch's status interval while a decode's loader worker lives: fairseq-generate in this process leaves its worker
# to the next garbage collection, whose shutdown then waits this long for it (torch's default, 5 s, every decode)
LOADER_STATUS_S = 0.1


def decode_once(argv, cuda: bool) -> dict:
    """One fairseq-generate run (``argv``: its arguments) in this process under a StepMeter: its figures, its peak
    memory (CUDA: allocated; a CPU: the process's RSS high-water mark, and the part above the RSS before it) and its
    hypotheses (``H-`` lines, in sentence order). Raises RuntimeError when fairseq-generate fails. Its loader worker
    (users' --num-workers) is reaped before it returns, at LOADER_STATUS_S."""
    from torch.utils.data import _utils as loader_utils

    from ..recipes.generate import fairseq_generate

    interval, loader_utils.MP_STATUS_CHECK_INTERVAL = loader_utils.MP_STATUS_CHECK_INTERVAL, LOADER_STATUS_S
    try:
        return _decode_once(argv, cuda, fairseq_generate)
    finally:
        gc.collect()  # the decode's loader worker, reaped here (outside the figures) at the interval above
        loader_utils.MP_STATUS_CHECK_INTERVAL = interval


def _decode_once(argv, cuda: bool, fairseq_generate) -> dict:
    import torch

    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    else:
        before = _common.current_rss_bytes()
        _common.reset_peak_rss()
    with _common.quiet_fairseq(), StepMeter(cuda) as meter:
        rc, text = fairseq_generate(argv)
    peak = torch.cuda.max_memory_allocated() if cuda else _common.peak_rss_bytes()
    if rc:
        raise RuntimeError(f"fairseq-generate {' '.join(map(str, argv))} failed (exit {rc})")
    hyps = sorted((int(line.split("\t")[0][2:]), line.split("\t")[2]) for line in text.splitlines()
                  if line.startswith("H-"))
    return dict(meter.figures(), peak_bytes=peak, decode_bytes=peak - before,
                hypotheses=[h for _, h in hyps], hypothesis_lengths=sorted(set(meter.hypothesis_lengths)))


# ------------------------------------------------------------------------------------------ the data
def generated_corpus(folder: Path, args) -> Path:
    """``pe-bench wmt-corpus``'s generator writing ``args.sentences`` pairs to decode (its valid split) of mean
    source length ``args.mean`` over ``args.vocab`` joined types into ``folder``."""
    from .wmt_corpus import generate

    generate(folder, sentences_n=1, valid_n=args.sentences, vocab=args.vocab, seed=args.seed, mean=args.mean,
             pair=args.pair)
    return folder


# ------------------------------------------------------------------------------------------ the report
FIGURES = ("sentences_per_s", "tokens_per_s", "step_wall_s", "step_cpu_s", "decoder_cpu_s", "peak_bytes",
           "decode_bytes", *RATIOS.values())


def round_ratios(measurements) -> list:
    """Per-run rows (one per row and round) with their ratios to stock's run of the same round."""
    rows = [{k: v for k, v in m.items() if k != "key"} for m in measurements]
    add_ratios(rows, RATIOS, lambda r: r["round"], lambda r: r["pe"] == STOCK)
    return rows


def summarise(rows, basis: str) -> list:
    """One result per encoding: the median and spread over its rounds of every figure and ratio, and the goals'
    verdicts on ``basis`` (every encoding <= GOAL x stock, SAPE <= SAPE_GOAL x)."""
    from ..naming import BASELINE

    results = []
    for res in over_rounds(rows, "pe", ("pe", "arch", "params", "batches", "steps", "sentences", "tokens"), FIGURES):
        res["steps_per_round"] = sorted({r["steps"] for r in res.pop("_runs")})
        pe = res["pe"]
        if pe != STOCK:
            bound = SAPE_GOAL if pe == BASELINE else GOAL
            res["goal"] = {"figure": basis, "bound": bound, "verdict": verdict(res.get(basis, {}), bound, False)}
        results.append(res)
    return results


def report_text(results, s) -> str:
    def med(r, k, fmt, scale=1.0):
        return spread_cell(r.get(k), fmt, scale)

    headers = ["pe", "sentences/s", "tokens/s", "ms/step (wall)", "ms/step (cpu)", "step/stock (cpu)",
               "step/stock (wall)", "decoder/stock (cpu)", "peak MiB", "peak/stock", "goal"]
    rows = [[r["pe"], med(r, "sentences_per_s", "{:,.1f}"), med(r, "tokens_per_s", "{:,.0f}"),
             med(r, "step_wall_s", "{:.2f}", 1e3), med(r, "step_cpu_s", "{:.2f}", 1e3),
             med(r, "step_cpu_to_stock", "{:.3f}x"), med(r, "step_wall_to_stock", "{:.3f}x"),
             med(r, "decoder_cpu_to_stock", "{:.3f}x"), med(r, "peak_bytes", "{:,.0f}", 2 ** -20),
             med(r, "peak_to_stock", "{:.3f}x"),
             f"<= {r['goal']['bound']}x: {r['goal']['verdict']}" if "goal" in r else "-"] for r in results]
    length = (f"every hypothesis {s['equal_length']} tokens (--min-len = maximum length)" if s["equal_length"]
              else "hypotheses of free length")
    return (f"fairseq-generate's beam search ({' '.join(s['decode_flags'] + s['extra'])}), recipe {s['recipe']} "
            f"size {s['size']} ({s['pair']}), {s['sentences']:,} sentences of {s['data']}, {length}; {s['device']} "
            f"({s['device_name']}), "
            f"{s['threads']} torch thread(s), torch {s['torch']}, {s['rounds']} round(s), order rotated each round. "
            "Each cell: the median over the rounds (lowest-highest); every ratio is to stock's run in the same round. "
            "A step: one decoder call for the whole beam of a batch; ms/step = the beam search's time (encoder, "
            "decoder steps, search) over its decoder steps; decoder = the decoder calls' own CPU time per step. "
            f"The goal is judged on {s['basis']} ({s['basis_why']}). peak = "
            + ("CUDA allocated" if s["device"] == "cuda" else "the process's RSS high-water mark") + ".\n\n"
            + markdown_table(headers, rows) + "\n")


# ------------------------------------------------------------------------------------------ the command
def add_args(parser):
    from pe_plugin.encodings import PE_REGISTRY

    from ..recipes import recipe_names

    names = list(PE_REGISTRY) + [STOCK]
    parser.add_argument("--recipe", choices=recipe_names("methods"), default="multi30k",
                        help="the recipe whose models (methods and size) are decoded (default: multi30k)")
    parser.add_argument("--pair", default="en-de", help="the recipe's language pair (default: en-de)")
    parser.add_argument("--size", help="one of the recipe's sizes (default: the recipe's default size)")
    parser.add_argument("--pe", nargs="+", choices=names, metavar="PE",
                        help=f"rows, from {', '.join(names)} (default: all; {STOCK}, fairseq's transformer, always)")
    parser.add_argument("--data", help="a fairseq-preprocess'd folder to decode (e.g. the recipe's data-bin folder); "
                                       "default: a generated corpus (--sentences, --mean, --vocab)")
    parser.add_argument("--subset", help="the split of --data to decode (default: test; valid for a generated corpus)")
    add_counts(parser, [("--sentences", 1, 1000, "sentences of the generated corpus"),
                        ("--vocab", 6, 7944, "joined dictionary of the generated corpus, fairseq's 4 specials "
                                             "included (Multi30k En-De's)"),
                        ("--rounds", 1, 3, "rounds, the order rotated each round"),
                        ("--threads", 0, 1, "torch threads (0: torch's choice)")])
    parser.add_argument("--equal-length", type=int_at_least(1), metavar="N",
                        help="every hypothesis exactly N tokens: maximum length 0 x source + N and --min-len N, so "
                             "every encoding takes the same decoder steps (default: the recipe's maximum length, "
                             "hypotheses of free length)")
    parser.add_argument("--mean", type=float, default=13.0,
                        help="mean source length of the generated corpus in tokens (default: 13, Multi30k's)")
    parser.add_argument("--seed", type=int, default=1, help="the generated corpus's seed (default: 1)")
    add_device_arg(parser)
    parser.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                        help="more fairseq-generate arguments, after the recipe's (they win; give it last), e.g. "
                             "--batch-size 64")
    add_output_args(parser, "decode")


def run(args) -> int:
    import torch

    from pe_plugin.encodings import PE_REGISTRY

    from ..recipes import load_table
    from ..recipes.train import default_size

    if args.data and not any(Path(args.data).glob("dict.*.txt")):
        return fail(f"--data {args.data}: no fairseq dictionary (dict.*.txt) there; give a fairseq-preprocess'd "
                    f"folder, or leave --data out to decode a generated corpus")
    table = load_table(args.recipe)
    size = args.size or default_size(table)
    if size not in table["size"]:
        return fail(f"--size {size}: not a size of recipe {args.recipe}; its sizes: {', '.join(table['size'])}")
    device = resolve_device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    names = [pe for pe in [*PE_REGISTRY, STOCK] if pe in set(args.pe or [*PE_REGISTRY, STOCK]) | {STOCK}]
    with tempfile.TemporaryDirectory(prefix="pe_bench_decode_") as tmp:
        data = Path(args.data) if args.data else generated_corpus(Path(tmp) / "corpus", args)
        subset = args.subset or ("test" if args.data else "valid")
        return measure(args, names, size, device, data, subset, Path(tmp))


def measure(args, names, size, device, data, subset, tmp: Path) -> int:
    import fairseq
    import torch

    env = machine(device)
    flags = decode_flags(args.equal_length)
    fixed = dict(recipe=args.recipe, pair=args.pair, size=size, encodings=names,
                 data=str(args.data) if args.data else "a generated corpus", subset=subset,
                 sentences=None if args.data else args.sentences, vocab=None if args.data else args.vocab,
                 mean=None if args.data else args.mean, seed=None if args.data else args.seed,
                 equal_length=args.equal_length, decode_flags=flags, extra=args.extra, rounds=args.rounds,
                 threads=torch.get_num_threads(), device=device, device_name=env["device_name"], torch=env["torch"],
                 fairseq=fairseq.__version__, pe_plugin_sources=plugin_digest())
    basis = BASIS[device]
    progress = Progress(args, "pe-bench decode", rotated(names, args.rounds), fixed, what="decodes")
    started, load_start = time.time(), os.getloadavg()

    def report():
        rows = round_ratios(progress.measurements())
        results = summarise(rows, basis)
        first = rows[0] if rows else {}
        s = dict(fixed, sentences=first.get("sentences", fixed["sentences"]), basis=basis,
                 basis_why="the process's CPU time per step: other processes' load on a shared CPU stretches the "
                           "wall time, not this process's CPU seconds" if device == "cpu" else
                           "the wall time per step: the CPU time does not see the GPU",
                 python=env["python"], platform=env["platform"], cpu_count=os.cpu_count(),
                 command=shlex.join(["pe-bench", *getattr(args, "argv", [NAME])]),
                 loadavg_start=list(load_start), loadavg_end=list(os.getloadavg()),
                 started=time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
                 seconds=round(time.time() - started, 1))
        return s, results, report_text(results, s)

    progress.write = progress.writer(args, report, "Decoding: fairseq-generate's beam search, ratios to stock")
    models, todo = {}, progress.missing()
    for i, (pe, k) in enumerate(todo[:1] + todo):  # the first decode twice: the first, discarded, pays one-time costs
        if pe not in models:
            print(f"[decode] building {pe}", file=sys.stderr, flush=True)
            path = tmp / f"{pe}.pt"
            with _common.quiet_fairseq():
                models[pe] = dict(save_untrained(pe, args.recipe, args.pair, size, data, path), path=path)
        print(f"[decode round {k}/{args.rounds}] {pe}" + (" (warm-up, discarded)" if i == 0 else ""),
              file=sys.stderr, flush=True)
        argv = generate_argv(pe, models[pe]["path"], data, subset, args.pair, device, args.equal_length, args.extra)
        try:
            record = decode_once(argv, device == "cuda")
        except RuntimeError as e:
            return fail(str(e))
        if i == 0:
            continue
        hyps = record.pop("hypotheses")
        record["hypotheses_sha256"] = hashlib.sha256("\n".join(hyps).encode()).hexdigest()
        progress.add((pe, k), dict(record, pe=pe, round=k, arch=models[pe]["arch"], params=models[pe]["params"],
                                   command="fairseq-generate " + " ".join(map(str, argv)).replace(str(tmp), "TMP")))
        if progress.stop_now():
            break
    print("\n" + report()[2])
    progress.finish()
    return 0

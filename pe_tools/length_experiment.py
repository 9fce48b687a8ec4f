"""pe-length: train short, test long: how each positional encoding translates sentences longer than any it was
trained on.
CPU, about 15 minutes for every registered encoding on 2 cores.

    make length                                 # = pe-length = python scripts/length_experiment.py (after .venv)
    pe-length --out length_out --max-train-words 15 --long-clauses 3 --methods sape,lape,rpe

1. corpus: ``pe_tools.synthetic.grammar`` with ``--max-train-words 15 --long 500 --long-clauses 3``: 20k/500/500
   train/valid/test pairs of at most 15 words, and a long split of 500 pairs of more than 15 words (16-37 with these defaults; the
   same rules, with up to three clauses instead of two);
2. prepare: ``pe-prepare raw``, whose test set is the test split followed by the long split
   (``raw/eval``), so that one decode translates both;
3. train: ``pe-train METHOD --size tiny`` for every encoding of ``pe_plugin.encodings.PE_REGISTRY``
   (or ``--methods``; SAPE, the baseline, always), with the demo's settings and ``--max-source-positions`` /
   ``--max-target-positions`` ``--max-positions`` (1024), far above the longest sentence, so every long sentence
   is translated and none is refused by a position limit; two at a time, while ``--budget-minutes`` allows;
4. decode: ``pe-generate RUN --checkpoints 3``; the output is cut into RUN/gen/hyp.{test,long}.de;
5. evaluate with ``pe-evaluate`` against SAPE (paired bootstrap, 1000 resamples): results/test.md (the
   in-distribution test split), results/long.md (the long split), and over both, by source length in words,
   results/all_length.{md,csv,png} (BLEU and chrF++ per bucket, each bucket tested; buckets ``--length-buckets``,
   by default half the training limit, the limit, then steps of a third of it);
6. positions: results/positions.{md,json}: the longest source and target (in tokens) of training and of the long
   split, and for every encoding the position parameters that training never updated and that the long split
   uses (found from gradients: those of a pair as long as the longest training pair are zero there, those of a
   pair as long as the longest long-split pair are not), e.g. the rows of LAPE's table or PosNet's kernels past
   the training length.

Every step is skipped when its output is complete (``pe_tools.demo``'s ``Pipeline``), so an interrupted run
resumes where it stopped. Everything is under ``--out`` (raw/, data/, runs/, logs/, results/).
"""
import argparse
import math
import sys
from pathlib import Path

from .fairseq_plugin import plugin_dir
from .file_io import dump_json, write_atomic
from .demo import SRC, TGT, Pipeline, add_pipeline_args, check_pipeline_args
from .naming import BASELINE
from .runs.run_dir import load_meta
from .synthetic import grammar as grammar_corpus
from .tables import markdown_table

DECODE_MARGIN = 50  # generate.sh decodes up to 1 x source + 50 tokens


def registry() -> list:
    from pe_plugin.encodings import PE_REGISTRY

    return list(PE_REGISTRY)


def lines(path: Path) -> list:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def longest(path: Path) -> int:
    """Tokens of the longest line of a BPE text file, plus its end-of-sentence token: the positions it needs."""
    return max((len(line.split()) for line in lines(path)), default=0) + 1


class LengthExperiment(Pipeline):
    tag = "length"

    def __init__(self, args):
        super().__init__(args)
        self.train_flags += ["--max-source-positions", str(args.max_positions),
                             "--max-target-positions", str(args.max_positions)]
        self.raw = self.out / "raw"
        self.results = self.out / "results"

    def eval_corpus(self) -> None:
        """raw/{train,valid,test,long} from the grammar, and raw/eval = test then long (what prepare decodes)."""
        self.corpus(self.raw, ("train", "valid", "test", "long"), max_train_words=self.a.max_train_words,
                    n_long=self.a.long, long_clauses=self.a.long_clauses)
        for lang in (SRC, TGT):
            path = self.raw / f"eval.{lang}"
            if not path.exists():  # rewritten only when missing: prepare's stamps compare modification times
                write_atomic(path, "".join(f"{line}\n" for split in ("test", "long")
                                           for line in lines(self.raw / f"{split}.{lang}")))

    def lengths(self, data: Path) -> dict:
        """Positions needed (tokens + end of sentence) by the longest training, test and long pair, per side."""
        n_test = len(lines(self.raw / f"test.{SRC}"))
        out = {"train": {side: longest(data / "text" / f"train.{lang}") for side, lang in (("source", SRC),
                                                                                            ("target", TGT))}}
        for side, lang in (("source", SRC), ("target", TGT)):
            bpe = lines(data / "text" / f"test.{lang}")
            out.setdefault("test", {})[side] = max(len(x.split()) for x in bpe[:n_test]) + 1
            out.setdefault("long", {})[side] = max(len(x.split()) for x in bpe[n_test:]) + 1
        return out

    def check_positions(self, lengths: dict) -> None:
        """Refuse to train models that could not take the longest test sentence or its translation."""
        need = max(lengths["long"]["source"], lengths["long"]["target"]) + DECODE_MARGIN
        if need > self.a.max_positions:
            raise SystemExit(f"[{self.tag}] --max-positions {self.a.max_positions}: the long split needs {need} "
                             f"(its longest source, {lengths['long']['source']} tokens, plus the decoding margin "
                             f"of {DECODE_MARGIN}); raise --max-positions")

    def split_outputs(self, systems: dict) -> dict:
        """RUN/gen/{hyp,ref}.{test,long}.de (with the encoding's meta file) from the decode of raw/eval."""
        n_test = len(lines(self.raw / f"test.{SRC}"))
        n_all = n_test + len(lines(self.raw / f"long.{SRC}"))
        out = {"test": {}, "long": {}, "all": {}}
        for method, hyp in systems.items():
            gen = hyp.parent
            meta = (gen / f"hyp.detok.{TGT}.meta.json").read_text(encoding="utf-8")
            for name in ("hyp", "ref"):
                text = lines(gen / f"{name}.detok.{TGT}")
                if len(text) != n_all:
                    raise SystemExit(f"[{self.tag}] {gen / f'{name}.detok.{TGT}'} has {len(text)} lines, not the "
                                     f"{n_all} of raw/eval.{TGT}: every test and long sentence must be translated")
                for split, part in (("test", text[:n_test]), ("long", text[n_test:])):
                    path = gen / f"{name}.{split}.{TGT}"
                    write_atomic(path, "".join(f"{x}\n" for x in part))
                    if name == "hyp":
                        write_atomic(path.with_name(path.name + ".meta.json"), meta)
                        out[split][method] = path
            out["all"][method] = hyp
        return out

    def bucket_edges(self) -> str:
        """--length-buckets, or: half the training limit, the limit, then steps of a third of it up to the
        longest long-split sentence."""
        if self.a.length_buckets:
            return self.a.length_buckets
        n, step = self.a.max_train_words, math.ceil(self.a.max_train_words / 3)
        top = max(grammar_corpus.n_words(x) for x in lines(self.raw / f"long.{SRC}"))
        edges = [math.ceil(n / 2), n]
        while edges[-1] + step < top:
            edges.append(edges[-1] + step)
        return ",".join(map(str, sorted(set(edges))))

    def positions(self, systems, data: Path, lengths: dict) -> Path:
        """results/positions.{json,md}: the lengths, and per encoding what the long split reaches untrained."""
        self.say(f"positions: position parameters the long split uses that training never updated, "
                 f"{len(systems)} models")
        found = {m: untrained_positions(self.run_dir(m) / "checkpoint_last.pt", data, lengths) for m in systems}
        for m, hyp in systems.items():  # what generate.sh recorded about the decode (e.g. positions past a limit)
            found[m]["decode_meta"] = load_meta(hyp.with_name(hyp.name + ".meta.json"))
        report = {"unit": "tokens after Moses tokenisation and BPE, end of sentence included", "lengths": lengths,
                  "max_positions": self.a.max_positions, "encodings": found}
        dump_json(self.results / "positions.json", report)
        path = self.results / "positions.md"
        write_atomic(path, positions_markdown(report))
        return path

    def run(self) -> int:
        self.eval_corpus()
        data = self.prepare(self.raw, test="eval")
        lengths = self.lengths(data)
        self.check_positions(lengths)
        self.say(f"lengths: training sources up to {lengths['train']['source']} positions, the long split up to "
                 f"{lengths['long']['source']} (tokens + end of sentence); models take {self.a.max_positions}")
        systems = self.train_all(data, self.a.methods, {BASELINE})
        split = self.split_outputs(systems)
        self.results.mkdir(parents=True, exist_ok=True)
        ref = self.run_dir(BASELINE) / "gen"
        self.evaluate(split["test"], ref / f"ref.test.{TGT}", "test", what="on the test split")
        self.evaluate(split["long"], ref / f"ref.long.{TGT}", "long", what="on the long split")
        edges = self.bucket_edges()
        self.evaluate(split["all"], ref / f"ref.detok.{TGT}", "all",
                      ["--source", self.raw / f"eval.{SRC}", "--length-buckets", edges],
                      what=f"per source-length bucket ({edges} words)")
        positions = self.positions(systems, data, lengths)
        print((self.results / "all_length.md").read_text(), positions.read_text(), sep="\n", flush=True)
        self.say(f"done: {self.results / 'all_length.md'}, plot {self.results / 'all_length.png'}, "
                 f"{self.results / 'test.md'}, {self.results / 'long.md'}, {positions}")
        return 0


def untrained_positions(checkpoint: Path, data: Path, lengths: dict, draws: int = 4) -> dict:
    """The position parameters of one model that the long split uses and training never updated.

    The gradient of a random projection of the model's output with respect to the encoding's parameters is
    taken for pairs as long as the longest training pair (source and target), then for pairs as long as the
    longest long-split pair, ``draws`` random token sequences each. Every shorter pair uses a subset of the
    positions (and relative distances) of the longest one, so what has a zero gradient at the training lengths
    was never updated in training. Compared are slices, along every axis of a tensor in turn (a position's row
    of LAPE's table, a position of PosNet's kernels, a bucket of T5's table): within a slice an element's
    gradient may vanish for one input and not for another (PosNet's product), a whole slice's does not. Counted
    are the slices with a non-zero gradient at the long lengths only, and their elements."""
    import logging

    import torch
    from fairseq import checkpoint_utils, utils

    torch.set_num_threads(1)
    for name in ("fairseq", "pe_plugin"):  # loading a model logs its dictionaries and summary
        logging.getLogger(name).setLevel(logging.WARNING)
    utils.import_user_module(argparse.Namespace(user_dir=plugin_dir()))
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)],
                                                                    arg_overrides={"data": str(data)})
    model = models[0].eval()
    params = {}
    for side in ("encoder", "decoder"):
        for name, p in getattr(model, side).pe.named_parameters():
            params.setdefault(id(p), (f"{side}.pe.{name}", p))  # modules shared by both sides count once

    def reached(src_len: int, tgt_len: int) -> dict:
        """{tensor: bool mask}: a non-zero gradient for one of the draws."""
        hit = {name: torch.zeros(p.shape, dtype=torch.bool) for name, p in params.values()}
        g, d = torch.Generator().manual_seed(0), task.source_dictionary
        for _ in range(draws):
            model.zero_grad(set_to_none=True)
            src = torch.randint(d.nspecial, len(d), (1, src_len), generator=g)
            src[0, -1] = d.eos()
            prev = torch.randint(d.nspecial, len(d), (1, tgt_len), generator=g)
            prev[0, 0] = d.eos()
            logits, _ = model(src, torch.tensor([src_len]), prev)
            (logits * torch.randn(logits.shape, generator=g)).sum().backward()
            for name, p in params.values():
                if p.grad is not None:
                    hit[name] |= p.grad.ne(0)
        return hit

    trained = reached(lengths["train"]["source"], lengths["train"]["target"])
    used = reached(lengths["long"]["source"], lengths["long"]["target"])
    untrained = {}
    for name, p in params.values():
        mask, slices = torch.zeros(p.shape, dtype=torch.bool), {}
        for axis in range(p.dim()):
            other = [a for a in range(p.dim()) if a != axis]
            new = used[name].any(dim=other) & ~trained[name].any(dim=other) if other else used[name] & ~trained[name]
            if new.any():
                slices[axis] = {"untrained": int(new.sum()), "of": p.shape[axis]}
                mask |= new.reshape([-1 if a == axis else 1 for a in range(p.dim())])
        if slices:
            untrained[name] = {"elements": int(mask.sum()), "slices_by_axis": slices}
    encoder, decoder = model.max_positions()
    return {"checkpoint": str(checkpoint), "max_positions": {"source": encoder, "target": decoder},
            "position_parameters": sum(p.numel() for _, p in params.values()),
            "untrained_used": sum(u["elements"] for u in untrained.values()), "untrained_by_tensor": untrained}


def positions_markdown(report: dict) -> str:
    n = report["lengths"]
    rows = [("longest training pair", "train"), ("longest test pair", "test"), ("longest long-split pair", "long")]
    out = [f"Positions ({report['unit']}):", "",
           markdown_table([None, "source", "target"], [[label, str(n[k]["source"]), str(n[k]["target"])]
                                                        for label, k in rows], "lrr", compact_rule=True)]
    out += ["", f"Source positions {n['train']['source']}-{n['long']['source'] - 1} and target positions "
            f"{n['train']['target']}-{n['long']['target'] - 1} occur only in the long split: no model was trained "
            f"on them. Models take {report['max_positions']} positions a side, so no sentence is refused or cut.", "",
            "Position parameters that the long split uses and training never updated: slices of a tensor (a "
            "position's row, a bucket) whose gradient is zero at the longest training lengths and non-zero at the "
            "longest long-split lengths:", ""]
    table = []
    for m, e in report["encodings"].items():
        tensors = ", ".join(f"`{k}` " + ", ".join(f"{x['untrained']} of {x['of']} along axis {axis}"
                                                  for axis, x in v["slices_by_axis"].items())
                            for k, v in e["untrained_by_tensor"].items()) or "–"
        table.append([m, f"{e['position_parameters']:,}", f"{e['untrained_used']:,}", tensors])
    out.append(markdown_table(["encoding", "position parameters", "untrained, used by the long split",
                               "tensors: untrained slices"], table, "lrrl", compact_rule=True))
    reached = [m for m, e in report["encodings"].items() if e["untrained_used"]]
    out += ["", "Encodings that translate the long split with position parameters they never trained: "
            + (", ".join(reached) if reached else "none") + "."]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pipeline_args(p, "length_out", 60.0, "train encodings beyond SAPE only while the experiment can end "
                                             "within this many minutes")
    p.add_argument("--methods", help="comma-separated encodings to train (default: every one registered in "
                                     "pe_plugin.encodings.PE_REGISTRY); SAPE, the baseline, is always trained")
    p.add_argument("--max-train-words", type=int, default=15,
                   help="train, valid and test sentences have at most this many words (default: 15)")
    p.add_argument("--long", type=int, default=500, help="pairs in the long split (default: 500)")
    p.add_argument("--long-clauses", type=int, default=3,
                   help="the long split's sentences have up to this many clauses; training's have 2 (default: 3)")
    p.add_argument("--max-positions", type=int, default=1024,
                   help="--max-source-positions and --max-target-positions of every model (default: 1024)")
    p.add_argument("--length-buckets", metavar="EDGES",
                   help="bucket edges in source words for pe-evaluate (default: from --max-train-words)")
    a = p.parse_args(argv)
    check_pipeline_args(p, a)
    known = registry()
    wanted = [m.strip() for m in (a.methods or ",".join(known)).split(",") if m.strip()]
    unknown = [m for m in wanted if m not in known]
    if unknown:
        p.error(f"--methods: unknown encoding {', '.join(unknown)}; registered: {', '.join(known)}")
    a.methods = [BASELINE] + [m for m in dict.fromkeys(wanted) if m != BASELINE]
    if a.max_train_words < grammar_corpus.MIN_WORDS:
        p.error(f"--max-train-words {a.max_train_words}: at least {grammar_corpus.MIN_WORDS} (the shortest sentence)")
    if a.long < 10:
        p.error(f"--long {a.long}: at least 10 sentence pairs")
    if a.long_clauses < 2 or a.max_train_words >= grammar_corpus.max_words(a.long_clauses):
        p.error(f"--long-clauses {a.long_clauses}: at least 2, and enough for sentences of more than "
                f"{a.max_train_words} words")
    return LengthExperiment(a).run()


if __name__ == "__main__":
    sys.exit(main())

"""pe-evaluate: score translations against one reference and test them against a baseline (a Table-1 style report).

Metrics, each with a sacrebleu signature:
  * sacreBLEU: BLEU on detokenised text, 13a tokenisation (Post, 2018).
  * chrF++: chrF with character order 6, word order 2, beta 2 (Popovic, 2017).
  * compound-split BLEU: the tokenised BLEU of Vaswani et al. (2017) and Ott et al. (2018). Hypothesis and
    reference are Moses-tokenised (sacremoses, aggressive dash splitting, escaping), every ``(\\S)-(\\S)``
    becomes ``\\1 ##AT##-##AT## \\2`` (fairseq ``scripts/compound_split_bleu.sh``), and BLEU-4 is computed
    with ``tokenize='none'``.
Significance: sacrebleu's paired bootstrap resampling (Koehn, 2004; default) or paired approximate
randomisation (Riezler and Maxwell, 2005; Clark et al., 2011), run once per metric. The 95% confidence
intervals come from bootstrap resampling (sacrebleu's ``estimate_ci``).
Figure-4 analysis (``--ngram-analysis``): system minus baseline as the n-gram order grows, in three sweeps
as in the paper: chrF with character order n = 1..30 and word order 2 (chrF++ is n = 6), chrF with word
order n = 1..8 and character order 6, and BLEU of order n = 1..8.

Several runs (seeds) per system: ``--system NAME=run1.txt,run2.txt``. Run i of a system is tested against
run i of the baseline, or against the baseline's only run when the baseline has one. The table shows the
mean and sample standard deviation over runs; its mark is the one every run earns (the largest p-value).

Scores by source length (``--source FILE`` with ``--length-buckets 10,20,30`` or ``--length-quantiles 4``):
BLEU and chrF++ of every system on the segments of each bucket, each bucket tested against the baseline with
the same test, samples and seed as the whole set. Length = words of the source line (whitespace-separated
tokens, before any tokenisation); edges 10,20,30 give the buckets <=10, 11-20, 21-30, >=31 words. Quantile
edges are nearest-rank quantiles of the source lengths, repeated edges merged. An empty bucket is reported
(table, CSV, a warning), not scored.

Outputs in --out-dir (PREFIX defaults to ``results``): PREFIX.md, PREFIX.csv (one row per system),
PREFIX_runs.csv (one row per run), PREFIX.json (everything), with --ngram-analysis PREFIX_ngram.csv
and PREFIX_ngram.png, and with --source PREFIX_length.md, PREFIX_length.csv (one row per bucket and system)
and PREFIX_length.png (the signatures below the plot and in its PNG Description). Each file is written
under a temporary name and renamed; nothing is written when an input is invalid (exit code 2).

A system file is either one detokenised translation per reference line, or fairseq-generate's raw output (its
stdout as it is, with S-/T-/H-/D-/P- lines in batch order): its D- lines (H- where it has none) are put back in
corpus order by sentence id, and a missing id stops with an error naming it and the flag that dropped it
(``generate_output``).

PE settings: ``--meta NAME=settings.json``, or a file ``HYPOTHESIS.meta.json`` beside a hypothesis file,
is copied into the outputs. Its ``pe_signature`` entry, if any, fills the table's PE column.

Comparable inputs only (``inputs``), the baseline checked like every system: a hypothesis file that does not read
as the reference's language is refused (``language``; --no-language-check skips it), and so is a run (pe-generate's
decode, with its meta file) that differs from its baseline run in recipe, language pair, size, updates, changed
flags or decode (an average of the last 4 checkpoints against the last one alone), or whose label names another
method than its run's (``--baseline sape=FILE`` of a rope run), unless --allow-mismatch, which marks it in the table
(``‡``, and a note naming what differs). A file without its meta file (copied away from it, or fairseq-generate's
raw output) cannot be checked: it is refused unless --allow-unchecked, which marks it ``(unchecked)``.

Modules: metrics, inputs, significance, ngram (Figure 4), length (buckets), report; this one is the CLI.

sacrebleu quirks handled here (see tests/test_evaluate.py):
  * numpy 2 float32 values in paired-test results are not JSON serialisable: converted by
    ``pe_tools.file_io.to_jsonable`` (NaN -> null, +-inf -> "inf"/"-inf").
  * ``SACREBLEU_SEED=0`` silently unseeds the paired tests: seed 0 is rejected.
  * ``PairedTest`` keys results by ``Score.name``, so two BLEU variants collide: one test per metric.
  * ``BLEU(max_ngram_order=n)`` leaves n out of its signature: added as ``ngram:n``.
"""
import argparse
import os
import sys
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

from ..file_io import csv_text, dumps_json, write_all_atomic
from .inputs import InputError, Inputs, load_inputs
from .length_buckets import check_length_options, length_rows, plot_length_buckets, render_length_markdown, score_length_buckets
from .ngram import ngram_gaps, plot_ngram_gaps
from .report import build_report, render_markdown, run_rows, table_rows
from .significance import DEFAULT_SEED, TEST_NAMES, score_systems


def check_options(args: argparse.Namespace) -> None:
    if args.seed <= 0:
        raise InputError(
            f"--seed {args.seed}: use a positive seed (sacrebleu treats seed 0 as 'unseeded' and negative "
            "seeds are invalid for numpy)"
        )
    if args.n_samples is not None and args.n_samples < 1:
        raise InputError(f"--n-samples {args.n_samples}: must be at least 1")
    if args.jobs < 1:
        raise InputError(f"--jobs {args.jobs}: must be at least 1")
    if Path(args.prefix).name != args.prefix or args.prefix in ("", ".", ".."):
        raise InputError(f"--prefix {args.prefix!r}: must be a plain file name, without a folder")
    if Path(args.out_dir).exists() and not Path(args.out_dir).is_dir():
        raise InputError(f"--out-dir {args.out_dir}: exists and is not a folder")
    if not args.baseline:
        raise InputError("no baseline system: pass --baseline NAME=FILE[,FILE...]")
    if not args.system:
        raise InputError("no system to compare with the baseline: pass --system NAME=FILE[,FILE...]")
    check_length_options(args)


def load(args: argparse.Namespace) -> Inputs:
    """Check the options, then read and validate every input file; raise InputError before anything is computed
    or written."""
    check_options(args)
    return load_inputs(args)


def render_outputs(inputs: Inputs, report: Dict[str, Any], args: argparse.Namespace) -> Dict[Path, bytes]:
    out, prefix = Path(args.out_dir), args.prefix
    files = {
        out / f"{prefix}.md": render_markdown(report, args.width).encode(),
        out / f"{prefix}.csv": csv_text(table_rows(report)).encode(),
        out / f"{prefix}_runs.csv": csv_text(run_rows(report)).encode(),
    }
    if args.ngram_analysis:
        rows = ngram_gaps(inputs, args.trg_lang)
        report["ngram_analysis"] = rows
        files[out / f"{prefix}_ngram.csv"] = csv_text(rows).encode()
        files[out / f"{prefix}_ngram.png"] = plot_ngram_gaps(rows, inputs.baseline.name)
    if inputs.source is not None:
        report["length_buckets"] = score_length_buckets(inputs, args)
        files[out / f"{prefix}_length.md"] = render_length_markdown(report, args.width).encode()
        files[out / f"{prefix}_length.csv"] = csv_text(length_rows(report)).encode()
        files[out / f"{prefix}_length.png"] = plot_length_buckets(report)
    files[out / f"{prefix}.json"] = dumps_json(report, indent=2).encode()
    return files


def program_name() -> str:
    """``pe-evaluate``, or ``evaluate.py`` when run as the checkout's scripts/evaluate.py: the name the user typed,
    never ``cli.py`` (python -m) or the name of a program that calls ``main``."""
    typed = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return typed if typed in ("pe-evaluate", "evaluate.py") else "pe-evaluate"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=program_name(), description=__doc__.split("\n\n")[0], epilog="See the module docstring for the details.")
    p.add_argument("--ref", required=True, help="reference file, one detokenised segment per line")
    p.add_argument("--baseline", metavar="NAME=FILE[,FILE...]",
                   help="the baseline system (several runs: commas); a file is one translation per reference line, "
                        "or fairseq-generate's raw output")
    p.add_argument("--system", action="append", default=[], metavar="NAME=FILE[,FILE...]",
                   help="a system to compare with the baseline, files as for --baseline; repeat for more systems")
    p.add_argument("--meta", action="append", default=[], metavar="NAME=FILE.json",
                   help="PE settings of a system (default: HYPOTHESIS.meta.json when it exists)")
    p.add_argument("--trg-lang", required=True, help="target language, for the Moses tokeniser and sacreBLEU")
    p.add_argument("--out-dir", required=True, help="folder for the report files (created if missing)")
    p.add_argument("--prefix", default="results", help="output file names (default: %(default)s)")
    p.add_argument("--paired", choices=sorted(TEST_NAMES), default="bs",
                   help="bs: paired bootstrap (default); ar: paired approximate randomisation")
    p.add_argument("--n-samples", type=int, default=None,
                   help="resamples (bs) or trials (ar); default: 1000 (bs), 10000 (ar)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="random seed, > 0 (default: %(default)s)")
    p.add_argument("--jobs", type=int, default=1, help="worker processes per paired test (default: 1)")
    p.add_argument("--ngram-analysis", action="store_true", help="also write the Figure-4 n-gram gap CSV and PNG")
    p.add_argument("--source", metavar="FILE",
                   help="source file, line-aligned with --ref: BLEU and chrF++ per source-length bucket")
    p.add_argument("--length-buckets", metavar="EDGES",
                   help="bucket edges in source words, e.g. 10,20,30: buckets <=10, 11-20, 21-30, >=31")
    p.add_argument("--length-quantiles", type=int, metavar="N",
                   help="N buckets of about equal size, from the quantiles of the source lengths")
    p.add_argument("--no-aggressive-dash", action="store_true",
                   help="compound split without Moses -a (tensor2tensor's get_ende_bleu.sh variant)")
    p.add_argument("--width", type=int, default=2, help="decimals in the markdown table (default: 2)")
    p.add_argument("--allow-mismatch", action="store_true",
                   help="score a system whose runs differ from the baseline's in recipe, language pair, size, "
                        "updates, changed flags or decoded checkpoints (their meta files' run identity), or whose "
                        "label names another method than its run's, marked in the table; without it such a system "
                        "is refused")
    p.add_argument("--allow-unchecked", action="store_true",
                   help="score a hypothesis file without its meta file (HYP.meta.json, which pe-generate writes "
                        "beside it), such as fairseq-generate's raw output, marked unchecked in the table; without "
                        "it such a file is refused, since nothing tells which run it is a decode of")
    p.add_argument("--no-language-check", action="store_true",
                   help="skip the check that every hypothesis file reads as the reference's language")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        inputs = load(args)
    except InputError as e:
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        return 2
    report = build_report(inputs, score_systems(inputs, args), args)
    files = render_outputs(inputs, report, args)
    write_all_atomic(files)
    print(files[Path(args.out_dir) / f"{args.prefix}.md"].decode(), end="")
    if inputs.source is not None:
        for label in report["length_buckets"]["empty"]:
            print(f"{parser.prog}: warning: length bucket {label} holds no segment of {args.source}; it is reported "
                  "empty", file=sys.stderr)
        print("\n" + files[Path(args.out_dir) / f"{args.prefix}_length.md"].decode(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""pe-prepare: WMT14 En-De / En-Fr, Multi30k, or any line-aligned parallel corpus, as fairseq binaries.

The steps follow fairseq's examples/translation/prepare-wmt14en2{de,fr}.sh, done in Python:
  fetch     download the archives of pe_tools/recipes/wmt14/corpora.toml (resumable, verified), or check
            the copies given with --raw-dir
  extract   take the listed members out of each archive (.gz members are gunzipped)
  collect   one raw file per split and side: train corpora concatenated, <seg> text of the SGM sets,
            both sides' line counts checked; --valid-split takes every Nth train line as valid
  tokenize  train, valid: normalize-punctuation.perl -l L | remove-non-printing-char.perl |
            tokenizer.perl -a -l L.   test: ’ -> ' | tokenizer.perl -a -l L (fairseq's test treatment)
            Done with sacremoses (perl_parity=True; aggressive dash splits; escaping), except the
            non-printing step, which replaces \\p{C} with a space as the perl script does.
  filter    only with --max-train-source-words N: keep the train pairs whose tokenised source has at most N
            words (whitespace-separated tokens after the tokenize step), before BPE; valid and test untouched
  bpe       learn joint BPE on train.SRC + train.TGT (subword-nmt, 40k merges; or sentencepiece),
            apply it to every split
  clean     clean-corpus-n.perl -ratio 1.5 on train and valid, after BPE, 1..250 tokens; test kept
  binarize  fairseq-preprocess --joined-dictionary  ->  OUT (the fairseq data; default data-bin/RECIPE_SRC_TGT)
Each step writes through temporary names, then records OUT/.stamps/STEP.json: its settings and
the size and mtime of its inputs and outputs. A re-run skips a step whose stamp still matches.

References: docs/evaluation.md §WMT14 data (fairseq's recipes, our departures, clean-corpus-n rules) and
§Moses in Python (sacremoses parity); moses-smt/mosesdecoder scripts/training/clean-corpus-n.perl.
"""
import argparse
import os
import sys
from pathlib import Path

from ..recipes import recipe_names, table_path
from .corpora import load_table
from .files import SPLITS, PrepareError
from .pipeline import Pipeline

# flags a corpora table's [prepare] section may default (the command line wins), with their built-in defaults
TABLE_DEFAULTS = {"out": "data-bin/{recipe}_{src}_{tgt}", "download_dir": "data-bin/{recipe}_archives",
                  "bpe_merges": 40000, "spm_vocab_size": 40000, "min_len": 1, "max_len": 250, "ratio": 1.5,
                  "max_train_source_words": None}


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    def _get_help_string(self, action):  # show only meaningful defaults
        return action.help if action.default in (None, False) else super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="Prepare WMT14 En-De / En-Fr (or your own parallel text) for fairseq: Moses tokens, joint "
                    "BPE, clean-corpus-n, fairseq-preprocess --joined-dictionary. Re-running skips finished steps.",
        formatter_class=_Help)
    p.add_argument("pair", help="a pair of the corpora table (en-de, en-fr), or `raw` for your own files")
    p.add_argument("--out", help="output: the fairseq data folder (default: the table's, else "
                                 "data-bin/RECIPE_SRC_TGT); BPE text in OUT/text, intermediate files in OUT/work")
    g = p.add_argument_group("corpora of a recipe (pe_tools/recipes/RECIPE/corpora.toml)")
    g.add_argument("--recipe", default="wmt14", help="whose corpora table: " + ", ".join(recipe_names("corpora")))
    g.add_argument("--corpora", help="the corpora table (TOML); default pe_tools/recipes/RECIPE/corpora.toml")
    g.add_argument("--download-dir", help="where archives are downloaded and kept (default: the table's, else "
                                          "data-bin/RECIPE_archives)")
    g.add_argument("--raw-dir", help="take the archives from this folder (downloaded elsewhere); download nothing")
    g.add_argument("--base-url", help="mirror: replaces the scheme and host of every url, keeping its path")
    g.add_argument("--download-only", action="store_true", help="fetch and verify the archives, then stop")
    g.add_argument("--retries", type=int, default=5, help="resume an interrupted download this many times")
    g.add_argument("--retry-wait", type=float, default=2.0, help="seconds before the first retry (doubles)")
    g.add_argument("--timeout", type=float, default=60.0, help="network timeout in seconds")
    g = p.add_argument_group("raw: your own line-aligned files PREFIX.SRC / PREFIX.TGT")
    g.add_argument("--src", help="source language code (raw; a WMT pair sets it)")
    g.add_argument("--tgt", help="target language code (raw; a WMT pair sets it)")
    for split in SPLITS:
        g.add_argument(f"--{split}", metavar="PREFIX", help=f"{split} files PREFIX.SRC and PREFIX.TGT")
    g = p.add_argument_group("processing")
    g.add_argument("--valid-split", action="store_true",
                   help="valid = every Nth line of train (fairseq's script) instead of newstest2013 / --valid")
    g.add_argument("--valid-every", type=int, help="N for --valid-split (default: the pair's valid_every; raw 100)")
    g.add_argument("--normalize-test", action="store_true",
                   help="normalise punctuation and non-printing characters of the test set too (fairseq does not)")
    g.add_argument("--bpe", choices=["subword-nmt", "sentencepiece"], default="subword-nmt", help="subword model")
    g.add_argument("--bpe-merges", type=int, help="subword-nmt merge operations (default: the table's, else 40000)")
    g.add_argument("--spm-vocab-size", type=int, help="sentencepiece vocabulary size (default: the table's, else 40000)")
    g.add_argument("--min-len", type=int, help="clean: fewest tokens after BPE (default: the table's, else 1)")
    g.add_argument("--max-len", type=int, help="clean: most tokens after BPE (default: the table's, else 250)")
    g.add_argument("--ratio", type=float, help="clean: largest length ratio, either way; 0 = no ratio rule "
                                               "(default: the table's, else 1.5)")
    g.add_argument("--max-train-source-words", type=int, metavar="N",
                   help="keep only the training pairs whose source has at most N words: whitespace-separated "
                        "tokens of the Moses-tokenised source, counted before BPE (so not the subword tokens that "
                        "--max-len and fairseq count); valid and test are untouched. Default output folder: the "
                        "usual one with _shortN appended (default: off, every pair kept)")
    g.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1), help="processes")
    g.add_argument("--no-binarize", action="store_true", help="stop after the text files (skip fairseq-preprocess)")
    return p


def check_args(a) -> None:
    """Fill derived defaults; raise PrepareError naming the flag and the fix."""
    table_defaults, out_given = {}, a.out is not None
    if a.pair == "raw":
        needed = ["src", "tgt", "train", "test"] + ([] if a.valid_split else ["valid"])
        missing = [f"--{n}" for n in needed if getattr(a, n) is None]
        if missing:
            raise PrepareError(f"`raw` needs {', '.join(missing)}: e.g. raw --src en --tgt de --train data/train "
                               f"--valid data/valid --test data/test --out data/mine (files data/train.en, ...).")
        if a.valid_split and a.valid:
            raise PrepareError("give either --valid PREFIX or --valid-split, not both.")
        if a.out is None:
            raise PrepareError("`raw` needs --out DIR.")
        a.valid_every = 100 if a.valid_every is None else a.valid_every  # 0 is refused below, not the default
    else:
        a.corpora = a.corpora or str(table_path(a.recipe, "corpora"))
        table = load_table(Path(a.corpora))
        table_defaults = table.get("prepare", {})
        unknown = set(table_defaults) - set(TABLE_DEFAULTS)
        if unknown:
            raise PrepareError(f"{a.corpora}: [prepare] sets {', '.join(sorted(unknown))}; it may set "
                               f"{', '.join(TABLE_DEFAULTS)}.")
        pairs = table.get("pair", {})
        if a.pair not in pairs:
            raise PrepareError(f"unknown pair {a.pair!r}: {a.corpora} defines {', '.join(pairs) or 'no pairs'}.\n"
                               f"  Fix: use one of those, add a [pair.{a.pair}] table there, or prepare your own "
                               f"files with `raw`.")
        for flag in ("src", "tgt", *SPLITS):
            if getattr(a, flag) is not None:
                raise PrepareError(f"--{flag} is for `raw`; the {a.pair} files come from {a.corpora}.")
        if a.raw_dir and (a.base_url or a.download_only):
            raise PrepareError("--raw-dir reads archives downloaded elsewhere; it cannot be combined with "
                               "--base-url or --download-only.")
        needed = ["train", "test"] + ([] if a.valid_split else ["valid"])
        lacking = [k for k in needed if k not in pairs[a.pair]]
        if lacking:
            raise PrepareError(f"[pair.{a.pair}] in {a.corpora} has no {', '.join(lacking)}"
                               f"{' (or pass --valid-split)' if lacking == ['valid'] else ''}.")
        a.src, a.tgt = a.pair.split("-", 1)
        a.valid_every = pairs[a.pair].get("valid_every", 100) if a.valid_every is None else a.valid_every
    for flag, default in TABLE_DEFAULTS.items():
        if getattr(a, flag, None) is None:
            value = table_defaults.get(flag, default)
            setattr(a, flag, value.format(recipe=a.recipe, src=a.src, tgt=a.tgt) if isinstance(value, str) else value)
    words = a.max_train_source_words
    if words is not None:
        if isinstance(words, bool) or not isinstance(words, int) or words < 1:
            raise PrepareError(f"--max-train-source-words {words}: must be a whole number, at least 1 (the most "
                               f"words a training source may have).")
        if not out_given:  # never overwrite the full corpus's data with the filtered one
            a.out = f"{a.out}_short{words}"
    if a.src == a.tgt:
        raise PrepareError(f"--src and --tgt are both {a.src!r}.")
    for flag in ("bpe_merges", "spm_vocab_size", "workers", "valid_every", "max_len"):
        if getattr(a, flag) < 1:
            raise PrepareError(f"--{flag.replace('_', '-')} must be at least 1.")
    if a.ratio < 0:
        raise PrepareError("--ratio must be 0 (no ratio rule) or positive.")


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        check_args(args)
        return Pipeline(args).run()
    except PrepareError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted: finished steps are kept; re-run the same command to go on.", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

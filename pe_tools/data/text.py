"""Text steps, line by line: Moses normalisation and tokenisation, BPE (subword-nmt or sentencepiece) learnt
and applied, clean-corpus-n. ``map_lines`` runs a line function on worker processes, in order."""
import itertools
import multiprocessing
import os
import re
from collections import Counter, deque
from pathlib import Path

import regex  # a sacremoses dependency; supports \p{...} like perl
from tqdm import tqdm

from ..file_io import atomic
from .files import PrepareError, count_lines, log, open_text, progress, read_lines

CHUNK_LINES = 2000
NON_PRINTING = regex.compile(r"\p{C}")  # remove-non-printing-char.perl: s/\p{C}/ /g
WHITESPACE = regex.compile(r"\p{White_Space}+")  # perl's \s on utf8 strings
_LINE_FN = None


def make_line_fn(kind: str, arg: str):
    """kind: tok-train / tok-test (arg = language), bpe (arg = codes file), spm (arg = model file)."""
    if kind.startswith("tok-"):
        from sacremoses import MosesPunctNormalizer, MosesTokenizer

        tokenizer, normalizer = MosesTokenizer(lang=arg), MosesPunctNormalizer(lang=arg, perl_parity=True)

        def tokenize(line: str) -> str:
            if kind == "tok-train":
                line = NON_PRINTING.sub(" ", normalizer.normalize(line))
            else:  # fairseq's test set: sed "s/\’/\'/g" and nothing else before the tokenizer
                line = line.replace("\u2019", "'")
            return tokenizer.tokenize(line, aggressive_dash_splits=True, escape=True, return_str=True)

        return tokenize
    if kind == "bpe":
        from subword_nmt.apply_bpe import BPE

        with open_text(Path(arg)) as codes:
            return BPE(codes).process_line
    if kind == "spm":
        import sentencepiece

        model = sentencepiece.SentencePieceProcessor(model_file=arg)
        return lambda line: " ".join(model.encode(line, out_type=str))
    raise ValueError(kind)


def _init_worker(kind: str, arg: str) -> None:
    global _LINE_FN
    _LINE_FN = make_line_fn(kind, arg)


def _work(lines: list) -> list:
    return [_LINE_FN(line) for line in lines]


def _batched(iterable, n: int):
    it = iter(iterable)
    while batch := list(itertools.islice(it, n)):
        yield batch


def map_lines(src: Path, dst: Path, kind: str, arg: str, workers: int, desc: str) -> None:
    """dst = fn(each line of src), in order, on `workers` processes, with a bounded queue."""
    total = count_lines(src)
    chunks = _batched(read_lines(src), CHUNK_LINES)
    with atomic(dst) as tmp, open_text(tmp, "w") as out, progress(total, desc) as bar:
        def write(lines):
            out.writelines(line + "\n" for line in lines)
            bar.update(len(lines))

        if workers <= 1 or total <= CHUNK_LINES:
            _init_worker(kind, arg)
            for chunk in chunks:
                write(_work(chunk))
            return
        with multiprocessing.Pool(workers, _init_worker, (kind, arg)) as pool:
            pending = deque()
            for chunk in chunks:
                pending.append(pool.apply_async(_work, (chunk,)))
                if len(pending) >= 4 * workers:
                    write(pending.popleft().get())
            while pending:
                write(pending.popleft().get())


def learn_subword_nmt(train: list, codes: Path, merges: int) -> None:
    """learn_bpe.py -s MERGES < cat train.SRC train.TGT (fairseq's joint BPE; min frequency 2)."""
    from subword_nmt.learn_bpe import learn_bpe

    total = sum(count_lines(p) for p in train)
    with atomic(codes) as tmp, open_text(tmp, "w") as out, open_text(train[0]) as f1, open_text(train[1]) as f2:
        lines = tqdm(itertools.chain(f1, f2), total=total, desc="BPE word counts", unit=" lines",
                     unit_scale=True, mininterval=1, leave=False)
        learn_bpe(lines, out, merges, min_frequency=2, num_workers=1)  # its own tqdm bar counts the merges
    learned = count_lines(codes) - 1  # less the '#version' header
    log(f"learn-bpe: {learned:,} merges (asked for {merges:,}; fewer when no pair occurs twice)")


def learn_sentencepiece(train: list, prefix: Path, vocab_size: int, workers: int) -> None:
    try:
        import sentencepiece
    except ModuleNotFoundError:
        raise PrepareError("--bpe sentencepiece needs the sentencepiece package: pip install sentencepiece") from None
    tmp = prefix.with_name(prefix.name + f".tmp{os.getpid()}")
    prefix.parent.mkdir(parents=True, exist_ok=True)
    try:
        try:
            sentencepiece.SentencePieceTrainer.train(
                input=",".join(map(str, train)), model_prefix=str(tmp), vocab_size=vocab_size, model_type="bpe",
                character_coverage=1.0, input_sentence_size=10_000_000, shuffle_input_sentence=True,
                num_threads=workers, minloglevel=1)
        except RuntimeError as e:
            hint = "\n  Fix: lower --spm-vocab-size for small data." if "ocabulary size" in str(e) else ""
            raise PrepareError(f"sentencepiece training failed: {e}{hint}") from None
        for ext in (".model", ".vocab"):
            os.replace(f"{tmp}{ext}", f"{prefix}{ext}")
    finally:
        for ext in (".model", ".vocab"):
            Path(f"{tmp}{ext}").unlink(missing_ok=True)


def aligned_lines(src: Path, tgt: Path) -> int:
    """The number of pairs of a step's two input files, which must have as many lines as each other."""
    n_src, n_tgt = count_lines(src), count_lines(tgt)
    if n_src != n_tgt:
        raise PrepareError(f"misaligned: {src} has {n_src} lines but {tgt} has {n_tgt}; delete {src.parent} "
                           f"and re-run.")
    return n_src


def filter_source_words(src: Path, tgt: Path, out_src: Path, out_tgt: Path, max_words: int) -> Counter:
    """The pairs whose source has at most ``max_words`` words (whitespace-separated tokens of the tokenised
    source line), in order, both sides written under temporary names and renamed; returns the counts
    (kept, dropped, longest_kept: the most words of a kept source)."""
    if max_words < 1:
        raise PrepareError(f"--max-train-source-words {max_words}: must be at least 1.")
    n_src = aligned_lines(src, tgt)
    stats = Counter(kept=0, dropped=0, longest_kept=0)
    with atomic(out_src) as ts, atomic(out_tgt) as tt, open_text(ts, "w") as fs, open_text(tt, "w") as ft, \
            progress(n_src, f"filter {src.name.split('.', 1)[1].rsplit('.', 1)[0]}") as bar:
        for f, e in zip(read_lines(src), read_lines(tgt)):
            bar.update()
            words = len(f.split())
            if words > max_words:
                stats["dropped"] += 1
                continue
            stats["kept"] += 1
            stats["longest_kept"] = max(stats["longest_kept"], words)
            fs.write(f + "\n")
            ft.write(e + "\n")
        if not stats["kept"]:
            raise PrepareError(f"--max-train-source-words {max_words}: no training pair has a source that short "
                               f"({n_src:,} pairs in {src}); raise the limit.")
    log(f"filter train: {n_src:,} pairs in, {stats['kept']:,} kept, {stats['dropped']:,} dropped (source longer "
        f"than {max_words} words); longest kept source: {stats['longest_kept']} words")
    return stats


def clean_corpus(src: Path, tgt: Path, out_src: Path, out_tgt: Path, min_len: int, max_len: int, ratio: float,
                 max_word_length: int = 1000) -> Counter:
    """clean-corpus-n.perl -ratio RATIO CORPUS SRC TGT OUT MIN MAX: the kept pairs, whitespace collapsed."""
    n_src = aligned_lines(src, tgt)
    long_word = re.compile(r"[^ |]{%d}" % (max_word_length + 1))
    stats, factored = Counter(), None
    with atomic(out_src) as ts, atomic(out_tgt) as tt, open_text(ts, "w") as fs, open_text(tt, "w") as ft, \
            progress(n_src, f"clean {src.name.split('.', 1)[1].rsplit('.', 1)[0]}") as bar:
        for f, e in zip(read_lines(src), read_lines(tgt)):
            bar.update()
            if factored is None:  # the perl script keeps '|' if the first pair has one
                factored = "|" in f or "|" in e
            if not factored:
                f, e = f.replace("|", ""), e.replace("|", "")
            f, e = WHITESPACE.sub(" ", f).strip(" "), WHITESPACE.sub(" ", e).strip(" ")
            if not f or not e:
                stats["empty"] += 1
                continue
            fc, ec = f.count(" ") + 1, e.count(" ") + 1
            if not (min_len <= fc <= max_len and min_len <= ec <= max_len):
                stats["length"] += 1
            elif ratio and (fc / ec > ratio or ec / fc > ratio):
                stats["ratio"] += 1
            elif long_word.search(f) or long_word.search(e):
                stats["long word"] += 1
            else:
                stats["kept"] += 1
                fs.write(f + "\n")
                ft.write(e + "\n")
    dropped = ", ".join(f"{v:,} {k}" for k, v in stats.items() if k != "kept") or "none"
    log(f"clean {src.name.split('.')[1]}: {n_src:,} pairs in, {stats['kept']:,} kept (dropped: {dropped})")
    return stats

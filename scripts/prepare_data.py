#!/usr/bin/env python3
"""Prepare WMT14 En-De / En-Fr, or any line-aligned parallel corpus, as fairseq binaries.

The steps follow fairseq's examples/translation/prepare-wmt14en2{de,fr}.sh, done in Python:
  fetch     download the archives of examples/wmt14/corpora.toml (resumable, verified), or check
            the copies given with --raw-dir
  extract   take the listed members out of each archive (.gz members are gunzipped)
  collect   one raw file per split and side: train corpora concatenated, <seg> text of the SGM sets,
            both sides' line counts checked; --valid-split takes every Nth train line as valid
  tokenize  train, valid: normalize-punctuation.perl -l L | remove-non-printing-char.perl |
            tokenizer.perl -a -l L.   test: ’ -> ' | tokenizer.perl -a -l L (fairseq's test treatment)
            Done with sacremoses (perl_parity=True; aggressive dash splits; escaping), except the
            non-printing step, which replaces \\p{C} with a space as the perl script does.
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
import contextlib
import itertools
import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
from collections import Counter, deque
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from download import Archive, CorruptFile, PrepareError, fetch, quarantine, verify_raw  # noqa: E402

import regex  # noqa: E402  (a sacremoses dependency; supports \p{...} like perl)
from tqdm import tqdm  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
RECIPES = REPO / "examples"
# flags a corpora table's [prepare] section may default (the command line wins), with their built-in defaults
TABLE_DEFAULTS = {"out": "data-bin/{recipe}_{src}_{tgt}", "download_dir": "data-bin/{recipe}_archives",
                  "bpe_merges": 40000, "spm_vocab_size": 40000, "min_len": 1, "max_len": 250, "ratio": 1.5}
SPLITS = ("train", "valid", "test")
CHUNK_LINES = 2000
NON_PRINTING = regex.compile(r"\p{C}")  # remove-non-printing-char.perl: s/\p{C}/ /g
WHITESPACE = regex.compile(r"\p{White_Space}+")  # perl's \s on utf8 strings
SEG = re.compile(r"<seg[^>]*>(.*)</seg>", re.IGNORECASE)


def shown(path: Path) -> str:
    """A path as the user would type it: relative to the working folder when inside it."""
    rel = os.path.relpath(path)
    return str(path) if rel.startswith("..") else rel


def log(msg: str) -> None:
    print(f"[prepare] {msg}", flush=True)


def progress(total: Optional[int], desc: str, unit: str = " lines"):
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, mininterval=1, leave=False)


# ---------------------------------------------------------------------------- files and stamps
def open_text(path: Path, mode: str = "r"):
    """UTF-8, '\\n' as the only line end (a stray \\r or \\x85 inside a line must not split it)."""
    return open(path, mode, encoding="utf-8", errors="replace" if "r" in mode else "strict", newline="\n")


def read_lines(path: Path):
    with open_text(path) as f:
        for line in f:
            yield line[:-1] if line.endswith("\n") else line


def count_lines(path: Path) -> int:
    n, last = 0, b"\n"
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            n += block.count(b"\n")
            last = block[-1:]
    return n + (last != b"\n")


@contextlib.contextmanager
def atomic(path: Path):
    """Yield a temporary path that becomes `path` only if the block finishes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def exclusive(folder: Path, what: str, wait: bool = False):
    """Hold folder/.lock, so two runs never write the same files at once."""
    import fcntl

    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                raise PrepareError(f"another prepare run is using {folder} ({what}); wait for it to end.") from None
            log(f"waiting for another prepare run to finish with {folder} ({what})")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def remove_temporaries(folder: Path) -> None:
    """Temporary files of a run that was killed: never trusted, so just removed."""
    for p in folder.rglob("*.tmp*"):
        if re.fullmatch(r".*\.tmp\d+", p.name):
            shutil.rmtree(p) if p.is_dir() else p.unlink()


class Stamps:
    def __init__(self, out: Path):
        self.out, self.dir = out, out / ".stamps"

    def _key(self, p: Path) -> str:
        p = Path(os.path.abspath(p))
        return str(p.relative_to(self.out)) if p.is_relative_to(self.out) else str(p)

    def _sig(self, paths) -> dict:
        return {self._key(p): ([p.stat().st_size, p.stat().st_mtime_ns] if p.exists() else None) for p in paths}

    def run(self, name: str, inputs, outputs, params: dict, fn) -> bool:
        """Run fn() unless the stamp of `name` matches; return whether it ran."""
        stamp = self.dir / f"{name}.json"
        record = {"params": json.loads(json.dumps(params)), "inputs": self._sig(inputs)}
        if stamp.exists():
            with contextlib.suppress(ValueError):
                old = json.loads(stamp.read_text())
                if {k: old.get(k) for k in record} == record and old.get("outputs") == self._sig(outputs):
                    log(f"{name}: done before, skipped")
                    return False
            stamp.unlink()
        log(name)
        fn()
        record["outputs"] = self._sig(outputs)
        with atomic(stamp) as tmp:
            tmp.write_text(json.dumps(record, indent=1, sort_keys=True))
        return True

    def drop(self, name: str) -> None:
        (self.dir / f"{name}.json").unlink(missing_ok=True)


# ------------------------------------------------------------------------------- line processing
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


# ----------------------------------------------------------------------------------- the corpora
@dataclass
class Corpus:
    src: Path
    tgt: Path
    lines: Optional[int] = None  # expected sentence count, if known


def sgm_segments(path: Path) -> list:
    """The text of every <seg> of a WMT SGM file, in file order (fairseq: grep '<seg id' | sed)."""
    segs = []
    for n, line in enumerate(read_lines(path), 1):
        if "<seg" in line.lower():
            m = SEG.search(line)
            if not m:
                raise PrepareError(f"{path}:{n}: a <seg> line without its closing </seg>: {line[:80]!r}")
            segs.append(m.group(1).strip())
    return segs


def sentences(path: Path):
    return iter(sgm_segments(path)) if path.name.endswith(".sgm") else read_lines(path)


def count_sentences(path: Path) -> int:
    return len(sgm_segments(path)) if path.name.endswith(".sgm") else count_lines(path)


def check_aligned(corpus: Corpus) -> int:
    for p in (corpus.src, corpus.tgt):
        if not p.is_file():
            raise PrepareError(f"{p} not found.")
    n_src, n_tgt = count_sentences(corpus.src), count_sentences(corpus.tgt)
    if n_src != n_tgt:
        raise PrepareError(f"misaligned parallel corpus: {corpus.src} has {n_src} lines but {corpus.tgt} has "
                           f"{n_tgt}.\n  Fix: the two sides must hold one sentence per line, pair by pair; find "
                           f"the extra or missing line (a stray newline or an empty last line?) and re-run.")
    if corpus.lines is not None and n_src != corpus.lines:
        raise PrepareError(f"{corpus.src} and {corpus.tgt} have {n_src} sentences, the corpora table expects "
                           f"{corpus.lines}.\n  Fix: check the archive (re-download it), or remove `lines` from "
                           f"that entry if the table is wrong.")
    return n_src


def collect(corpora: list, out_src: Path, out_tgt: Path, valid_every: Optional[int] = None,
            valid_src: Optional[Path] = None, valid_tgt: Optional[Path] = None) -> None:
    """Concatenate corpora into out_src/out_tgt; with valid_every=N, every Nth pair goes to valid_*."""
    total = sum(check_aligned(c) for c in corpora)
    outs = [out_src, out_tgt] + ([valid_src, valid_tgt] if valid_every else [])
    with contextlib.ExitStack() as stack:
        tmps = [stack.enter_context(atomic(p)) for p in outs]
        files = [stack.enter_context(open_text(t, "w")) for t in tmps]
        bar = stack.enter_context(progress(total, f"collect {out_src.name.rsplit('.', 1)[0]}"))
        n = 0
        for c in corpora:
            for s, t in zip(sentences(c.src), sentences(c.tgt)):
                n += 1
                fs, ft = files[2:] if valid_every and n % valid_every == 0 else files[:2]
                fs.write(s + "\n")
                ft.write(t + "\n")
                bar.update()


# ------------------------------------------------------------------------------------- archives
def corpus_sides(entry: dict) -> list:
    """[(archive, member)] of a corpus entry's two sides. With an `archive` key src and tgt are members of
    that tar; without one they name single-file archives (member None), e.g. Multi30k's train.en.gz."""
    if "archive" in entry:
        return [(entry["archive"], entry["src"]), (entry["archive"], entry["tgt"])]
    return [(entry["src"], None), (entry["tgt"], None)]


def extract_single(path: Path, dest: Path) -> None:
    """The content of a single-file archive (gunzipped when it ends in .gz), through a temporary name."""
    import gzip
    import zlib

    try:
        with atomic(dest) as tmp, open(tmp, "wb") as out, \
                (gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")) as f:
            shutil.copyfileobj(f, out)
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise CorruptFile(f"it is truncated or not a valid gzip file ({type(e).__name__}: {e})") from None


def extract(archive_path: Path, members: dict) -> None:
    """Write each archive member of `members` (member -> destination) through a temporary name."""
    import gzip
    import tarfile
    import zlib

    wanted, seen = dict(members), []
    with open(archive_path, "rb") as raw, progress(archive_path.stat().st_size, f"extract {archive_path.name}",
                                                   unit="B") as bar:
        class Counted:
            def read(self, n=-1):
                block = raw.read(n)
                bar.update(len(block))
                return block

        try:
            with tarfile.open(fileobj=Counted(), mode="r|*") as tar:
                for info in tar:
                    name = info.name.removeprefix("./")
                    seen.append(name)
                    if name not in wanted or not info.isfile():
                        continue
                    with atomic(wanted.pop(name)) as tmp, open(tmp, "wb") as out:
                        data = tar.extractfile(info)
                        shutil.copyfileobj(gzip.GzipFile(fileobj=data) if name.endswith(".gz") else data, out)
        except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as e:  # not disk errors
            raise CorruptFile(f"it is truncated or not a valid archive ({type(e).__name__}: {e})") from None
    if wanted:
        raise PrepareError(f"{archive_path} has no member {', '.join(sorted(wanted))} (it has: "
                           f"{', '.join(seen[:12])}{' ...' if len(seen) > 12 else ''}).\n  Fix: correct the member "
                           f"path in the corpora table.")


def load_table(path: Path) -> dict:
    import tomllib  # standard library from Python 3.11, pe_plugin's floor
    if not path.is_file():
        raise PrepareError(f"corpora table {path} not found (--corpora).")
    with open(path, "rb") as f:
        try:
            return tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise PrepareError(f"{path} is not valid TOML: {e}") from None


# ------------------------------------------------------------------------------------ the steps
class Pipeline:
    def __init__(self, args):
        self.args, self.out = args, Path(os.path.abspath(args.out))
        self.src, self.tgt = args.src, args.tgt
        self.text, self.work = self.out / "text", self.out / "work"
        self.stamps = Stamps(self.out)

    def path(self, stage: str, split: str, lang: str) -> Path:
        """final: OUT/text/SPLIT.LANG (what fairseq-preprocess reads); else OUT/work/STAGE.SPLIT.LANG."""
        return self.text / f"{split}.{lang}" if stage == "final" else self.work / f"{stage}.{split}.{lang}"

    def pair_paths(self, stage: str, split: str) -> list:
        return [self.path(stage, split, self.src), self.path(stage, split, self.tgt)]

    # --- WMT mode: fetch and extract the archives; returns {split: [Corpus]} of extracted files
    def fetch_and_extract(self, table: dict, pair: dict) -> dict:
        splits = ["train", "test"] + ([] if self.args.valid_split else ["valid"])
        entries = {split: pair[split] if isinstance(pair[split], list) else [pair[split]] for split in splits}
        archives = {}
        for name, _ in (side for e in itertools.chain(*entries.values()) for side in corpus_sides(e)):
            if name not in table.get("archive", {}):
                raise PrepareError(f"{self.args.corpora}: no [archive.{name}] (used by [pair.{self.args.pair}]).")
            archives[name] = Archive.from_table(name, table["archive"][name])
        if self.args.raw_dir:
            self.check_raw_dir(archives.values())
            paths = {name: self.fetch(arc) for name, arc in archives.items()}
        else:
            with exclusive(Path(self.args.download_dir), "--download-dir", wait=True):  # shared by the pairs
                paths = {name: self.fetch(arc) for name, arc in archives.items()}
        if self.args.download_only:
            return {}
        for name, arc in archives.items():
            members = {m: self.extracted(arc, m) for e in itertools.chain(*entries.values())
                       for n, m in corpus_sides(e) if n == name}
            self.stamps.run(f"extract-{name}", [paths[name]], members.values(), sorted(map(str, members)),
                            lambda arc=arc, members=members: self.extract(arc, paths[arc.name], members))
        return {split: [Corpus(*(self.extracted(archives[n], m) for n, m in corpus_sides(e)), e.get("lines"))
                        for e in es] for split, es in entries.items()}

    def extracted(self, arc: Archive, member: Optional[str]) -> Path:
        """Where a member of a tar (or the content of a single-file archive, member None) is extracted."""
        name = arc.file if member is None else member
        return self.work / "extracted" / arc.name / name.removesuffix(".gz")

    def check_raw_dir(self, archives) -> None:
        missing = [arc for arc in archives if not (Path(self.args.raw_dir) / arc.file).is_file()]
        if missing:
            raise PrepareError(f"--raw-dir {self.args.raw_dir} lacks {len(missing)} archive(s):\n" + "".join(
                f"  {arc.file}: {arc.url} ({arc.describe()})\n" for arc in missing) + "  Fix: download them on "
                "a machine with internet (prepare.sh PAIR --download-only) and copy them there.")

    def extract(self, arc: Archive, path: Path, members: dict) -> None:
        try:
            extract_single(path, members[None]) if arc.single_file else extract(path, members)
        except CorruptFile as e:  # passed its checks, yet unreadable: stop trusting it
            self.stamps.drop(f"fetch-{arc.name}")
            if self.args.raw_dir:
                raise PrepareError(f"{path} (from --raw-dir) is corrupt: {e}.\n  Fix: replace it with a complete "
                                   f"copy of {arc.url}.") from None
            raise PrepareError(f"{path} is corrupt: {e}.\n  It was moved to {quarantine(path)}. Fix: re-run to "
                               f"download it again; if that fails too, check [archive.{arc.name}] in "
                               f"{self.args.corpora}.") from None

    def fetch(self, arc: Archive) -> Path:
        a = self.args
        if a.raw_dir:
            path = Path(a.raw_dir) / arc.file
            self.stamps.run(f"fetch-{arc.name}", [path], [], asdict(arc), lambda: verify_raw(path, arc))
            return path
        path = Path(a.download_dir) / arc.file
        ran = self.stamps.run(f"fetch-{arc.name}", [], [path], {k: v for k, v in asdict(arc).items() if k != "url"},
                              lambda: fetch(arc, Path(a.download_dir), a.base_url, a.retries, a.retry_wait, a.timeout))
        if ran:
            log(f"fetch-{arc.name}: {shown(path)} ({path.stat().st_size:,} bytes) verified")
        return path

    def raw_corpora(self) -> dict:
        a, corpora = self.args, {}
        for split in SPLITS:
            prefix = getattr(a, split)
            if prefix is None:
                continue
            files = [Path(f"{prefix}.{lang}") for lang in (self.src, self.tgt)]
            missing = [str(p) for p in files if not p.is_file()]
            if missing:
                raise PrepareError(f"--{split} {prefix}: {' and '.join(missing)} not found (expected "
                                   f"{files[0]} and {files[1]}, one sentence per line).")
            corpora[split] = [Corpus(*files)]
        return corpora

    # --- text steps
    def collect(self, corpora: dict) -> None:
        a = self.args
        for split, cs in corpora.items():
            outs = self.pair_paths("raw", split)
            every = a.valid_every if split == "train" and a.valid_split else None
            if every:
                outs += self.pair_paths("raw", "valid")
            inputs = [p for c in cs for p in (c.src, c.tgt)]
            self.stamps.run(f"collect-{split}", inputs, outs, {"valid_every": every, "lines": [c.lines for c in cs]},
                            lambda cs=cs, outs=outs, every=every: collect(cs, outs[0], outs[1], every, *outs[2:]))

    def tokenize(self) -> None:
        for split in SPLITS:
            kind = "tok-test" if split == "test" and not self.args.normalize_test else "tok-train"
            for lang in (self.src, self.tgt):
                src, dst = self.path("raw", split, lang), self.path("tok", split, lang)
                self.stamps.run(f"tokenize-{split}.{lang}", [src], [dst], {"kind": kind, "lang": lang},
                                lambda src=src, dst=dst, kind=kind, lang=lang:
                                map_lines(src, dst, kind, lang, self.args.workers, f"tokenize {split}.{lang}"))

    def bpe(self) -> None:
        a, train = self.args, self.pair_paths("tok", "train")
        if a.bpe == "subword-nmt":
            model, kind, params = [self.text / "bpe.codes"], "bpe", {"merges": a.bpe_merges, "min_frequency": 2}
            self.stamps.run("learn-bpe", train, model, params, lambda: learn_subword_nmt(train, model[0], a.bpe_merges))
        else:
            model, kind, params = [self.text / "spm.model", self.text / "spm.vocab"], "spm", {"vocab": a.spm_vocab_size}
            self.stamps.run("learn-spm", train, model, params,
                            lambda: learn_sentencepiece(train, self.text / "spm", a.spm_vocab_size, a.workers))
        for split in SPLITS:
            for lang in (self.src, self.tgt):
                src, dst = self.path("tok", split, lang), self.path("bpe", split, lang)
                self.stamps.run(f"apply-{a.bpe}-{split}.{lang}", [model[0], src], [dst], {},
                                lambda src=src, dst=dst: map_lines(src, dst, kind, str(model[0]), a.workers,
                                                                   f"{a.bpe} {dst.name.split('.', 1)[1]}"))

    def clean(self) -> None:
        a = self.args
        rules = {"min_len": a.min_len, "max_len": a.max_len, "ratio": a.ratio, "max_word_length": 1000}
        for split in ("train", "valid"):
            ins, outs = self.pair_paths("bpe", split), self.pair_paths("final", split)
            self.stamps.run(f"clean-{split}", ins, outs, rules, lambda ins=ins, outs=outs: clean_corpus(
                *ins, *outs, **rules))
        ins, outs = self.pair_paths("bpe", "test"), self.pair_paths("final", "test")

        def copy_test():
            for i, o in zip(ins, outs):
                with atomic(o) as tmp:
                    shutil.copyfile(i, tmp)

        self.stamps.run("copy-test", ins, outs, {}, copy_test)

    def binarize(self) -> Path:
        s, t, dest = self.src, self.tgt, self.out
        ins = [p for split in SPLITS for p in self.pair_paths("final", split)]
        outs = [dest / f"dict.{lang}.txt" for lang in (s, t)] + [
            dest / f"{split}.{s}-{t}.{lang}.{ext}" for split in SPLITS for lang in (s, t) for ext in ("bin", "idx")]
        self.stamps.run("binarize", ins, outs, {"joined_dictionary": True},
                        lambda: fairseq_preprocess(s, t, self.text, dest, self.args.workers))
        return dest

    def summary(self) -> None:
        counts = {split: count_lines(self.path("final", split, self.src)) for split in SPLITS}
        log("sentences: " + ", ".join(f"{k} {v:,}" for k, v in counts.items()))
        dict_file = self.out / f"dict.{self.src}.txt"
        if dict_file.exists():
            log(f"joined dictionary: {count_lines(dict_file):,} types (+4 specials)")
            log(f"done: fairseq data in {shown(self.out)}, BPE text in {shown(self.text)}")
        else:
            log(f"done: BPE text in {shown(self.text)}")

    def run(self) -> int:
        with exclusive(self.out, "--out"):
            remove_temporaries(self.out)
            return self.run_steps()

    def run_steps(self) -> int:
        a = self.args
        if a.pair == "raw":
            corpora = self.raw_corpora()
        else:
            table = load_table(Path(a.corpora))
            corpora = self.fetch_and_extract(table, table["pair"][a.pair])
            if a.download_only:
                log(f"archives are in {a.download_dir}; copy them to the machine that prepares the data and "
                    f"pass --raw-dir there")
                return 0
        self.collect(corpora)
        self.tokenize()
        self.bpe()
        self.clean()
        if not a.no_binarize:
            self.binarize()
        self.summary()
        return 0


# ------------------------------------------------------------------------------ BPE, clean, bin
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


def clean_corpus(src: Path, tgt: Path, out_src: Path, out_tgt: Path, min_len: int, max_len: int, ratio: float,
                 max_word_length: int = 1000) -> Counter:
    """clean-corpus-n.perl -ratio RATIO CORPUS SRC TGT OUT MIN MAX: the kept pairs, whitespace collapsed."""
    n_src, n_tgt = count_lines(src), count_lines(tgt)
    if n_src != n_tgt:
        raise PrepareError(f"misaligned: {src} has {n_src} lines but {tgt} has {n_tgt}; delete {src.parent} "
                           f"and re-run.")
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


def fairseq_preprocess(src: str, tgt: str, text_dir: Path, dest: Path, workers: int) -> None:
    """fairseq-preprocess --joined-dictionary into a temporary folder, then its files into `dest`."""
    import importlib.util

    if importlib.util.find_spec("fairseq_cli") is None:
        raise PrepareError(f"fairseq is not installed for {sys.executable}. Fix: run `make setup` and use "
                           f"PYTHON=.venv/bin/python, or pass --no-binarize to stop at the text files.")
    tmp = dest / f"bin.tmp{os.getpid()}"
    cmd = [sys.executable, "-m", "fairseq_cli.preprocess", "--source-lang", src, "--target-lang", tgt,
           *(x for split in SPLITS for x in (f"--{split}pref", shown(text_dir / split))),
           "--destdir", shown(tmp), "--joined-dictionary", "--workers", str(workers)]
    log("binarize: fairseq-preprocess " + " ".join(cmd[3:]).replace(shown(tmp), shown(dest)))
    try:
        result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if result.returncode != 0:
            raise PrepareError(f"fairseq-preprocess failed (exit {result.returncode}):\n{result.stdout[-3000:]}")
        for f in tmp.iterdir():
            os.replace(f, dest / f.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------------------------------------------- CLI
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
    g = p.add_argument_group("corpora of a recipe (examples/RECIPE/corpora.toml)")
    g.add_argument("--recipe", default="wmt14", help="whose corpora table: " + ", ".join(
        sorted(t.parent.name for t in RECIPES.glob("*/corpora.toml"))))
    g.add_argument("--corpora", help="the corpora table (TOML); default examples/RECIPE/corpora.toml")
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
    g.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1), help="processes")
    g.add_argument("--no-binarize", action="store_true", help="stop after the text files (skip fairseq-preprocess)")
    return p


def check_args(a) -> None:
    """Fill derived defaults; raise PrepareError naming the flag and the fix."""
    table_defaults = {}
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
        a.valid_every = a.valid_every or 100
    else:
        a.corpora = a.corpora or str(RECIPES / a.recipe / "corpora.toml")
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
        a.valid_every = a.valid_every or pairs[a.pair].get("valid_every", 100)
    for flag, default in TABLE_DEFAULTS.items():
        if getattr(a, flag, None) is None:
            value = table_defaults.get(flag, default)
            setattr(a, flag, value.format(recipe=a.recipe, src=a.src, tgt=a.tgt) if isinstance(value, str) else value)
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

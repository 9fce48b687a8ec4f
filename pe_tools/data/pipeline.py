"""The preparation pipeline: fetch, extract, collect, tokenize, filter (--max-train-source-words), bpe, clean,
binarize. Each step writes through
temporary names, then records OUT/.stamps/STEP.json (its settings and the size and mtime of its inputs and
outputs); a re-run skips a step whose stamp still matches."""
import contextlib
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Optional

from ..file_io import atomic
from ..locks import Busy, describe, hold
from .corpora import Corpus, collect, corpus_sides, extract, extract_single, load_table
from .download import Archive, fetch, quarantine, verify_raw
from .files import SPLITS, CorruptFile, PrepareError, count_lines, log, read_lines, shown
from .text import clean_corpus, filter_source_words, learn_sentencepiece, learn_subword_nmt, map_lines


@contextlib.contextmanager
def exclusive(folder: Path, what: str, wait: bool = False):
    """Hold folder/.lock (pe_tools/locks.py), so two runs never write the same files at once."""
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(hold(Path(folder) / ".lock", wait=wait, holder={"what": f"prepare {what} {folder}"},
                                    say=lambda line: log(f"another prepare run is using {folder} ({what}): {line}")))
        except Busy as e:
            raise PrepareError(f"another prepare run is using {folder} ({what}): {describe(e.holder)}; wait for it "
                               f"to end.") from None
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

    @property
    def max_source_words(self) -> Optional[int]:
        return getattr(self.args, "max_train_source_words", None)

    def tok_stage(self, split: str) -> str:
        """The tokenised text that BPE learns from and is applied to: for train, the pairs kept by
        --max-train-source-words when it is given (OUT/work/filtered.train.*), else OUT/work/tok.*."""
        return "filtered" if split == "train" and self.max_source_words is not None else "tok"

    def filter_train(self) -> None:
        """--max-train-source-words N: keep the train pairs whose tokenised source has at most N words (before
        BPE; valid and test untouched). N is in the stamp, so a changed N redoes this step and every later one."""
        n = self.max_source_words
        if n is None:
            return
        ins, outs = self.pair_paths("tok", "train"), self.pair_paths("filtered", "train")
        self.stamps.run("filter-train", ins, outs, {"max_source_words": n, "unit": "tokenised source words"},
                        lambda: filter_source_words(*ins, *outs, n))

    def bpe(self) -> None:
        a, train = self.args, self.pair_paths(self.tok_stage("train"), "train")
        if a.bpe == "subword-nmt":
            model, kind, params = [self.text / "bpe.codes"], "bpe", {"merges": a.bpe_merges, "min_frequency": 2}
            self.stamps.run("learn-bpe", train, model, params, lambda: learn_subword_nmt(train, model[0], a.bpe_merges))
        else:
            model, kind, params = [self.text / "spm.model", self.text / "spm.vocab"], "spm", {"vocab": a.spm_vocab_size}
            self.stamps.run("learn-spm", train, model, params,
                            lambda: learn_sentencepiece(train, self.text / "spm", a.spm_vocab_size, a.workers))
        for split in SPLITS:
            for lang in (self.src, self.tgt):
                src, dst = self.path(self.tok_stage(split), split, lang), self.path("bpe", split, lang)
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
        if self.max_source_words is not None:
            longest = max((line.count(" ") + 1 for line in read_lines(self.path("final", "train", self.src))
                           if line), default=0)
            log(f"train sources: at most {self.max_source_words} tokenised words (--max-train-source-words), "
                f"at most {longest} subword tokens")
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
        self.filter_train()
        self.bpe()
        self.clean()
        if not a.no_binarize:
            self.binarize()
        self.summary()
        return 0


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

"""The corpora: the corpora table (TOML), archives and their members, SGM test sets, line-aligned pairs
collected into one raw file per split and side."""
import contextlib
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..file_io import TomlError, atomic, load_toml
from .files import CorruptFile, PrepareError, count_lines, open_text, progress, read_lines

SEG = re.compile(r"<seg[^>]*>(.*)</seg>", re.IGNORECASE)


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
    try:
        return load_toml(path, "corpora table")
    except TomlError as e:
        raise PrepareError(f"{e}{' (--corpora).' if 'not found' in str(e) else ''}") from None

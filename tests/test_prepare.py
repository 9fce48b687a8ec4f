"""examples/wmt14/prepare.sh end to end on tiny WMT-like archives served from 127.0.0.1.

The fixture builds every archive of pe_tools/recipes/wmt14/corpora.toml (same file names, same member
paths, SGM test sets, a plain tar with .gz members for giga-fren) with a few dozen synthetic
sentences, and serves them over HTTP with Range support, so resumed downloads are real.
Tests marked slow run fairseq-preprocess (about 5 s each); the rest take a second or less.
"""
import gzip
import hashlib
import io
import json
import random
import re
import tarfile
import tomllib
from pathlib import Path

import pytest

from pe_prepare import Server, prepare
from pe_testing import lines

from pe_tools import file_io
from pe_tools.data import corpora as data_corpora, files as data_files, pipeline as data_pipeline, text as data_text

REPO = Path(__file__).resolve().parent.parent
TABLE = REPO / "pe_tools" / "recipes" / "wmt14" / "corpora.toml"


def tokenize(line, lang, test=False):
    """The reference pipeline, straight from sacremoses (docs/evaluation.md §Moses in Python)."""
    import regex
    from sacremoses import MosesPunctNormalizer, MosesTokenizer

    if test:
        line = line.replace("\u2019", "'")
    else:
        line = regex.sub(r"\p{C}", " ", MosesPunctNormalizer(lang, perl_parity=True).normalize(line))
    return MosesTokenizer(lang).tokenize(line, aggressive_dash_splits=True, escape=True, return_str=True)


# --------------------------------------------------------------------------------- fixture data
WORDS = "the house is small red car dog cat sees big old new tree river green fast slow walks eats".split()
SPECIAL_PAIRS = [  # (en, other), placed in the middle of the en-de commoncrawl corpus
    ("The Auto\u00admobile is red .", "Thede Auto\u00admobil Isde Redde ."),  # soft hyphen -> space
    ("a well-known dog sees the cat .", "Ade well-known Dogde Seesde Thede Catde ."),  # -> well @-@ known
    ("carriage\x85return stays inside the line .", "carriage\rreturn stays inside the line ."),  # no line ends
    ("pipe | sign in the river .", "pipe | sign in the river ."),  # escaped to &#124;
    ("she says hello to the dog .", "she says \u201ehello\u201c to the dog ."),  # normalised quotes
    ("RATIOMARK " + " ".join(WORDS * 2), "ja ."),  # length ratio > 1.5: dropped
    (" ".join(["LONGMARK"] + WORDS * 14), " ".join(["LONGMARK"] + WORDS * 14)),  # 267 tokens: dropped
    ("", ""),  # empty: dropped
]


def sentences(seed, n, lang):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 9))]
        out.append(" ".join(w if lang == "en" else w.capitalize() + lang for w in words) + " .")
    return out


def sgm(segs, setid):
    docs, lines = [segs[:3], segs[3:]], [f'<srcset setid="{setid}" srclang="any">']
    n = 0
    for d, doc in enumerate(docs):
        lines.append(f'<doc sysid="ref" docid="doc{d}" genre="news" origlang="en">')
        for seg in doc:
            n += 1
            lines.append(f'<seg id="{n}">{seg}</seg>')
        lines.append("</doc>")
    return "\n".join(lines + ["</srcset>", ""])


TEST_SEGS = {  # newstest2014 stand-ins: a ’ in the source (fairseq maps it to ') and „…“ in the reference
    "en": ["It\u2019s a small house .", "The red car .", "A well-known tree .", "Old dog , new tricks .",
           "Two  spaces here .", "The end ."],
    "de": ["Es ist ein kleines Haus .", "\u201eDas rote Auto\u201c .", "Ein bekannter Baum .",
           "Alter Hund , neue Tricks .", "Zwei Leerzeichen .", "Das Ende ."],
    "fr": ["C\u2019est une petite maison .", "La voiture rouge .", "Un arbre connu .", "Vieux chien .",
           "Deux espaces .", "La fin ."],
}


def member_text(pair, split, side, entry, index):
    """Synthetic content for one corpus side; `side` is the language code."""
    if entry["src"].endswith(".sgm"):
        if split == "test":
            return sgm(TEST_SEGS[side], "newstest2014")
        return sgm(sentences(100, 5, side), "newstest2013")
    lines = sentences(7 * index + (1 if pair == "en-de" else 50), 30 + 10 * index, side)
    if pair == "en-de" and "commoncrawl" in entry["src"]:
        specials = [en if side == "en" else other for en, other in SPECIAL_PAIRS]
        lines = lines[:10] + specials + lines[10:]
    return "".join(line + "\n" for line in lines)


def build_archives(table, root):
    """Write every archive of `table` under root/<url path>; return {archive name: bytes}."""
    members = {}
    for pair, spec in table["pair"].items():
        src, tgt = pair.split("-")
        for split in ("train", "valid", "test"):
            entries = spec[split] if isinstance(spec[split], list) else [spec[split]]
            for i, e in enumerate(entries):
                for key, lang in (("src", src), ("tgt", tgt)):
                    data = member_text(pair, split, lang, e, i).encode()
                    if e[key].endswith(".gz"):
                        data = gzip.compress(data, mtime=0)
                    members.setdefault(e["archive"], {})[e[key]] = data
    blobs = {}
    for name, files in members.items():
        url = table["archive"][name]["url"]
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w" if url.endswith(".tar") else "w:gz") as tar:
            for path, data in sorted(files.items()) + [("README", b"fixture\n")]:
                info = tarfile.TarInfo(path)
                info.size, info.mtime = len(data), 0
                tar.addfile(info, io.BytesIO(data))
        blobs[name] = buf.getvalue()
        dest = root / url.split("://", 1)[1].split("/", 1)[1]
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(blobs[name])
    return blobs


def toml_value(v):
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, list):
        return "[\n  " + ",\n  ".join(toml_value(x) for x in v) + ",\n]"
    return json.dumps(v)


def write_table(table, path):
    lines = []
    for section in ("archive", "pair"):
        for name, entry in table[section].items():
            lines.append(f"[{section}.{name}]")
            lines += [f"{k} = {toml_value(v)}" for k, v in entry.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def fixture_table(blobs, **overrides):
    """The real table with the fixture's sizes and sha256 (and the fixture's SGM sentence counts)."""
    table = tomllib.loads(TABLE.read_text())
    for name, entry in table["archive"].items():
        entry.pop("md5", None)
        entry.update(size=len(blobs[name]), sha256=hashlib.sha256(blobs[name]).hexdigest())
        entry.update(overrides.get(name, {}))
        for key in [k for k, v in entry.items() if v is None]:
            del entry[key]
    for spec in table["pair"].values():
        spec["valid"]["lines"], spec["test"]["lines"] = 5, len(TEST_SEGS["en"])
    return table


def net_args(server, table_path, downloads):
    return ["--corpora", table_path, "--base-url", server.url, "--download-dir", downloads, "--retry-wait", "0"]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("site")
    blobs = build_archives(tomllib.loads(TABLE.read_text()), root)
    server = Server(root)
    yield server, blobs, root
    server.close()


@pytest.fixture(scope="module")
def ende(site, tmp_path_factory):
    """One full en-de run: download (europarl cut off halfway), extract, ..., binarise."""
    server, blobs, _ = site
    tmp = tmp_path_factory.mktemp("ende")
    table = write_table(fixture_table(blobs), tmp / "corpora.toml")
    server.cut_once.add("/wmt13/training-parallel-europarl-v7.tgz")
    args = ["en-de", *net_args(server, table, tmp / "archives"), "--out", tmp / "out", "--bpe-merges", 200,
            "--workers", 1]
    first = prepare(*args)
    assert first.returncode == 0, first.output
    return {"out": tmp / "out", "archives": tmp / "archives", "args": args, "result": first, "blobs": blobs,
            "server": server}


def unbpe(line):
    return line.replace("@@ ", "")


# ------------------------------------------------------------------------------------ en-de e2e
@pytest.mark.slow
def test_download_cut_off_halfway_is_resumed(ende):
    requests = ende["server"].requests("training-parallel-europarl-v7.tgz")
    size = len(ende["blobs"]["europarl-v7"])
    assert requests[0][1] is None and requests[0][3] == size // 2  # the cut one
    assert requests[1] == ("/wmt13/training-parallel-europarl-v7.tgz", f"bytes={size // 2}-", 206, size - size // 2)
    assert f"download of training-parallel-europarl-v7.tgz stopped at byte {size // 2}" in ende["result"].output
    archive = ende["archives"] / "training-parallel-europarl-v7.tgz"
    assert hashlib.sha256(archive.read_bytes()).hexdigest() == hashlib.sha256(ende["blobs"]["europarl-v7"]).hexdigest()
    assert not list(ende["archives"].glob("*.part")) and not list(ende["archives"].glob("*.corrupt"))


@pytest.mark.slow
def test_train_is_normalised_and_tokenised_like_moses(ende):
    tok = lines(ende["out"] / "work" / "tok.train.en")
    tok_de = lines(ende["out"] / "work" / "tok.train.de")
    assert len(tok) == len(tok_de) == 30 + 40 + 50 + len(SPECIAL_PAIRS)  # europarl, commoncrawl, nc-v9
    assert "The Auto mobile is red ." in tok  # soft hyphen replaced by a space, not deleted
    assert "a well @-@ known dog sees the cat ." in tok
    assert "carriage return stays inside the line ." in tok  # U+0085 (\p{C}) is a space, not a line end
    assert "carriagereturn stays inside the line ." in tok_de  # normalize-punctuation.perl: s/\r//g
    assert "pipe &#124; sign in the river ." in tok
    assert "she says &quot; hello &quot; to the dog ." in tok_de  # normalize-punctuation: „“ -> "
    raw = lines(ende["out"] / "work" / "raw.train.en")
    assert [tokenize(s, "en") for s in raw] == tok


@pytest.mark.slow
def test_cleaning_after_bpe_drops_ratio_length_and_empty(ende):
    bpe, final = lines(ende["out"] / "work" / "bpe.train.en"), lines(ende["out"] / "text" / "train.en")
    assert any(unbpe(line).startswith("RATIOMARK") for line in bpe)
    long_line = next(line for line in bpe if unbpe(line).startswith("LONGMARK"))
    assert len(long_line.split()) > 250 and "" in bpe
    kept = [unbpe(line) for line in final]
    assert not any("RATIOMARK" in line or "LONGMARK" in line or not line.strip() for line in kept)
    assert len(kept) == len(bpe) - 3 == len(lines(ende["out"] / "text" / "train.de"))
    assert "clean train: 128 pairs in, 125 kept (dropped: 1 ratio, 1 length, 1 empty)" in ende["result"].output


@pytest.mark.slow
def test_test_set_is_every_sgml_segment_in_order(ende):
    for lang in ("en", "de"):
        got = [unbpe(line) for line in lines(ende["out"] / "text" / f"test.{lang}")]
        assert got == [tokenize(seg, lang, test=True) for seg in TEST_SEGS[lang]]
    assert unbpe(lines(ende["out"] / "text" / "test.en")[0]) == "It &apos;s a small house ."
    assert "\u201e" in lines(ende["out"] / "text" / "test.de")[1]  # the test set is not punctuation-normalised


@pytest.mark.slow
def test_valid_is_newstest2013(ende):
    got = [unbpe(line) for line in lines(ende["out"] / "text" / "valid.de")]
    assert got == [tokenize(s, "de") for s in sentences(100, 5, "de")]


@pytest.mark.slow
def test_binarised_data_loads_with_fairseq(ende):
    from fairseq.data import Dictionary, data_utils

    bin_dir = ende["out"]
    assert (bin_dir / "dict.en.txt").read_text() == (bin_dir / "dict.de.txt").read_text()  # joined
    dictionary = Dictionary.load(str(bin_dir / "dict.en.txt"))
    for split in ("train", "valid", "test"):
        for lang in ("en", "de"):
            dataset = data_utils.load_indexed_dataset(str(bin_dir / f"{split}.en-de.{lang}"), dictionary)
            text = lines(ende["out"] / "text" / f"{split}.{lang}")
            assert len(dataset) == len(text) > 0
            assert [len(dataset[i]) for i in range(len(text))] == [len(t.split()) + 1 for t in text]  # + </s>
            if split == "train":  # every symbol of train is in the dictionary
                assert [dictionary.string(dataset[i]) for i in range(len(text))] == text


@pytest.mark.slow
def test_rerun_skips_every_step(ende):
    """A second run downloads nothing and rewrites no file: every output keeps its modification time (the lock file
    OUT/.lock, which names its last holder, aside)."""
    def outputs():
        return {p: p.stat().st_mtime_ns for p in ende["out"].rglob("*") if p.is_file() and p.name != ".lock"}

    before = outputs()
    n_requests = len(ende["server"].log)
    again = prepare(*ende["args"])
    assert again.returncode == 0, again.output
    assert len(ende["server"].log) == n_requests  # nothing downloaded again
    assert "binarize: done before, skipped" in again.stdout and "tokenize-train.en: done before" in again.stdout
    assert outputs() == before and len(before) > 10


# ------------------------------------------------------------------------------ bad downloads
def test_interrupted_download_resumes_on_the_next_run(site, tmp_path):
    server, blobs, _ = site
    table = write_table(fixture_table(blobs), tmp_path / "corpora.toml")
    server.cut_once.add("/wmt14/training-parallel-nc-v9.tgz")
    args = ["en-de", *net_args(server, table, tmp_path / "a"), "--out", tmp_path / "o", "--download-only"]
    first = prepare(*args, "--retries", 0)
    assert first.returncode == 1
    part = tmp_path / "a" / "training-parallel-nc-v9.tgz.part"
    assert f"The partial file {part} ({len(blobs['nc-v9']) // 2} bytes) is kept: re-run to resume" in first.stderr
    assert part.stat().st_size == len(blobs["nc-v9"]) // 2
    second = prepare(*args)
    assert second.returncode == 0, second.output
    assert server.requests("nc-v9.tgz")[-1][1] == f"bytes={len(blobs['nc-v9']) // 2}-"
    assert (tmp_path / "a" / "training-parallel-nc-v9.tgz").read_bytes() == blobs["nc-v9"]


@pytest.mark.parametrize("ignores_range", [False, True])
def test_a_resumed_download_is_the_whole_file_once_whether_the_server_honours_range_or_not(ignores_range, tmp_path):
    """A partial NAME.part (the first third of the file) resumed from a server on 127.0.0.1: one that honours Range
    sends the rest (206) and the part is completed; one that ignores it sends the whole file (200), which replaces
    the part instead of being appended to it. Either way the part holds the file once, byte for byte."""
    from pe_tools.data.download import Archive, download

    blob = bytes(range(256)) * 40
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "corpus.tgz").write_bytes(blob)
    server = Server(tmp_path / "site")
    if ignores_range:
        server.ignore_range.add("/corpus.tgz")
    part = tmp_path / "downloads" / "corpus.tgz.part"
    part.parent.mkdir()
    part.write_bytes(blob[:len(blob) // 3])
    try:
        total = download(f"{server.url}/corpus.tgz", part, Archive("corpus", "unused", "corpus.tgz", len(blob)),
                         retries=0)
    finally:
        server.close()
    assert server.log == [("/corpus.tgz", None if ignores_range else f"bytes={len(blob) // 3}-",
                           200 if ignores_range else 206, len(blob) - (0 if ignores_range else len(blob) // 3))]
    assert total == len(blob) and part.read_bytes() == blob


def test_checksum_mismatch_is_rejected_and_not_trusted(site, tmp_path):
    server, blobs, _ = site
    table = write_table(fixture_table(blobs, **{"nc-v9": {"sha256": "0" * 64}}), tmp_path / "corpora.toml")
    args = ["en-de", *net_args(server, table, tmp_path / "a"), "--out", tmp_path / "o", "--download-only"]
    first = prepare(*args)
    archive = tmp_path / "a" / "training-parallel-nc-v9.tgz"
    assert first.returncode == 1
    assert f"error: {archive} is corrupt: its sha256 is {hashlib.sha256(blobs['nc-v9']).hexdigest()}" in first.stderr
    assert "Fix: re-run to download it again" in first.stderr and "[archive.nc-v9]" in first.stderr
    assert not archive.exists() and archive.with_name(archive.name + ".corrupt").exists()
    n = len(server.requests("nc-v9.tgz"))
    second = prepare(*args)
    assert second.returncode == 1 and "is corrupt" in second.stderr
    assert len(server.requests("nc-v9.tgz")) == n + 1 and server.requests("nc-v9.tgz")[-1][1] is None


def test_file_missing_on_the_server_is_named(site, tmp_path):
    server, blobs, _ = site
    table = fixture_table(blobs)
    table["archive"]["test-full"]["url"] = "https://www.statmt.org/wmt14/gone.tgz"
    table = write_table(table, tmp_path / "corpora.toml")
    result = prepare("en-de", *net_args(server, table, tmp_path / "a"), "--out", tmp_path / "o", "--download-only")
    assert result.returncode == 1
    assert f"error: {server.url}/wmt14/gone.tgz answered HTTP 404" in result.stderr and "--raw-dir" in result.stderr


def test_truncated_archive_without_checksum_is_rejected(site, tmp_path):
    server, blobs, root = site
    whole = root / "wmt14" / "test-full.tgz"
    cut = root / "cut" / "wmt14" / "test-full.tgz"  # the server's own copy is truncated
    cut.parent.mkdir(parents=True)
    cut.write_bytes(blobs["test-full"][: len(blobs["test-full"]) * 2 // 3])
    table = fixture_table(blobs, **{"test-full": {"size": None, "sha256": None}})
    table["archive"]["test-full"]["url"] = "https://www.statmt.org/cut/wmt14/test-full.tgz"
    table = write_table(table, tmp_path / "corpora.toml")
    args = ["en-de", *net_args(server, table, tmp_path / "a"), "--out", tmp_path / "o", "--download-only"]
    first = prepare(*args)
    archive = tmp_path / "a" / "test-full.tgz"
    assert first.returncode == 1
    assert f"error: {archive} is corrupt: it is truncated or not a valid archive" in first.stderr
    assert not archive.exists() and archive.with_name("test-full.tgz.corrupt").exists()
    cut.write_bytes(whole.read_bytes())  # the mirror is fixed: the re-run downloads a new copy
    second = prepare(*args)
    assert second.returncode == 0, second.output
    assert archive.read_bytes() == blobs["test-full"] and server.requests("cut/wmt14/test-full.tgz")[-1][1] is None


def test_raw_dir_archives_are_checked_and_never_moved(site, tmp_path):
    server, blobs, root = site
    raw = tmp_path / "raw"
    raw.mkdir()
    table = write_table(fixture_table(blobs, **{"test-full": {"size": None, "sha256": None}}), tmp_path / "c.toml")
    args = ["en-de", "--corpora", table, "--raw-dir", raw, "--out", tmp_path / "o"]
    missing = prepare(*args)
    assert missing.returncode == 1 and f"--raw-dir {raw} lacks 5 archive(s)" in missing.stderr
    assert "test-full.tgz: https://www.statmt.org/wmt14/test-full.tgz" in missing.stderr
    for path in root.glob("wmt1*/*"):
        (raw / path.name).write_bytes(path.read_bytes())
    truncated = blobs["test-full"][:-200]
    (raw / "test-full.tgz").write_bytes(truncated)
    bad = prepare(*args)
    assert bad.returncode == 1
    assert f"{raw / 'test-full.tgz'} (from --raw-dir) is corrupt: it is truncated" in bad.stderr
    assert "Fix: replace it with a complete copy of https://www.statmt.org/wmt14/test-full.tgz" in bad.stderr
    assert (raw / "test-full.tgz").read_bytes() == truncated and not list(raw.glob("*.corrupt"))


def test_missing_archive_member_is_named(site, tmp_path):
    server, blobs, root = site
    table = fixture_table(blobs)
    table["pair"]["en-de"]["test"]["src"] = "test-full/newstest2014-deen-src.xx.sgm"
    raw = tmp_path / "raw"
    raw.mkdir()
    for path in root.glob("wmt1[34]/*"):
        (raw / path.name).write_bytes(path.read_bytes())
    result = prepare("en-de", "--corpora", write_table(table, tmp_path / "c.toml"), "--raw-dir", raw,
                     "--out", tmp_path / "o")
    assert result.returncode == 1
    assert f"{raw / 'test-full.tgz'} has no member test-full/newstest2014-deen-src.xx.sgm (it has: " in result.stderr
    assert "test-full/newstest2014-deen-src.en.sgm" in result.stderr and "correct the member path" in result.stderr


@pytest.mark.slow
def test_en_fr_from_raw_dir(site, tmp_path):
    """The En-Fr table (UN, a plain tar of .gz files for Giga-fren) through the whole pipeline, offline."""
    server, blobs, root = site
    table = write_table(fixture_table(blobs), tmp_path / "c.toml")
    raw = tmp_path / "raw"
    raw.mkdir()
    for path in root.glob("wmt1*/*"):
        (raw / path.name).write_bytes(path.read_bytes())
    n = len(server.log)
    result = prepare("en-fr", "--corpora", table, "--raw-dir", raw, "--out", tmp_path / "o", "--bpe-merges", 150,
                     "--workers", 1, "--valid-split", "--valid-every", 20)
    assert result.returncode == 0, result.output
    assert len(server.log) == n  # nothing was downloaded
    raw_en = lines(tmp_path / "o" / "work" / "raw.train.en") + lines(tmp_path / "o" / "work" / "raw.valid.en")
    corpora = [sentences(7 * i + 50, 30 + 10 * i, "en") for i in range(5)]
    everything = [s for c in corpora for s in c]
    assert sorted(raw_en) == sorted(everything)  # the giga-fren .gz members were gunzipped
    assert lines(tmp_path / "o" / "work" / "raw.valid.en") == everything[19::20]  # fairseq's NR % N == 0
    assert len(lines(tmp_path / "o" / "text" / "test.fr")) == len(TEST_SEGS["fr"])
    assert (tmp_path / "o" / "train.en-fr.fr.idx").exists()


# ---------------------------------------------------------------------------- the CLI's errors
def write_corpus(prefix, src_lines, tgt_lines, src="en", tgt="de"):
    Path(f"{prefix}.{src}").write_text("".join(s + "\n" for s in src_lines))
    Path(f"{prefix}.{tgt}").write_text("".join(s + "\n" for s in tgt_lines))


def test_misaligned_files_are_rejected_with_their_line_counts(tmp_path):
    write_corpus(tmp_path / "train", ["a b ."] * 5, ["x y ."] * 4)
    write_corpus(tmp_path / "test", ["a ."] * 2, ["x ."] * 2)
    result = prepare("raw", "--src", "en", "--tgt", "de", "--train", tmp_path / "train", "--valid-split",
                     "--test", tmp_path / "test", "--out", tmp_path / "o")
    assert result.returncode == 1
    assert (f"misaligned parallel corpus: {tmp_path / 'train.en'} has 5 lines but {tmp_path / 'train.de'} has 4"
            in result.stderr)
    assert not (tmp_path / "o" / "work" / "raw.train.en").exists()


def test_unknown_pair_and_missing_files_name_the_fix(tmp_path):
    unknown = prepare("en-ru")
    assert unknown.returncode == 1 and "unknown pair 'en-ru'" in unknown.stderr
    assert "defines en-de, en-fr" in unknown.stderr and "`raw`" in unknown.stderr
    missing = prepare("raw", "--src", "en", "--tgt", "de", "--train", tmp_path / "nope", "--valid", tmp_path / "v",
                      "--test", tmp_path / "t", "--out", tmp_path / "o")
    assert missing.returncode == 1
    assert f"--train {tmp_path / 'nope'}: {tmp_path / 'nope.en'} and {tmp_path / 'nope.de'} not found" in missing.stderr
    flags = prepare("raw", "--src", "en", "--tgt", "de", "--out", tmp_path / "o")
    assert flags.returncode == 1 and "`raw` needs --train, --test, --valid" in flags.stderr


def prepare_raw_split(tmp_path, seed, n_train, n_test, *flags):
    """Write a synthetic train/test corpus and run ``prepare.sh raw`` on it, valid split off train and no
    binarisation. (English lines, output folder, result)"""
    en, de = sentences(seed, n_train + n_test, "en"), sentences(seed, n_train + n_test, "de")
    write_corpus(tmp_path / "train", en[:n_train], de[:n_train])
    write_corpus(tmp_path / "test", en[n_train:], de[n_train:])
    out = tmp_path / "o"
    result = prepare("raw", "--src", "en", "--tgt", "de", "--train", tmp_path / "train", "--valid-split",
                     "--test", tmp_path / "test", "--out", out, "--no-binarize", *flags)
    assert result.returncode == 0, result.output
    return en, out, result


def test_raw_corpus_end_to_end_with_few_merges(tmp_path):
    """The demo's path: a tiny synthetic corpus, 30 merges, valid split off train."""
    en, out, result = prepare_raw_split(tmp_path, 3, 200, 20, "--valid-every", 10, "--bpe-merges", 30)
    assert len(lines(out / "text" / "bpe.codes")) == 31  # '#version' + 30 merges
    assert lines(out / "work" / "raw.valid.en") == en[9:200:10]
    assert len(lines(out / "work" / "raw.train.en")) == 180
    assert 0 < len(lines(out / "text" / "valid.en")) <= 20 and 0 < len(lines(out / "text" / "train.en")) <= 180
    assert "@@" in (out / "text" / "train.en").read_text()
    assert not list(out.glob("dict.*"))
    stale = out / "work" / "tok.train.en.tmp12345"  # left by a killed run
    stale.write_text("half a file")
    again = prepare(*result.args[2:])
    assert again.returncode == 0 and "learn-bpe: done before, skipped" in again.stdout
    assert not stale.exists()


# ---------------------------------------------------------------------------------- unit level
@pytest.mark.parametrize("src, tgt, kept", [
    ("a b c", "x y", True),  # ratio exactly 1.5
    ("a b c d", "x y", False),  # ratio 2
    ("x y", "a b c d", False),  # either direction
    (" ".join("w" * 250), "w " * 200, True),  # 250 tokens is allowed ...
    (" ".join("w" * 251), " ".join("w" * 251), False),  # ... 251 is not
    (" ".join("w" * 251), " ".join("w" * 200), False),  # ... in the source alone (ratio 1.255 passes)
    (" ".join("w" * 200), " ".join("w" * 251), False),  # ... or in the target alone
    ("", "x", False),
    ("a  \t b", "x\u00a0y", True),  # whitespace runs collapse (perl \s: Unicode White_Space)
    ("a " + "b" * 1001, "x y", False),  # a 1001-character word
])
def test_clean_corpus_rules(tmp_path, src, tgt, kept):
    write_corpus(tmp_path / "c", ["ok fine", src], ["gut fein", tgt])
    data_text.clean_corpus(tmp_path / "c.en", tmp_path / "c.de", tmp_path / "o.en", tmp_path / "o.de", 1, 250, 1.5)
    out_en = lines(tmp_path / "o.en")
    assert len(out_en) == 1 + kept and len(lines(tmp_path / "o.de")) == len(out_en)
    if kept:
        assert out_en[1] == re.sub(r"\s+", " ", src).strip()


def test_clean_corpus_drops_a_long_source_with_a_short_target_by_its_length(tmp_path):
    """With the ratio check off (0), a 300-word source beside a 2-word target is dropped for its length alone, and
    a source of the maximum length (250 words) beside a 1-word target is kept."""
    write_corpus(tmp_path / "c", ["ok fine", " ".join("w" * 300), " ".join("v" * 250)], ["gut fein", "x y", "u"])
    stats = data_text.clean_corpus(tmp_path / "c.en", tmp_path / "c.de", tmp_path / "o.en", tmp_path / "o.de",
                                   1, 250, 0)
    assert lines(tmp_path / "o.en") == ["ok fine", " ".join("v" * 250)] and lines(tmp_path / "o.de") == ["gut fein", "u"]
    assert (stats["kept"], stats["length"], stats["ratio"]) == (2, 1, 0)


def test_clean_corpus_removes_pipes_unless_factored(tmp_path):
    write_corpus(tmp_path / "c", ["plain text", "a|b c"], ["x y", "u|v w"])
    data_text.clean_corpus(tmp_path / "c.en", tmp_path / "c.de", tmp_path / "o.en", tmp_path / "o.de", 1, 250, 1.5)
    assert lines(tmp_path / "o.en") == ["plain text", "ab c"]


def test_non_printing_characters_become_spaces():
    line_fn = data_text.make_line_fn("tok-train", "de")
    assert line_fn("Auto\u00admobil und\u200bZug\tTab") == "Auto mobil und Zug Tab"  # sacremoses would delete
    assert line_fn("ein Gute-Nacht-Kuss") == "ein Gute @-@ Nacht @-@ Kuss"
    assert data_text.make_line_fn("tok-test", "en")("It\u2019s") == "It &apos;s"


def test_parallel_workers_keep_line_order(tmp_path, monkeypatch):
    monkeypatch.setattr(data_text, "CHUNK_LINES", 7)
    src = tmp_path / "in.en"
    src.write_text("".join(f"line {i} is a well-known line .\n" for i in range(100)))
    data_text.map_lines(src, tmp_path / "one", "tok-train", "en", 1, "t")
    data_text.map_lines(src, tmp_path / "two", "tok-train", "en", 2, "t")
    assert (tmp_path / "one").read_text() == (tmp_path / "two").read_text()
    assert lines(tmp_path / "two")[99] == "line 99 is a well @-@ known line ."


def test_an_interrupted_step_leaves_nothing_trusted(tmp_path):
    stamps, src, dst = data_pipeline.Stamps(tmp_path), tmp_path / "in", tmp_path / "out"
    src.write_text("a\n")

    def broken():
        with file_io.atomic(dst) as tmp:
            tmp.write_text("half")
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        stamps.run("step", [src], [dst], {}, broken)
    assert not dst.exists() and not list(tmp_path.glob("out.tmp*")) and not (tmp_path / ".stamps").exists()
    calls = []

    def good():
        calls.append(1)
        with file_io.atomic(dst) as tmp:
            tmp.write_text("whole")

    assert stamps.run("step", [src], [dst], {"n": 1}, good) and calls == [1]
    assert not stamps.run("step", [src], [dst], {"n": 1}, good) and calls == [1]  # stamp matches: skipped
    assert stamps.run("step", [src], [dst], {"n": 2}, good) and calls == [1, 1]  # new settings: redone
    src.write_text("bb\n")  # a new size: mtimes are coarse (one kernel tick), sizes are not
    assert stamps.run("step", [src], [dst], {"n": 2}, good) and len(calls) == 3  # new input: redone
    dst.write_text("edited")
    assert stamps.run("step", [src], [dst], {"n": 2}, good) and len(calls) == 4  # output changed: redone


def test_sgm_sets_are_counted_by_segment_and_checked_against_the_table(tmp_path):
    (tmp_path / "src.en.sgm").write_text(sgm(TEST_SEGS["en"], "t"))
    (tmp_path / "ref.de.sgm").write_text(sgm(TEST_SEGS["de"], "t"))
    corpus = data_corpora.Corpus(tmp_path / "src.en.sgm", tmp_path / "ref.de.sgm", lines=6)
    assert data_corpora.check_aligned(corpus) == 6 and data_corpora.sgm_segments(corpus.src) == TEST_SEGS["en"]
    corpus.lines = 3003
    with pytest.raises(data_files.PrepareError, match="have 6 sentences, the corpora table expects 3003"):
        data_corpora.check_aligned(corpus)


def test_two_runs_never_share_an_output_folder(tmp_path):
    with data_pipeline.exclusive(tmp_path, "--out"):
        with pytest.raises(data_files.PrepareError, match=f"another prepare run is using {tmp_path}"):
            with data_pipeline.exclusive(tmp_path, "--out"):
                pass
    with data_pipeline.exclusive(tmp_path, "--out"):  # released
        pass


def test_sentencepiece_option(tmp_path):
    _, out, _ = prepare_raw_split(tmp_path, 5, 260, 40, "--bpe", "sentencepiece", "--spm-vocab-size", 60)
    assert (out / "text" / "spm.model").exists() and "\u2581" in (out / "text" / "train.en").read_text()


# Moses' tokeniser splits an apostrophe by the language's rules: English keeps it with the clitic after it ('s),
# French with the elided word before it (l'), German (no rule of its own) splits it off both sides.
TOKENISED = {
    "en": "L &apos;homme est là , it &apos;s John &apos;s car .",
    "fr": "L&apos; homme est là , it&apos; s John&apos; s car .",
    "de": "L &apos; homme est là , it &apos; s John &apos; s car .",
}


@pytest.mark.parametrize("kind", ["tok-train", "tok-test"])
@pytest.mark.parametrize("lang", sorted(TOKENISED))
def test_each_language_is_tokenised_by_its_own_rules(lang, kind):
    """pe-prepare's tokeniser of a side (training and test sets alike) takes that side's language: the same line
    tokenised as English, French and German gives three different token sequences, each the one Moses' rules of
    the language give."""
    assert data_text.make_line_fn(kind, lang)("L'homme est là, it's John's car.") == TOKENISED[lang]


# Moses' punctuation normaliser (training sets only) moves a comma after a closing quote inside it in English
# and leaves it outside in German and French
NORMALISED = {
    "en": "Er sagte &quot; hallo , &quot; dann ging er .",
    "fr": "Er sagte &quot; hallo &quot; , dann ging er .",
    "de": "Er sagte &quot; hallo &quot; , dann ging er .",
}


@pytest.mark.parametrize("lang", sorted(NORMALISED))
def test_each_language_is_normalised_by_its_own_rules(lang):
    """pe-prepare's training-set normaliser takes the side's language, as its tokeniser does."""
    assert data_text.make_line_fn("tok-train", lang)('Er sagte "hallo", dann ging er.') == NORMALISED[lang]


def _damaged(name: str, how: str) -> bytes:
    """A gzipped file (``name`` .gz: one text; .tar.gz: a tar of one member) of incompressible bytes, damaged ``how``:
    cut in half (gzip's EOFError), an unknown compression method in its header (BadGzipFile), a garbled deflate
    stream after the header (zlib.error), or a gzip of bytes that are not a tar (tarfile's ReadError)."""
    payload = random.Random(0).randbytes(100_000)
    if name.endswith(".tar.gz") and how != "not a tar":
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            info = tarfile.TarInfo("a.txt")
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
        data = buf.getvalue()
    else:
        data = gzip.compress(payload)
    return {"cut": data[: len(data) // 2], "method": data[:2] + b"\x09" + data[3:],
            "deflate": data[:10] + b"\xff" * 16 + data[26:], "not a tar": data}[how]


@pytest.mark.parametrize("name, how, text_digest", [
    ("text.gz", "cut", True), ("text.gz", "method", True), ("text.gz", "deflate", True),
    ("text.gz", "cut", False), ("text.gz", "method", False), ("text.gz", "deflate", False),
    ("data.tar.gz", "not a tar", False),
])
def test_each_kind_of_damaged_archive_is_reported_corrupt(tmp_path, name, how, text_digest):
    """A download damaged in each way gzip, zlib and tarfile report it (cut short, a bad header, a garbled stream,
    not a tar) is CorruptFile, which quarantines it and names the fix, whether it is checked by the sha256 of its text
    or read through to its end; never the library's own exception, a traceback of pe-prepare."""
    from pe_tools.data.download import Archive, CorruptFile, verify

    path = tmp_path / name
    path.write_bytes(_damaged(name, how))
    archive = Archive(name="x", url="https://example.org/" + name, file=name,
                      text_sha256="0" * 64 if text_digest else None)
    with pytest.raises(CorruptFile, match="it is truncated or not a valid"):
        verify(path, archive)


def failing_once(tmp_path, status: int):
    """A local server of corpus.tgz (2 KiB) whose first answer is HTTP ``status``: the file's bytes, the server
    (close it) and the path of the download's part file."""
    blob = bytes(range(256)) * 8
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "corpus.tgz").write_bytes(blob)
    server = Server(tmp_path / "site")
    server.fail_once["/corpus.tgz"] = status
    return blob, server, tmp_path / "corpus.tgz.part"


@pytest.mark.parametrize("status, retried", [(500, True), (503, True), (408, True), (429, True), (404, False),
                                             (499, False)])
def test_a_server_error_is_retried_and_a_client_error_is_refused_at_once(tmp_path, status, retried):
    """HTTP 5xx, 408 and 429 are passing troubles: the download tries again and gets the file; any other 4xx (499,
    the last below 500, and 404) is refused at once naming the fix, with no second request."""
    from pe_tools.data.download import Archive, PrepareError, download

    blob, server, part = failing_once(tmp_path, status)
    try:
        if retried:
            download(f"{server.url}/corpus.tgz", part, Archive("corpus", "unused", "corpus.tgz", len(blob)),
                     retries=1, retry_wait=0)
        else:
            with pytest.raises(PrepareError, match=f"answered HTTP {status} .*Fix: check"):
                download(f"{server.url}/corpus.tgz", part, Archive("corpus", "unused", "corpus.tgz", len(blob)),
                         retries=1, retry_wait=0)
    finally:
        server.close()
    assert [entry[2] for entry in server.log] == ([status, 200] if retried else [status])
    assert (part.read_bytes() == blob) if retried else not part.exists()


@pytest.mark.parametrize("status, retried", [(503, True), (404, False)])
def test_an_http_error_on_a_resumed_download_keeps_the_partial_file(tmp_path, status, retried):
    """Only a 416 on a resume says the part file is at or past the server's end. Any other error answered to a
    Range request is the error it says: a 503 is retried from where the part stopped (bytes=N-, 206), a 404 is
    refused at once; neither deletes the partial file nor starts the file over."""
    from pe_tools.data.download import Archive, PrepareError, download

    blob, server, part = failing_once(tmp_path, status)
    third = len(blob) // 3
    part.write_bytes(blob[:third])
    archive = Archive("corpus", "unused", "corpus.tgz", len(blob))
    try:
        if retried:
            download(f"{server.url}/corpus.tgz", part, archive, retries=1, retry_wait=0)
        else:
            with pytest.raises(PrepareError, match=f"answered HTTP {status} "):
                download(f"{server.url}/corpus.tgz", part, archive, retries=1, retry_wait=0)
    finally:
        server.close()
    if retried:
        assert server.log[1:] == [("/corpus.tgz", f"bytes={third}-", 206, len(blob) - third)]
        assert part.read_bytes() == blob
    else:
        assert [entry[2] for entry in server.log] == [status] and part.read_bytes() == blob[:third]


@pytest.mark.parametrize("missing", ["train.en.gz", "train.fr.gz", "val.en.gz", "test.fr.gz"])
def test_raw_dir_missing_any_single_file_archive_is_named(tmp_path, capsys, missing):
    """A corpus of single-file archives (no `archive` key: src and tgt name an archive each, as Multi30k's): every
    side of every split is an archive --raw-dir must hold, the first side of the first split included; the one
    missing is named, and nothing is fetched or prepared."""
    from pe_tools.data.cli import main

    names = {f"{split}-{lang}": f"{split}.{lang}.gz" for split in ("train", "val", "test") for lang in ("en", "fr")}
    table = tmp_path / "corpora.toml"
    table.write_text("".join(f'[archive.{n}]\nurl = "https://example.org/raw/{f}"\n\n' for n, f in names.items())
                     + "[pair.en-fr]\n" + "".join(f'{split} = {{ src = "{s}-en", tgt = "{s}-fr" }}\n' for split, s in
                                                  (("train", "train"), ("valid", "val"), ("test", "test"))))
    raw = tmp_path / "raw"
    raw.mkdir()
    for f in names.values():
        if f != missing:
            (raw / f).write_bytes(gzip.compress(b"a caption .\n", mtime=0))
    assert main(["en-fr", "--corpora", str(table), "--raw-dir", str(raw), "--out", str(tmp_path / "out"),
                 "--workers", "1", "--no-binarize"]) == 1
    err = capsys.readouterr().err
    assert f"--raw-dir {raw} lacks 1 archive(s):\n  {missing}: https://example.org/raw/{missing}" in err
    assert not (tmp_path / "out" / "text").exists()


@pytest.mark.parametrize("tgt, target_line, tokenised", [
    ("fr", "L'homme voit l'eau.", "L&apos; homme voit l&apos; eau ."),  # French keeps the elided article whole
    ("de", "Gib's ihm.", "Gib &apos; s ihm ."),  # German splits the apostrophe off on both sides
])
def test_each_side_is_tokenised_by_its_own_languages_rules(tgt, target_line, tokenised, tmp_path):
    """pe-prepare raw en-TGT: the source is tokenised by English rules (it's -> it 's) and the target by its own
    (sacremoses: French l' stays with the article, German splits ' s), in every split; the same line through English
    rules would give L 'homme, Gib 's."""
    from pe_tools.data.cli import main

    for split in ("train", "valid", "test"):
        (tmp_path / f"{split}.en").write_text("It's a man.\n" * 3, encoding="utf-8")
        (tmp_path / f"{split}.{tgt}").write_text(f"{target_line}\n" * 3, encoding="utf-8")
    out = tmp_path / "out"
    assert main(["raw", "--src", "en", "--tgt", tgt, *(x for s in ("train", "valid", "test")
                                                       for x in (f"--{s}", str(tmp_path / s))),
                 "--out", str(out), "--bpe-merges", "5", "--workers", "1", "--no-binarize"]) == 0
    for split in ("train", "valid", "test"):
        assert lines(out / "work" / f"tok.{split}.en") == ["It &apos;s a man ."] * 3
        assert lines(out / "work" / f"tok.{split}.{tgt}") == [tokenised] * 3


def test_a_member_that_is_not_a_file_is_no_member(tmp_path):
    """A tar whose entry of a wanted member's name is a folder (or a link) has no such member: the error names it
    and the fix, nothing is written, and the other members are extracted."""
    import tarfile as tf

    archive = tmp_path / "corpus.tgz"
    with tf.open(archive, "w:gz") as tar:
        for name, data in (("c/train.en", b"a\n"), ("c/train.de", None)):
            info = tf.TarInfo(name)
            if data is None:
                info.type = tf.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    dest = {"c/train.en": tmp_path / "x" / "train.en", "c/train.de": tmp_path / "x" / "train.de"}
    dest["c/train.en"].parent.mkdir()
    with pytest.raises(data_files.PrepareError, match=r"corpus\.tgz has no member c/train\.de \(it has: c/train\.en, "
                                                      r"c/train\.de\)\.\n  Fix: correct the member path"):
        data_corpora.extract(archive, dest)
    assert dest["c/train.en"].read_text() == "a\n" and not dest["c/train.de"].exists()


@pytest.mark.parametrize("flag", ["--bpe-merges", "--spm-vocab-size", "--workers", "--valid-every", "--max-len"])
def test_every_count_flag_below_one_is_refused_naming_it(flag, tmp_path, capsys):
    """Each count of pe-prepare (merges, vocabulary size, processes, the valid split's step, the longest sentence)
    is at least 1: 0 and -1 are refused naming the flag, before any file is read or written; 1 passes the check."""
    from pe_tools.data.cli import build_parser, check_args, main

    base = ["raw", "--src", "en", "--tgt", "de", *(x for split in ("train", "valid", "test")
                                                   for x in (f"--{split}", str(tmp_path / split))),
            "--out", str(tmp_path / "out")]
    for value in ("0", "-1"):
        assert main([*base, flag, value]) == 1
        assert f"error: {flag} must be at least 1." in capsys.readouterr().err
    check_args(build_parser().parse_args([*base, flag, "1"]))
    assert not (tmp_path / "out").exists()

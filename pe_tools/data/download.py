"""Resumable, verified downloads of corpus archives, for the preparation pipeline (pe_tools.data.pipeline).

A download goes to NAME.part and resumes from its size with an HTTP Range request; only a file that
passes `verify` is renamed to NAME. A file that fails is moved to NAME.corrupt, so no later run
trusts it. Checks, in order: size (the table's, else the server's Content-Length), sha256 / md5
when the table has them, else a full read of the archive (tar structure and gzip CRC).
"""
import gzip
import hashlib
import http.client
import os
import socket
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from tqdm import tqdm

from .files import CorruptFile, PrepareError

CHUNK = 1 << 20
USER_AGENT = "pe_plugin-prepare/1.0"


@dataclass(frozen=True)
class Archive:
    name: str
    url: str
    file: str
    size: Optional[int] = None
    sha256: Optional[str] = None
    md5: Optional[str] = None
    text_sha256: Optional[str] = None  # of the decompressed content of a single-file .gz

    @classmethod
    def from_table(cls, name: str, entry: dict) -> "Archive":
        if "url" not in entry:
            raise PrepareError(f"corpora table: [archive.{name}] has no url")
        file = entry.get("file") or Path(urllib.parse.urlsplit(entry["url"]).path).name
        return cls(name, entry["url"], file, entry.get("size"), entry.get("sha256"), entry.get("md5"),
                   entry.get("text_sha256"))

    @property
    def single_file(self) -> bool:
        """One text file, gzipped or not (not a tar): its content is the corpus side itself."""
        return not self.file.endswith((".tgz", ".tar", ".tar.gz"))

    def describe(self) -> str:
        known = [f"{self.size} bytes"] if self.size else []
        known += [f"{k} {getattr(self, k)}" for k in ("sha256", "md5", "text_sha256") if getattr(self, k)]
        return ", ".join(known) or "no size or checksum recorded"


def mirror_url(url: str, base_url: Optional[str]) -> str:
    """Point `url` at `base_url` (scheme, host and an optional path prefix), keeping its path."""
    if not base_url:
        return url
    base, orig = urllib.parse.urlsplit(base_url), urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((base.scheme, base.netloc, base.path.rstrip("/") + orig.path, orig.query, ""))


def quarantine(path: Path) -> Path:
    bad = path.with_name(path.name.removesuffix(".part") + ".corrupt")
    os.replace(path, bad)
    return bad


# ------------------------------------------------------------------------------------------ verify
def _digests(path: Path, algos: list) -> dict:
    hashers = {a: hashlib.new(a) for a in algos}
    with open(path, "rb") as f, tqdm(total=path.stat().st_size, unit="B", unit_scale=True,
                                     desc=f"check {path.name}", leave=False, mininterval=1) as bar:
        while block := f.read(CHUNK):
            for h in hashers.values():
                h.update(block)
            bar.update(len(block))
    return {a: h.hexdigest() for a, h in hashers.items()}


def _text_digest(path: Path) -> str:
    """sha256 of a single file's content, decompressed when it is gzipped (CRC and length checked)."""
    h = hashlib.sha256()
    with open(path, "rb") as raw:
        gz = raw.read(2) == b"\x1f\x8b"  # by content: a download is verified as NAME.part
    try:
        with (gzip.open(path, "rb") if gz else open(path, "rb")) as f:
            while block := f.read(CHUNK):
                h.update(block)
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise CorruptFile(f"it is truncated or not a valid gzip file ({type(e).__name__}: {e})") from None
    return h.hexdigest()


def _read_through(path: Path) -> None:
    """Read a (gzipped) tar or a .gz file to its end; raise CorruptFile if it is cut short or garbled."""
    with open(path, "rb") as raw:
        gz = raw.read(2) == b"\x1f\x8b"
    try:
        with (gzip.open(path, "rb") if gz else open(path, "rb")) as f:
            if path.name.endswith(".gz") and not path.name.endswith(".tar.gz"):
                while f.read(CHUNK):
                    pass
                return
            with tarfile.open(fileobj=f, mode="r|") as tar:
                for member in tar:
                    if member.isfile():
                        data = tar.extractfile(member)
                        while data.read(CHUNK):
                            pass
            while f.read(CHUNK):  # through the gzip trailer, so its CRC and length are checked
                pass
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as e:  # not disk errors
        raise CorruptFile(f"it is truncated or not a valid archive ({type(e).__name__}: {e})") from None


def verify(path: Path, archive: Archive, server_size: Optional[int] = None) -> None:
    size = path.stat().st_size
    want = archive.size or server_size
    if want is not None and size != want:
        source = "corpora table" if archive.size else "the server's Content-Length"
        raise CorruptFile(f"it has {size} bytes, {source} says {want}")
    algos = [a for a in ("sha256", "md5") if getattr(archive, a)]
    if archive.text_sha256:
        got = _text_digest(path)
        if got != archive.text_sha256.lower():
            raise CorruptFile(f"the sha256 of its text is {got}, the corpora table expects {archive.text_sha256}")
    if algos:
        for algo, got in _digests(path, algos).items():
            if got != getattr(archive, algo).lower():
                raise CorruptFile(f"its {algo} is {got}, the corpora table expects {getattr(archive, algo)}")
    elif not archive.text_sha256:
        _read_through(path)


def verify_raw(path: Path, archive: Archive) -> Path:
    """Check an archive given with --raw-dir; never moves or edits it."""
    if not path.is_file():
        raise PrepareError(f"{path} not found (--raw-dir). Fix: download {archive.url} "
                           f"({archive.describe()}) and put it there as {archive.file}.")
    try:
        verify(path, archive)
    except CorruptFile as e:
        raise PrepareError(f"{path} (from --raw-dir) is corrupt: {e}.\n  Fix: replace it with a complete copy "
                           f"of {archive.url} ({archive.describe()}).") from None
    return path


# ---------------------------------------------------------------------------------------- download
def _total_from(resp, have: int) -> Optional[int]:
    content_range = resp.headers.get("Content-Range")
    if content_range and "/" in content_range and not content_range.endswith("/*"):
        return int(content_range.rsplit("/", 1)[1])
    length = resp.headers.get("Content-Length")
    return int(length) + have if length is not None else None


def _get(url: str, part: Path, archive: Archive, timeout: float) -> Optional[int]:
    """One attempt: fetch the rest of `url` into `part`; return the full size, None if unknown."""
    have = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": USER_AGENT, **({"Range": f"bytes={have}-"} if have else {})}
    try:
        resp = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code != 416 or not have:
            raise
        total = _total_from(e, 0) if e.headers.get("Content-Range") else None
        if total == have:  # the part file was already whole
            return total
        part.unlink()  # the server's file is shorter than our part: start over
        raise ConnectionError(f"server refused to resume at byte {have}; restarting")
    with resp:
        if have and resp.status != 206:  # server ignored the Range header: start over
            have = 0
        total = _total_from(resp, have)
        if archive.size and total and total != archive.size:
            raise PrepareError(f"{url} is {total} bytes on the server, but the corpora table says "
                               f"[archive.{archive.name}] size = {archive.size}. Fix: check the url "
                               f"(or --base-url), or update the entry if the file changed upstream.")
        with open(part, "ab" if have else "wb") as out, \
                tqdm(total=total, initial=have, unit="B", unit_scale=True, unit_divisor=1024,
                     desc=archive.file, mininterval=1) as bar:
            while block := resp.read(CHUNK):
                out.write(block)
                bar.update(len(block))
    size = part.stat().st_size
    if total is not None and size < total:
        raise http.client.IncompleteRead(b"", total - size)
    return total


RETRYABLE = (urllib.error.URLError, http.client.HTTPException, ConnectionError, socket.timeout, TimeoutError)


def download(url: str, part: Path, archive: Archive, retries: int = 5, retry_wait: float = 2.0,
             timeout: float = 60.0) -> Optional[int]:
    """Download `url` into `part`, resuming after cuts; return the size the server announced."""
    part.parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(retries + 1):
        try:
            return _get(url, part, archive, timeout)
        except urllib.error.HTTPError as e:
            if e.code < 500 and e.code not in (408, 429):
                raise PrepareError(f"{url} answered HTTP {e.code} {e.reason}. Fix: check [archive.{archive.name}] "
                                   f"in the corpora table or --base-url, or download the file elsewhere and "
                                   f"pass its folder with --raw-dir.") from None
            error = e
        except RETRYABLE as e:
            error = e
        have = part.stat().st_size if part.exists() else 0
        if attempt < retries:
            wait = retry_wait * 2 ** attempt
            print(f"[prepare] download of {archive.file} stopped at byte {have} ({type(error).__name__}: {error}); "
                  f"retrying in {wait:.0f}s ({attempt + 1}/{retries})", flush=True)
            time.sleep(wait)
    kept = (f"The partial file {part} ({have} bytes) is kept: re-run to resume it, or download" if have else
            "Fix: check the network and the url (or --base-url), or download")
    raise PrepareError(f"download of {url} failed after {retries + 1} attempts ({type(error).__name__}: {error}).\n"
                       f"  {kept} the archive elsewhere and pass its folder with --raw-dir.")


def fetch(archive: Archive, download_dir: Path, base_url: Optional[str] = None, retries: int = 5,
          retry_wait: float = 2.0, timeout: float = 60.0) -> Path:
    """Return download_dir/FILE, downloading (resumably) and verifying it unless it is already there."""
    final = download_dir / archive.file
    part = final.with_name(final.name + ".part")
    url = mirror_url(archive.url, base_url)
    server_size = None
    target = final
    if not final.exists():
        server_size = download(url, part, archive, retries, retry_wait, timeout)
        target = part
    try:
        verify(target, archive, server_size)
    except CorruptFile as e:
        bad = quarantine(target)
        raise PrepareError(
            f"{final} is corrupt: {e}.\n  It was moved to {bad} and will not be used.\n"
            f"  Fix: re-run to download it again from {url}; if the new copy fails too, the file on the server "
            f"differs from the record in [archive.{archive.name}] of the corpora table: check its url, size "
            f"and checksum.") from None
    if target is part:
        os.replace(part, final)
    return final


"""A copy's bytes for `GET /copy/{id}` and covers (docs/web.md, "Streaming a copy"): the id
looked up among the served index's online copies, the file opened on its share (SMB through
crawl_io.smb, each stream on a connection of the host's pool; or file:// without following
links) and checked against the listing; the streams' caps. Every SMB call has a deadline."""

from __future__ import annotations

import ctypes
import os
import re
import stat
import threading
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from sharecrawl.crawl_io.checked import clamped, name_on_host
from sharecrawl.crawl_io.filesource import host_bytes
from sharecrawl.crawl_io.sources import (
    AccessDenied,
    ConfigError,
    Entry,
    HostUnreachable,
    HostURL,
    NotFound,
    SourceError,
    credentials_for,
    parse_host_url,
)
from sharecrawl.queries.index_store import IndexFile
from sharecrawl.queries.search_results import COPY_ID_SQL

if TYPE_CHECKING:
    from sharecrawl.crawl_io.smb import SMBSource

ID = re.compile(r"[0-9a-f]{16}")
UNREACHABLE = "The copy's host cannot be reached now."
MOVED = "The file is no longer where the index saw it."
NO_NAME = "The file's name no longer leads to it."
CHANGED = (
    "The file changed since the crawl listed it (its size or time differs); "
    "search again after the next round."
)


class NotStreamable(Exception):
    """404: the message is one sentence for the user."""


class Changed(Exception):
    """409: the file on the share is not the one the index lists."""


class Busy(Exception):
    """503: too many streams now."""


@dataclass(frozen=True)
class StreamSettings:
    enabled: bool = True
    authenticated: bool = False  # stream hosts crawled with credentials too
    per_host: int = 4
    total: int = 32
    timeout_s: float = 30.0  # connecting to a host, and each SMB call after


@dataclass(frozen=True)
class Copy:
    host: HostURL
    share: str
    path: str
    size: int
    mtime_us: int

    @property
    def name(self) -> str:
        """The file's name as stored (crawl_io.checked.safe_name)."""
        return self.path.rpartition("/")[2]

    def names_on_host(self) -> list[str]:
        """The share's and each path name as the host names them (the stored names' inverse,
        crawl_io.checked): what is opened. Changed when one cannot name a file there (a
        stored `\\x2f`, `\\x00`, or an empty or dot name that only a hostile host lists)."""
        names = [name_on_host(self.share), *map(name_on_host, self.path.split("/"))]
        if any(n in ("", ".", "..") or "/" in n or "\0" in n for n in names):
            raise Changed(NO_NAME)
        return names

    @property
    def shown_name(self) -> str:
        """The host's name for a download: a byte that is not UTF-8, or an unpaired UTF-16
        unit, is U+FFFD (a header's filename* is UTF-8, RFC 8187 §3.2.1)."""
        name = name_on_host(self.name)
        return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in name)


BLOCK = 4 * 1024 * 1024  # a stream's reads after its first (fastest in bench/stream.py)
SMB_AHEAD = 2  # SMB reads asked for before they are wanted, so that the host never waits


class Reader(Protocol):
    def read(self, offset: int, length: int, ahead: int = 0) -> bytes:
        """`length` bytes at `offset` (fewer at the end); `ahead` more bytes will be asked for
        next, in BLOCKs, which a reader may start reading now."""
        ...

    def close(self) -> None: ...


def _ids(file: IndexFile) -> tuple[np.ndarray, np.ndarray]:
    with file.cursor() as con:
        found = con.execute(
            f"SELECT ('0x' || {COPY_ID_SQL})::UBIGINT AS id, rowid AS r FROM copies "
            "WHERE online ORDER BY id"
        ).fetchnumpy()
    return np.asarray(found["id"], np.uint64), np.asarray(found["r"], np.int64)


def find(file: IndexFile, copy_id: str) -> Copy:
    """The online copy with this id in the index file; NotStreamable when there is none."""
    gone = NotStreamable("No copy with this id is in the index now, or its host is offline.")
    if not ID.fullmatch(copy_id):
        raise gone
    ids, rows = file.cached("stream_ids", _ids)
    want = np.uint64(int(copy_id, 16))
    at = int(np.searchsorted(ids, want))
    if at >= len(ids) or ids[at] != want:
        raise gone
    with file.cursor() as con:
        row = con.execute(
            "SELECT c.host, c.share, c.path, c.size, epoch_us(c.mtime), h.url "
            "FROM copies c JOIN hosts h USING (host) WHERE c.rowid = ? AND h.online",
            [int(rows[at])],
        ).fetchone()
    if row is None or not row[5]:
        raise gone
    try:
        host = parse_host_url(row[5])
    except ConfigError:
        raise gone from None
    return Copy(host, row[1], row[2], int(row[3]), int(row[4]))


class FileReader:
    """A file below a file:// host's folder, every name opened without following links."""

    def __init__(self, copy: Copy) -> None:
        try:
            parts = list(map(host_bytes, copy.names_on_host()))
        except NotFound:  # a lone surrogate no byte stands for: no file's name
            raise Changed(NO_NAME) from None
        try:
            folder = os.open(copy.host.hostname, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            raise NotStreamable(UNREACHABLE) from None
        try:
            for part in parts[:-1]:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=folder)
                os.close(folder)
                folder = inner
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
            self.fd = os.open(parts[-1], flags, dir_fd=folder)
        except OSError:
            raise Changed(MOVED) from None
        finally:
            os.close(folder)
        st = os.fstat(self.fd)
        if not stat.S_ISREG(st.st_mode):
            self.close()
            raise Changed(MOVED)
        self.size, self.mtime_us = st.st_size, st.st_mtime_ns // 1000

    def read(self, offset: int, length: int, ahead: int = 0) -> bytes:
        return os.pread(self.fd, length, offset)

    def close(self) -> None:
        os.close(self.fd)


class SmbReader:
    """A file on an SMB share, on a connection of the pool's for its host (given back after)."""

    def __init__(self, copy: Copy, pool: Streams) -> None:
        self.pool, self.host = pool, copy.host
        share, *names = copy.names_on_host()
        for fresh in (False, True):
            self.source, reused = pool.connection(copy.host, fresh)
            try:
                self.file = self.source.open_file(share, "/".join(names), BLOCK, SMB_AHEAD)
                break
            except (NotFound, AccessDenied):
                pool.give_back_connection(copy.host, self.source)
                raise Changed(MOVED) from None
            except HostUnreachable:
                if not reused:
                    raise NotStreamable(UNREACHABLE) from None
                # the host closed the pooled connection meanwhile (a restart): once more
            except SourceError:
                if not self.source.usable:  # it timed out, or the connection broke
                    raise NotStreamable(UNREACHABLE) from None
                pool.give_back_connection(copy.host, self.source)
                raise  # an answer it should not give: a server error
        self.size, self.mtime_us = self.file.size, self.file.mtime_us

    def read(self, offset: int, length: int, ahead: int = 0) -> bytes:
        """Through the file's Open, several reads in flight; a host gone or hung mid-stream is
        NotStreamable."""
        try:
            return self.file.read(offset, length, ahead)
        except (NotFound, AccessDenied):
            raise Changed(MOVED) from None
        except SourceError:
            if not self.source.usable:
                raise NotStreamable(UNREACHABLE) from None
            raise

    def close(self) -> None:
        self.file.close()
        self.pool.give_back_connection(self.host, self.source)


def keep_freed_buffers() -> None:
    """Have glibc's malloc keep freed buffers of a few MiB for reuse instead of handing them
    back to the kernel: smbprotocol allocates several per SMB READ, and fresh pages cost more
    than the copies into them (docs/web.md, "Streaming a copy"). mallopt(3); elsewhere,
    nothing."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return
    mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD: heap, not mmap, below 32 MiB
    mallopt(-1, 64 << 20)  # M_TRIM_THRESHOLD: keep up to 64 MiB free at the heap's top


class Streams:
    """The server's streams: how many are open per host and in all, and the SMB connections."""

    def __init__(self, settings: StreamSettings) -> None:
        if settings.enabled:
            keep_freed_buffers()
        self.settings = settings
        self._lock = threading.Lock()
        self._open: Counter[str] = Counter()
        self._idle: dict[str, list[SMBSource]] = {}  # a host's URL -> connections no stream uses

    def withheld(self, host: HostURL) -> str | None:
        """Why this host's copies are not streamed by this server, or None."""
        if not self.settings.enabled:
            return "Streaming is off on this server (it was started with --no-stream)."
        if host.scheme == "smb" and not self.settings.authenticated:
            try:
                user = credentials_for(host).user
            except ConfigError:
                user = "?"
            if user:
                return (
                    "This copy's host was crawled with credentials; the server streams such "
                    "hosts only when started with --stream-authenticated."
                )
        return None

    def connection(self, host: HostURL, fresh: bool = False) -> tuple[SMBSource, bool]:
        """A connection to the host for one stream, and whether it was the pool's: an idle one,
        unless `fresh`, else a new one (NotStreamable when the host cannot be reached)."""
        from sharecrawl.crawl_io.smb import SMBSource  # the SMB stack loads for SMB hosts alone

        while not fresh:
            with self._lock:
                idle = self._idle.get(host.url)
                source = idle.pop() if idle else None
            if source is None:
                break
            if source.usable:
                return source, True
            source.close()  # closed meanwhile: a timed-out stream's, or by the host
        try:
            credentials = credentials_for(host)
            return SMBSource(host, credentials, self.settings.timeout_s, window=1), False
        except (SourceError, ConfigError):  # refused, timed out, a logon failure: not for us
            raise NotStreamable(UNREACHABLE) from None

    def give_back_connection(self, host: HostURL, source: SMBSource) -> None:
        """Keep a stream's connection for the host's next (a failed one, or past the host's
        cap of streams, is closed)."""
        with self._lock:
            idle = self._idle.setdefault(host.url, [])
            if source.usable and len(idle) < self.settings.per_host:
                idle.append(source)
                return
        source.close()

    def take(self, host: str) -> None:
        """Count one more stream of `host`; Busy past a cap."""
        with self._lock:
            total = sum(self._open.values())
            if self._open[host] >= self.settings.per_host or total >= self.settings.total:
                raise Busy("Too many files are being streamed now; try again in a moment.")
            self._open[host] += 1

    def give_back(self, host: str) -> None:
        with self._lock:
            self._open[host] -= 1

    def open(self, copy: Copy) -> Reader:
        """The copy opened and checked against the listing as the crawl stored it, clamped
        alike (crawl_io.checked.clamped: a year 10000 is stored as 9999); Changed when it
        differs."""
        reader: FileReader | SmbReader
        reader = FileReader(copy) if copy.host.scheme == "file" else SmbReader(copy, self)
        live = clamped(Entry("file", False, reader.size, reader.mtime_us))
        if (live.size, live.mtime_us) != (copy.size, copy.mtime_us):
            reader.close()
            raise Changed(CHANGED)
        return reader

"""A copy's bytes for `GET /copy/{id}` (docs/web.md, "Streaming a copy"): the id looked up
among the served index's online copies, the file opened on its share (SMB over one pooled
connection per host, or file:// without following links) and checked against the listing;
the streams' caps, and a deadline on every SMB call."""

from __future__ import annotations

import ctypes
import logging
import os
import re
import stat
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from sharecrawl.crawl_io.smb_names import smb_path
from sharecrawl.crawl_io.sources import ConfigError, HostURL, credentials_for, parse_host_url
from sharecrawl.queries.index_store import IndexFile
from sharecrawl.queries.search_results import COPY_ID_SQL

ID = re.compile(r"[0-9a-f]{16}")
UNREACHABLE = "The copy's host cannot be reached now."
MOVED = "The file is no longer where the index saw it."
for _name in ("smbprotocol", "smbclient"):  # a line per SMB message otherwise, at INFO
    logging.getLogger(_name).setLevel(logging.WARNING)


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
        return self.path.rpartition("/")[2]


BLOCK = 2 * 1024 * 1024  # a stream's reads after its first (fastest in bench/stream.py)
SMB_AHEAD = 3  # SMB reads asked for before they are wanted, so that the host never waits
CREDIT_BYTES = 65536  # what one SMB credit pays for (MS-SMB2 §3.1.5.2)


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
        parts = [copy.share, *copy.path.split("/")]
        if any(p in ("", ".", "..") for p in parts):
            raise Changed("The file's name no longer leads to it.")
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
    """A file on an SMB share, through smbclient and the pool's connection to its host."""

    def __init__(self, copy: Copy, pool: Streams) -> None:
        import smbclient
        from smbprotocol.exceptions import SMBOSError

        host = copy.host
        port = host.port or 445
        credentials = credentials_for(host)
        session = {
            "username": credentials.user or "guest",  # unknown users map to guest (Samba)
            "password": (credentials.password or "") if credentials.user else "",
            "port": port,
            "connection_cache": pool.connections,
            "connection_timeout": max(1, int(pool.settings.timeout_s)),
            "auth_protocol": "ntlm",
            "require_signing": bool(credentials.user),  # a guest session cannot sign
        }
        unc = f"\\\\{host.hostname}\\{copy.share}\\{smb_path(copy.path)}"
        # A guest session has no key to sign the check of the negotiation with (the crawler's
        # SMB source does not make that check either)
        smbclient.ClientConfig(require_secure_negotiate=False)
        self.pool, self.host = pool, host
        try:
            with pool.host_lock(host.host), pool.deadline(host):  # one connection per host
                smbclient.register_session(host.hostname, **session)
        except Exception:  # refused, timed out, logon failure: the host is not there for us
            pool.forget(host)
            raise NotStreamable(UNREACHABLE) from None
        try:
            with pool.deadline(host):
                st = smbclient.stat(unc, **session)
                # shared: other streams of the file, and its owner, may open it meanwhile
                shared = {"buffering": 0, "share_access": "rwd"}
                self.file = smbclient.open_file(unc, mode="rb", **shared, **session)
        except SMBOSError:
            raise Changed(MOVED) from None
        except Exception:
            pool.forget(host)
            raise NotStreamable(UNREACHABLE) from None
        self.size, self.mtime_us = st.st_size, st.st_mtime_ns // 1000
        self.pending: deque[tuple[int, int, Callable, Any]] = deque()  # from, to, answer

    def read(self, offset: int, length: int, ahead: int = 0) -> bytes:
        """Through the file's Open, several reads in flight (smbclient's file object waits for
        each read before it asks for the next, and copies the bytes twice more)."""
        length = min(length, self.size - offset)
        if length <= 0:
            return b""
        with self.pool.deadline(self.host, self.file.fd.connection):
            if self.pending and self.pending[0][0] != offset:
                self._drain()  # not the bytes read ahead: a seek
            if not self.pending:
                self._ask(offset, length)
            self._ask_ahead(offset + length, ahead)
            *_, receive, request = self.pending.popleft()
            return receive(request)

    def _ask(self, offset: int, length: int) -> bool:
        """Send a read of these bytes unless the host's credits do not cover it now (the first
        read in flight: of as many bytes as they cover)."""
        fd = self.file.fd
        window = fd.connection.sequence_window
        credits = window["high"] - window["low"]
        if not self.pending:
            length = min(length, max(1, credits) * CREDIT_BYTES)
        charge = (length - 1) // CREDIT_BYTES + 1
        if self.pending and charge > credits:
            return False  # the reads in flight bring credits back
        message, receive = fd.read(offset, length, send=False)
        tree = fd.tree_connect
        request = fd.connection.send(
            message, tree.session.session_id, tree.tree_connect_id, credit_request=charge * 2
        )
        self.pending.append((offset, offset + length, receive, request))
        return True

    def _ask_ahead(self, at: int, ahead: int) -> None:
        end = min(self.size, at + ahead)
        if self.pending:
            at = self.pending[-1][1]
        while at < end and len(self.pending) < SMB_AHEAD:
            length = min(BLOCK, end - at, self.file.fd.connection.max_read_size)
            if not self._ask(at, length):
                return
            at += length

    def _drain(self) -> None:
        while self.pending:
            *_, receive, request = self.pending.popleft()
            receive(request)

    def close(self) -> None:
        try:
            with self.pool.deadline(self.host, self.file.fd.connection):
                self._drain()
                self.file.close()
        except Exception:  # the connection is gone (closed by a deadline): nothing to close
            pass


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
        self.connections: dict = {}  # smbclient's connection cache, this server's own
        self._lock = threading.Lock()
        self._host_locks: dict[str, threading.Lock] = {}
        self._open: Counter[str] = Counter()
        self._deadlines: dict[object, tuple[float, HostURL, Any]] = {}
        self._watchdog: threading.Thread | None = None

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

    @contextmanager
    def host_lock(self, host: str) -> Iterator[None]:
        with self._lock:
            lock = self._host_locks.setdefault(host, threading.Lock())
        with lock:
            yield

    def forget(self, host: HostURL, connection: Any = None) -> None:
        """Drop a host's connection (`connection`, or the pooled one) after a failure or past a
        deadline; the next stream connects anew."""
        key = f"{host.hostname.lower()}:{host.port or 445}"
        with self._lock:
            if connection is None or self.connections.get(key) is connection:
                connection = self.connections.pop(key, connection)
        if connection is not None:
            try:  # no logoff first: a hung host would never answer it
                connection.disconnect(close=False)
            except Exception:  # already broken: nothing to close cleanly
                pass

    @contextmanager
    def deadline(self, host: HostURL, connection: Any = None) -> Iterator[None]:
        """Close the connection if the SMB calls inside take longer than the timeout: they
        then fail (smbprotocol waits for an answer without one)."""
        token = object()
        with self._lock:
            self._deadlines[token] = (time.monotonic() + self.settings.timeout_s, host, connection)
            if self._watchdog is None:  # started on first use: `serve` forks its workers first
                self._watchdog = threading.Thread(target=self._watch, daemon=True)
                self._watchdog.start()
        try:
            yield
        finally:
            with self._lock:
                del self._deadlines[token]

    def _watch(self) -> None:
        while True:  # a deadline is met within a quarter of the timeout (a thread per call
            time.sleep(min(1.0, self.settings.timeout_s / 4))  # would cost more than the read)
            now = time.monotonic()
            with self._lock:
                late = [(h, c) for due, h, c in self._deadlines.values() if due < now]
            for host, connection in late:
                self.forget(host, connection)

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
        """The copy opened and checked against the listing (Changed when it differs)."""
        reader: FileReader | SmbReader
        reader = FileReader(copy) if copy.host.scheme == "file" else SmbReader(copy, self)
        if (reader.size, reader.mtime_us) != (copy.size, copy.mtime_us):
            reader.close()
            raise Changed(
                "The file changed since the crawl listed it (its size or time differs); "
                "search again after the next round."
            )
        return reader

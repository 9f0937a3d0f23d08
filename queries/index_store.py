"""Reading the search index: the one cache of open index files in a process.

The index is one DuckDB file, replaced whole by rename when a round builds or updates it.
A reader asks for the file as it is now (`pinned`): the first time, or when the file at
the path is no longer the one held (another inode, mtime or size), it is opened through a
descriptor and attached read-only to a private in-memory DuckDB. Everything a request reads
then comes from that one file, even when a round replaces it meanwhile (the old file lives
on until its descriptor is closed): a reader sees the old index or the new one, never a
mix. The old file is closed when its last reader leaves.

Attaching through the descriptor (/proc/self/fd/N) rather than by path keeps clear of
DuckDB's process-wide cache of databases by path, which would hand a new connection the old
file while any connection to it is open. What readers derive from a file (the search
arrays, the page's copies) is kept with it (`IndexFile.cached`) and goes with it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb

# The index's format: readers take no other, and an index of another format is rebuilt in
# full, never updated. It changes whenever what the index holds or how text is read
# (queries.text) does.
FORMAT = "2"
Identity = tuple[int, int, int]  # inode, mtime in ns, size: a replaced file differs in all
REQUIRED_TABLES = ("works", "copies", "hosts", "terms", "postings", "meta")


class IndexUnreadable(Exception):
    """The search index file is damaged; the message says what rebuilds it."""


def _identity(stat: os.stat_result) -> Identity:
    return (stat.st_ino, stat.st_mtime_ns, stat.st_size)


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:160]


class IndexFile:
    """One index file, pinned: its descriptor, a read-only DuckDB on it (the file attached
    as `idx`, the default schema), its meta, and what readers derive from it."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd
        self.identity = _identity(os.fstat(fd))
        # no temp_directory: DuckDB would spill big sorts to the working folder, and readers
        # write nothing anywhere
        self.con = duckdb.connect(":memory:", config={"temp_directory": ""})
        self._users = 0
        self._retired = False
        self._cache: dict[str, Any] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        try:
            source = f"/proc/self/fd/{fd}"
            if not os.path.exists(source):  # no /proc: by name (a swap is then caught late)
                source = str(path)
            quoted = source.replace("'", "''")  # our own path, never request text
            self.con.execute(f"ATTACH '{quoted}' AS idx (READ_ONLY)")
            self.con.execute("USE idx")
            self.meta: dict[str, str] = dict(
                self.con.execute("SELECT key, value FROM meta").fetchall()
            )
            if self.meta.get("format") != FORMAT:
                raise IndexUnreadable(
                    f"of another format ({self.meta.get('format') or '1'}, not {FORMAT})"
                )
            for table in REQUIRED_TABLES:  # a garbled file fails here, not later
                self.con.execute(f"SELECT count(*) FROM {table}").fetchone()
        except BaseException:
            self.con.close()
            raise
        self.version: str = self.meta.get("version") or "?"

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A cursor on this file (one per thread), its tables named plainly or as `idx.`;
        close it when done."""
        cursor = self.con.cursor()
        cursor.execute("USE idx")  # a cursor starts on the in-memory database
        return cursor

    def cached(self, name: str, load: Callable[[IndexFile], Any]) -> Any:
        """`load(self)`, computed once per file; concurrent callers wait for the first."""
        with self._lock:
            if name in self._cache:
                return self._cache[name]
            lock = self._locks.setdefault(name, threading.Lock())
        with lock:
            if name not in self._cache:
                self._cache[name] = load(self)
            return self._cache[name]

    def enter(self) -> bool:
        """Count one more user; False when the file is already closed."""
        with self._lock:
            if self._retired and self._users == 0:
                return False
            self._users += 1
            return True

    def leave(self) -> None:
        with self._lock:
            self._users -= 1
            last = self._retired and self._users == 0
        if last:
            self._close()

    def retire(self) -> None:
        """A newer file is served now: close this one once its last user leaves."""
        with self._lock:
            self._retired = True
            last = self._users == 0
        if last:
            self._close()

    def _close(self) -> None:
        self.con.close()
        os.close(self.fd)
        self._cache.clear()


class _Slot:
    """The file held for one index path, and the last file found damaged there."""

    def __init__(self) -> None:
        self.file: IndexFile | None = None
        self.damaged: tuple[Identity, str] | None = None
        self.lock = threading.Lock()


_slots: dict[str, _Slot] = {}
_slots_lock = threading.Lock()


def open_index(index_path: Path) -> tuple[IndexFile, bool]:
    """The index file at `index_path` as it is now, with one user counted for the caller
    (call `leave()` when done), and whether it was opened by this call. Raises
    FileNotFoundError when there is none and IndexUnreadable when it is damaged."""
    key = os.path.abspath(index_path)
    try:
        identity = _identity(os.stat(key))
    except FileNotFoundError:
        raise FileNotFoundError(f"no search index at {index_path}: run a crawl first") from None
    with _slots_lock:
        slot = _slots.setdefault(key, _Slot())
    with slot.lock:
        held = slot.file
        if held is not None and held.identity == identity and held.enter():
            return held, False
        if slot.damaged is not None and slot.damaged[0] == identity:
            raise IndexUnreadable(slot.damaged[1])
        try:
            fd = os.open(key, os.O_RDONLY)
        except FileNotFoundError:  # removed between the stat and the open
            raise FileNotFoundError(f"no search index at {index_path}: run a crawl first") from None
        try:
            new = IndexFile(Path(key), fd)
        except (duckdb.Error, OSError, UnicodeError, IndexUnreadable) as e:
            os.close(fd)
            message = (
                f"search index {index_path} is damaged ({_first_line(e)}): the next "
                "round rebuilds it (`sharecrawl crawl`)"
            )
            slot.damaged = (identity, message)
            raise IndexUnreadable(message) from None
        new.enter()
        slot.file = new
        if held is not None:
            held.retire()
        return new, True


@contextmanager
def pinned(index_path: Path) -> Iterator[IndexFile]:
    """The index file as it is now, kept open until the block ends."""
    file, _ = open_index(index_path)
    try:
        yield file
    finally:
        file.leave()


def index_meta(index_path: Path) -> dict[str, str] | None:
    """The meta of the index at `index_path`, or None when it is missing or damaged."""
    try:
        with pinned(index_path) as file:
            return dict(file.meta)
    except (FileNotFoundError, IndexUnreadable):
        return None


def index_version(index_path: Path) -> str | None:
    """The crawldb version the index at `index_path` holds, or None."""
    meta = index_meta(index_path)
    return meta.get("version") if meta else None

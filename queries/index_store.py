"""Reading the search index: the one cache of open index files in a process. A reader pins
the file as it is now (`pinned`), attached read-only to an in-memory DuckDB of its own (DuckDB
shares an attached file between connections of one database only) and checked to be the file
the path names after the attach as before (docs/DESIGN.md, Search): a reader sees the old index
or the new one, never a mix. A file, and what readers derive from it (`IndexFile.cached`), is
closed when its last reader leaves after a newer one is served."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where a file is opened: a search by the arrays file needs none
    import duckdb

# Readers take no other; an index of another format is rebuilt, never updated. It changes
# whenever what the index holds or how text is read (queries.text) does.
FORMAT = "4"
Identity = tuple[int, int, int]  # inode, mtime in ns, size: a replaced file differs in all
REQUIRED_TABLES = ("works", "copies", "hosts", "terms", "postings", "meta")


class IndexUnreadable(Exception):
    """The search index file is damaged; the message says what rebuilds it."""

    @classmethod
    def damaged(cls, path: Path | str, why: str, *, state: str = "damaged") -> IndexUnreadable:
        return cls(
            f"search index {path} is {state} ({why}): the next round rebuilds it "
            "(`sharecrawl crawl`)"
        )


class Swapped(Exception):
    """The file at the index path was replaced while it was being opened."""


class Unopenable(Exception):
    """The index file of this identity does not open as an index: why, in one line."""

    def __init__(self, identity: Identity, why: str, state: str = "damaged") -> None:
        super().__init__(why)
        self.identity, self.state = identity, state


SWAPS_TRIED = 50  # swaps met in a row while opening before giving up (a round makes one)


def identity_of(stat: os.stat_result) -> Identity:
    return (stat.st_ino, stat.st_mtime_ns, stat.st_size)


class IndexFile:
    """One index file, pinned: a read-only DuckDB on it (the file attached as `idx`, the
    default schema), its identity and meta, and what readers derive from it."""

    def __init__(self, path: Path) -> None:
        """Attach the index file at `path` as it is now: Swapped, FileNotFoundError or
        Unopenable when it cannot."""
        import duckdb

        self.path = path
        # Readers write nothing (no spills to the working folder). Made before the file is
        # looked at: a new DuckDB takes longer than a round may take to swap the file again.
        self.con = duckdb.connect(":memory:", config={"temp_directory": ""})
        self._users = 0
        self._retired = False
        self._cache: dict[str, Any] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        try:
            self.identity = identity_of(os.stat(path))
            try:
                self._attach()
                self.con.execute("USE idx")
                self.meta: dict[str, str] = dict(
                    self.con.execute("SELECT key, value FROM meta").fetchall()
                )
                if (found := self.meta.get("format")) != FORMAT:
                    why = f"format {found or '1'}, this one's is {FORMAT}"
                    raise Unopenable(self.identity, why, "of another sharecrawl")
                for table in REQUIRED_TABLES:  # a garbled file fails here, not later
                    self.con.execute(f"SELECT count(*) FROM {table}").fetchone()
            except (Swapped, FileNotFoundError):
                raise
            except (duckdb.Error, OSError, UnicodeError) as e:
                from sharecrawl.crawl_io.crawldb.version_manifest import first_line  # Arrow

                raise Unopenable(self.identity, first_line(e)[:160]) from None
        except BaseException:
            self.con.close()
            raise
        self.version: str = self.meta.get("version") or "?"

    def _attach(self) -> None:
        quoted = str(self.path).replace("'", "''")  # our own path, never request text
        try:
            self.con.execute(f"ATTACH '{quoted}' AS idx (READ_ONLY)")
        finally:
            if identity_of(os.stat(self.path)) != self.identity:
                raise Swapped

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A cursor on this file (one per thread), its tables named plainly or as `idx.`; a
        `with` block closes it."""
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
        self._cache.clear()


@dataclass
class _Slot:
    """The file held for one index path, and the last file found damaged there."""

    file: IndexFile | None = None
    damaged: tuple[Identity, str] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


_slots: dict[str, _Slot] = {}
_slots_lock = threading.Lock()


def _no_index(index_path: Path) -> FileNotFoundError:
    return FileNotFoundError(f"no search index at {index_path}: run a crawl first")


def open_index(index_path: Path) -> tuple[IndexFile, bool]:
    """The index file at `index_path` as it is now, with the caller counted as a user (call
    `leave()`), and whether this call opened it. FileNotFoundError, IndexUnreadable."""
    key = os.path.abspath(index_path)
    with _slots_lock:
        slot = _slots.setdefault(key, _Slot())
    with slot.lock:
        for _ in range(SWAPS_TRIED):
            try:
                identity = identity_of(os.stat(key))
            except FileNotFoundError:
                raise _no_index(index_path) from None
            held = slot.file
            if held is not None and held.identity == identity and held.enter():
                return held, False
            if slot.damaged is not None and slot.damaged[0] == identity:
                raise IndexUnreadable(slot.damaged[1])
            try:
                new = IndexFile(Path(key))
            except Swapped:
                continue
            except FileNotFoundError:  # removed between the stat and the open
                raise _no_index(index_path) from None
            except Unopenable as e:
                error = IndexUnreadable.damaged(index_path, str(e), state=e.state)
                slot.damaged = (e.identity, str(error))
                raise error from None
            new.enter()
            slot.file = new
            if held is not None:
                held.retire()
            return new, True
    raise IndexUnreadable(
        f"search index {index_path} was replaced {SWAPS_TRIED} times while it was being "
        "opened: try again"
    )


@contextmanager
def pinned(index_path: Path) -> Iterator[IndexFile]:
    """The index file as it is now, kept open until the block ends."""
    file, _ = open_index(index_path)
    try:
        yield file
    finally:
        file.leave()


def index_meta(index_path: Path) -> dict[str, str] | None:
    """The meta of the index at `index_path`, or None when it is missing or damaged: as its
    search arrays file names it, when that file is this index file's (a search trusts it as
    far), else from the file itself (a DuckDB opened: 50 ms a time)."""
    from sharecrawl.queries.search_file import arrays_meta

    try:
        meta = arrays_meta(index_path, identity_of(os.stat(index_path)))
    except OSError:
        return None
    if meta is not None:
        return meta
    try:
        with pinned(index_path) as file:
            return dict(file.meta)
    except (FileNotFoundError, IndexUnreadable):
        return None


def index_version(index_path: Path) -> str | None:
    """The crawldb version the index at `index_path` holds, or None."""
    meta = index_meta(index_path)
    return meta.get("version") if meta else None

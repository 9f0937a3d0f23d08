"""The version the web page serves: the search index on disk now, pinned for each request.

Every request stats crawldb/CURRENT and index/search.duckdb (microseconds). When the index
file was replaced (a round swaps it by rename), the request opens the new file: through a
descriptor held for as long as requests use that version, attached read-only to a private
in-memory DuckDB. So a request reads one version whole even when a round swaps the index
under it (the old file lives on until its descriptor is closed), and DuckDB's process-wide
cache of databases by path stays queries.index's alone: a connection opened by path would
make later connects by that path see the old file.

queries.search.search() reads the index by path through its own cache; the page checks that
the file did not change while search() ran (see `changed`) and runs the request again if
it did, so its results and the pinned version never disagree.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb

from crawl_io.crawldir import CrawlDir

Identity = tuple[int, int, int]  # inode, mtime in ns, size: a replaced file differs in all

_VERSION_NAME = re.compile(r"v\d{6}")


class Unavailable(Exception):
    """Nothing can be served now; the message is one sentence saying what to do."""


def _identity(stat: os.stat_result) -> Identity:
    return (stat.st_ino, stat.st_mtime_ns, stat.st_size)


class VersionState:
    """One index file, pinned: its descriptor, a read-only DuckDB on it, and what the page
    derives from it (loaded once, on first use, by the functions given to `cached`)."""

    def __init__(self, crawl: CrawlDir, fd: int) -> None:
        self.crawl = crawl
        self.fd = fd
        self.identity = _identity(os.fstat(fd))
        # no temp_directory: DuckDB would spill big sorts to the working folder, and the page
        # writes nothing anywhere
        self.con = duckdb.connect(":memory:", config={"temp_directory": ""})
        self._users = 0
        self._retired = False
        self._cache: dict[str, Any] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        path = f"/proc/self/fd/{fd}"
        if not os.path.exists(path):  # no /proc: attach by name (a swap is then caught late)
            path = str(crawl.index)
        quoted = path.replace("'", "''")  # our own path, never request text
        self.con.execute(f"ATTACH '{quoted}' AS idx (READ_ONLY)")
        self.meta = dict(self.con.execute("SELECT key, value FROM idx.meta").fetchall())
        for table in ("works", "copies", "hosts"):  # a garbled file fails here, not later
            self.con.execute(f"SELECT count(*) FROM idx.{table}").fetchone()
        self.version: str = self.meta.get("version") or "?"

    @property
    def version_dir(self) -> Path:
        return self.crawl.crawldb / self.version

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A cursor on this version (one per thread); close it when done."""
        return self.con.cursor()

    def cached(self, name: str, load: Callable[[VersionState], Any]) -> Any:
        """`load(self)`, computed once per version; concurrent callers wait for the first."""
        with self._lock:
            if name in self._cache:
                return self._cache[name]
            lock = self._locks.setdefault(name, threading.Lock())
        with lock:
            if name not in self._cache:
                self._cache[name] = load(self)
            return self._cache[name]

    def enter(self) -> bool:
        """Count one more user; False when the state is already closed."""
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


class LiveIndex:
    """The served version of one crawl directory, switched when the index file changes."""

    def __init__(self, crawl_dir: str | os.PathLike, on_open: Callable | None = None) -> None:
        self.crawl = CrawlDir(crawl_dir)
        self.on_open = on_open  # called with each newly opened VersionState (to warm it)
        self._state: VersionState | None = None
        self._current: tuple[Identity, str] | None = None  # CURRENT's identity and name
        self._damaged: tuple[Identity, str] | None = None  # an index file that failed to open
        self._lock = threading.Lock()

    def current_name(self) -> str:
        """The live crawldb version's name (from CURRENT, re-read only when it changed);
        raises Unavailable when there is none or it is damaged."""
        root = self.crawl.root
        current = self.crawl.crawldb / "CURRENT"
        try:
            stat = os.stat(current)
        except FileNotFoundError:
            if not self.crawl.crawldb.is_dir():
                raise Unavailable(
                    f"{root} is not a crawl directory: run `sharecrawl crawl --crawl-dir "
                    f"{root}` to make one."
                ) from None
            raise Unavailable(
                f"No crawl round has finished in {root} yet: run `sharecrawl crawl "
                f"--crawl-dir {root}` and reload this page."
            ) from None
        identity = _identity(stat)
        cached = self._current
        if cached is not None and cached[0] == identity:
            return cached[1]
        try:
            name = current.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            name = ""
        if not _VERSION_NAME.fullmatch(name) or not (self.crawl.crawldb / name).is_dir():
            raise Unavailable(
                f"{current} is damaged (it names no version folder): write the name of the "
                f"newest complete vNNNNNN folder of {self.crawl.crawldb} into it, or run "
                f"`sharecrawl crawl --crawl-dir {root}`."
            )
        self._current = (identity, name)
        return name

    def _index_identity(self) -> Identity:
        try:
            return _identity(os.stat(self.crawl.index))
        except FileNotFoundError:
            raise Unavailable(
                f"{self.crawl.root} has no search index yet: run `sharecrawl crawl "
                f"--crawl-dir {self.crawl.root}` and reload this page."
            ) from None

    def _damaged_message(self) -> str:
        return (
            f"The search index {self.crawl.index} is damaged: run `sharecrawl crawl "
            f"--crawl-dir {self.crawl.root} --rounds 1` to rebuild it, then reload this page."
        )

    def _open(self) -> VersionState:
        """The state of the index file as it is now (opened anew when it changed), with
        one user counted for the caller."""
        identity = self._index_identity()
        with self._lock:
            state = self._state
            if state is not None and state.identity == identity and state.enter():
                return state
            if self._damaged is not None and self._damaged[0] == identity:
                raise Unavailable(self._damaged[1])
            try:
                fd = os.open(self.crawl.index, os.O_RDONLY)
            except FileNotFoundError:  # removed between the stat and the open
                raise Unavailable(
                    f"The search index of {self.crawl.root} is being replaced: reload this page."
                ) from None
            try:
                new = VersionState(self.crawl, fd)
            except (duckdb.Error, OSError, UnicodeError):
                os.close(fd)
                self._damaged = (identity, self._damaged_message())
                raise Unavailable(self._damaged[1]) from None
            new.enter()
            self._state = new
            if state is not None:
                state.retire()
        if self.on_open is not None:
            self.on_open(new)
        return new

    @contextmanager
    def acquire(self) -> Iterator[VersionState]:
        """The served version, kept open until the block ends."""
        self.current_name()  # a missing or damaged crawldb is said before anything else
        state = self._open()
        try:
            yield state
        finally:
            state.leave()

    def changed(self, state: VersionState) -> bool:
        """Has the index file been replaced since `state` was opened?"""
        try:
            return _identity(os.stat(self.crawl.index)) != state.identity
        except FileNotFoundError:
            return True

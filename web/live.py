"""The version the web page serves: the search index on disk now (a stat of CURRENT and the
index file per request), pinned for each request, so results, copies and status come from one
file even when a round swaps it meanwhile."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sharecrawl.crawl_io.crawldb.crawldir import VERSION_NAME, CrawlDir
from sharecrawl.queries.index_store import Identity, IndexFile, IndexUnreadable, open_index


class Unavailable(Exception):
    """Nothing can be served now; the message is one sentence saying what to do."""


class LiveIndex:
    """The served index of one crawl directory, switched when the index file changes."""

    def __init__(
        self, crawl_dir: str | os.PathLike, on_open: Callable[[IndexFile], None] | None = None
    ) -> None:
        self.crawl = CrawlDir(crawl_dir)
        self.on_open = on_open  # called with each newly opened index file (to warm it)
        self._current: tuple[Identity, str] | None = None  # CURRENT's identity and name

    def current_name(self) -> str:
        """The live version's name (CURRENT, re-read when it changed), else Unavailable."""
        root, current = self.crawl.root, self.crawl.crawldb / "CURRENT"
        try:
            stat = os.stat(current)
        except FileNotFoundError:
            crawl = f"run `sharecrawl crawl --crawl-dir {root}`"
            message = f"No crawl round has finished in {root} yet: {crawl} and reload this page."
            if not self.crawl.crawldb.is_dir():
                message = f"{root} is not a crawl directory: {crawl} to make one."
            raise Unavailable(message) from None
        identity = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        cached = self._current
        if cached is not None and cached[0] == identity:
            return cached[1]
        try:
            name = current.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            name = ""
        if not VERSION_NAME.fullmatch(name) or not (self.crawl.crawldb / name).is_dir():
            # the words the other commands say (CrawlDamaged): check --repair mends it
            damaged = self.crawl.damaged(f"{current} is damaged (it names no version folder)")
            raise Unavailable(f"{damaged}, then reload this page.")
        self._current = (identity, name)
        return name

    def version_dir(self, file: IndexFile) -> Path:
        """The crawldb folder of the version an index file holds."""
        return self.crawl.crawldb / file.version

    def damaged_index(self) -> Unavailable:
        return Unavailable(
            f"The search index {self.crawl.index} is damaged: run `sharecrawl crawl "
            f"--crawl-dir {self.crawl.root} --rounds 1` to rebuild it, then reload this page."
        )

    @contextmanager
    def acquire(self) -> Iterator[IndexFile]:
        """The served index file, kept open until the block ends."""
        self.current_name()  # a missing or damaged crawldb is said before anything else
        root = self.crawl.root
        try:
            file, opened = open_index(self.crawl.index)
        except FileNotFoundError:
            raise Unavailable(
                f"{root} has no search index yet: run `sharecrawl crawl --crawl-dir {root}` "
                "and reload this page."
            ) from None
        except IndexUnreadable:
            raise self.damaged_index() from None
        try:
            if opened and self.on_open is not None:
                self.on_open(file)
            yield file
        finally:
            file.leave()

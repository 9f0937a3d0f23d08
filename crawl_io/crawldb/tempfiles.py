"""Temporary files a stopped crawl leaves in its crawl directory, and their removal once their
writer is gone (another machine's only after FOREIGN_STALE_S unchanged)."""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

from sharecrawl.crawl_io.crawldb.atomic import machine
from sharecrawl.crawl_io.crawldb.crawldir import SEGMENT_NAME, CrawlDir
from sharecrawl.crawl_io.crawldb.history import changes_dir
from sharecrawl.crawl_io.processes import alive

TEMP_NAME = re.compile(r"^\..+\.tmp(?:(?P<pid>\d+)@(?P<machine>[^/]+?))?(?:\.wal)?$")

# A fetch worker writes a host's part in seconds; an hour also absorbs the file server's
# clock disagreeing with this machine's.
FOREIGN_STALE_S = 3600.0


def _writer_gone(path: Path) -> bool:
    """Is `path` a temporary name whose writer no longer runs (or is this process)? A name
    without a pid (the version folder) belongs to whoever holds the crawl lock."""
    if (match := TEMP_NAME.match(path.name)) is None:
        return False
    pid, where = match["pid"], match["machine"]
    if pid is None:
        return True
    if where != machine():
        try:
            return time.time() - path.lstat().st_mtime > FOREIGN_STALE_S
        except OSError:  # gone already
            return False
    return int(pid) == os.getpid() or not alive(int(pid))


def stale_temp_files(root: str | os.PathLike) -> list[Path]:
    """Temporary files and folders of writers that are gone, where a crawl writes (older
    segments than the live round's are never written again)."""
    crawl = CrawlDir(root)
    try:
        live = crawl.current()
    except (ValueError, OSError):
        live = 0  # an unreadable CURRENT: look at every segment
    folders = [crawl.root, crawl.crawldb, changes_dir(crawl.crawldb), crawl.index.parent]
    found = [p for folder in folders for p in folder_entries(folder) if _writer_gone(p)]
    for segment in folder_entries(crawl.segments):
        if number := SEGMENT_NAME.fullmatch(segment.name):
            if int(number[1]) >= live:
                for dirpath, dirnames, filenames in os.walk(segment):
                    found += [
                        Path(dirpath, n)
                        for n in dirnames + filenames
                        if _writer_gone(Path(dirpath, n))
                    ]
        elif _writer_gone(segment):
            found.append(segment)
    return found


def folder_entries(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except OSError:
        return []


def remove_stale_temp_files(root: str | os.PathLike) -> list[Path]:
    """Remove what stale_temp_files finds, holding the crawl lock (see _writer_gone)."""
    removed = []
    for path in stale_temp_files(root):
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except OSError:  # gone already, or not ours to remove: the next crawl tries again
            continue
        removed.append(path)
    return removed

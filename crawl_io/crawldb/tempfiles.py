"""Temporary files a crawl leaves in its crawl directory when it is stopped mid-write.

Every write into the crawl directory goes to a hidden temporary name and is renamed into
place when whole (crawl_io.crawldb.atomic): `.<name>.tmp<pid>@<machine>` (Parquet parts, rules,
CURRENT, the search index and its DuckDB `.wal`), and `.v000013.tmp/` (the version being
built). A process killed before the rename leaves one behind. Readers never see them; they
only take space, so they are removed once their writer is gone: when an interrupted crawl
stops, and when the next crawl starts.

Whether a writer is gone can be asked only of this machine's processes. A fetch worker on
another machine that shares the crawl directory (`crawl --join`) writes its host parts under
its own machine's name: such a file goes only once it has not changed for FOREIGN_STALE_S.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

from crawl_io.crawldb.atomic import machine
from crawl_io.crawldb.crawldir import SEGMENT_NAME, CrawlDir
from crawl_io.processes import alive

TEMP_NAME = re.compile(r"^\..+\.tmp(?:(?P<pid>\d+)@(?P<machine>[^/]+?))?(?:\.wal)?$")

# Another machine's writer cannot be asked whether it runs: its temporary file goes once it
# has not been written for this long. A fetch worker writes a host's part in one go, in
# seconds; an hour also absorbs the clocks of the file server and this machine disagreeing.
FOREIGN_STALE_S = 3600.0


def _writer_gone(path: Path) -> bool:
    """Is `path` a temporary name whose writer no longer runs (or is this process)? A
    name without a pid (the version folder) belongs to whoever holds the crawl lock; one of
    another machine is gone when it has not changed for FOREIGN_STALE_S."""
    match = TEMP_NAME.match(path.name)
    if match is None:
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
    """Temporary files and folders of writers that are gone, in the places a crawl writes:
    the crawl directory, crawldb/, index/ and the segments of the live round and later ones
    (older segments are finished and never written again)."""
    crawl = CrawlDir(root)
    try:
        live = crawl.current()
    except (ValueError, OSError):
        live = 0  # an unreadable CURRENT: look at every segment
    folders = [crawl.root, crawl.crawldb, crawl.index.parent]
    found: list[Path] = []
    for folder in folders:
        found += [p for p in _entries(folder) if _writer_gone(p)]
    for segment in _entries(crawl.segments):
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


def _entries(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except OSError:
        return []


def remove_stale_temp_files(root: str | os.PathLike) -> list[Path]:
    """Remove what stale_temp_files finds; return it. Call it only while holding the crawl
    lock: a version folder being built has no pid in its name."""
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

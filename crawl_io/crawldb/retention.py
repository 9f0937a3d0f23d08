"""Old rounds removed (luigi.cfg keep_rounds; 0 keeps all, else at least MIN_KEEP): their
versions and segments, each segment's fetchlog kept aside (crawl_io.crawldb.fetchlogs)."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from sharecrawl.crawl_io.crawldb.atomic import temp_name
from sharecrawl.crawl_io.crawldb.crawldir import SEGMENT_NAME, CrawlDir
from sharecrawl.crawl_io.crawldb.fetchlogs import kept_fetchlog
from sharecrawl.crawl_io.crawldb.tempfiles import folder_entries

MIN_KEEP = 2  # the live round and one to fall back on
log = logging.getLogger("sharecrawl")


def old_rounds(crawl: CrawlDir, keep: int) -> list[tuple[int, Path]]:
    """(round, folder) of the versions and segments before the last `keep` rounds, oldest
    first."""
    if keep <= 0:
        return []
    if keep < MIN_KEEP:
        raise ValueError(f"keep_rounds must be 0 or at least {MIN_KEEP}, not {keep}")
    first_kept = crawl.current() - keep + 1
    found = [(v, crawl.version_dir(v)) for v in crawl.versions() if v < first_kept]
    for segment in folder_entries(crawl.segments):
        match = SEGMENT_NAME.fullmatch(segment.name)
        if match and int(match[1]) < first_kept and segment.is_dir():
            found.append((int(match[1]), segment))
    return sorted(found)


def remove_old_rounds(crawl: CrawlDir, keep: int) -> list[Path]:
    """Remove what old_rounds finds (under the crawl lock), keeping each segment's fetchlog;
    renamed first, so no reader sees half of it."""
    removed = []
    for round_, path in old_rounds(crawl, keep):
        gone = temp_name(path)
        fetchlog = path / "fetchlog.parquet"
        try:
            if path.parent == crawl.segments and fetchlog.exists():
                kept = kept_fetchlog(crawl, round_)
                kept.parent.mkdir(exist_ok=True)
                os.replace(fetchlog, kept)  # one rename: the round's scans are in one place
            os.rename(path, gone)  # one step: from here on no reader sees it
        except OSError as e:
            log.warning("sharecrawl: cannot remove the old round's %s (%s)", path, e.strerror or e)
            continue
        shutil.rmtree(gone, ignore_errors=True)  # what is left, the next crawl removes
        removed.append(path)
    return removed

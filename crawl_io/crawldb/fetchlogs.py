"""Every finished round's fetchlog for the `fetchlog` view: in its segment, or kept as
`segments/fetchlogs/rNNNNNN.parquet` once keep_rounds removed the segment."""

from __future__ import annotations

import os
import re
from pathlib import Path

from sharecrawl.crawl_io.crawldb.crawldir import SEGMENT_NAME, CrawlDir
from sharecrawl.crawl_io.crawldb.version_manifest import read_problem

KEPT_FETCHLOGS = "fetchlogs"  # in segments/: the kept fetchlogs of removed rounds
KEPT_NAME = re.compile(r"r(\d{6,})\.parquet")


def kept_fetchlog(crawl: CrawlDir, round_: int) -> Path:
    return crawl.segments / KEPT_FETCHLOGS / f"r{round_:06d}.parquet"


def fetchlog_parts(segments: Path, version: int) -> list[Path]:
    """The fetchlog parts of the rounds up to `version`, by round. Names, not Paths, until
    a part is wanted: a year of hourly rounds is 8,760."""
    found: dict[int, Path] = {}
    for name in _names(segments / KEPT_FETCHLOGS):
        match = KEPT_NAME.fullmatch(name)
        if match and int(match[1]) <= version:
            found[int(match[1])] = segments / KEPT_FETCHLOGS / name
    for name in _names(segments):
        match = SEGMENT_NAME.fullmatch(name)
        if match and int(match[1]) <= version:
            part = os.path.join(segments, name, "fetchlog.parquet")
            if os.path.exists(part):
                found[int(match[1])] = Path(part)
    return [found[r] for r in sorted(found)]


def damaged_fetchlogs(segments: Path) -> list[tuple[Path, str]]:
    """(path, what is wrong) of each kept part that does not read in full."""
    folder = segments / KEPT_FETCHLOGS
    paths = [folder / name for name in sorted(_names(folder)) if KEPT_NAME.fullmatch(name)]
    return [(path, problem) for path in paths if (problem := read_problem(path))]


def _names(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return []

"""Every finished round's fetchlog, as the `fetchlog` view reads it:

    segments/r000042/fetchlog.parquet               round 42's, in its segment
    segments/fetchlogs/r000042.parquet              kept there when keep_rounds removed it
    segments/fetchlogs/r000001-r000128.parquet      a span: rounds 1 to 128 in one file

A query pays for every file it reads: over one part a round, a year of hourly rounds (8,000
parts of 1,000 scans) took `sql` 1.6 s to count the rows and 2.4 s to group them by host,
against 0.06 s and 0.11 s over spans of SPAN_ROUNDS rounds (bench/fetchlogs.py). So, after
each round, the crawl writes the span of every block of rounds (1-128, 129-256, ...) that is
all retired: every round of it at or before the live one, and before the last `keep_rounds`
when old rounds are removed. A span never holds a round that is run again: with
`keep_rounds`, `check --repair` falls back no further; without, it moves aside the spans
past the version it falls back on, whose rounds are still in their segments.

The view reads a span in place of its rounds' parts. A segment's own fetchlog stays (the
segment is the round's record); a kept part that a span holds is deleted one round after
the span was written, so a reader that listed the folder before the span existed still
finds the parts it listed.
"""

from __future__ import annotations

import logging
import os
import re
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from crawl_io.atomic import write_parquet
from crawl_io.crawldir import SEGMENT_NAME, CrawlDir
from crawl_io.host_parts import read_parquet
from crawl_io.schema import FETCHLOG
from crawl_io.version_manifest import first_line, read_problem

KEPT_FETCHLOGS = "fetchlogs"  # in segments/: kept fetchlogs of removed rounds, and spans
SPAN_ROUNDS = 128  # a year of hourly rounds: 68 spans, at most 127 parts besides
SPAN_NAME = re.compile(r"r(\d{6,})-r(\d{6,})\.parquet")
KEPT_NAME = re.compile(r"r(\d{6,})\.parquet")
log = logging.getLogger("sharecrawl")


@dataclass(frozen=True)
class Span:
    first: int
    last: int
    path: Path


def kept_fetchlog(crawl: CrawlDir, round_: int) -> Path:
    """Where the fetchlog of a removed round's segment is kept (crawl_io.retention)."""
    return crawl.segments / KEPT_FETCHLOGS / f"r{round_:06d}.parquet"


def span_path(segments: Path, first: int, last: int) -> Path:
    return segments / KEPT_FETCHLOGS / f"r{first:06d}-r{last:06d}.parquet"


def spans(segments: Path) -> list[Span]:
    """The spans written, by first round; one that overlaps an earlier one (none is ever
    written so) is not one, lest its rounds be read twice."""
    found = []
    for name in _names(segments / KEPT_FETCHLOGS):
        match = SPAN_NAME.fullmatch(name)
        if match and int(match[1]) <= int(match[2]):
            found.append(Span(int(match[1]), int(match[2]), segments / KEPT_FETCHLOGS / name))
    kept: list[Span] = []
    for span in sorted(found, key=lambda s: (s.first, s.last)):
        if not kept or span.first > kept[-1].last:
            kept.append(span)
    return kept


def holder_of(written: list[Span]) -> Callable[[int], Span | None]:
    """The span of those `written` (as spans() gives them: sorted, apart) that holds a
    round, or None."""
    firsts = [s.first for s in written]

    def holder(round_: int) -> Span | None:
        i = bisect_right(firsts, round_) - 1
        return written[i] if i >= 0 and written[i].last >= round_ else None

    return holder


def held_by(written: list[Span]) -> Callable[[int], bool]:
    """Whether one of the spans `written` holds a round."""
    holder = holder_of(written)
    return lambda round_: holder(round_) is not None


def round_parts(segments: Path, wanted: Callable[[int], bool]) -> dict[int, Path]:
    """Each wanted round's own fetchlog part: in its segment, else kept after the segment
    went. Names, not Paths, until a part is wanted: a year of hourly rounds is 8,760."""
    found: dict[int, Path] = {}
    for name in _names(segments / KEPT_FETCHLOGS):
        match = KEPT_NAME.fullmatch(name)
        if match and wanted(int(match[1])):
            found[int(match[1])] = segments / KEPT_FETCHLOGS / name
    for name in _names(segments):
        match = SEGMENT_NAME.fullmatch(name)
        if match and wanted(int(match[1])):
            part = os.path.join(segments, name, "fetchlog.parquet")
            if os.path.exists(part):
                found[int(match[1])] = Path(part)
    return found


def fetchlog_parts(segments: Path, version: int) -> list[Path]:
    """The parts the `fetchlog` view reads for the rounds up to `version` (from folder
    `segments`): the spans within them, and the parts of the rounds no such span holds; by
    round."""
    within = [s for s in spans(segments) if s.last <= version]
    held = held_by(within)
    parts = [(s.first, s.path) for s in within]
    parts += round_parts(segments, lambda r: r <= version and not held(r)).items()
    return [part for _, part in sorted(parts)]


def compact_fetchlogs(crawl: CrawlDir, keep: int, span: int | None = None) -> list[Path]:
    """After a round (under the crawl lock): delete the kept parts that spans written before
    now hold, then write the span of each retired block of `span` rounds (SPAN_ROUNDS) not
    yet written; return the spans written. A block with a part that does not read is left
    as it is, with one warning (the view warns of the part too); a span that cannot be
    written (a full disk) is one warning, and the next round tries again."""
    span = span or SPAN_ROUNDS
    written = spans(crawl.segments)
    held = held_by(written)
    every = round_parts(crawl.segments, lambda r: True)
    _delete_held(crawl.segments, written, {r: p for r, p in every.items() if held(r)})
    retired = crawl.current() - keep  # keep 0: every round up to the live one
    parts = {r: p for r, p in every.items() if not held(r)}
    blocks = {(r - 1) // span for r in parts}
    made = []
    for block in sorted(blocks):
        first, last = block * span + 1, (block + 1) * span
        if last > retired or any(s.first <= last and first <= s.last for s in written):
            continue  # not retired yet; or partly in a span of another size (SPAN_ROUNDS changed)
        rows = _read_block([parts[r] for r in sorted(parts) if first <= r <= last])
        if rows is None:
            continue
        path = span_path(crawl.segments, first, last)
        try:
            write_parquet(rows, path, durable=True)
        except OSError as e:
            log.warning("sharecrawl: cannot write %s (%s); the next round tries again", path, e)
            continue
        made.append(path)
    return made


def _delete_held(segments: Path, written: list[Span], held: dict[int, Path]) -> None:
    """Delete the kept parts of the rounds `held` by spans `written`, when their span reads
    in full (a damaged span keeps them: `check --repair` moves it aside, and they stand in
    for it). A segment's own fetchlog is never deleted here."""
    holder_of_round = holder_of(written)
    reads: dict[Path, bool] = {}
    for round_, part in held.items():
        holder = holder_of_round(round_)
        if part.parent != segments / KEPT_FETCHLOGS or holder is None:
            continue
        if holder.path not in reads:
            reads[holder.path] = read_problem(holder.path) is None
        if not reads[holder.path]:
            continue
        try:
            part.unlink(missing_ok=True)
        except OSError as e:
            log.warning("sharecrawl: cannot delete %s (%s); the next round tries again", part, e)


def damaged_fetchlogs(segments: Path) -> list[tuple[Path, str]]:
    """(path, what is wrong) of each span and kept part that does not read in full (footer,
    every page and its CRC): the only copy of its rounds' scans once their segments went.
    A segment's own fetchlog is its segment's."""
    found = []
    for name in sorted(_names(segments / KEPT_FETCHLOGS)):
        if SPAN_NAME.fullmatch(name) or KEPT_NAME.fullmatch(name):
            path = segments / KEPT_FETCHLOGS / name
            problem = read_problem(path)
            if problem:
                found.append((path, problem))
    return found


def _read_block(parts: list[Path]) -> pa.Table | None:
    """The rows of a block's parts, or None (said once) when one does not read."""
    tables = []
    for part in parts:
        try:
            tables.append(read_parquet(part, FETCHLOG))
        except (OSError, pa.ArrowException) as e:
            log.warning(
                "sharecrawl: %s does not read (%s); its block of rounds stays in one part a "
                "round, and `sql` leaves that part out",
                part,
                first_line(e),
            )
            return None
    return pa.concat_tables(tables)


def _names(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return []

"""What is new, and the status line, read once per served version from the pinned index and
the crawl's history up to that version (the `changes` rows, crawl_io.crawldb.history). A work
is new when every copy of it was added within NEW_DAYS of the version's newest addition (a
copy moved, changed or retagged is not new)."""

from __future__ import annotations

import logging
from pathlib import Path

import duckdb

from sharecrawl.crawl_io.crawldb.crawldir import VERSION_NAME
from sharecrawl.crawl_io.crawldb.history import change_parts
from sharecrawl.crawl_io.crawldb.version_manifest import published_time, read_problem
from sharecrawl.queries.index_store import IndexFile

log = logging.getLogger("sharecrawl.web")
NEW_DAYS = 7
NEW_LIMIT = 200  # newest works considered for the page

_WORK_COLUMNS = (
    "work_id, kind, artist, title, album, year, series, season, episode, copies, hosts, "
    "online_copies, online_hosts, best_host, best_share, best_path"
)


def new_works(file: IndexFile, version_dir: Path, days: int = NEW_DAYS) -> list[dict]:
    """Work rows (search results' columns, `first_seen`) new in the last `days`, newest first.
    A history part that does not read is left out, with one line in the log."""
    version = VERSION_NAME.fullmatch(version_dir.name)
    parts = change_parts(version_dir.parent, int(version[1])) if version else []
    try:
        return _new_works(file, parts, days)
    except duckdb.Error:
        pass  # most likely a part that does not read: found and left out
    damaged = {p: why for p in parts if (why := read_problem(p))}
    for part, why in damaged.items():
        log.warning(
            "%s: %s; left out of what is new (`sharecrawl check --repair` sets it aside)",
            part,
            why,
        )
    try:
        return _new_works(file, [p for p in parts if p not in damaged], days)
    except duckdb.Error:  # not the parts: the page works without the new list
        return []


def _new_works(file: IndexFile, parts: list[Path], days: int) -> list[dict]:
    if not parts:
        return []
    with file.cursor() as con:
        rows = con.execute(  # the file list travels as a parameter
            f"""
        WITH f AS (
            SELECT host, share, path, published AS first_seen FROM read_parquet(?)
            WHERE change = 'added'
        ),
        fresh AS (
            SELECT host, share, path, max(first_seen) AS first_seen FROM f
            WHERE first_seen >= (SELECT max(first_seen) FROM f) - INTERVAL {int(days)} DAY
            GROUP BY ALL
        ),
        candidates AS (
            SELECT DISTINCT c.work_id FROM idx.copies c JOIN fresh USING (host, share, path)
        ),
        seen AS (
            SELECT c.work_id, min(fresh.first_seen) AS first_seen,
                   count(*) = count(fresh.first_seen) AS all_fresh
            FROM idx.copies c SEMI JOIN candidates USING (work_id)
            LEFT JOIN fresh USING (host, share, path)
            GROUP BY c.work_id
        )
        SELECT {_WORK_COLUMNS}, s.first_seen
        FROM seen s JOIN idx.works w USING (work_id)
        WHERE s.all_fresh
        ORDER BY s.first_seen DESC, w.work_id
        LIMIT {NEW_LIMIT}
            """,
            [[str(p) for p in parts]],
        )
        columns = [d[0] for d in rows.description or ()]
        return [dict(zip(columns, row, strict=True)) for row in rows.fetchall()]


def status(file: IndexFile, version_dir: Path) -> dict:
    """Hosts online, media files and works of the version, and when it was published (its
    MANIFEST.json's time)."""
    with file.cursor() as con:
        online, total = con.execute(
            "SELECT count(*) FILTER (WHERE online), count(*) FROM idx.hosts"
        ).fetchone()
    published = published_time(version_dir)
    return {
        "version": file.version,
        "hosts_online": int(online),
        "hosts": int(total),
        "media": int(file.meta["media"]),
        "works": int(file.meta["works"]),
        "published": published.isoformat(timespec="seconds") if published else None,
    }

"""What is new, and the status line, read once per served version from the pinned index and
that version's crawldb folder (files' first_seen). A work is new when every copy of it was
first seen within NEW_DAYS of the version's newest addition."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from sharecrawl.crawl_io.crawldb.host_parts import table_parts
from sharecrawl.queries.index_store import IndexFile

NEW_DAYS = 7
NEW_LIMIT = 200  # newest works considered for the page

_WORK_COLUMNS = (
    "work_id, kind, artist, title, album, year, series, season, episode, copies, hosts, "
    "online_copies, online_hosts, best_host, best_share, best_path"
)


def new_works(file: IndexFile, version_dir: Path, days: int = NEW_DAYS) -> list[dict]:
    """Work rows (search results' columns, `first_seen`) new in the last `days`, newest first."""
    parts = [str(p) for p in table_parts(version_dir, "files")]
    if not parts:
        return []
    with file.cursor() as con:
        try:  # the file list travels as a parameter
            rows = con.execute(
                f"""
            WITH f AS (
                SELECT host, share, path, first_seen FROM read_parquet(?)
                WHERE NOT is_dir AND first_seen IS NOT NULL
            ),
            fresh AS (
                SELECT host, share, path, first_seen FROM f
                WHERE first_seen >= (SELECT max(first_seen) FROM f) - INTERVAL {int(days)} DAY
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
                [parts],
            )
        except duckdb.Error:  # a damaged files part: the page works without the new list
            return []
        columns = [d[0] for d in rows.description or ()]
        return [dict(zip(columns, row, strict=True)) for row in rows.fetchall()]


def status(file: IndexFile, version_dir: Path) -> dict:
    """Hosts online, media files and works of the version, and when it was published (its
    hosts table is the last thing a round writes)."""
    with file.cursor() as con:
        online, total = con.execute(
            "SELECT count(*) FILTER (WHERE online), count(*) FROM idx.hosts"
        ).fetchone()
    try:
        published = datetime.fromtimestamp(os.stat(version_dir / "hosts.parquet").st_mtime, UTC)
    except OSError:
        published = None
    return {
        "version": file.version,
        "hosts_online": int(online),
        "hosts": int(total),
        "media": int(file.meta["media"]),
        "works": int(file.meta["works"]),
        "published": published.isoformat(timespec="seconds") if published else None,
    }

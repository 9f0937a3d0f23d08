"""What is new, and the status line, read once per served version from the pinned index and
that version's crawldb folder (files' first_seen). A work is new when every copy of it was
first seen within NEW_DAYS of the version's newest addition."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import duckdb

NEW_DAYS = 7
NEW_LIMIT = 200  # newest works considered for the page

_WORK_COLUMNS = (
    "work_id, kind, artist, title, album, year, series, season, episode, copies, hosts, "
    "online_copies, online_hosts, best_host, best_share, best_path"
)


def _files_parts(version_dir: Path) -> list[str]:
    folder = version_dir / "files"
    return sorted(str(p) for p in folder.glob("*.parquet")) if folder.is_dir() else []


def new_works(
    con: duckdb.DuckDBPyConnection, version_dir: Path, days: int = NEW_DAYS
) -> list[dict]:
    """Work rows (search results' columns, `first_seen`) new in the last `days`, newest first."""
    parts = _files_parts(version_dir)
    if not parts:
        return []
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


def round_time(version_dir: Path) -> datetime | None:
    """When the version was published: its hosts table is the last thing a round writes."""
    try:
        stamp = os.stat(version_dir / "hosts.parquet").st_mtime
    except OSError:
        return None
    return datetime.fromtimestamp(stamp, UTC)


def status(con: duckdb.DuckDBPyConnection, version: str, version_dir: Path) -> dict:
    """Hosts online, media files and works of the version, and when it was published."""
    online, total = con.execute(
        "SELECT count(*) FILTER (WHERE online), count(*) FROM idx.hosts"
    ).fetchone()
    meta = dict(con.execute("SELECT key, value FROM idx.meta").fetchall())
    media = meta.get("media")
    if media is None:
        media = con.execute("SELECT count(*) FROM idx.copies").fetchone()[0]
    works = meta.get("works")
    if works is None:
        works = con.execute("SELECT count(*) FROM idx.works").fetchone()[0]
    published = round_time(version_dir)
    return {
        "version": version,
        "hosts_online": int(online),
        "hosts": int(total),
        "media": int(media),
        "works": int(works),
        "published": published.isoformat(timespec="seconds") if published else None,
    }

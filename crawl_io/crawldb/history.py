"""The crawl's history of media changes (`crawldb/changes/rNNNNNN.parquet`, the `changes`
view): what each round changed in the media rows, in the crawl's words (schema.CHANGES). Made
by Update from the round's media-changes record (crawl_io.crawldb.media_changes), so it costs
what changed; kept `history_days` whatever `keep_rounds` removes, the oldest parts pruned
first. A host offline keeps its rows (nothing is deleted); a host retired is deleted once."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from sharecrawl.crawl_io.crawldb.atomic import write_parquet
from sharecrawl.crawl_io.crawldb.media_changes import INDEXED_COLUMNS
from sharecrawl.crawl_io.crawldb.media_changes import SCHEMA as RECORD
from sharecrawl.crawl_io.crawldb.version_manifest import read_problem
from sharecrawl.crawl_io.duck import cursor
from sharecrawl.crawl_io.schema import CHANGES

CHANGES_DIR = "changes"  # in crawldb/, beside the versions
PART_NAME = re.compile(r"r(\d{6,})\.parquet")
PUBLISHED_KEY = b"sharecrawl.published"
# The tags whose change makes a row `retagged` (else a new size, time or format: `changed`).
TAG_FIELDS = ("artist", "title", "album", "albumartist", "genre", "year")
TAG_FIELDS += ("series", "season", "episode")
FILE_FIELDS = ("size", "mtime", "kind", "format", "bitrate_kbps")

_CLASSIFIED = """
WITH old AS (
    SELECT * EXCLUDE (came), regexp_extract(path, '[^/]*$') AS name FROM rec
    WHERE NOT came AND (size IS NOT NULL OR mtime IS NOT NULL)  -- else a path that only came
),
new AS (SELECT * EXCLUDE (came), regexp_extract(path, '[^/]*$') AS name FROM rec WHERE came),
gone AS (SELECT * FROM old ANTI JOIN new USING (host, share, path)),
came AS (SELECT * FROM new ANTI JOIN old USING (host, share, path)),
-- a file moved within its host: gone from one place, come at another with the same name, size
-- and mtime (what the fetcher matches to keep its tags); pairs taken in path order
g AS (SELECT *, row_number() OVER (PARTITION BY host, name, size, mtime ORDER BY share, path) k
      FROM gone),
c AS (SELECT *, row_number() OVER (PARTITION BY host, name, size, mtime ORDER BY share, path) k
      FROM came),
moves AS (
    SELECT c.*, g.share AS share_before, g.path AS path_before
    FROM c JOIN g USING (host, name, size, mtime, k)
),
same_path AS (
    SELECT n.*, o.size AS size_before,
           list_filter([{fields}], lambda f: f.before IS DISTINCT FROM f.after) AS fields,
           {file_differs} AS file_differs
    FROM old o JOIN new n USING (host, share, path)
)
SELECT host, share, path, 'added' AS change, kind, NULL AS size_before, size AS size_after,
       NULL AS share_before, NULL AS path_before, NULL AS fields, artist, title, album
FROM came ANTI JOIN moves USING (host, share, path)
UNION ALL
SELECT host, share, path, 'deleted', kind, size, NULL, NULL, NULL, NULL, artist, title, album
FROM gone g WHERE NOT EXISTS (
    SELECT 1 FROM moves m
    WHERE m.host = g.host AND m.share_before = g.share AND m.path_before = g.path)
UNION ALL
SELECT host, share, path, 'moved', kind, size, size, share_before, path_before, NULL,
       artist, title, album
FROM moves
UNION ALL
SELECT host, share, path, CASE WHEN len(fields) > 0 THEN 'retagged' ELSE 'changed' END, kind,
       size_before, size, NULL, NULL, CASE WHEN len(fields) > 0 THEN fields END,
       artist, title, album
FROM same_path WHERE len(fields) > 0 OR file_differs
ORDER BY host, share, path
"""


def _sql() -> str:
    fields = ", ".join(
        f"{{'field': '{f}', 'before': o.{f}::VARCHAR, 'after': n.{f}::VARCHAR}}" for f in TAG_FIELDS
    )
    differs = " OR ".join(f"o.{f} IS DISTINCT FROM n.{f}" for f in FILE_FIELDS)
    return _CLASSIFIED.format(fields=fields, file_differs=differs)


def round_changes(
    record: pa.Table, retired: pa.Table, round_: int, published: datetime
) -> pa.Table:
    """The CHANGES rows of a round from its media-changes record (media_changes.SCHEMA, every
    host's) and the stored media rows of the hosts it retired (deleted, all of them)."""
    gone = retired.select(list(INDEXED_COLUMNS)).append_column(
        "came", pa.repeat(False, retired.num_rows)
    )
    rec = pa.concat_tables([record.cast(RECORD), gone.cast(RECORD)])
    con = cursor()
    try:
        con.register("rec", rec)
        found = con.sql(_sql()).to_arrow_table()
    finally:
        con.close()
    n = found.num_rows
    columns = {"round": pa.repeat(round_, n), "published": pa.repeat(published, n)}
    return pa.table(
        {f.name: columns[f.name] if f.name in columns else found[f.name] for f in CHANGES}
    ).cast(CHANGES)


def changes_dir(crawldb: Path) -> Path:
    return crawldb / CHANGES_DIR


def part_path(crawldb: Path, round_: int) -> Path:
    return changes_dir(crawldb) / f"r{round_:06d}.parquet"


def write_changes(crawldb: Path, round_: int, rows: pa.Table, published: datetime) -> None:
    """Write round `round_`'s part (durable: it goes with the version it describes); a round
    that changed nothing has none (a killed attempt's is removed)."""
    path = part_path(crawldb, round_)
    if not rows.num_rows:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(exist_ok=True)
    meta = {PUBLISHED_KEY: published.astimezone(UTC).isoformat().encode()}
    write_parquet(rows, path, durable=True, metadata=meta, compact=True)


def change_parts(crawldb: Path, up_to: int) -> list[Path]:
    """The parts of rounds 1 to `up_to` (the live round: a later one is unpublished), oldest
    first."""
    try:
        names = os.listdir(changes_dir(crawldb))
    except OSError:
        return []
    found = ((int(m[1]), name) for name in names if (m := PART_NAME.fullmatch(name)))
    return [changes_dir(crawldb) / name for n, name in sorted(found) if n <= up_to]


def damaged_changes(crawldb: Path) -> list[tuple[Path, str]]:
    """(path, what is wrong) of each history part that does not read in full (`check`)."""
    parts = change_parts(crawldb, 2**31)
    return [(path, problem) for path in parts if (problem := read_problem(path))]


def part_published(path: Path) -> datetime | None:
    """When the round of a part was published, from its footer (None: it does not read)."""
    try:
        meta = pq.read_metadata(path).metadata or {}
        return datetime.fromisoformat(meta[PUBLISHED_KEY].decode())
    except (OSError, KeyError, ValueError, pa.ArrowException):
        return None


def prune_changes(crawldb: Path, days: int, now: datetime) -> list[Path]:
    """Remove the parts published more than `days` ago (0 keeps every one), oldest first
    until one is younger: a round reads the footers of what it removes, and of one more."""
    if days <= 0:
        return []
    removed = []
    for path in change_parts(crawldb, 2**31):
        published = part_published(path)
        if published is None:
            continue  # unreadable: left for the operator (the view names it)
        if published >= now - timedelta(days=days):
            break
        path.unlink(missing_ok=True)
        removed.append(path)
    return removed

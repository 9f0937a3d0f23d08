"""Per-prefix crawl statistics as pure functions, under jobs.mr_prefix_stats (after
CrawlDbExtendedStat in "Optimising document collection with Nutch"): PREFIX_STATS rows down to
`depth` folders; prefixes under `min_entries` go unless something under them was deleted."""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

from sharecrawl.crawl_io.duck import cursor
from sharecrawl.crawl_io.mediatypes import MEDIA_NAME
from sharecrawl.crawl_io.schema import FILES, MEDIA, PREFIX_STATS

KEY = ("host", "share", "prefix")
COUNTS = tuple(f.name for f in PREFIX_STATS if f.name not in (*KEY, "depth"))
Source = pa.Table | str | list[str] | None  # a table, Parquet parts' paths, or None (empty)

# Every entry counts under each of its ancestors down to $depth folders. Media are files whose
# extension is a media one (crawl_io.mediatypes.media_kind: a name needs a stem before the
# dot). Deleted files (in old, not in new) count only in n_deleted. An entry's depths are a
# list unnested, not a lateral join with range(), which DuckDB runs row by row (5x slower).
SQL = """
WITH changes AS (
    SELECT coalesce(n.share, o.share) AS share, coalesce(n.path, o.path) AS path,
           o.path IS NULL AS is_new, n.path IS NULL AS is_deleted,
           n.path IS NOT NULL AND o.path IS NOT NULL
               AND (n.size <> o.size OR n.mtime <> o.mtime) AS is_changed
    FROM (SELECT share, path, size, mtime FROM new_files WHERE NOT is_dir) n
    FULL OUTER JOIN (SELECT share, path, size, mtime FROM old_files WHERE NOT is_dir) o
        ON n.share = o.share AND n.path = o.path
),
entries AS (
    SELECT f.share, f.path, f.is_dir, CASE WHEN f.is_dir THEN 0 ELSE f.size END AS size,
           NOT f.is_dir AND regexp_matches(f.name, $media_name, 'i') AS is_media,
           coalesce(c.is_new, false) AS is_new, coalesce(c.is_changed, false) AS is_changed,
           false AS is_deleted, NOT f.is_dir AND m.tag_error IS NOT NULL AS is_error
    FROM new_files f
    LEFT JOIN changes c ON NOT f.is_dir AND c.share = f.share AND c.path = f.path
    LEFT JOIN (SELECT share, path, any_value(tag_error) AS tag_error FROM media
               GROUP BY share, path) m ON m.share = f.share AND m.path = f.path
    UNION ALL
    SELECT share, path, false, 0, false, false, false, true, false FROM changes WHERE is_deleted
),
prefixed AS (
    SELECT e.*, string_split(e.path, '/') AS parts FROM entries e
)
SELECT share, array_to_string(parts[1:d], '/') AS prefix, d::INT AS depth,
       count(*) FILTER (NOT is_dir AND NOT is_deleted) AS n_files,
       count(*) FILTER (is_dir) AS n_folders,
       count(*) FILTER (is_media) AS n_media,
       coalesce(sum(size), 0)::BIGINT AS bytes,
       coalesce(sum(size) FILTER (is_media), 0)::BIGINT AS media_bytes,
       count(*) FILTER (is_new) AS n_new,
       count(*) FILTER (is_changed) AS n_changed,
       count(*) FILTER (is_deleted) AS n_deleted,
       count(*) FILTER (is_error) AS n_errors
FROM (SELECT *, unnest(range(0, least(len(parts) - 1, $depth) + 1)) AS d FROM prefixed)
GROUP BY ALL
"""


def prefix_rows(new_files: Source, old_files: Source, media: Source, depth: int) -> list[tuple]:
    """(share, prefix, depth, *COUNTS) of every prefix with anything under it, no threshold, from a
    host's files now and before and its media."""
    con = cursor()
    try:
        for name, source, schema in (
            ("new_files", new_files, FILES),
            ("old_files", old_files, FILES),
            ("media", media, MEDIA),
        ):
            if isinstance(source, str | list):
                con.read_parquet(source).create_view(name)
            else:
                con.register(name, schema.empty_table() if source is None else source)
        return con.execute(SQL, {"media_name": MEDIA_NAME, "depth": depth}).fetchall()
    finally:
        con.close()


def keep_row(row: dict, min_entries: int) -> bool:
    return row["n_files"] + row["n_folders"] >= min_entries or row["n_deleted"] > 0


def stats_table(rows: Iterable[dict]) -> pa.Table:
    rows = sorted(rows, key=lambda r: (r["host"], r["share"], r["prefix"]))
    return pa.Table.from_pylist(rows, PREFIX_STATS)


def host_prefix_stats(
    host: str, new_files: Source, old_files: Source, media: Source, depth: int, min_entries: int
) -> pa.Table:
    """One host's PREFIX_STATS rows, in this process."""
    names = ("share", "prefix", "depth", *COUNTS)
    rows = prefix_rows(new_files, old_files, media, depth)
    dicts = ({"host": host, **dict(zip(names, r, strict=True))} for r in rows)
    return stats_table(r for r in dicts if keep_row(r, min_entries))


def sum_counts(values: Iterable[list]) -> list:
    """Sum count vectors [depth, *counts] of one prefix (depth is the same in all)."""
    values = list(values)
    return [values[0][0], *(sum(c) for c in zip(*(v[1:] for v in values), strict=True))]


def carried_over(old_stats: pa.Table, hosts: Iterable[str], min_entries: int) -> pa.Table:
    """Rows of hosts the round did not touch, as this round's: nothing new, changed or
    deleted under them (so what only a deletion kept goes), the rest as it was."""
    con = cursor()
    con.register("old", old_stats)
    table = con.sql(
        """SELECT * REPLACE (0::BIGINT AS n_new, 0::BIGINT AS n_changed, 0::BIGINT AS n_deleted)
           FROM old WHERE list_contains($hosts, host) AND n_files + n_folders >= $min
           ORDER BY host, share, prefix""",
        params={"hosts": sorted(set(hosts)), "min": min_entries},
    ).to_arrow_table()
    con.close()
    return table.cast(PREFIX_STATS)


def is_complete_round(round_: int, stats_every: int) -> bool:
    """Every `stats_every`-th round recomputes every host (0 or less: never)."""
    return stats_every > 0 and round_ % stats_every == 0

"""Per-prefix statistics of one host's files (seed 002), computed with DuckDB from the host's
new and previous file rows: sizes per folder prefix down to `depth`, and the round's
new / changed / deleted files under each prefix."""

from __future__ import annotations

import duckdb
import pyarrow as pa

from crawl_io.mediatypes import AUDIO_EXTENSIONS, VIDEO_EXTENSIONS
from crawl_io.schema import PREFIX_STATS

SQL = """
WITH changes AS (
    SELECT coalesce(n.share, o.share) AS share, coalesce(n.path, o.path) AS path,
           o.path IS NULL AS is_new, n.path IS NULL AS is_deleted,
           n.path IS NOT NULL AND o.path IS NOT NULL
               AND (n.size <> o.size OR n.mtime <> o.mtime) AS is_changed
    FROM (SELECT * FROM new_files WHERE NOT is_dir) n
    FULL OUTER JOIN (SELECT * FROM old_files WHERE NOT is_dir) o
        ON n.share = o.share AND n.path = o.path
),
entries AS (
    SELECT f.share, f.path, f.is_dir, f.size,
           lower(regexp_extract(f.name, '\\.([^.]+)$', 1)) IN (SELECT unnest($media)) AS is_media,
           coalesce(c.is_new, false) AS is_new, coalesce(c.is_changed, false) AS is_changed,
           false AS is_deleted, m.tag_error IS NOT NULL AS is_error
    FROM new_files f
    LEFT JOIN changes c ON c.share = f.share AND c.path = f.path
    LEFT JOIN media m ON m.share = f.share AND m.path = f.path
    UNION ALL
    SELECT share, path, false, 0, false, false, false, true, false FROM changes WHERE is_deleted
),
prefixed AS (
    SELECT e.*, string_split(e.path, '/') AS parts FROM entries e
)
SELECT $host AS host, share, array_to_string(parts[1:d], '/') AS prefix, d::INT AS depth,
       count(*) FILTER (NOT is_dir AND NOT is_deleted) AS n_files,
       count(*) FILTER (is_dir) AS n_folders,
       count(*) FILTER (is_media) AS n_media,
       coalesce(sum(size), 0)::BIGINT AS bytes,
       coalesce(sum(size) FILTER (is_media), 0)::BIGINT AS media_bytes,
       count(*) FILTER (is_new) AS n_new,
       count(*) FILTER (is_changed) AS n_changed,
       count(*) FILTER (is_deleted) AS n_deleted,
       count(*) FILTER (is_error) AS n_errors
FROM prefixed, range(0, least(len(parts) - 1, $depth) + 1) AS t(d)
GROUP BY ALL
HAVING count(*) FILTER (NOT is_deleted) >= $min_entries OR count(*) FILTER (is_deleted) > 0
ORDER BY share, prefix
"""


def host_prefix_stats(
    host: str, new_files: pa.Table, old_files: pa.Table, media: pa.Table, depth: int,
    min_entries: int,
) -> pa.Table:  # fmt: skip
    con = duckdb.connect()
    for name, table in (("new_files", new_files), ("old_files", old_files), ("media", media)):
        con.register(name, table)
    params = {
        "media": sorted(AUDIO_EXTENSIONS | VIDEO_EXTENSIONS), "host": host, "depth": depth,
        "min_entries": min_entries,
    }  # fmt: skip
    result = con.sql(SQL, params=params).to_arrow_table()
    con.close()
    return result.cast(PREFIX_STATS)

"""How Update merges a host's stored rows with what the round listed and read (files, media,
and the hashes the next walk sees past refused folders); pipeline.host_rewrite applies them."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from sharecrawl.crawl_io.crawldb.media_changes import host_changes
from sharecrawl.crawl_io.duck import cursor
from sharecrawl.crawl_io.schema import FILES, MEDIA
from sharecrawl.jobs.subtree_hash import summarize
from sharecrawl.pipeline import repartition


def merged_files(old: pa.Table, listing: pa.Table, log: pa.Table, drop: set[str]) -> pa.Table:
    """The host's rows now: stored rows of partitions not rescanned, plus the new listings
    (first_seen kept from the stored row of the same path, unless the clock has since moved
    back past it: a row is never first seen after a scan that saw it). A folder whose listing was
    refused keeps its stored rows below it: a folder we may not read is not a deleted one."""
    con = cursor()
    con.register("old", old)
    con.register("listing", listing)
    con.register("log", log)
    sql = """
        WITH denied AS (
            SELECT DISTINCT partition_id, share, unnest(denied) || '/' AS below FROM log
            WHERE status IN ('changed', 'new') AND coalesce(n_denied, 0) > 0
        )
        SELECT l.*, least(o.first_seen, f.started) AS first_seen, f.started AS last_seen
        FROM listing l JOIN log f USING (partition_id)
        LEFT JOIN old o ON o.share = l.share AND o.path = l.path AND o.is_dir = l.is_dir
        UNION ALL BY NAME
        SELECT * FROM old WHERE NOT list_contains($drop, partition_id)
        UNION ALL BY NAME
        SELECT * FROM old o WHERE list_contains($drop, o.partition_id) AND EXISTS (
            SELECT 1 FROM denied d WHERE d.partition_id = o.partition_id
                AND d.share = o.share AND starts_with(o.path, d.below))
        ORDER BY share, path
    """
    table = con.sql(sql, params={"drop": sorted(drop)}).to_arrow_table()
    con.close()
    return table.select(FILES.names).cast(FILES)


def denied_hashes(files: pa.Table, log: pa.Table) -> dict[str, str]:
    """partition_id -> hash without the kept rows below this round's denied folders, for the
    partitions holding such rows: what the next walk hashes while those folders stay shut
    (re-partitioning recomputes hashes from the rows, which include the kept ones)."""
    con = cursor()
    con.register("files", files)
    con.register("log", log)
    hidden = """
        WITH below AS (
            SELECT DISTINCT share, unnest(denied) || '/' AS prefix FROM log
            WHERE coalesce(n_denied, 0) > 0
        )
        SELECT DISTINCT f.share, f.path, f.partition_id FROM files f
        JOIN below b ON f.share = b.share AND starts_with(f.path, b.prefix)
    """
    affected = [
        pid for (pid,) in con.sql(f"SELECT DISTINCT partition_id FROM ({hidden})").fetchall()
    ]
    visible = con.sql(f"""
        WITH hidden AS ({hidden})
        SELECT f.* FROM files f ANTI JOIN hidden h ON f.share = h.share AND f.path = h.path
        WHERE f.partition_id IN (SELECT partition_id FROM hidden)
    """).to_arrow_table()
    con.close()
    summaries = summarize(visible)
    return {pid: summaries.get(pid, repartition.EMPTY)["hash"] for pid in affected}


def merged_media(old: pa.Table, fetched: pa.Table, files: pa.Table) -> tuple[pa.Table, pa.Table]:
    """Stored tags of files still present unchanged, plus the tags read this round; each
    with its file's partition. And what changed for the search index
    (crawl_io.crawldb.media_changes): the stored rows not kept, and the rows read this
    round. A kept row is its stored row but for its partition, so nothing else can
    differ."""
    con = cursor()
    for name, table in (("old", old), ("fetched", fetched), ("files", files)):
        con.register(name, table)
    sql = """
        WITH kept AS (
            SELECT o.*, false AS fresh FROM old o
            JOIN files f ON f.share = o.share AND f.path = o.path AND f.size = o.size
                        AND f.mtime = o.mtime AND NOT f.is_dir
            ANTI JOIN fetched n ON n.share = o.share AND n.path = o.path
            UNION ALL BY NAME
            SELECT *, true AS fresh FROM fetched
        ),
        merged AS (
            -- first seen: the stored row's, a moved file's own (its tags came with it), else
            -- its files row's; last changed: this scan for a row read anew
            SELECT k.* REPLACE (
                f.partition_id AS partition_id,
                coalesce(k.first_seen, f.first_seen) AS first_seen,
                CASE WHEN fresh THEN f.last_seen
                     ELSE coalesce(k.last_changed, k.tagged_at) END AS last_changed
            ), false AS gone FROM kept k
            JOIN files f ON f.share = k.share AND f.path = k.path
        )
        SELECT * FROM merged
        UNION ALL BY NAME
        SELECT o.*, true AS gone FROM old o
        ANTI JOIN (SELECT share, path FROM merged WHERE NOT fresh) m
            ON m.share = o.share AND m.path = o.path
        ORDER BY share, path
    """
    table = con.sql(sql).to_arrow_table()
    con.close()
    gone = table["gone"]
    rows = table.filter(pc.invert(gone))
    media = rows.select(MEDIA.names).cast(MEDIA)
    changes = host_changes(table.filter(gone), media.filter(rows["fresh"]))
    return media, changes

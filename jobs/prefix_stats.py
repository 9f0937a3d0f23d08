"""Per-prefix crawl statistics (seed 002, "CrawlDbExtendedStat") as an mrjob job.

For every (host, share, folder prefix) down to `depth` folders: the files, folders, media and
bytes strictly below the prefix ('' is the share root), and the round's new / changed /
deleted files and media tag errors under it. Prefixes with fewer than `min_entries` entries
are dropped, unless something under them was deleted this round.

Input: a manifest with one JSON object per line, one line per host:
    {"host": "pc-1", "new": ".../v000013/files/pc-1.parquet",
     "old": ".../v000012/files/pc-1.parquet" or null, "media": ".../media/pc-1.parquet" or null}
A host's new and old files must be on one line (new/changed/deleted compare the two).

The mapper aggregates one host with DuckDB straight from its Parquet parts and emits one
summary per (host, share, prefix) -- never one record per file; the reducer sums them (so a
host split over several lines would still add up for the counts that do not compare old and
new) and applies `min_entries`. Output: PREFIX_STATS rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

import duckdb
import pyarrow as pa
from mrjob.job import MRJob
from mrjob.protocol import JSONProtocol, RawValueProtocol

from crawl_io.crawldir import host_file
from crawl_io.duck import cursor
from crawl_io.mediatypes import MEDIA_NAME
from crawl_io.schema import FILES, MEDIA, PREFIX_STATS
from jobs.manifest import run_job

KEY = ("host", "share", "prefix")
COUNTS = tuple(f.name for f in PREFIX_STATS if f.name not in (*KEY, "depth"))

# Every entry counts under each of its ancestors down to $depth folders. Media are files whose
# extension is a media one (crawl_io.mediatypes.media_kind: a name needs a stem before the
# dot). Deleted files (in old, not in new) count only in n_deleted.
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
FROM prefixed, range(0, least(len(parts) - 1, $depth) + 1) AS t(d)
GROUP BY ALL
"""


def _aggregate(con: duckdb.DuckDBPyConnection, depth: int) -> list[tuple]:
    """(share, prefix, depth, *COUNTS) of every prefix with anything under it, no threshold."""
    params = {"media_name": MEDIA_NAME, "depth": depth}
    return con.execute(SQL, params).fetchall()


def _register(con: duckdb.DuckDBPyConnection, name: str, source: pa.Table | str | None,
              schema: pa.Schema) -> None:  # fmt: skip
    """A table, a Parquet part's path, or None (empty) under `name`."""
    if isinstance(source, str):
        con.read_parquet(source).create_view(name)
    else:
        con.register(name, schema.empty_table() if source is None else source)


def _keep(row: dict, min_entries: int) -> bool:
    return row["n_files"] + row["n_folders"] >= min_entries or row["n_deleted"] > 0


def _table(rows: Iterable[dict]) -> pa.Table:
    rows = sorted(rows, key=lambda r: (r["host"], r["share"], r["prefix"]))
    return pa.Table.from_pylist(rows, PREFIX_STATS)


def host_prefix_stats(
    host: str, new_files: pa.Table, old_files: pa.Table, media: pa.Table, depth: int,
    min_entries: int,
) -> pa.Table:  # fmt: skip
    """One host's PREFIX_STATS rows from its files now, its files before and its media (the
    same computation the job's mapper does, in this process)."""
    con = cursor()
    try:
        for name, table, schema in (
            ("new_files", new_files, FILES),
            ("old_files", old_files, FILES),
            ("media", media, MEDIA),
        ):
            _register(con, name, table, schema)
        rows = _aggregate(con, depth)
    finally:
        con.close()
    names = ("share", "prefix", "depth", *COUNTS)
    dicts = ({"host": host, **dict(zip(names, r, strict=True))} for r in rows)
    return _table(r for r in dicts if _keep(r, min_entries))


class MRPrefixStats(MRJob):
    INPUT_PROTOCOL = RawValueProtocol
    INTERNAL_PROTOCOL = JSONProtocol
    OUTPUT_PROTOCOL = JSONProtocol

    def configure_args(self) -> None:
        super().configure_args()
        self.add_passthru_arg("--depth", type=int, default=3, help="deepest prefix, in folders")
        self.add_passthru_arg("--min-entries", type=int, default=1,
                              help="drop prefixes with fewer entries under them")  # fmt: skip

    def mapper(self, _: None, line: str) -> Iterator[tuple[list, list]]:
        line = line.strip()
        if not line:
            return
        part = json.loads(line)
        con = cursor()
        try:
            _register(con, "new_files", part["new"], FILES)
            _register(con, "old_files", part.get("old"), FILES)
            _register(con, "media", part.get("media"), MEDIA)
            rows = _aggregate(con, self.options.depth)
        finally:
            con.close()
        for share, prefix, depth, *counts in rows:
            yield [part["host"], share, prefix], [depth, *counts]

    def combiner(self, key: list, values: Iterator[list]) -> Iterator[tuple[list, list]]:
        yield key, _sum(values)

    def reducer(self, key: list, values: Iterator[list]) -> Iterator[tuple[list, dict]]:
        total = _sum(values)
        row = dict(zip(("depth", *COUNTS), total, strict=True))
        if _keep(row, self.options.min_entries):
            yield key, row


def _sum(values: Iterable[list]) -> list:
    """Sum count vectors [depth, *counts] of one prefix (depth is the same in all)."""
    values = iter(values)
    total = list(next(values))
    for value in values:
        total[1:] = [a + b for a, b in zip(total[1:], value[1:], strict=True)]
    return total


# -- running it ----------------------------------------------------------------------------
def host_parts(
    version_dir: Path, prev_dir: Path | None, hosts: Iterable[str], damaged: Iterable[str] = ()
) -> list[dict]:
    """Manifest entries for `hosts` of crawldb version folder `version_dir`, compared with
    `prev_dir` (the previous version, None for none). Absent parts are null, and so are the
    old parts of `damaged` hosts (their files count as new); a host without a files part now
    is skipped (it has no prefixes)."""
    damaged = set(damaged)

    def part(vdir: Path | None, table: str, host: str) -> str | None:
        path = None if vdir is None else vdir / table / host_file(host)
        return str(path.resolve()) if path is not None and path.exists() else None

    entries = []
    for host in sorted(set(hosts)):
        new = part(version_dir, "files", host)
        if new is not None:
            old = None if host in damaged else part(prev_dir, "files", host)
            entries.append({"host": host, "new": new, "old": old,
                            "media": part(version_dir, "media", host)})  # fmt: skip
    return entries


def run_prefix_stats(
    host_parts: list[dict], runner: str, depth: int, min_entries: int, workdir: Path
) -> pa.Table:
    """Run MRPrefixStats over these hosts' parts with an mrjob runner; PREFIX_STATS rows."""
    if not host_parts:
        return PREFIX_STATS.empty_table()
    workdir.mkdir(parents=True, exist_ok=True)
    manifest = workdir / "prefix_stats.manifest"
    manifest.write_text("".join(json.dumps(p, ensure_ascii=True) + "\n" for p in host_parts))
    args = ("--depth", str(depth), "--min-entries", str(min_entries))
    rows = (
        {"host": host, "share": share, "prefix": prefix, **values}
        for (host, share, prefix), values in run_job(MRPrefixStats, manifest, runner, *args)
    )
    return _table(rows)


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


def round_prefix_stats(
    *, round_: int, version_dir: Path, prev_dir: Path | None, old_stats: pa.Table,
    listed: Iterable[str], touched: Iterable[str], runner: str, depth: int, min_entries: int,
    stats_every: int, workdir: Path, damaged: Iterable[str] = (),
) -> pa.Table:  # fmt: skip
    """The `prefix_stats` table of the version being written to `version_dir` (its files/
    and media/ parts all in place): the touched hosts recomputed by the job and the other
    listed hosts' rows carried over, or every listed host recomputed on a complete round."""
    listed = set(listed)
    redo = listed if is_complete_round(round_, stats_every) else set(touched) & listed
    fresh = run_prefix_stats(host_parts(version_dir, prev_dir, redo, damaged), runner, depth,
                             min_entries, workdir)  # fmt: skip
    kept = carried_over(old_stats, listed - redo, min_entries)
    return pa.concat_tables([kept, fresh]).sort_by([(k, "ascending") for k in KEY])


if __name__ == "__main__":
    MRPrefixStats.run()

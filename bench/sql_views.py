"""Benchmark defining the analysts' views (the parts checked, the sandbox locked) against
DuckDB defining the same views unchecked, each followed by the same first query.

Writes a synthetic crawl directory: one live version with `--hosts` hosts, each with a
files, media and folders part (1 000 hosts: 3 000 parts), its manifest as Update writes it,
and `--rounds` fetchlog parts. Times, median of `--passes`:
- sharecrawl: a query of the files table as `sharecrawl sql` runs it (queries.views.query:
  the statement checked, the parts of the tables it reads checked (a part the manifest
  vouches for by a stat, its footer read by the query alone), the views defined, external
  access locked); the same on a version without a manifest (the footer of each part of the
  files table read first); and with every part of every table checked that way;
- reference: a plain DuckDB connection with the same views over read_parquet of the same
  parts, nothing checked, and the same query.
Two queries: `count(*)`, which DuckDB answers from the footers alone (reading them first
costs it nothing more), and one that reads columns.

    .venv/bin/python bench/sql_views.py [--hosts 1000] [--rounds 300] [--passes 7]

The ratio (sharecrawl / reference, both queries' times summed) is printed last.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from bench.progress import step, track
from sharecrawl.crawl_io.crawldb.crawldir import PER_HOST_TABLES, CrawlDir, host_file
from sharecrawl.crawl_io.crawldb.version_manifest import MANIFEST_NAME, write_manifest
from sharecrawl.crawl_io.schema import TABLES
from sharecrawl.queries.views import CrawlViews, query, rows


def synthetic(schema: pa.Schema, host: str, n: int) -> pa.Table:
    """n rows of `schema`: the host and a path set, the other columns null."""
    columns = {f.name: pa.nulls(n, f.type) for f in schema}
    if "host" in columns:
        columns["host"] = pa.array([host] * n, pa.string())
    if "path" in columns:
        columns["path"] = pa.array([f"folder/{i:05d}.mp3" for i in range(n)], pa.string())
    return pa.table(columns, schema=schema)


def write_crawl(root: Path, hosts: int, rounds: int, rows_per_part: int = 200) -> CrawlDir:
    crawl = CrawlDir(root)
    version = crawl.version_dir(1)
    for name in PER_HOST_TABLES:
        (version / name).mkdir(parents=True)
        for h in range(hosts):
            host = f"pc-{h:04d}"
            pq.write_table(
                synthetic(TABLES[name], host, rows_per_part), version / name / host_file(host)
            )
    for name in ("hosts", "partitions"):
        pq.write_table(synthetic(TABLES[name], "pc-0000", hosts), version / f"{name}.parquet")
    for r in range(1, rounds + 1):
        seg = crawl.segment_dir(r)
        seg.mkdir(parents=True)
        log = synthetic(TABLES["fetchlog"], "pc-0000", 10).set_column(
            0, "round", pa.array([r] * 10, pa.int64())
        )
        pq.write_table(log, seg / "fetchlog.parquet")
    write_manifest(version, {})
    (crawl.crawldb / "CURRENT").write_text("v000001\n")
    return crawl


# A query DuckDB answers from the parts' footers alone, and one that reads their columns.
QUERIES = {
    "footers only": "SELECT count(*) FROM files",
    "columns read": "SELECT host, count(*) AS n, sum(size) AS bytes FROM files GROUP BY host "
    "ORDER BY n DESC, host LIMIT 3",
}


def warn(line: str) -> None:
    print(line, file=sys.stderr)


def sharecrawl(sql: str, crawl: CrawlDir) -> list[tuple]:
    """As `sharecrawl sql` runs it: the statement checked, the parts of the tables it
    reads checked, the views defined and locked, the query run."""
    return query(crawl, 1, sql, rows, warn)[1]


@contextmanager
def without_manifest(crawl: CrawlDir) -> Iterator[None]:
    """The version without its manifest: every footer is read first."""
    manifest = crawl.version_dir(1) / MANIFEST_NAME
    aside = manifest.with_name("manifest.aside")
    manifest.rename(aside)
    try:
        yield
    finally:
        aside.rename(manifest)


def footers_read(sql: str, crawl: CrawlDir) -> list[tuple]:
    with without_manifest(crawl):
        return sharecrawl(sql, crawl)


def every_part_checked(sql: str, crawl: CrawlDir) -> list[tuple]:
    with without_manifest(crawl):
        views = CrawlViews(crawl, 1, warn)
        try:
            return views.con.execute(sql).fetchall()
        finally:
            views.close()


def reference(sql: str, crawl: CrawlDir) -> list[tuple]:
    version = crawl.version_dir(1)
    with duckdb.connect() as con:
        for name in TABLES:
            if name == "fetchlog":
                parts = sorted(crawl.segments.glob("r*/fetchlog.parquet"))
            elif name in PER_HOST_TABLES:
                parts = sorted((version / name).glob("*.parquet"))
            else:
                parts = [version / f"{name}.parquet"]
            files = ", ".join(f"'{p}'" for p in parts)
            con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet([{files}])")
        return con.execute(sql).fetchall()


def timed(fns: list, crawl: CrawlDir, passes: int) -> list[tuple[float, list[tuple]]]:
    """Median time and result of each function, their passes interleaved so that the load
    of a shared machine weighs on each alike."""
    times: list[list[float]] = [[] for _ in fns]
    results: list[list[tuple]] = [[] for _ in fns]
    for _ in track(range(passes), "timing the queries"):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            results[i] = fn(crawl)
            times[i].append(time.perf_counter() - t0)
    return [(statistics.median(t), r) for t, r in zip(times, results, strict=True)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--passes", type=int, default=7)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        with step("writing the crawl directory"):
            crawl = write_crawl(Path(tmp) / "crawl", args.hosts, args.rounds)
        n_parts = args.hosts * len(PER_HOST_TABLES) + 2 + args.rounds
        print(f"wrote {n_parts} parts in {time.perf_counter() - t0:.1f} s")
        reference(QUERIES["footers only"], crawl)  # warm the page cache for all
        ours_sum = ref_sum = 0.0
        for what, sql in QUERIES.items():
            fns = [sharecrawl, footers_read, every_part_checked, reference]
            timings = timed([partial(fn, sql) for fn in fns], crawl, args.passes)
            (ours, found), (read, _), (every, _), (ref, _) = timings
            assert all(result == found for _, result in timings), what
            print(
                f"sharecrawl sql, {what} ({args.hosts} files parts): {ours:.3f} s, the parts "
                f"vouched for by the manifest; without a manifest (their footers read "
                f"first) {read:.3f} s, and every one of the {n_parts} parts checked "
                f"{every:.3f} s; reference (DuckDB, unchecked views) {ref:.3f} s "
                f"({ours / ref:.2f}x)"
            )
            ours_sum, ref_sum = ours_sum + ours, ref_sum + ref
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        print(f"ratio sharecrawl/reference: {ours_sum / ref_sum:.2f}")


if __name__ == "__main__":
    main()

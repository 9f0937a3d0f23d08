"""Benchmark defining the analysts' views (every part's footer checked, the sandbox locked)
against DuckDB defining the same views unchecked, each followed by the same first query.

Writes a synthetic crawl directory: one live version with `--hosts` hosts, each with a
files, media and folders part (1 000 hosts: 3 000 parts), and `--rounds` fetchlog parts.
Times, median of `--passes`:
- sharecrawl: `SELECT count(*) FROM files` as `sharecrawl sql` runs it (queries.views.query:
  the statement checked, the footer of each part of the tables it reads checked, the views
  defined, external access locked); and the same with every part of every table checked;
- reference: a plain DuckDB connection with the same views over read_parquet of the same
  parts, nothing checked, and the same query.

    .venv/bin/python bench/sql_views.py [--hosts 1000] [--rounds 300] [--passes 7]

The ratio (sharecrawl / reference) is printed last.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from crawl_io.crawldir import PER_HOST_TABLES, CrawlDir, host_file
from crawl_io.schema import TABLES
from queries.views import CrawlViews, query, rows
from simulator.progress import step, track


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
    (crawl.crawldb / "CURRENT").write_text("v000001\n")
    return crawl


QUERY = "SELECT count(*) FROM files"


def warn(line: str) -> None:
    print(line, file=sys.stderr)


def sharecrawl(crawl: CrawlDir) -> int:
    """As `sharecrawl sql` runs it: the statement checked, the parts of the tables it
    reads checked, the views defined and locked, the query run."""
    _, values = query(crawl, 1, QUERY, rows, warn)
    return values[0][0]


def every_part_checked(crawl: CrawlDir) -> int:
    views = CrawlViews(crawl, 1, warn)
    try:
        return views.con.execute(QUERY).fetchone()[0]
    finally:
        views.close()


def reference(crawl: CrawlDir) -> int:
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
        return con.execute(QUERY).fetchone()[0]


def timed(fns: list, crawl: CrawlDir, passes: int) -> list[tuple[float, int]]:
    """Median time and result of each function, their passes interleaved so that the load
    of a shared machine weighs on each alike."""
    times: list[list[float]] = [[] for _ in fns]
    results = [0] * len(fns)
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
        reference(crawl)  # warm the page cache for both
        (ours, n_ours), (every, n_every), (ref, n_ref) = timed(
            [sharecrawl, every_part_checked, reference], crawl, args.passes
        )
        assert n_ours == n_every == n_ref, (n_ours, n_every, n_ref)
        print(f"sharecrawl sql {QUERY!r}: {ours:.3f} s ({args.hosts} files parts checked)")
        print(
            f"  every one of the {n_parts} parts checked: {every:.3f} s "
            f"({every / n_parts * 1e3:.3f} ms a part)"
        )
        print(f"reference (DuckDB, unchecked views, the same query): {ref:.3f} s")
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        print(f"ratio sharecrawl/reference: {ours / ref:.2f}")


if __name__ == "__main__":
    main()

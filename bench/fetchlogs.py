"""Benchmark: `sharecrawl sql` over the fetchlog of a long-running crawl, one part a round
against spans of rounds (crawl_io.fetchlogs), with DuckDB over one file of the same rows as
the reference.

Writes `--rounds` rounds' fetchlogs of `--rows` rows each (a round of a 1,000-host LAN
scans about a thousand partitions) into a synthetic crawl directory, as the rounds leave
them: in their segments. Times, median of `--passes`, two queries (one DuckDB answers from
the footers, one reading columns):
- sharecrawl, one part a round: as `sharecrawl sql` runs them before any span is written;
- compaction: writing the spans of every retired block at once (a crawl writes one every
  SPAN_ROUNDS rounds);
- sharecrawl, spans: the same queries after;
- reference: a DuckDB connection over one Parquet file of all the rows.

    .venv/bin/python bench/fetchlogs.py [--rounds 8000] [--rows 1000] [--passes 5]

The last line: sharecrawl over spans against the reference, both queries' times summed.
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

from crawl_io.crawldir import CrawlDir
from crawl_io.fetchlogs import SPAN_ROUNDS, compact_fetchlogs, fetchlog_parts
from crawl_io.schema import FETCHLOG
from queries.views import query, rows
from simulator.progress import step, track

QUERIES = {
    "footers only": "SELECT count(*) FROM fetchlog",
    "columns read": "SELECT host, count(*) AS scans, sum(n_entries) AS entries FROM fetchlog "
    "WHERE status <> 'unchanged' GROUP BY host ORDER BY scans DESC, host LIMIT 5",
}
STATUSES = ("unchanged", "unchanged", "unchanged", "changed", "new", "error")


def fetchlog_of(round_: int, n: int) -> pa.Table:
    """A round's scans of n partitions on n // 4 hosts: most unchanged."""
    columns = {f.name: pa.nulls(n, f.type) for f in FETCHLOG}
    columns["round"] = pa.array([round_] * n, FETCHLOG.field("round").type)
    columns["host"] = pa.array([f"pc-{i // 4:04d}" for i in range(n)], pa.string())
    columns["partition_id"] = pa.array([f"pc-{i // 4:04d}/share/{i % 4}" for i in range(n)])
    columns["status"] = pa.array([STATUSES[(i + round_) % len(STATUSES)] for i in range(n)])
    columns["n_entries"] = pa.array([(i * 7 + round_) % 1000 for i in range(n)], pa.int64())
    return pa.table(columns, schema=FETCHLOG)


def write_crawl(root: Path, rounds: int, n: int) -> CrawlDir:
    crawl = CrawlDir(root)
    for round_ in track(range(1, rounds + 1), "writing the rounds' fetchlogs"):
        segment = crawl.segment_dir(round_)
        segment.mkdir(parents=True)
        pq.write_table(fetchlog_of(round_, n), segment / "fetchlog.parquet")
    crawl.version_dir(rounds).mkdir(parents=True)
    (crawl.version_dir(rounds) / "MANIFEST.json").write_text('{"format": 1, "parts": {}}')
    (crawl.crawldb / "CURRENT").write_text(f"v{rounds:06d}\n")
    return crawl


def sharecrawl(crawl: CrawlDir, sql: str) -> list[tuple]:
    return query(crawl, crawl.current(), sql, rows, lambda line: print(line, file=sys.stderr))[1]


def reference(one_file: Path, sql: str) -> list[tuple]:
    with duckdb.connect() as con:
        con.execute(f"CREATE VIEW fetchlog AS SELECT * FROM read_parquet('{one_file}')")
        return con.execute(sql).fetchall()


def timed(fn, passes: int) -> tuple[float, list[tuple]]:
    times, result = [], []
    for _ in range(passes):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=8000)
    p.add_argument("--rows", type=int, default=1000)
    p.add_argument("--passes", type=int, default=5)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        crawl = write_crawl(Path(tmp) / "crawl", args.rounds, args.rows)
        one_file = Path(tmp) / "fetchlog.parquet"
        with step("writing the reference's one file"):
            with duckdb.connect() as con:
                parts = ", ".join(f"'{p}'" for p in fetchlog_parts(crawl.segments, args.rounds))
                con.execute(f"COPY (SELECT * FROM read_parquet([{parts}])) TO '{one_file}'")
        before = {q: timed(lambda q=q: sharecrawl(crawl, QUERIES[q]), args.passes) for q in QUERIES}
        t0 = time.perf_counter()
        made = compact_fetchlogs(crawl, keep=0)
        compaction = time.perf_counter() - t0
        after = {q: timed(lambda q=q: sharecrawl(crawl, QUERIES[q]), args.passes) for q in QUERIES}
        ref = {q: timed(lambda q=q: reference(one_file, QUERIES[q]), args.passes) for q in QUERIES}
        n_parts = len(fetchlog_parts(crawl.segments, args.rounds))
        print(
            f"{args.rounds:,} rounds of {args.rows:,} scans: {len(made)} spans of {SPAN_ROUNDS} "
            f"rounds written in {compaction:.1f} s; the view then reads {n_parts} parts"
        )
        for q in QUERIES:
            assert before[q][1] == after[q][1] == ref[q][1], q
            print(
                f"sql, {q}: one part a round {before[q][0]:.3f} s, spans {after[q][0]:.3f} s; "
                f"reference (DuckDB, one file) {ref[q][0]:.3f} s"
            )
        ours, theirs = (sum(t[q][0] for q in QUERIES) for t in (after, ref))
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        print(f"ratio sharecrawl over spans/reference: {ours / theirs:.2f}")


if __name__ == "__main__":
    main()

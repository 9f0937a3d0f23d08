"""Benchmark the search index's update against a full build, on the same two versions.

Writes the synthetic media of bench/search.py (default 2 M files; its generator, reused) as
a crawldb version whose media parts are per partition, as a round stores them: each host's
rows in `--parts-per-host` parts by folder (about 1 000 rows a part at the defaults). Then
a next version in which 1 % of the media rows changed, as a round finds them: folders of a
few partitions each got new files (adds), lost some (deletes), had their tags rewritten
(retags) or were renamed (moves), a quarter of the changed rows each; one host went off
line and one came back. Unchanged parts are hard links to the first version's, as Publish
makes them. `--spread` spreads the same changes over every part instead (the worst case for
an index that compares parts: every part is read, old and new). The second version carries
the record of its media changes that Update writes (crawl_io.crawldb.media_changes), so that the
index reads the changes rather than compare parts; `--no-record` removes it, for the
comparison's cost. What writing the record costs Update is measured by bench/scale.py.

Times, in the same run: `queries.index.update_index` from the first version's index to the
second, and `queries.index.build_index` of the second from scratch; checks that both give
the same results for the mixed queries of bench/search.py and a few hundred more; and times
searches on the updated index (goals: p50 <= 10 ms, p95 <= 30 ms). It also says what the
update wrote: on a file system that clones files (XFS, btrfs) the update starts from a clone
of the index rather than a copy (a `--workdir` there shows it). Each timed step starts once
the disk has everything written before it (os.sync); the update runs `--repeat` times and
the full build one time fewer, taking turns, and the ratio is of their medians. The last
line is `ratio incremental/full: R` (goal: R <= 0.10).

    .venv/bin/python bench/index_update.py [--rows 2000000] [--workdir DIR] [--spread]
                                           [--changed 0.01] [--parts-per-host 7] [--repeat 3]
                                           [--no-record]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout

import duckdb  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from bench.progress import step  # noqa: E402
from bench.search import load_average, mixed_queries, percentile, write_version  # noqa: E402
from sharecrawl.crawl_io import schema  # noqa: E402
from sharecrawl.crawl_io.crawldb.host_parts import changed_parts  # noqa: E402
from sharecrawl.crawl_io.crawldb.media_changes import (  # noqa: E402
    FILE_NAME,
    INDEXED_COLUMNS,
    ChangesRecord,
    host_changes,
)
from sharecrawl.queries.index import build_index, update_index  # noqa: E402
from sharecrawl.queries.search import search  # noqa: E402

MEDIA_COLUMNS = ", ".join(schema.MEDIA.names)


def part_tables(con: duckdb.DuckDBPyConnection, table: str) -> dict[str, pa.Table]:
    """The rows of `table` (with a `part` column) as one Arrow table per part."""
    whole = con.sql(f"SELECT {MEDIA_COLUMNS}, part FROM {table} ORDER BY part, path")
    whole = whole.to_arrow_table()
    names = whole.column("part").to_pylist()
    media = whole.drop_columns(["part"]).cast(schema.MEDIA)
    out, start = {}, 0
    for i in range(1, len(names) + 1):
        if i == len(names) or names[i] != names[start]:
            out[names[start]] = media.slice(start, i - start)
            start = i
    return out


def make_versions(
    workdir: Path, rows: int, changed: float, parts_per_host: int, spread: bool
) -> tuple[Path, Path, dict[str, int]]:
    """Versions v000001 and v000002 of a crawldb under `workdir` (see the module's text)."""
    base = write_version(workdir / "base", rows)
    con = duckdb.connect()
    con.execute(
        f"""
        CREATE TABLE v1 AS  -- one row per path, as a crawl has it
        SELECT DISTINCT ON (host, share, path) *,
            host || '-' || (hash(regexp_replace(path, '/[^/]*$', '')) % {parts_per_host}) AS part
        FROM read_parquet('{base}/media/*.parquet')
        """
    )
    parts = [p for (p,) in con.execute("SELECT DISTINCT part FROM v1 ORDER BY part").fetchall()]
    crawldb = workdir / "crawldb"
    v1, v2 = crawldb / "v000001", crawldb / "v000002"
    (v1 / "media").mkdir(parents=True)
    shutil.copyfile(base / "hosts.parquet", v1 / "hosts.parquet")
    for part, rows_of_part in part_tables(con, "v1").items():
        pq.write_table(rows_of_part, v1 / "media" / f"{part}.parquet")

    # Which rows change: whole folders of a few parts (or rows spread over every part),
    # until `changed` of the rows; each changed row is an add, delete, retag or move.
    n_change = int(rows * changed)
    rng = random.Random(5)
    if spread:
        con.execute(
            f"CREATE TABLE pick AS SELECT path, host FROM v1 USING SAMPLE {n_change} ROWS "
            "(reservoir, 3)"
        )
    else:
        chosen = rng.sample(parts, len(parts))
        con.execute("CREATE TABLE pick (path VARCHAR, host VARCHAR)")
        for part in chosen:
            if con.execute("SELECT count(*) FROM pick").fetchone()[0] >= n_change:
                break
            con.execute(  # a fifth of the part's rows, by folder
                """
                INSERT INTO pick SELECT path, host FROM v1
                WHERE part = ? AND hash(regexp_replace(path, '/[^/]*$', '')) % 5 = 0
                """,
                [part],
            )
    con.execute(
        f"""
        CREATE TABLE ops AS
        SELECT path, host,
               ['add', 'delete', 'retag', 'move'][(1 + hash(path, 'op') % 4)::BIGINT] AS op
        FROM (SELECT * FROM pick LIMIT {n_change})
        """
    )
    con.execute(
        """
        CREATE TABLE v2 AS
        SELECT v.* FROM v1 v ANTI JOIN ops o ON o.host = v.host AND o.path = v.path
        UNION ALL  -- an add: a new file beside the picked one (a new album in the folder)
        SELECT v.* REPLACE (regexp_replace(v.path, '([^/]*)$', 'new \\1') AS path,
                            v.title || ' (remastered)' AS title)
        FROM v1 v JOIN ops o ON o.host = v.host AND o.path = v.path WHERE o.op = 'add'
        UNION ALL
        SELECT v.* FROM v1 v JOIN ops o ON o.host = v.host AND o.path = v.path
        WHERE o.op = 'add'
        UNION ALL  -- a retag: other title and artist (a work left, another joined or new)
        SELECT v.* REPLACE (coalesce(v.title, 'untitled') || ' live' AS title,
                            coalesce(v.artist, v.series) AS artist)
        FROM v1 v JOIN ops o ON o.host = v.host AND o.path = v.path WHERE o.op = 'retag'
        UNION ALL  -- a move: the folder renamed, the tags kept
        SELECT v.* REPLACE (regexp_replace(v.path, '^([^/]*)/', '\\1 (old)/') AS path)
        FROM v1 v JOIN ops o ON o.host = v.host AND o.path = v.path WHERE o.op = 'move'
        """
    )
    touched = {
        p
        for (p,) in con.execute(
            "SELECT DISTINCT v.part FROM v1 v JOIN ops o ON o.host = v.host AND o.path = v.path"
        ).fetchall()
    }
    # hosts: one goes off line, one comes back
    hosts = pq.read_table(base / "hosts.parquet").to_pylist()
    offline = [h for h in hosts if not h["online"]]
    online = [h for h in hosts if h["online"]]
    online[0]["online"], offline[0]["online"] = False, True
    (v2 / "media").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(hosts, schema.HOSTS), v2 / "hosts.parquet")
    con.execute(
        "CREATE TABLE v2_changed AS SELECT * FROM v2 WHERE part = ANY(?)", [sorted(touched)]
    )
    new_parts = part_tables(con, "v2_changed")
    for part in parts:
        target = v2 / "media" / f"{part}.parquet"
        if part in touched:
            pq.write_table(new_parts.get(part, schema.MEDIA.empty_table()), target)
        else:
            os.link(v1 / "media" / f"{part}.parquet", target)  # as Publish links them
    counts = dict(con.execute("SELECT op, count(*) FROM ops GROUP BY op").fetchall())
    counts |= {"parts": len(parts), "parts changed": len(touched), "hosts switched": 2}
    con.close()
    shutil.rmtree(base)
    (crawldb / "CURRENT").write_text("v000002\n")
    return v1, v2, counts


def write_record(v1: Path, v2: Path) -> None:
    """The record of v2's media changes, as Update writes it: for each part that differs
    (a bench's part stands for a host's group), the paths whose rows changed and their new
    rows."""
    diff = changed_parts(v1, v2, "media")
    columns = ", ".join(INDEXED_COLUMNS)
    con = duckdb.connect()

    def rows_of(parts: list[Path], side: int) -> str:
        files = ", ".join(f"'{p}'" for p in parts)
        return (
            f"SELECT parse_filename(filename, true) AS part, {columns}, "
            f"hash({columns}) AS h, {side} AS side FROM read_parquet([{files}], filename = true)"
        )

    con.execute(f"CREATE TABLE old AS {rows_of(diff.removed, -1)}")
    con.execute(f"CREATE TABLE new AS {rows_of(diff.added, 1)}")
    con.execute(
        """
        CREATE TABLE changed AS SELECT DISTINCT part, host, share, path FROM (
            SELECT * FROM old UNION ALL SELECT * FROM new
        ) GROUP BY part, host, share, path, h HAVING sum(side) <> 0
        """
    )
    record = ChangesRecord()
    for part in sorted({p.stem for p in diff.removed + diff.added}):
        # the changed paths' stored rows (not kept) and their rows that came
        old_rows, came = (
            con.sql(
                f"SELECT {columns} FROM {side} SEMI JOIN changed USING (part, host, share, path) "
                "WHERE part = ?",
                params=[part],
            ).to_arrow_table()
            for side in ("old", "new")
        )
        name = [f"media/{part}.parquet"]
        record.add(part, name, name, host_changes(old_rows, came))
    con.close()
    pq.write_table(record.table().replace_schema_metadata(record.metadata(v1.name)), v2 / FILE_NAME)


def bytes_written() -> int:
    """What this process has sent to be written so far (Linux; elsewhere 0)."""
    try:
        lines = Path("/proc/self/io").read_text().splitlines()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in lines if line.startswith("write_bytes:")), 0)


def more_queries(index: Path, n: int, rng: random.Random) -> list[str]:
    """Words drawn from the index's vocabulary, alone, in pairs, misspelt, with fields."""
    with duckdb.connect(str(index), read_only=True) as con:
        terms = [
            t
            for (t,) in con.execute(
                "SELECT term FROM terms WHERE df > 1 AND length(term) > 3 "
                "ORDER BY hash(term) LIMIT 2000"
            ).fetchall()
        ]
        hosts = [h for (h,) in con.execute("SELECT host FROM hosts ORDER BY host").fetchall()]
    queries = []
    for i in range(n):
        word = rng.choice(terms)
        kind = i % 5
        if kind == 0:
            queries.append(word)
        elif kind == 1:
            queries.append(f"{word} {rng.choice(terms)}")
        elif kind == 2:  # one letter dropped: a typo
            cut = rng.randrange(len(word))
            queries.append(word[:cut] + word[cut + 1 :])
        elif kind == 3:
            queries.append(f"{word} host:{rng.choice(hosts)}")
        else:
            queries.append(f"{word} format:flac")
    return queries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--workdir", type=Path, help="kept; its versions are reused")
    parser.add_argument("--changed", type=float, default=0.01, help="share of rows changed")
    parser.add_argument("--parts-per-host", type=int, default=7)
    parser.add_argument("--spread", action="store_true", help="changes in every part")
    parser.add_argument("--repeat", type=int, default=3, help="update runs; full builds: 1 fewer")
    parser.add_argument(
        "--no-record", action="store_true", help="without the record of changes: compare parts"
    )
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-index-update-"))
    print(f"{os.cpu_count()} cpus, {load_average()}")
    try:
        v1, v2 = workdir / "crawldb" / "v000001", workdir / "crawldb" / "v000002"
        if v2.is_dir():
            print(f"data: reusing {workdir}")
        else:
            with step(f"writing two versions of {args.rows:,} media rows"):
                v1, v2, counts = make_versions(
                    workdir, args.rows, args.changed, args.parts_per_host, args.spread
                )
            print("data: " + ", ".join(f"{k} {v:,}" for k, v in counts.items()))
        if args.no_record:
            (v2 / FILE_NAME).unlink(missing_ok=True)
        elif not (v2 / FILE_NAME).exists():
            with step("writing the record of the second version's media changes"):
                write_record(v1, v2)
        index = workdir / "index" / "search.duckdb"
        full = workdir / "full.duckdb"
        first = workdir / "first.duckdb"  # the first version's index, for each update run
        with step("building the first version's index"):
            build_index(v1, first)
        size_before = first.stat().st_size

        # The shared machines are noisy: the update runs `--repeat` times, the full build
        # one time fewer (at least once), taking turns so that both meet the same spells of
        # load, and the ratio is of their medians. Each timed step starts with nothing left
        # to write: in a round, the index was written a round ago, not seconds ago, and its
        # pages are long on disk.
        update_times: list[float] = []
        update_writes: list[int] = []
        full_times: list[float] = []
        for turn in range(args.repeat):
            index.parent.mkdir(exist_ok=True)
            shutil.copyfile(first, index)
            os.sync()
            started, sent = time.perf_counter(), bytes_written()
            with step("updating it to the second version"):
                update = update_index(index, v1, v2)
            update_times.append(time.perf_counter() - started)
            update_writes.append(bytes_written() - sent)
            print(
                f"update: {update_times[-1]:.2f} s, {update_writes[-1] / 2**20:.1f} MiB written "
                f"({load_average()})"
            )
            if turn < max(1, args.repeat - 1):
                os.sync()
                started = time.perf_counter()
                with step("building the second version's index in full"):
                    build_index(v2, full)
                full_times.append(time.perf_counter() - started)
                print(f"full build: {full_times[-1]:.2f} s ({load_average()})")
        print(
            f"update: {update}; file {size_before / 2**20:.0f} -> "
            f"{index.stat().st_size / 2**20:.0f} MiB; written "
            f"{statistics.median(update_writes) / 2**20:.1f} MiB (a file system that clones "
            "files spares the copy of the whole index)"
        )
        update_s, full_s = statistics.median(update_times), statistics.median(full_times)
        print(
            f"median update {update_s:.2f} s, median full build {full_s:.2f} s "
            f"({full.stat().st_size / 2**20:.0f} MiB)"
        )

        rng = random.Random(11)
        queries = mixed_queries(v2, rng) + more_queries(full, 300, rng)
        differ = [
            q
            for q in queries
            for all_hosts in (False, True)
            if search(index, q, limit=30, all_hosts=all_hosts)
            != search(full, q, limit=30, all_hosts=all_hosts)
        ]
        print(
            f"same results as the full build: {2 * len(queries) - len(differ)} of "
            f"{2 * len(queries)} searches" + (f"; differ: {differ[:5]}" if differ else "")
        )
        timings = []
        for query in queries[:100] * 3:
            started = time.perf_counter()
            search(index, query)
            timings.append(time.perf_counter() - started)
        print(
            f"search on the updated index: p50 {percentile(timings, 50) * 1000:.1f}/10 ms, "
            f"p95 {percentile(timings, 95) * 1000:.1f}/30 ms, "
            f"mean {statistics.mean(timings) * 1000:.1f} ms"
        )
        print(f"ratio incremental/full: {update_s / full_s:.3f}")
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()

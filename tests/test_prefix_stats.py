"""Per-prefix statistics equal a plain DuckDB GROUP BY over `files`, in the function and in
the mrjob job on the inline and local runners; incremental rounds equal a complete one."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir, host_file, write_parquet
from sharecrawl.crawl_io.schema import FILES, MEDIA, PREFIX_STATS
from sharecrawl.jobs.mr_prefix_stats import host_parts, round_prefix_stats, run_prefix_stats
from sharecrawl.jobs.prefix_stats import host_prefix_stats
from tests.conftest import LAN

T0 = datetime(2024, 1, 1, tzinfo=UTC)

names = st.sampled_from(["a", "b", "Музыка", "x y", "c.mp3", "d.txt", "e.FLAC", ".mp3", "f'g"])
trees = st.dictionaries(
    st.tuples(st.sampled_from(["s", "t"]), st.lists(names, min_size=1, max_size=5).map("/".join)),
    st.tuples(st.integers(0, 1000), st.integers(0, 3)),  # size, mtime
    max_size=30,
)


def files_table(host: str, tree: dict[tuple[str, str], tuple[int, int]]) -> pa.Table:
    """FILES rows for files at these paths, with every folder above them."""
    folders = {(s, "/".join(p.split("/")[:i])) for s, p in tree for i in range(1, p.count("/") + 1)}
    rows = [{"share": s, "path": p, "is_dir": True, "size": 0, "mtime": T0} for s, p in folders]
    rows += [
        {"share": s, "path": p, "is_dir": False, "size": size, "mtime": T0.replace(second=m)}
        for (s, p), (size, m) in tree.items()
        if (s, p) not in folders  # a path cannot be a file and a folder
    ]
    for r in rows:
        r.update(host=host, name=r["path"].rsplit("/", 1)[-1], partition_id="p")
    return pa.Table.from_pylist(sorted(rows, key=lambda r: (r["share"], r["path"])), FILES)


def media_table(files: pa.Table, errors: set[str]) -> pa.Table:
    rows = [
        {
            "host": r["host"],
            "share": r["share"],
            "path": r["path"],
            "size": r["size"],
            "tag_error": "unreadable" if r["path"] in errors else None,
        }
        for r in files.to_pylist()
        if not r["is_dir"]
        and r["name"].lower().endswith((".mp3", ".flac"))
        and not r["name"].startswith(".")
    ]
    return pa.Table.from_pylist(rows, MEDIA)


# The reference: for every folder prefix (and the share root) of the old or new rows, a plain
# GROUP BY over the rows whose path starts with it -- no path splitting, no shared SQL.
REFERENCE = """
WITH prefixes AS (
    SELECT DISTINCT share, path AS prefix FROM (SELECT * FROM new UNION ALL SELECT * FROM old)
    WHERE is_dir AND len(string_split(path, '/')) <= $depth
    UNION SELECT DISTINCT share, '' FROM (SELECT * FROM new UNION ALL SELECT * FROM old)
),
rows AS (
    SELECT n.share, n.path, n.is_dir, n.size, o.path IS NULL AS is_new,
           o.path IS NOT NULL AND (o.size <> n.size OR o.mtime <> n.mtime) AS is_changed,
           false AS is_deleted, m.path IS NOT NULL AS is_media, m.tag_error IS NOT NULL AS is_error
    FROM new n
    LEFT JOIN old o ON NOT n.is_dir AND NOT o.is_dir AND o.share = n.share AND o.path = n.path
    LEFT JOIN media m ON m.share = n.share AND m.path = n.path
    UNION ALL
    SELECT o.share, o.path, false, 0, false, false, true, false, false FROM old o
    WHERE NOT o.is_dir AND NOT EXISTS (SELECT 1 FROM new n WHERE NOT n.is_dir
                                       AND n.share = o.share AND n.path = o.path)
)
SELECT $host AS host, p.share, p.prefix,
       count(*) FILTER (NOT is_dir AND NOT is_deleted) AS n_files,
       count(*) FILTER (is_dir) AS n_folders, count(*) FILTER (is_media) AS n_media,
       coalesce(sum(size) FILTER (NOT is_dir), 0) AS bytes,
       coalesce(sum(size) FILTER (is_media), 0) AS media_bytes,
       count(*) FILTER (is_new AND NOT is_dir) AS n_new, count(*) FILTER (is_changed) AS n_changed,
       count(*) FILTER (is_deleted) AS n_deleted, count(*) FILTER (is_error) AS n_errors
FROM prefixes p JOIN rows r ON r.share = p.share AND starts_with(r.path, p.prefix || '/')
                            OR r.share = p.share AND p.prefix = ''
GROUP BY ALL
HAVING count(*) FILTER (NOT is_deleted) >= $min OR count(*) FILTER (is_deleted) > 0
"""

COLUMNS = [c for c in PREFIX_STATS.names if c != "depth"]


def reference(
    host: str, new: pa.Table, old: pa.Table, media: pa.Table, depth: int, min_entries: int
) -> list[tuple]:
    con = duckdb.connect()
    for name, table in (("new", new), ("old", old), ("media", media)):
        con.register(name, table)
    rows = con.execute(REFERENCE, {"host": host, "depth": depth, "min": min_entries}).fetchall()
    return sorted(rows)


def rows_of(table: pa.Table) -> list[tuple]:
    return sorted(zip(*(table[c].to_pylist() for c in COLUMNS), strict=True))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees, trees, st.integers(0, 3), st.integers(1, 3), st.data())
def test_function_equals_group_by(old_tree, new_tree, depth, min_entries, data) -> None:
    new, old = files_table("h", new_tree), files_table("h", old_tree)
    paths = sorted(p for p in new["path"].to_pylist())
    errors = set(data.draw(st.lists(st.sampled_from(paths), max_size=3))) if paths else set()
    media = media_table(new, errors)
    got = host_prefix_stats("h", new, old, media, depth, min_entries)
    assert got.schema == PREFIX_STATS
    assert rows_of(got) == reference("h", new, old, media, depth, min_entries)
    for row in got.to_pylist():
        assert row["depth"] == (len(row["prefix"].split("/")) if row["prefix"] else 0)


def write_host(vdir: Path, host: str, files: pa.Table, media: pa.Table) -> None:
    write_parquet(files, vdir / "files" / host_file(host))
    write_parquet(media, vdir / "media" / host_file(host))


HOSTS = {
    "pc-1": {
        ("s", "Music/Abba/01.mp3"): (100, 1),
        ("s", "Music/Abba/02.flac"): (50, 1),
        ("s", "src/a/b/c/d.c"): (7, 1),
        ("t", "x.txt"): (3, 1),
    },
    "лаб/2": {("s", "Видео/фильм.mp3"): (9, 1), ("s", "a b/'q'/c.txt"): (1, 1)},
    "empty": {},
}


@pytest.mark.parametrize("runner", ["inline", "local"])
def test_job_equals_function(tmp_path: Path, runner: str) -> None:
    old_dir, new_dir = tmp_path / "v1", tmp_path / "v2"
    expected = []
    for host, tree in HOSTS.items():
        old = files_table(host, tree)
        changed = {**tree, ("s", "new/n.mp3"): (5, 2)}
        changed.pop(next(iter(tree), None), None)  # one file deleted
        new = files_table(host, changed)
        write_host(old_dir, host, old, media_table(old, set()))
        write_host(new_dir, host, new, media_table(new, {"new/n.mp3"}))
        expected.append(host_prefix_stats(host, new, old, media_table(new, {"new/n.mp3"}), 2, 2))
    parts = host_parts(new_dir, old_dir, HOSTS)
    assert [json.loads(json.dumps(p))["host"] for p in parts] == sorted(HOSTS)
    got = run_prefix_stats(parts, runner, 2, 2, tmp_path / "work")
    assert got.schema == PREFIX_STATS
    order = [(k, "ascending") for k in ("host", "share", "prefix")]
    assert got.to_pylist() == pa.concat_tables(expected).sort_by(order).to_pylist()
    assert run_prefix_stats([], runner, 2, 2, tmp_path / "work").num_rows == 0


def test_incremental_rounds_equal_a_complete_round(tmp_path: Path) -> None:
    """Round 2 touches one host: recomputing it and carrying the others over gives what
    recomputing every host gives."""
    v0, v1, v2 = tmp_path / "v0", tmp_path / "v1", tmp_path / "v2"
    for host, tree in HOSTS.items():
        write_host(v1, host, files_table(host, tree), media_table(files_table(host, tree), set()))
    first = round_prefix_stats(
        round_=1,
        version_dir=v1,
        prev_dir=v0,
        old_stats=PREFIX_STATS.empty_table(),
        listed=HOSTS,
        touched=HOSTS,
        runner="inline",
        depth=3,
        min_entries=1,
        stats_every=10,
        workdir=tmp_path / "w1",
    )
    assert first.filter(pa.compute.greater(first["n_new"], 0)).num_rows > 0
    for host, tree in HOSTS.items():
        tree = {**tree, ("s", "more.mp3"): (1, 1)} if host == "pc-1" else tree
        files = files_table(host, tree)
        write_host(v2, host, files, media_table(files, set()))
    common = {
        "version_dir": v2,
        "prev_dir": v1,
        "old_stats": first,
        "listed": HOSTS,
        "touched": {"pc-1"},
        "runner": "inline",
        "depth": 3,
        "min_entries": 1,
        "stats_every": 10,
    }
    incremental = round_prefix_stats(round_=2, workdir=tmp_path / "w2", **common)
    complete = round_prefix_stats(round_=10, workdir=tmp_path / "w3", **common)
    assert incremental.to_pylist() == complete.to_pylist()
    news = {(r["host"], r["share"], r["prefix"]): r["n_new"] for r in incremental.to_pylist()}
    assert news[("pc-1", "s", "")] == 1 and news[("лаб/2", "s", "")] == 0


def test_crawl_statistics_equal_group_by_over_files(
    lan: LAN, run_json: Callable[..., object], tmp_path: Path
) -> None:
    """On a real crawl: the job over the live version equals a GROUP BY over the `files`
    view of `sharecrawl sql`."""
    lan.media("pc-1", "music/Abba/Gold/01.mp3", artist="ABBA", title="SOS")
    lan.media("pc-1", "music/Abba/Gold/02.flac", "flac", artist="ABBA", title="Waterloo")
    lan.media("pc-2", "video/clip.mp4", "mp4")
    (lan.host("pc-2") / "video" / "notes.txt").write_text("hello")
    lan.write_hosts("pc-1", "pc-2")
    lan.crawl()
    crawl = CrawlDir(lan.crawl_dir)
    got = run_prefix_stats(
        host_parts(crawl.version_dir(crawl.current()), None, ["pc-1", "pc-2"]),
        "local",
        2,
        1,
        tmp_path / "work",
    )
    query = """
        WITH prefixes AS (SELECT DISTINCT host, share, path AS prefix FROM files
                          WHERE is_dir AND len(string_split(path, '/')) <= 2
                          UNION SELECT DISTINCT host, share, '' FROM files)
        SELECT p.host, p.share, p.prefix, count(*) FILTER (NOT f.is_dir) AS n_files,
               count(*) FILTER (f.is_dir) AS n_folders, count(m.path) AS n_media,
               coalesce(sum(f.size) FILTER (NOT f.is_dir), 0) AS bytes,
               coalesce(sum(m.size), 0) AS media_bytes
        FROM prefixes p JOIN files f ON f.host = p.host AND f.share = p.share
             AND (p.prefix = '' OR starts_with(f.path, p.prefix || '/'))
        LEFT JOIN media m ON m.host = f.host AND m.share = f.share AND m.path = f.path
        GROUP BY ALL ORDER BY ALL
    """
    expected = run_json(lan, "sql", query)
    keys = ["host", "share", "prefix", "n_files", "n_folders", "n_media", "bytes", "media_bytes"]
    assert [{k: r[k] for k in keys} for r in got.to_pylist()] == expected
    assert {(r["share"], r["prefix"]) for r in expected} >= {("music", "Abba/Gold"), ("video", "")}

"""prefix_stats stored in parts per host and group of partitions: a round writes the parts
of the groups whose statistics changed and hard-links the others, the table stays what a
whole recomputation gives, and a damaged part costs only statistics computed again. Real
crawls of file:// hosts with a small group size, real Parquet files."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sharecrawl.crawl_io.crawldb.part_groups
from sharecrawl.crawl_io.crawldb.atomic import write_parquet
from sharecrawl.crawl_io.crawldb.crawldir import CrawlDamaged, CrawlDir
from sharecrawl.crawl_io.crawldb.host_parts import footer_partitions, part_file, read_parquet
from sharecrawl.crawl_io.crawldb.version_manifest import MANIFEST_NAME, write_manifest
from sharecrawl.crawl_io.schema import PREFIX_STATS
from sharecrawl.jobs.mr_prefix_stats import host_parts, prefix_stats_here
from tests.conftest import LAN

SHARES = ("a-music", "b-films", "c-talks", "d-misc")
DEPTH, MIN_ENTRIES = 3, 1  # luigi.cfg's stats_depth and stats_min_entries


@pytest.fixture(autouse=True)
def small_groups(lan: LAN, monkeypatch: pytest.MonkeyPatch) -> None:
    """One share a group; the LAN's rounds run in this process, which sees it."""
    monkeypatch.setattr(sharecrawl.crawl_io.crawldb.part_groups, "GROUP_ROWS", 8)
    monkeypatch.setattr(lan, "crawl", lan.crawl_here)


def build(lan: LAN) -> None:
    for share in SHARES:
        for album in range(2):
            for track in range(2):
                lan.media("alpha", f"{share}/Album {album}/t{track}.mp3", title=f"{share} {album}")
    lan.media("beta", "share/x/song.ogg", "ogg", title="Kukushka")
    lan.write_hosts("alpha", "beta")


def inodes(crawl: CrawlDir, version: int) -> dict[str, int]:
    return {p.name: p.stat().st_ino for p in crawl.table_parts(version, "prefix_stats")}


def recomputed(crawl: CrawlDir, version: int) -> pa.Table:
    """The version's statistics computed whole from its files parts and the previous
    version's (what a complete round computes)."""
    hosts = crawl.read(version, "hosts")["host"].to_pylist()
    prev = crawl.version_dir(version - 1) if version > 1 else None
    parts = host_parts(crawl.version_dir(version), prev, hosts)
    return prefix_stats_here(parts, DEPTH, MIN_ENTRIES)


def ordered(table: pa.Table) -> list[dict]:
    return table.sort_by([("host", "ascending"), ("share", "ascending"), ("prefix", "ascending")])


def test_a_change_rewrites_only_the_statistics_of_its_groups(lan: LAN, run_json) -> None:
    build(lan)
    lan.crawl(rounds=2)  # round 1 counts every file new; round 2 counts them back to zero
    crawl = CrawlDir(lan.crawl_dir)
    assert sorted(inodes(crawl, 2)) == sorted(p.name for p in crawl.table_parts(2, "files"))
    for part in crawl.table_parts(2, "prefix_stats"):  # the same groups, the same footers
        assert footer_partitions(part) == footer_partitions(
            crawl.version_dir(2) / "files" / part.name
        )
    before = inodes(crawl, 2)

    lan.media("alpha", "c-talks/Album 1/t9.mp3", title="Lecture")
    lan.crawl()
    files = {p.name: p.stat().st_ino for p in crawl.table_parts(2, "files")}
    changed = {p.name for p in crawl.table_parts(3, "files") if p.stat().st_ino != files[p.name]}
    assert len(changed) == 1  # c-talks' group: its share root and folders are there
    after = inodes(crawl, 3)
    assert sorted(after) == sorted(before)
    assert {name for name in after if after[name] != before[name]} == changed
    stats = crawl.read(3, "prefix_stats")
    assert ordered(stats).equals(ordered(recomputed(crawl, 3)))
    talks = stats.filter(pa.compute.equal(stats["share"], "c-talks")).to_pylist()
    assert {r["prefix"]: r["n_new"] for r in talks} == {"": 1, "Album 0": 0, "Album 1": 1}

    lan.crawl()  # nothing changed: the group that counted the new file counts zero again
    again = inodes(crawl, 4)
    assert {name for name in again if again[name] != after[name]} == changed
    assert ordered(crawl.read(4, "prefix_stats")).equals(ordered(recomputed(crawl, 4)))
    rows = run_json(lan, "sql", "SELECT sum(n_files) AS n FROM prefix_stats WHERE prefix = ''")
    assert rows == [{"n": 18}]
    assert lan.cli("check") == 0


def test_a_damaged_statistics_part_costs_only_statistics_computed_again(
    lan: LAN, caplog: pytest.LogCaptureFixture
) -> None:
    build(lan)
    lan.crawl(rounds=2)
    crawl = CrawlDir(lan.crawl_dir)
    expected = ordered(crawl.read(2, "prefix_stats"))
    part = crawl.table_parts(2, "prefix_stats")[1]  # one of alpha's groups
    data = bytearray(part.read_bytes())
    data[len(data) // 3] ^= 0xFF  # bit rot: the size stays, the checksum does not
    part.write_bytes(bytes(data))
    assert lan.cli("check") == 1

    lan.crawl()
    assert f"{part}: checksum mismatch" in caplog.text
    assert "prefix statistics of alpha are computed again" in caplog.text
    log = pq.read_table(crawl.segment_dir(3) / "fetchlog.parquet").to_pylist()
    assert {r["status"] for r in log} == {"unchanged"}  # no partition listed again
    assert ordered(crawl.read(3, "prefix_stats")).equals(expected)
    assert lan.cli("check") == 0


def test_stored_parts_are_read_once_checked_then_parsed(tmp_path) -> None:
    """CrawlDir.stats_parts without a round: a part of the current schema, one of an older
    schema (a column fewer: conformed, the column empty), one whose bytes changed after
    the manifest was written, one gone, and one that is not Parquet."""
    crawl = CrawlDir(tmp_path / "crawl")
    vdir = crawl.version_dir(1)
    (vdir / "prefix_stats").mkdir(parents=True)

    def rows(host: str) -> pa.Table:
        columns = {f.name: pa.nulls(3, f.type) for f in PREFIX_STATS}
        columns |= {
            "host": pa.array([host] * 3),
            "share": pa.array(["share"] * 3),
            "prefix": pa.array(["", "Music", "Video"]),
        }
        return pa.table(columns, schema=PREFIX_STATS)

    def path(host: str):
        return vdir / "prefix_stats" / part_file(host, 0)

    dropped = PREFIX_STATS.names[-1]
    for host in ("alpha", "beta", "gamma", "delta"):
        write_parquet(rows(host), path(host))
    pq.write_table(rows("older").drop_columns([dropped]), path("older"))
    path("junk").write_bytes(b"not parquet at all")
    write_manifest(vdir, {})
    data = bytearray(path("beta").read_bytes())
    data[len(data) // 2] ^= 0xFF
    path("beta").write_bytes(bytes(data))
    path("gamma").unlink()

    parts, problems = crawl.stats_parts(1)
    assert set(parts) == {(host, 0) for host in ("alpha", "delta", "older")}
    assert parts[("alpha", 0)].equals(read_parquet(path("alpha"), PREFIX_STATS))
    assert parts[("alpha", 0)].schema.equals(PREFIX_STATS, check_metadata=True)
    older = parts[("older", 0)]
    assert older.schema.equals(PREFIX_STATS) and older[dropped].null_count == 3
    assert problems[path("junk")].startswith("does not read")
    assert problems[path("beta")].startswith("checksum mismatch")
    assert problems[path("gamma")] == "missing"
    assert len(problems) == 3
    (vdir / MANIFEST_NAME).unlink()  # a version without its manifest is damaged
    with pytest.raises(CrawlDamaged, match=r"MANIFEST\.json is missing"):
        CrawlDir(tmp_path / "crawl").stats_parts(1)

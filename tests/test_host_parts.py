"""A host's parts by group of partitions: a round rewrites only the groups whose partitions
changed, a file moved between groups keeps its tags, a damaged group costs only its
partitions, and a fetch reads only the groups it needs. Real crawls of file:// hosts with a
small group size, real Parquet files."""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Callable

import pyarrow.parquet as pq
import pytest

import sharecrawl.crawl_io.crawldb.part_groups
import sharecrawl.pipeline.host_rewrite
from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir
from sharecrawl.crawl_io.crawldb.host_parts import (
    changed_parts,
    footer_partitions,
    parse_part_file,
    part_file,
)
from sharecrawl.crawl_io.crawldb.part_groups import plan_groups
from sharecrawl.crawl_io.crawldb.stored_hosts import StoredHost
from sharecrawl.crawl_io.schema import FILES, FOLDERS, MEDIA
from sharecrawl.jobs.subtree_hash import folder_summaries
from tests.conftest import LAN

SHARES = ("a-music", "b-films", "c-talks", "d-misc")
GROUP_ROWS = 8  # a share here is 6 rows: one share a group


# -- planning groups ------------------------------------------------------------------------
def test_a_new_host_is_packed_in_order_into_groups_of_the_target() -> None:
    rows = {"p1": 4, "p2": 4, "p3": 4, "p4": 9, "p5": 0}
    plan = plan_groups({}, rows, ["p1", "p2", "p3", "p4", "p5"], {}, target=8)
    assert plan == {0: ["p1", "p2"], 1: ["p3"], 2: ["p4"]}  # p5 has no rows: no group


def test_partitions_stay_in_their_group_and_new_ones_join_their_ancestor() -> None:
    old = {0: ["root"], 3: ["x"], 5: ["y"]}
    rows = {"root": 5, "x": 5, "y": 6, "x-split": 2, "lone": 1}
    parent = {"x-split": "x", "x": "root", "y": "root", "lone": None}
    plan = plan_groups(old, rows, ["root", "x", "x-split", "y", "lone"], parent, target=8)
    assert plan[3] == ["x", "x-split"]  # with the partition it was split from
    assert plan[5] == ["y"] and "lone" in plan[0]  # no ancestor: the smallest group with room
    assert set(plan) == {0, 3, 5}


def test_a_group_past_twice_the_target_is_cut_and_small_groups_are_compacted() -> None:
    rows = {f"p{i}": 4 for i in range(10)}
    plan = plan_groups({0: list(rows)}, rows, list(rows), {}, target=8)  # 40 rows, one part
    assert list(plan.values()) == [[f"p{2 * i}", f"p{2 * i + 1}"] for i in range(5)]
    assert plan_groups({0: list(rows)}, rows, list(rows), {}, target=20) == {0: list(rows)}
    shrunk = {"a": 1, "b": 1, "c": 8, "d": 0}
    plan = plan_groups(
        {0: ["a"], 1: ["b"], 2: ["c"], 4: ["d"]}, shrunk, ["a", "b", "c", "d"], {}, target=8
    )
    assert plan == {0: ["a", "b"], 2: ["c"]}


def test_part_names_keep_any_host_and_its_group() -> None:
    for host in ("pc-1", "nas.lab", "odd@host", "x%40y", "дом"):
        for group in (0, 1, 17):
            name = part_file(host, group)
            assert "/" not in name and parse_part_file(name) == (host, group)
    assert part_file("pc-1") == "pc-1.parquet"  # group 0: the name one part per host had
    assert parse_part_file(".pc-1.parquet.tmp12") is None
    assert parse_part_file("pc-1@0.parquet") is None


# -- rounds ---------------------------------------------------------------------------------
@pytest.fixture
def small_groups(lan: LAN, monkeypatch: pytest.MonkeyPatch) -> None:
    """Groups of GROUP_ROWS rows; the LAN's rounds run in this process, which sees them."""
    monkeypatch.setattr(sharecrawl.crawl_io.crawldb.part_groups, "GROUP_ROWS", GROUP_ROWS)
    monkeypatch.setattr(lan, "crawl", lan.crawl_here)


def build(lan: LAN) -> None:
    for share in SHARES:
        for album in range(2):
            for track in range(2):
                lan.media(
                    "alpha",
                    f"{share}/Album {album}/t{track}.mp3",
                    artist=f"{share} band",
                    title=f"{share} {album} {track}",
                )
    lan.media("beta", "share/x/song.ogg", "ogg", artist="Kino", title="Kukushka")
    lan.write_hosts("alpha", "beta")


def inodes(crawl: CrawlDir, version: int, table: str) -> dict[str, int]:
    return {p.name: p.stat().st_ino for p in crawl.table_parts(version, table)}


def rows(crawl: CrawlDir, version: int, table: str) -> list[tuple]:
    columns = ["host", "share", "path", "partition_id"]
    return sorted(
        crawl.read(version, table).select(columns).to_pylist(),
        key=lambda r: (r["host"], r["share"], r["path"]),
    )


def group_of(crawl: CrawlDir, version: int, share: str) -> str:
    """The name of alpha's files part holding `share`'s root partition."""
    (pid,) = {
        r["partition_id"]
        for r in rows(crawl, version, "files")
        if r["host"] == "alpha" and r["share"] == share
    }
    (name,) = [
        p.name for p in crawl.table_parts(version, "files") if pid in (footer_partitions(p) or ())
    ]
    return name


def test_a_change_rewrites_only_the_group_of_its_partition(
    lan: LAN, small_groups, run_json
) -> None:
    build(lan)
    lan.crawl()
    crawl = CrawlDir(lan.crawl_dir)
    names = sorted(inodes(crawl, 1, "files"))
    assert names == [
        "alpha.parquet",
        "alpha@1.parquet",
        "alpha@2.parquet",
        "alpha@3.parquet",
        "beta.parquet",
    ]
    held = [footer_partitions(p) for p in crawl.table_parts(1, "files")]
    assert all(held) and len(set().union(*held)) == sum(len(h) for h in held) == 5
    before = {t: inodes(crawl, 1, t) for t in ("files", "media", "folders")}

    lan.media("alpha", "c-talks/Album 1/t9.mp3", artist="new", title="Lecture")
    lan.crawl()
    changed = group_of(crawl, 2, "c-talks")
    for table in ("files", "media", "folders"):
        after = inodes(crawl, 2, table)
        assert sorted(after) == sorted(before[table])
        assert {n for n in after if after[n] != before[table][n]} == {changed}, table
    assert run_json(lan, "status")["tags_read"] == 1
    found = run_json(lan, "sql", "SELECT count(*) AS n FROM media WHERE host = 'alpha'")
    assert found == [{"n": 17}]
    assert run_json(lan, "search", "lecture")[0]["title"] == "Lecture"
    assert lan.cli("check") == 0


def test_folder_rows_updated_from_the_stored_ones_equal_hashing_every_folder(
    lan: LAN, luigi_cfg: Callable[[str], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A share split into range partitions of a few albums under one folder, one partition
    changed a round (a file added deep down, one deleted, a folder moved): the host's folder
    rows are brought up to date from the stored ones (jobs.folder_update: the band's folder
    from its unchanged albums' stored hashes), but on a complete round, and they are the
    rows folder_summaries gives over its files."""
    # about four folders a partition; round 4 a complete round (every host's statistics)
    luigi_cfg("[sharecrawl]\npartition_max_seconds = 0.06\nstats_every = 4\n")
    for album, disc, track in itertools.product(range(48), range(2), range(2)):
        lan.media("alpha", f"music/Band/Album {album:02d}/CD {disc}/t{track}.mp3", artist="b")
    lan.write_hosts("alpha")
    updates: list[bool] = []
    real = sharecrawl.pipeline.host_rewrite.updated_folder_summaries

    def counted(*args):
        result = real(*args)
        updates.append(result is not None)
        return result

    monkeypatch.setattr(sharecrawl.pipeline.host_rewrite, "updated_folder_summaries", counted)
    monkeypatch.setattr(lan, "crawl", lan.crawl_here)  # rounds where the count is kept
    crawl = CrawlDir(lan.crawl_dir)
    band = lan.host("alpha") / "music/Band"
    changes = [
        lambda: lan.media("alpha", "music/Band/Album 07/CD 1/Bonus/t9.mp3", artist="new"),
        lambda: (band / "Album 20/CD 0/t1.mp3").unlink(),
        lambda: shutil.move(band / "Album 33/CD 0", band / "Album 33/CD 1/Inner"),
    ]
    lan.crawl()
    assert len(crawl.read(crawl.current(), "partitions")) > 4
    for change in [None, *changes]:
        if change is not None:
            change()
            lan.tick(band)
            lan.crawl()
        version = crawl.current()
        expected = folder_summaries(crawl.read(version, "files")).to_pylist()
        stored = crawl.read(version, "folders").select(FOLDERS.names).to_pylist()
        assert sorted(stored, key=repr) == sorted(expected, key=repr)
    assert updates == [True, True]  # rounds 2 and 3 updated; round 4 hashed every folder


def test_a_file_moved_to_another_group_keeps_its_tags(lan: LAN, small_groups, run_json) -> None:
    build(lan)
    lan.crawl()
    crawl = CrawlDir(lan.crawl_dir)
    assert group_of(crawl, 1, "a-music") != group_of(crawl, 1, "d-misc")
    shutil.move(lan.host("alpha") / "a-music/Album 1", lan.host("alpha") / "d-misc/Moved")
    lan.crawl()
    assert run_json(lan, "status")["tags_read"] == 0
    moved = "SELECT share, path, tag_error FROM media WHERE title = 'a-music 1 0'"
    assert run_json(lan, "sql", moved) == [
        {"share": "d-misc", "path": "Moved/t0.mp3", "tag_error": None}
    ]


def test_a_damaged_group_costs_only_its_partitions(lan: LAN, small_groups, run_json) -> None:
    build(lan)
    lan.crawl()
    crawl = CrawlDir(lan.crawl_dir)
    expected = rows(crawl, 1, "files")
    damaged = group_of(crawl, 1, "b-films")
    (crawl.version_dir(1) / "media" / damaged).unlink()
    lan.crawl()
    log = pq.read_table(crawl.segment_dir(2) / "fetchlog.parquet").to_pylist()
    status = {r["share"]: r["status"] for r in log if r["host"] == "alpha"}
    assert status == {
        "a-music": "unchanged",
        "b-films": "new",
        "c-talks": "unchanged",
        "d-misc": "unchanged",
    }
    assert sum(r["n_tags_read"] for r in log) == 4  # b-films' tags, read again
    assert rows(crawl, 2, "files") == expected
    assert lan.cli("check") == 0


def test_a_fetch_reads_only_the_groups_of_the_partitions_it_needs(lan: LAN, small_groups) -> None:
    build(lan)
    lan.crawl()
    crawl = CrawlDir(lan.crawl_dir)
    pids = {r["share"]: r["partition_id"] for r in rows(crawl, 1, "files") if r["host"] == "alpha"}
    other = crawl.version_dir(1) / "files" / group_of(crawl, 1, "d-misc")
    other.write_bytes(b"\0" * other.stat().st_size)  # garbled, same size: only a read sees it
    stored = crawl.hosts(1)
    host = StoredHost(stored, "alpha")
    found = host.rows("files", {pids["a-music"]})
    assert {r["share"] for r in found.to_pylist()} == {"a-music"} and found.num_rows == 6
    assert stored.damaged_groups() == set()  # the garbled part was never opened
    assert host.rows("files", {pids["d-misc"]}).num_rows == 0  # read now: damaged, no rows
    assert stored.damaged_groups() == {("alpha", parse_part_file(other.name)[1])}


def test_parts_changed_between_versions_by_manifest_or_inode(lan: LAN, small_groups) -> None:
    build(lan)
    lan.crawl()
    lan.media("alpha", "a-music/Album 0/t7.mp3", artist="new", title="Song")
    lan.crawl()
    crawl = CrawlDir(lan.crawl_dir)
    group = group_of(crawl, 2, "a-music")
    change = changed_parts(crawl.version_dir(1), crawl.version_dir(2), "media")
    assert [p.name for p in change.removed] == [p.name for p in change.added] == [group]
    assert change.removed[0].parent.parent == crawl.version_dir(1)
    for version in (1, 2):  # without manifests: by inode, the same answer
        os.unlink(crawl.version_dir(version) / "MANIFEST.json")
    again = changed_parts(crawl.version_dir(1), crawl.version_dir(2), "media")
    assert again == change
    assert not changed_parts(crawl.version_dir(1), crawl.version_dir(1), "files")


# -- the same tables whatever the groups ----------------------------------------------------
STABLE_COLUMNS = {  # every column but the clocks and the measured costs
    "files": [c for c in FILES.names if c not in ("first_seen", "last_seen")],
    "media": [c for c in MEDIA.names if c not in ("tagged_at", "first_seen", "last_changed")],
    "folders": FOLDERS.names,
    "hosts": ["host", "url", "online", "last_error", "status"],
    "partitions": [
        "partition_id",
        "host",
        "share",
        "root",
        "lo",
        "hi",
        "parent_id",
        "hash",
        "n_folders",
        "n_files",
        "n_media",
        "bytes",
        "n_scans",
        "n_changes",
        "status",
    ],
}


def stable_tables(crawl: CrawlDir, version: int) -> dict[str, list[dict]]:
    return {
        table: sorted(crawl.read(version, table).select(columns).to_pylist(), key=repr)
        for table, columns in STABLE_COLUMNS.items()
    }


def test_groups_hold_exactly_the_rows_one_part_per_host_holds(
    lan: LAN, monkeypatch: pytest.MonkeyPatch, run_json
) -> None:
    """The same LAN crawled into two crawl dirs, round by round through a new file, a move
    and a deletion: one with one part per host, one with groups of one share. Every table,
    every sql answer and every search answer is the same."""
    build(lan)
    one_part, groups = lan.crawl_dir, lan.root / "crawl-groups"

    def crawl_both() -> None:
        for crawl_dir, group_rows in (
            (one_part, sharecrawl.crawl_io.crawldb.part_groups.GROUP_ROWS),
            (groups, GROUP_ROWS),
        ):
            with monkeypatch.context() as m:
                m.setattr(sharecrawl.crawl_io.crawldb.part_groups, "GROUP_ROWS", group_rows)
                m.setattr(lan, "crawl_dir", crawl_dir)
                lan.crawl_here()

    crawl_both()
    lan.media("alpha", "c-talks/Album 1/t9.mp3", artist="new", title="Lecture")
    crawl_both()
    shutil.move(lan.host("alpha") / "a-music/Album 1", lan.host("alpha") / "d-misc/Moved")
    (lan.host("alpha") / "b-films/Album 0/t1.mp3").unlink()
    crawl_both()

    a, b = CrawlDir(one_part), CrawlDir(groups)
    assert a.current() == b.current() == 3
    assert len(a.table_parts(3, "files")) == 2 and len(b.table_parts(3, "files")) > 2
    assert stable_tables(a, 3) == stable_tables(b, 3)
    asked = [
        ("sql", "SELECT share, count(*) AS n FROM media GROUP BY share ORDER BY share"),
        ("sql", "SELECT * FROM duplicate_folders ORDER BY ALL"),
        ("search", "lecture"),
        ("search", "band"),
        ("search", "artist:kino"),
    ]
    answers = []
    for crawl_dir in (one_part, groups):
        monkeypatch.setattr(lan, "crawl_dir", crawl_dir)
        answers.append([run_json(lan, *q) for q in asked])
        assert lan.cli("check") == 0
    assert answers[0] == answers[1] and all(answers[0][2:])


def test_check_repair_sets_aside_one_damaged_group_and_the_next_round_lists_only_it(
    lan: LAN, small_groups, capsys: pytest.CaptureFixture[str]
) -> None:
    build(lan)
    lan.crawl()
    crawl = CrawlDir(lan.crawl_dir)
    expected = rows(crawl, 1, "files")
    damaged = crawl.version_dir(1) / "media" / group_of(crawl, 1, "c-talks")
    data = bytearray(damaged.read_bytes())
    data[len(data) // 3] ^= 0xFF  # inside a page: same size, another checksum
    damaged.write_bytes(bytes(data))

    capsys.readouterr()
    assert lan.cli("check") == 1
    assert capsys.readouterr().out.splitlines() == [
        f"{damaged}: checksum mismatch (its bytes changed since it was written)"
    ]
    assert lan.cli("check", "--repair") == 0
    assert f"{damaged}: dropped from MANIFEST.json" in capsys.readouterr().out
    assert not damaged.exists() and crawl.current() == 1
    lan.crawl()
    log = pq.read_table(crawl.segment_dir(2) / "fetchlog.parquet").to_pylist()
    status = {r["share"]: r["status"] for r in log if r["host"] == "alpha"}
    assert status == {
        "a-music": "unchanged",
        "b-films": "unchanged",
        "c-talks": "new",
        "d-misc": "unchanged",
    }
    assert rows(crawl, 2, "files") == expected
    assert lan.cli("check") == 0

"""Incremental rounds: unchanged partitions cost one fetchlog row; tags are read only for
new or changed media; moves keep stored tags; removals leave the index."""

from __future__ import annotations

import shutil

import pyarrow.parquet as pq

from tests.conftest import LAN


def build(lan: LAN) -> None:
    for share in ("music", "films", "incoming", "old"):
        for i in range(3):
            word = ("alpha", "bravo", "charlie")[i]
            lan.media(
                "alpha",
                f"{share}/Album {i}/track{i:02d}.mp3",
                artist=f"{share} band",
                title=f"{share} song {word}",
            )
    lan.media("beta", "share/x/song_01.ogg", "ogg", artist="Kino", title="Kukushka")
    lan.write_hosts("alpha", "beta")


def listing_rows(lan: LAN, round_: int) -> int:
    folder = lan.crawl_dir / "segments" / f"r{round_:06d}" / "listing"
    return sum(pq.read_metadata(p).num_rows for p in folder.glob("*.parquet"))


def test_k_changed_files_in_m_partitions_cost_k_tag_reads(lan: LAN, run_json) -> None:
    build(lan)
    lan.crawl()
    assert run_json(lan, "status")["tags_read"] == 13
    lan.media("alpha", "music/Album 0/track00.mp3", artist="music band", title="remastered")
    lan.media("alpha", "music/Album 1/track01.mp3", artist="music band", title="live")
    lan.media("alpha", "films/Album 2/bonus.mp3", artist="films band", title="bonus")
    lan.crawl()
    status = run_json(lan, "status")
    assert status["tags_read"] == 3
    assert status["partitions"]["changed"] == 2
    assert status["partitions"]["unchanged"] == 3
    assert set(status) >= {
        "round",
        "partitions",
        "tags_read",
        "bytes_read",
        "listing_s",
        "tags_s",
        "errors",
        "change_share",
    }
    assert status["errors"] == 0 and 0 < status["change_share"] < 1
    changed = run_json(
        lan,
        "sql",
        "SELECT share FROM fetchlog WHERE round = 2 AND status = 'changed' ORDER BY share",
    )
    assert [r["share"] for r in changed] == ["films", "music"]
    # listing rows are written for the changed partitions only
    in_changed = "SELECT count(*) AS n FROM files WHERE share IN ('films', 'music')"
    assert listing_rows(lan, 2) == run_json(lan, "sql", in_changed)[0]["n"]


def test_moved_folder_costs_no_tag_reads(lan: LAN, run_json) -> None:
    build(lan)
    lan.crawl()
    shutil.move(lan.host("alpha") / "incoming/Album 1", lan.host("alpha") / "music/Moved")
    lan.crawl()
    status = run_json(lan, "status")
    assert status["tags_read"] == 0 and status["partitions"]["changed"] == 2
    (hit,) = run_json(lan, "search", "incoming", "song", "bravo")[:1]
    assert (hit["best"]["path"], hit["copies"]) == ("Moved/track01.mp3", 1)
    moved = "SELECT share, path, tag_error FROM media WHERE title = 'incoming song bravo'"
    assert run_json(lan, "sql", moved) == [
        {"share": "music", "path": "Moved/track01.mp3", "tag_error": None}
    ]


def test_removed_folder_leaves_the_crawldb_and_search(lan: LAN, run_json) -> None:
    build(lan)
    lan.crawl()
    shutil.rmtree(lan.host("alpha") / "old")
    shutil.rmtree(lan.host("beta") / "share" / "x")
    lan.crawl()
    status = run_json(lan, "status")
    assert status["partitions"]["gone"] == 1  # the share 'old' vanished with its folder
    left = run_json(
        lan, "sql", "SELECT count(*) AS n FROM files WHERE share = 'old' OR path LIKE 'x%'"
    )
    assert left[0]["n"] == 0
    assert (
        run_json(lan, "sql", "SELECT count(*) AS n FROM partitions WHERE share = 'old'")[0]["n"]
        == 0
    )
    assert run_json(lan, "search", "kukushka") == []
    assert run_json(lan, "search", "artist:old") == []
    assert run_json(lan, "search", "artist:music")


def test_untouched_hosts_parts_are_shared_not_copied(lan: LAN) -> None:
    build(lan)
    lan.crawl()
    lan.media("beta", "share/y/new.mp3", artist="Aria", title="Bespechny angel")
    lan.crawl()
    v1, v2 = (lan.crawl_dir / "crawldb" / f"v00000{n}" / "files" for n in (1, 2))
    assert (v1 / "alpha.parquet").stat().st_ino == (v2 / "alpha.parquet").stat().st_ino
    assert (v1 / "beta.parquet").stat().st_ino != (v2 / "beta.parquet").stat().st_ino


def index_meta(lan: LAN) -> dict[str, str]:
    import duckdb

    con = duckdb.connect(str(lan.crawl_dir / "index" / "search.duckdb"), read_only=True)
    try:
        return dict(con.execute("SELECT key, value FROM meta").fetchall())
    finally:
        con.close()


def test_index_is_rebuilt_only_when_the_round_changed_something(lan: LAN, run_json) -> None:
    build(lan)
    lan.crawl()
    first = index_meta(lan)
    lan.crawl()  # nothing changed: the index is relabelled, not rebuilt
    second = index_meta(lan)
    assert second["version"] == "v000002" and second["built_at"] == first["built_at"]
    shutil.move(lan.host("beta"), lan.root / "away")
    lan.crawl()  # a host went offline: its copies must be hidden, so the index is rebuilt
    third = index_meta(lan)
    assert third["version"] == "v000003" and third["built_at"] != first["built_at"]
    assert run_json(lan, "search", "kukushka") == []


def test_scan_history_and_rates_follow_the_scans(lan: LAN, run_json) -> None:
    """Each scan after the first adds a (time, changed) event; a partition that changed in
    every scan gets a higher rate than one that never did."""
    build(lan)
    lan.crawl()
    for i in range(2):
        lan.media("alpha", f"incoming/new{i}.mp3", artist="x", title=f"new {i}")
        lan.crawl()
    rows = run_json(
        lan,
        "sql",
        "SELECT share, n_scans, n_changes, rate_per_h, "
        "[e.changed FOR e IN history] AS changed, "
        "[epoch(e.t) FOR e IN history] AS t, last_scan "
        "FROM partitions WHERE host = 'alpha' ORDER BY share",
    )
    by_share = {r["share"]: r for r in rows}
    assert by_share["incoming"]["changed"] == [True, True]
    assert by_share["music"]["changed"] == [False, False]
    assert by_share["incoming"]["n_scans"] == 3 and by_share["incoming"]["n_changes"] == 2
    assert by_share["incoming"]["t"] == sorted(by_share["incoming"]["t"])
    assert by_share["incoming"]["rate_per_h"] > by_share["music"]["rate_per_h"] > 0

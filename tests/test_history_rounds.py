"""The crawl's history over real rounds of file:// hosts: the `changes` rows a round writes
(added, deleted, changed, retagged, moved; a host offline deletes nothing, a host retired is
deleted once), `versions` with their publish times, `sql --at` a version or a time, and
`media.first_seen` / `last_changed` kept across rounds."""

from __future__ import annotations

import json
import os
import shutil
from datetime import datetime, timedelta

import pyarrow.parquet as pq
import pytest

from sharecrawl.crawl_io.crawldb.history import prune_changes
from sharecrawl.queries.index_store import IndexFile
from sharecrawl.web.recent import new_works
from tests.conftest import LAN

ROW = "round, change, host, share, path, path_before, size_before, size_after, fields"
CHANGES = f"SELECT {ROW} FROM changes ORDER BY round, host, share, path"


def size(lan: LAN, host: str, relpath: str) -> int:
    return (lan.host(host) / relpath).stat().st_size


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[LAN, dict[str, int]]:
    """Five rounds: 1 builds alpha and beta; 2 adds, deletes, retags and moves on alpha while
    beta is switched off; 3 brings beta back with a file replaced (same tags, other bitrate);
    4 retires beta; 5 changes nothing. Returns the LAN and the files' sizes as they were."""
    lan = LAN(tmp_path_factory.mktemp("history"))
    sizes: dict[str, int] = {}
    lan.media("alpha", "music/Kino/a.mp3", artist="Kino", title="Kukushka")
    lan.media("alpha", "music/Kino/b.mp3", artist="Kino", title="Gruppa krovi")
    lan.media("alpha", "music/Aria/c.ogg", "ogg", artist="Aria", title="Bespechny angel")
    lan.media("beta", "share/x.mp3", artist="DDT", title="Osen")
    lan.media("beta", "video/film.mp4", "mp4")
    lan.write_hosts("alpha", "beta")
    lan.crawl()
    for path in ("music/Kino/a.mp3", "music/Kino/b.mp3", "music/Aria/c.ogg"):
        sizes[path] = size(lan, "alpha", path)
    sizes["share/x.mp3"] = size(lan, "beta", "share/x.mp3")

    lan.media("alpha", "music/Kino/d.mp3", artist="Kino", title="Zvezda")
    (lan.host("alpha") / "music/Kino/b.mp3").unlink()
    lan.media("alpha", "music/Kino/a.mp3", artist="Kino", title="Kukushka (live)")
    (lan.host("alpha") / "music/Moved").mkdir()
    shutil.move(lan.host("alpha") / "music/Aria/c.ogg", lan.host("alpha") / "music/Moved/c.ogg")
    away = lan.root / "away"
    away.mkdir()
    lan.host("beta").rename(away / "beta")  # switched off: its folder is gone
    lan.crawl()
    sizes["music/Kino/a.mp3 after"] = size(lan, "alpha", "music/Kino/a.mp3")
    sizes["music/Kino/d.mp3"] = size(lan, "alpha", "music/Kino/d.mp3")

    (away / "beta").rename(lan.host("beta"))
    lan.media("beta", "share/x.mp3", "mp3-320", artist="DDT", title="Osen")
    lan.crawl()
    sizes["share/x.mp3 after"] = size(lan, "beta", "share/x.mp3")
    sizes["video/film.mp4"] = size(lan, "beta", "video/film.mp4")

    lan.write_hosts("alpha")  # beta retired
    lan.crawl(rounds=2)
    return lan, sizes


def test_changes_hold_every_change_once_in_the_crawls_words(history, run_json) -> None:
    lan, s = history
    rows = [tuple(r.values()) for r in run_json(lan, "sql", CHANGES)]
    title = [{"field": "title", "before": "Kukushka", "after": "Kukushka (live)"}]
    assert rows == [
        (1, "added", "alpha", "music", "Aria/c.ogg", None, None, s["music/Aria/c.ogg"], None),
        (1, "added", "alpha", "music", "Kino/a.mp3", None, None, s["music/Kino/a.mp3"], None),
        (1, "added", "alpha", "music", "Kino/b.mp3", None, None, s["music/Kino/b.mp3"], None),
        (1, "added", "beta", "share", "x.mp3", None, None, s["share/x.mp3"], None),
        (1, "added", "beta", "video", "film.mp4", None, None, s["video/film.mp4"], None),
        (
            2,
            "retagged",
            "alpha",
            "music",
            "Kino/a.mp3",
            None,
            s["music/Kino/a.mp3"],
            s["music/Kino/a.mp3 after"],
            title,
        ),
        (2, "deleted", "alpha", "music", "Kino/b.mp3", None, s["music/Kino/b.mp3"], None, None),
        (2, "added", "alpha", "music", "Kino/d.mp3", None, None, s["music/Kino/d.mp3"], None),
        (
            2,
            "moved",
            "alpha",
            "music",
            "Moved/c.ogg",
            "Aria/c.ogg",
            s["music/Aria/c.ogg"],
            s["music/Aria/c.ogg"],
            None,
        ),
        # beta was switched off in round 2: nothing of it deleted; back in 3, one file replaced
        (
            3,
            "changed",
            "beta",
            "share",
            "x.mp3",
            None,
            s["share/x.mp3"],
            s["share/x.mp3 after"],
            None,
        ),
        # retired in round 4: every file of it deleted, once (round 5 changed nothing)
        (4, "deleted", "beta", "share", "x.mp3", None, s["share/x.mp3 after"], None, None),
        (4, "deleted", "beta", "video", "film.mp4", None, s["video/film.mp4"], None, None),
    ]
    assert s["music/Kino/a.mp3 after"] != s["music/Kino/a.mp3"]  # the sizes tell them apart
    assert s["share/x.mp3 after"] != s["share/x.mp3"]


def test_versions_are_dated_and_count_what_each_held(history, run_json) -> None:
    lan, _ = history
    rows = run_json(lan, "sql", "SELECT * FROM versions ORDER BY round")
    assert [(r["version"], r["media"], r["hosts"], r["hosts_online"]) for r in rows] == [
        ("v000001", 5, 2, 2),
        ("v000002", 5, 2, 1),  # beta offline keeps its rows
        ("v000003", 5, 2, 2),
        ("v000004", 3, 1, 1),
        ("v000005", 3, 1, 1),
    ]
    published = [datetime.fromisoformat(r["published"]) for r in rows]
    assert published == sorted(published) and len(set(published)) == 5
    media_bytes = run_json(lan, "sql", "SELECT sum(size) AS b, count(*) AS n FROM media")[0]
    assert rows[-1]["media_bytes"] == media_bytes["b"]
    # every manifest is dated, with the time the view shows
    for r in rows:
        manifest = lan.crawl_dir / "crawldb" / r["version"] / "MANIFEST.json"
        assert datetime.fromisoformat(json.loads(manifest.read_text())["published"]) == (
            datetime.fromisoformat(r["published"])
        )
    # the changes rows carry their version's time
    times = run_json(lan, "sql", "SELECT DISTINCT round, published FROM changes ORDER BY 1")
    assert {t["round"]: t["published"] for t in times} == {
        r["round"]: r["published"] for r in rows if r["round"] in (1, 2, 3, 4)
    }


def test_sql_at_a_version_or_a_time_reads_that_version(history, run_json, capsys) -> None:
    lan, _ = history
    versions = run_json(lan, "sql", "SELECT version, published FROM versions ORDER BY round")
    query = "SELECT path FROM media WHERE host = 'alpha' ORDER BY path"
    v1 = ["Aria/c.ogg", "Kino/a.mp3", "Kino/b.mp3"]
    assert [r["path"] for r in run_json(lan, "sql", "--at", "v000001", query)] == v1
    # a time between two publications: the first of them was live
    between = datetime.fromisoformat(versions[0]["published"]) + timedelta(microseconds=1)
    assert [r["path"] for r in run_json(lan, "sql", "--at", str(between), query)] == v1
    at_2 = run_json(lan, "sql", "--at", versions[1]["published"], query)
    assert [r["path"] for r in at_2] == ["Kino/a.mp3", "Kino/d.mp3", "Moved/c.ogg"]
    # the history as it stood then: changes and versions up to that version
    then = "SELECT max(round) AS c, (SELECT count(*) FROM versions) AS v FROM changes"
    seen = run_json(lan, "sql", "--at", "v000002", then)
    assert seen == [{"c": 2, "v": 2}]
    for at, said in (
        ("v000009", "v000009 is not a kept version"),
        ("2001-01-01", "no kept version was live at 2001-01-01 00:00:00 UTC"),
        ("last tuesday", "--at takes a kept version (v000002) or a UTC time"),
        ("9999-12-31T23:59:59-01:00", "--at takes a kept version (v000002) or a UTC time"),
        ("0001-01-01", "no kept version was live at 0001-01-01 00:00:00 UTC"),
    ):
        capsys.readouterr()
        assert lan.cli("sql", "--at", at, query) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"sharecrawl: error: {said}") and err.count("\n") == 1, err
    capsys.readouterr()
    assert lan.cli("sql", "--at", "v000001", "SELECT count(*) FROM works") == 2
    assert "live version's search index" in capsys.readouterr().err
    assert lan.cli("search", "--at", "v000001", "kino") == 2
    assert capsys.readouterr().err == (
        "sharecrawl: error: search has no --at: only the live version has a search index; "
        "query an older one's media with `sharecrawl sql --at WHEN`\n"
    )


def test_first_seen_is_kept_and_last_changed_follows_the_changes(history, run_json) -> None:
    lan, _ = history
    query = "SELECT path, first_seen, last_changed FROM media ORDER BY path"
    before = {r["path"]: r for r in run_json(lan, "sql", "--at", "v000001", query)}
    after = {r["path"]: r for r in run_json(lan, "sql", query)}
    assert set(after) == {"Kino/a.mp3", "Kino/d.mp3", "Moved/c.ogg"}
    assert all(r["first_seen"] and r["last_changed"] for r in [*before.values(), *after.values()])
    retagged, moved = after["Kino/a.mp3"], after["Moved/c.ogg"]
    assert retagged["first_seen"] == before["Kino/a.mp3"]["first_seen"]  # kept across a retag
    assert retagged["last_changed"] > before["Kino/a.mp3"]["last_changed"]
    assert moved["first_seen"] == before["Aria/c.ogg"]["first_seen"]  # a move keeps it too
    assert after["Kino/d.mp3"]["first_seen"] > before["Kino/a.mp3"]["first_seen"]


def test_history_is_pruned_by_age_alone(lan: LAN, run_json) -> None:
    """history_days removes the parts of rounds published longer ago, oldest first, and no
    version."""
    lan.media("alpha", "music/a.mp3", artist="A", title="a")
    lan.write_hosts("alpha")
    lan.crawl()
    lan.media("alpha", "music/b.mp3", artist="B", title="b")
    lan.crawl()
    changes = lan.crawl_dir / "crawldb" / "changes"
    parts = sorted(p.name for p in changes.iterdir())
    assert parts == ["r000001.parquet", "r000002.parquet"]
    second = datetime.fromisoformat(
        pq.read_metadata(changes / parts[1]).metadata[b"sharecrawl.published"].decode()
    )
    removed = prune_changes(lan.crawl_dir / "crawldb", 1, second + timedelta(days=1))
    assert [p.name for p in removed] == ["r000001.parquet"]  # published a little earlier
    removed = prune_changes(lan.crawl_dir / "crawldb", 1, second + timedelta(days=1, seconds=1))
    assert [p.name for p in removed] == ["r000002.parquet"]
    assert [r["version"] for r in run_json(lan, "sql", "SELECT version FROM versions")] == [
        "v000001",
        "v000002",
    ]
    assert run_json(lan, "sql", "SELECT count(*) AS n FROM changes") == [{"n": 0}]


def test_changes_are_kept_when_keep_rounds_removes_versions(lan: LAN, luigi_cfg, run_json) -> None:
    luigi_cfg("[sharecrawl]\nkeep_rounds = 2\n")
    lan.write_hosts("alpha")
    for name in ("a", "b", "c"):
        lan.media("alpha", f"music/{name}.mp3", artist=name, title=name)
        lan.crawl()
    assert [r["version"] for r in run_json(lan, "sql", "SELECT version FROM versions")] == [
        "v000002",
        "v000003",
    ]
    rows = run_json(lan, "sql", "SELECT round, change, path FROM changes ORDER BY round")
    assert [tuple(r.values()) for r in rows] == [
        (1, "added", "a.mp3"),
        (2, "added", "b.mp3"),
        (3, "added", "c.mp3"),
    ]


def test_a_manifest_without_its_time_falls_back_to_its_mtime(lan: LAN, run_json) -> None:
    """A manifest written before it held a time (the crawl directory's format is the same)
    reads with its file's mtime: a manifest is written last, as its version is published."""
    lan.media("alpha", "music/a.mp3", artist="A", title="a")
    lan.write_hosts("alpha")
    lan.crawl()
    manifest = lan.crawl_dir / "crawldb" / "v000001" / "MANIFEST.json"
    record = json.loads(manifest.read_text())
    del record["published"]
    for entry in record["parts"].values():  # nor the counts: the parts are counted when asked
        del entry[2:]  # an entry is [size, sha256, rows, folders, bytes]
    manifest.write_text(json.dumps(record))
    mtime = datetime.fromisoformat("2026-11-20T18:00:00+00:00")
    os.utime(manifest, (mtime.timestamp(), mtime.timestamp()))
    [row] = run_json(lan, "sql", "SELECT published, media, files, hosts_online FROM versions")
    assert datetime.fromisoformat(row["published"]) == mtime
    assert (row["media"], row["files"], row["hosts_online"]) == (1, 1, 1)
    assert run_json(lan, "sql", "--at", "2026-11-20 18:00", "SELECT count(*) AS n FROM media") == [
        {"n": 1}
    ]


def test_what_is_new_on_the_page_comes_from_the_changes(history) -> None:
    """The empty query's works are those whose every copy was added: the retagged song's copy
    was added in round 1 and stays new, the moved one's copy came by a move and is not."""
    lan, _ = history
    index = IndexFile(lan.crawl_dir / "index" / "search.duckdb")
    try:
        works = new_works(index, lan.crawl_dir / "crawldb" / "v000005")
        before = new_works(index, lan.crawl_dir / "crawldb" / "v000000")  # no round yet
    finally:
        index.con.close()
    assert sorted(w["title"] for w in works) == ["Kukushka (live)", "Zvezda"]
    assert before == []


def test_sql_at_a_time_names_the_version_live_then(lan: LAN, run_json, capsys) -> None:
    """Manifests dated by hand an hour apart: each time names the version live at it, the
    first instant of each version included; a version whose manifest is garbled is passed
    over by a time, and its `versions` row has no counts nor time (said in one line)."""
    lan.write_hosts("alpha")
    for name in "abcd":
        lan.media("alpha", f"music/{name}.mp3", artist=name, title=name)
        lan.crawl()
    crawldb = lan.crawl_dir / "crawldb"
    for v, hour in ((1, 18), (2, 19), (3, 20), (4, 21)):
        manifest = crawldb / f"v{v:06d}" / "MANIFEST.json"
        record = json.loads(manifest.read_text())
        record["published"] = f"2026-11-20T{hour}:00:00+00:00"
        manifest.write_text(json.dumps(record))
    count = "SELECT count(*) AS n FROM media"
    for at, n in (
        ("2026-11-20 18:00", 1),
        ("2026-11-20 18:59:59.999999", 1),
        ("2026-11-20 19:00", 2),
        ("2026-11-20 20:30", 3),
        ("2026-11-20T21:59:59+01:00", 3),  # 20:59:59 UTC
        ("2026-11-20 21:00", 4),
        ("2026-12-31", 4),  # later than every version: the live one
    ):
        assert run_json(lan, "sql", "--at", at, count) == [{"n": n}], at
    capsys.readouterr()
    assert lan.cli("sql", "--at", "2026-11-20 17:59:59.5", count) == 2
    assert capsys.readouterr().err == (
        "sharecrawl: error: no kept version was live at 2026-11-20 17:59:59.500000 UTC: the "
        "oldest kept, v000001, was published at 2026-11-20 18:00:00 UTC\n"
    )
    (crawldb / "v000003" / "MANIFEST.json").write_text("{garbled")
    assert run_json(lan, "sql", "--at", "2026-11-20 20:30", count) == [{"n": 2}]
    assert run_json(lan, "sql", "--at", "2026-11-20 21:30", count) == [{"n": 4}]
    capsys.readouterr()
    rows = "SELECT version, published, media, hosts FROM versions ORDER BY round"
    assert lan.cli("sql", rows) == 0
    out = capsys.readouterr()
    assert out.out.splitlines() == [
        "version\tpublished\tmedia\thosts",
        "v000001\t2026-11-20 18:00:00+00:00\t1\t1",
        "v000002\t2026-11-20 19:00:00+00:00\t2\t1",
        "v000003\t\t\t1",
        "v000004\t2026-11-20 21:00:00+00:00\t4\t1",
    ]
    assert out.err == (
        "sharecrawl: warning: v000003/MANIFEST.json: garbled (JSONDecodeError); its row of "
        "versions has no counts nor time, and `sql --at` a time passes it over\n"
    )


def test_a_damaged_history_part_is_named_and_set_aside(lan: LAN, run_json, capsys, caplog) -> None:
    """A history part that does not read is left out of `changes` with one line that says
    the round's changes are lost (no round writes it again), and out of the page's new works
    with one line in the log; `check` names it and `check --repair` sets it aside, after
    which `check` is clean."""
    lan.write_hosts("alpha")
    lan.media("alpha", "music/a.mp3", artist="A", title="a")
    lan.crawl()
    lan.media("alpha", "music/b.mp3", artist="B", title="b")
    lan.crawl()
    part = lan.crawl_dir / "crawldb" / "changes" / "r000002.parquet"
    part.write_bytes(part.read_bytes()[:40])
    query = "SELECT round, change, path FROM changes ORDER BY round"
    capsys.readouterr()
    assert lan.cli("sql", query) == 0
    out = capsys.readouterr()
    assert out.out.splitlines() == ["round\tchange\tpath", "1\tadded\ta.mp3"]
    assert out.err.count("\n") == 1 and out.err.startswith(
        "sharecrawl: warning: crawldb/changes/r000002.parquet: unreadable Parquet"
    )
    assert out.err.endswith(
        "left out of the views (`sharecrawl check` lists every problem, `check --repair` "
        "sets it aside: its round's changes are lost)\n"
    )
    index = IndexFile(lan.crawl_dir / "index" / "search.duckdb")
    try:
        works = new_works(index, lan.crawl_dir / "crawldb" / "v000002")
    finally:
        index.con.close()
    assert [w["title"] for w in works] == ["a"]  # round 2's part, which added b, is lost
    [logged] = [r.getMessage() for r in caplog.records if r.name == "sharecrawl.web"]
    assert logged.startswith(f"{part}: does not read as Parquet") and logged.endswith(
        "left out of what is new (`sharecrawl check --repair` sets it aside)"
    )
    assert lan.cli("check") == 1
    assert capsys.readouterr().out.startswith(f"{part}: does not read as Parquet")
    assert lan.cli("check", "--repair") == 0
    assert "crawldb/changes/r000002.parquet to" in capsys.readouterr().out
    assert not part.exists()
    assert lan.cli("check") == 0
    assert capsys.readouterr().out == "v000002: 7 parts intact\n"
    assert [r["round"] for r in run_json(lan, "sql", query)] == [1]


def test_a_round_prunes_the_history_older_than_history_days(lan: LAN, luigi_cfg, run_json) -> None:
    """luigi.cfg history_days = 1: the round after a part was published two days ago (its
    footer's time, as a round writes it) removes that part, and only that one."""
    luigi_cfg("[sharecrawl]\nhistory_days = 1\n")
    lan.write_hosts("alpha")
    lan.media("alpha", "music/a.mp3", artist="A", title="a")
    lan.crawl()
    lan.media("alpha", "music/b.mp3", artist="B", title="b")
    lan.crawl()
    changes = lan.crawl_dir / "crawldb" / "changes"
    first = changes / "r000001.parquet"
    table = pq.read_table(first)
    meta = dict(table.schema.metadata)
    old = datetime.fromisoformat(meta[b"sharecrawl.published"].decode()) - timedelta(days=2)
    meta[b"sharecrawl.published"] = old.isoformat().encode()
    pq.write_table(table.replace_schema_metadata(meta), first)
    lan.media("alpha", "music/c.mp3", artist="C", title="c")
    lan.crawl()
    assert sorted(p.name for p in changes.iterdir()) == ["r000002.parquet", "r000003.parquet"]
    rows = run_json(lan, "sql", "SELECT round, change, path FROM changes ORDER BY round")
    assert [tuple(r.values()) for r in rows] == [(2, "added", "b.mp3"), (3, "added", "c.mp3")]

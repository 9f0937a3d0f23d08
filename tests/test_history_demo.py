"""The demo's three rounds, as an analyst reads their history with the console script:
`versions` dated in order, `sql --at` a version and a time, `changes` holding the demo's
deleted and added songs, `media.first_seen` set and every manifest dated."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.cliproc import run_cli


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    workdir = tmp_path_factory.mktemp("demo") / "demo"
    done = run_cli("demo", "--workdir", str(workdir), timeout_s=600)
    assert done.returncode == 0, done.stderr
    return workdir / "crawl"


def sql(crawl: Path, query: str, *flags: str) -> list[dict]:
    done = run_cli("sql", "--crawl-dir", str(crawl), "--json", *flags, query)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_versions_are_dated_in_order_and_so_are_their_manifests(demo: Path) -> None:
    rows = sql(demo, "SELECT * FROM versions ORDER BY round")
    assert [(r["version"], r["media"], r["hosts_online"]) for r in rows] == [
        ("v000001", 277, 4),
        ("v000002", 279, 4),
        ("v000003", 280, 3),  # katya-laptop went offline before round 3: its rows stay
    ]
    published = [datetime.fromisoformat(r["published"]) for r in rows]
    assert published[0] < published[1] < published[2]
    for r, t in zip(rows, published, strict=True):
        manifest = json.loads((demo / "crawldb" / r["version"] / "MANIFEST.json").read_text())
        assert datetime.fromisoformat(manifest["published"]) == t


def test_sql_at_a_version_and_a_time(demo: Path) -> None:
    rows = sql(demo, "SELECT version, published FROM versions ORDER BY round")
    count = "SELECT count(*) AS n FROM media"
    assert sql(demo, count, "--at", "v000001") == [{"n": 277}]
    just_after_v2 = datetime.fromisoformat(rows[1]["published"]) + timedelta(microseconds=1)
    assert sql(demo, count, "--at", str(just_after_v2)) == [{"n": 279}]
    song = "SELECT path FROM media WHERE path LIKE '%Война%'"
    assert sql(demo, song, "--at", "v000001") == [{"path": "Кино/Группа крови/03 - Война.mp3"}]
    assert sql(demo, song) == []


def test_changes_hold_the_demos_deleted_and_added_songs(demo: Path) -> None:
    query = "SELECT round, change, host, share, path FROM changes WHERE round > 1 "
    query += "ORDER BY round, change, host, path"
    assert [tuple(r.values()) for r in sql(demo, query)] == [
        (2, "added", "dorm5-srv", "video", "Lost/Season 6/Lost.S06E03.720p.mp4"),
        (2, "added", "lab-nas", "media", "Massive Attack/1998 - Mezzanine/01.ogg"),
        (2, "added", "vasya-pc", "incoming", "song_90.mp3"),
        (2, "deleted", "vasya-pc", "music", "Кино/Группа крови/03 - Война.mp3"),
        (2, "retagged", "dorm5-srv", "music", "Мумий Тролль - Морская (1997)/track06.flac"),
        (3, "added", "dorm5-srv", "music", "misc/song_02.mp3"),
    ]
    [first] = sql(demo, "SELECT count(*) AS n FROM changes WHERE round = 1 AND change = 'added'")
    assert first == {"n": 277}  # the first round found every song


def test_media_first_seen_is_set(demo: Path) -> None:
    query = "SELECT count(*) AS n, count(first_seen) AS seen, count(last_changed) AS changed, "
    query += "count(*) FILTER (first_seen > (SELECT min(published) FROM versions)) AS later "
    query += "FROM media"
    assert sql(demo, query) == [{"n": 280, "seen": 280, "changed": 280, "later": 4}]

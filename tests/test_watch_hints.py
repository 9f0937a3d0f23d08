"""The hints store (crawl_io.crawldb.hints, .hints_writer) on real Parquet files and DuckDB:
parts, compaction, retention, the `hints` view, "hinted since t / unbroken since t", counts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest

from sharecrawl.crawl_io.crawldb import hints_writer
from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir
from sharecrawl.crawl_io.crawldb.hints import (
    HintsSnapshot,
    HintsStore,
    cover,
    part_name,
    timestamp_us,
)
from sharecrawl.crawl_io.crawldb.hints_writer import HintsWriter, WatchRunning
from sharecrawl.crawl_io.schema import PARTITIONS
from sharecrawl.jobs.hint_counts import count_hints
from sharecrawl.jobs.membership import partition_id
from sharecrawl.queries.views import run_sql

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def since(snapshot: HintsSnapshot, host: str, share: str, t: datetime | None) -> SimpleNamespace:
    """What generate learns of a share since t: paths and overflow hinted after t, and
    watched_since's (unbroken, as_of)."""
    t_us = None if t is None else timestamp_us(t)
    hinted = [h for h in snapshot.hints_for(host, share) if t_us is None or h.seen_at_us > t_us]
    unbroken, as_of = snapshot.watched_since(host, share, t)
    paths = {h.path for h in hinted if not h.overflow}
    overflow = any(h.overflow for h in hinted)
    return SimpleNamespace(paths=paths, overflow=overflow, unbroken=unbroken, as_of=as_of)


def hint(
    path: str,
    at: datetime,
    share: str = "music",
    action: str = "added",
    host: str = "pc1",
    overflow: bool = False,
) -> dict:
    return {
        "host": host,
        "share": share,
        "path": path,
        "action": action,
        "overflow": overflow,
        "seen_at": at,
    }


def state(
    share: str, since: datetime, alive: datetime, state: str = "watching", host: str = "pc1"
) -> dict:
    return {
        "host": host,
        "share": share,
        "state": state,
        "since": since,
        "alive_at": alive,
        "detail": None,
    }


@pytest.fixture
def writer(tmp_path: Path):
    w = HintsWriter(tmp_path / "crawl")
    yield w
    w.close()


def test_parts_are_read_once_and_shown_by_the_view(writer: HintsWriter, tmp_path: Path) -> None:
    writer.append([hint("a/x.mp3", T0), hint("", T0, action="overflow", overflow=True)])
    writer.append([hint("weird\nname|?.mp3", T0 + timedelta(seconds=1), share="video")])
    store = HintsStore(tmp_path / "crawl")
    assert [p.name for p in store.parts()] == [part_name(1, 1), part_name(2, 2)]
    sql = "SELECT share, path, action, overflow FROM hints ORDER BY seen_at, path"
    columns, rows = run_sql(CrawlDir(tmp_path / "crawl"), sql)
    assert columns == ["share", "path", "action", "overflow"]
    assert rows == [
        ("music", "", "overflow", True),
        ("music", "a/x.mp3", "added", False),
        ("video", "weird\nname|?.mp3", "added", False),
    ]


def test_a_compacted_part_hides_the_parts_it_replaces() -> None:
    names = [part_name(1, 32), *(part_name(i, i) for i in range(1, 36))]
    kept = [p.name for p in cover(Path(n) for n in names)]
    assert kept == [part_name(1, 32), part_name(33, 33), part_name(34, 34), part_name(35, 35)]


def test_compaction_keeps_the_latest_sighting(writer, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(hints_writer, "GRACE_S", 0.0)
    for i in range(70):  # 70 flushes: two merges of 32 fresh parts
        at = T0 + timedelta(seconds=i)
        writer.append([hint("hot.mp3", at, action="modified"), hint(f"new {i}.mp3", at)], now=at)
    writer.append([], now=T0 + timedelta(seconds=71))  # compacted parts are deleted when due
    store = HintsStore(tmp_path / "crawl")
    assert [p.name for p in store.parts()] == [
        part_name(1, 32),
        part_name(33, 64),
        *(part_name(i, i) for i in range(65, 71)),
    ]
    assert store.all_parts() == store.parts()
    table = store.read()
    hot = [r for r in table.to_pylist() if r["path"] == "hot.mp3"]
    assert len(hot) == 2 + 6  # one per merged part, one per fresh part
    assert max(r["seen_at"] for r in hot) == T0 + timedelta(seconds=69)
    assert len({r["path"] for r in table.to_pylist()}) == 71


def test_retention_drops_old_hints_and_says_since_when(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(hints_writer, "MERGED_LIMIT", 1)
    monkeypatch.setattr(hints_writer, "FRESH_LIMIT", 2)
    writer = HintsWriter(tmp_path / "crawl", keep_days=1)
    writer.append([hint("old.mp3", T0)], now=T0)
    writer.append([hint("new.mp3", T0 + timedelta(days=2))], now=T0 + timedelta(days=2))
    writer.write_watches([state("music", T0, T0 + timedelta(days=2))])
    writer.close()
    store = HintsStore(tmp_path / "crawl")
    assert [r["path"] for r in store.read().to_pylist()] == ["new.mp3"]
    snapshot = store.snapshot(now=T0 + timedelta(days=2, seconds=5))
    assert snapshot.complete_since == T0 + timedelta(days=1)
    assert not since(snapshot, "pc1", "music", T0 + timedelta(hours=1)).unbroken  # hints gone
    assert since(snapshot, "pc1", "music", T0 + timedelta(days=1, hours=1)).unbroken


def test_since_answers_for_generate(writer: HintsWriter, tmp_path: Path) -> None:
    writer.append(
        [
            hint("Rock/a.mp3", T0 + timedelta(minutes=5)),
            hint("Jazz/b.mp3", T0 + timedelta(minutes=20)),
            hint(
                "", T0 + timedelta(minutes=30), share="video", action="reconnected", overflow=True
            ),
        ]
    )
    alive = T0 + timedelta(hours=1)
    writer.write_watches(
        [
            state("music", T0, alive),
            state("video", T0 + timedelta(minutes=30), alive),
            state("old", T0, alive - timedelta(minutes=10)),  # the watcher went silent
            state("denied", T0, alive, state="refused"),
        ]
    )
    snapshot = HintsStore(tmp_path / "crawl").snapshot(now=alive + timedelta(seconds=2))
    music = since(snapshot, "pc1", "music", T0 + timedelta(minutes=10))
    assert music.paths == {"Jazz/b.mp3"} and not music.overflow
    assert music.unbroken and music.as_of == alive
    assert since(snapshot, "pc1", "music", None).paths == {"Rock/a.mp3", "Jazz/b.mp3"}
    assert not since(snapshot, "pc1", "music", None).unbroken  # never scanned: nothing to trust
    assert not since(snapshot, "pc1", "music", T0 - timedelta(minutes=1)).unbroken  # before arming
    video = since(snapshot, "pc1", "video", T0)
    assert video.overflow and not video.paths and not video.unbroken  # reconnected after T0
    assert since(snapshot, "pc1", "video", T0 + timedelta(minutes=40)).unbroken
    assert not since(snapshot, "pc1", "old", T0 + timedelta(minutes=1)).unbroken
    assert not since(snapshot, "pc1", "denied", T0 + timedelta(minutes=1)).unbroken
    assert not since(snapshot, "pc2", "music", T0).unbroken  # never watched


def test_count_hints_waiting_and_consumed(writer: HintsWriter, tmp_path: Path) -> None:
    writer.append(
        [
            hint("Rock/a.mp3", T0),  # Rock is its own range partition, scanned after: consumed
            hint("Jazz/b.mp3", T0),  # the root partition, scanned before: waiting
            hint("c.mp3", T0, share="video"),  # a share never crawled: waiting
            hint("", T0, share="books", action="overflow", overflow=True),
        ]
    )
    later, earlier = T0 + timedelta(minutes=1), T0 - timedelta(minutes=1)
    rows = [
        {"host": "pc1", "share": "music", "root": "", "lo": None, "hi": None, "last_scan": earlier},
        {"host": "pc1", "share": "music", "root": "", "lo": "R", "hi": "S", "last_scan": later},
        {"host": "pc1", "share": "books", "root": "", "lo": None, "hi": None, "last_scan": later},
        {"host": "pc1", "share": "books", "root": "", "lo": "A", "hi": None, "last_scan": later},
    ]
    for row in rows:
        row["partition_id"] = partition_id(
            row["host"], row["share"], row["root"], row["lo"], row["hi"]
        )
    partitions = pa.Table.from_pylist(rows, PARTITIONS)
    snapshot = HintsStore(tmp_path / "crawl").snapshot()
    counts = count_hints(snapshot, partitions)
    assert (counts.waiting, counts.consumed) == (2, 2)


def test_one_writer_at_a_time(writer: HintsWriter, tmp_path: Path) -> None:
    with pytest.raises(WatchRunning, match=r"pid \d+"):
        HintsWriter(tmp_path / "crawl")
    writer.close()
    HintsWriter(tmp_path / "crawl").close()  # the lock went with the first writer


def test_a_killed_writers_leftovers_are_cleaned(tmp_path: Path) -> None:
    hints = tmp_path / "crawl" / "hints"
    hints.mkdir(parents=True)
    (hints / f".{part_name(1, 1)}.tmp999").write_bytes(b"half a part")
    writer = HintsWriter(tmp_path / "crawl")
    assert not list(hints.glob(".*tmp*"))
    writer.append([hint("x.mp3", T0)])
    assert [p.name for p in HintsStore(tmp_path / "crawl").parts()] == [part_name(1, 1)]
    writer.close()


def test_a_damaged_part_is_set_aside_and_ends_trust(tmp_path: Path) -> None:
    writer = HintsWriter(tmp_path / "crawl")
    writer.append([hint("a.mp3", T0)])
    writer.append([hint("b.mp3", T0)])
    writer.write_watches([state("music", T0, datetime.now(UTC))])
    writer.close()
    store = HintsStore(tmp_path / "crawl")
    damaged = store.dir / part_name(1, 1)
    damaged.write_bytes(b"PAR1 not a parquet file")
    snapshot = store.snapshot()
    assert [h.path for h in snapshot.hints_for("pc1", "music")] == ["b.mp3"]
    assert store.damaged == [damaged]
    assert not since(snapshot, "pc1", "music", T0 + timedelta(minutes=1)).unbroken  # hints lost
    sql = "SELECT path FROM hints UNION ALL SELECT path FROM files"
    assert run_sql(CrawlDir(tmp_path / "crawl"), sql)[1] == [("b.mp3",)]  # SQL still answers
    writer = HintsWriter(tmp_path / "crawl")  # the next watcher sets it aside
    assert [p.name for p in store.parts()] == [part_name(2, 2)]
    assert (store.dir / f"{part_name(1, 1)}.damaged").exists()
    assert writer.complete_since is not None
    writer.close()
    (store.dir / "watches.parquet").write_bytes(b"garbage")
    assert store.watches()[0].num_rows == 0  # damaged: as if never watched


def test_a_name_that_is_not_unicode_keeps_its_folder() -> None:
    from sharecrawl.crawl_io.crawldb.hints import storable

    assert storable("Music/Rock/a.mp3") == "Music/Rock/a.mp3"
    assert storable("Music/bad\udc80name/a.mp3") == "Music"
    assert storable("\ud800") == ""


def test_a_crawl_dir_where_hints_cannot_go_gets_one_line(tmp_path: Path) -> None:
    from tests.cliproc import run_cli

    (tmp_path / "crawl" / "crawldb").mkdir(parents=True)
    (tmp_path / "crawl" / "hints").write_text("not a folder")
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("smb://127.0.0.1:1/media\n")
    args = ["watch", "--hosts-file", str(hosts), "--crawl-dir", str(tmp_path / "crawl")]
    done = run_cli(*args, "--seconds", "1")
    assert done.returncode == 2
    err = done.stderr
    assert err.startswith("sharecrawl: error: cannot write hints to") and err.count("\n") == 1
    assert run_cli(*args, "--seconds", "0").returncode == 2  # bad input: nothing is written
    assert (tmp_path / "crawl" / "hints").read_text() == "not a folder"

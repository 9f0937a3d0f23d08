"""Rounds that read the hints (pipeline.generate, pipeline.scheduling.signals): real rounds
over file:// hosts, hints and watch states written by the real writer
(crawl_io.crawldb.hints_writer) as `sharecrawl watch` writes them for SMB hosts.

Hinted partitions come first with reason 'hint' (a hinted scan lists only their hinted folders
and finds what a full walk finds); silent partitions of a trusted host whose watch is unbroken
are skipped until the safety interval; a broken watch ends that trust; an overflow lists the
share again; untrusted hosts get their hints taken and their silence ignored."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir
from sharecrawl.crawl_io.crawldb.hints_writer import HintsWriter
from tests.conftest import LAN

LONG_AGO = datetime(2000, 1, 1, tzinfo=UTC)


def build(lan: LAN) -> None:
    for album in range(12):
        lan.media(
            "alpha", f"music/Album {album:02d}/track.mp3", artist="Band", title=f"song {album}"
        )
    lan.media("alpha", "films/Film/a.mp3", artist="Film band", title="theme")
    lan.media("beta", "share/x/song_01.ogg", "ogg", artist="Kino", title="Kukushka")
    hosts(lan)


def hosts(lan: LAN, trusted: tuple[str, ...] = ("alpha",), extra: tuple[str, ...] = ()) -> None:
    lines = [
        f"file://{lan.host(name)}" + ("?notify=trusted" if name in trusted else "")
        for name in ("alpha", "beta", *extra)
    ]
    lan.hosts_file.write_text("".join(f"{line}\n" for line in lines))


def watch(
    lan: LAN,
    since: datetime = LONG_AGO,
    hints: list[tuple] = (),
    shares: dict[str, list[str]] | None = None,
) -> None:
    """Write what a watcher would: hints (host, share, path[, overflow]) seen now, and every
    share watched since `since`, alive now."""
    now = datetime.now(UTC)
    shares = shares or {"alpha": ["films", "music"], "beta": ["share"]}
    writer = HintsWriter(lan.crawl_dir)
    try:
        writer.append(
            [
                {
                    "host": h[0],
                    "share": h[1],
                    "path": h[2],
                    "overflow": len(h) > 3,
                    "action": "overflow" if len(h) > 3 else "added",
                    "seen_at": now,
                }
                for h in hints
            ]
        )
        writer.write_watches(
            [
                {
                    "host": host,
                    "share": share,
                    "state": "watching",
                    "since": since,
                    "alive_at": now,
                    "detail": None,
                }
                for host, names in shares.items()
                for share in names
            ]
        )
    finally:
        writer.close()


def fetchlog(lan: LAN) -> list[dict]:
    crawl = CrawlDir(lan.crawl_dir)
    return pq.read_table(crawl.segment_dir(crawl.current()) / "fetchlog.parquet").to_pylist()


def by_host(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for row in rows:
        out.setdefault(row["host"], []).append(row)
    return out


def files(crawl_dir: Path, host: str) -> set[tuple]:
    crawl = CrawlDir(crawl_dir)
    table = crawl.read_host(crawl.current(), "files", host)
    return {(r["share"], r["path"], r["is_dir"], r["size"], r["mtime"]) for r in table.to_pylist()}


def hashes(crawl_dir: Path) -> dict[tuple, str]:
    crawl = CrawlDir(crawl_dir)
    rows = crawl.read(crawl.current(), "partitions").to_pylist()
    return {(r["host"], r["share"], r["root"], r["lo"], r["hi"]): r["hash"] for r in rows}


def test_a_silent_trusted_watch_lists_nothing_until_the_safety_interval(
    lan: LAN, run_json, luigi_cfg
) -> None:
    build(lan)
    lan.crawl()
    watch(lan)
    lan.crawl()
    rows = by_host(fetchlog(lan))
    assert "alpha" not in rows  # trusted, watched since before its scans, silent: skipped
    assert {r["reason"] for r in rows["beta"]} == {"scheduled"}  # untrusted: the policy's
    assert not any(r["watched"] for r in rows["beta"])
    status = run_json(lan, "status")
    assert status["hints"] == {
        "waiting": 0,
        "consumed": 0,
        "watched_shares": 3,
        "scanned_for_hints": 0,
    }
    luigi_cfg("[sharecrawl]\nsafety_interval_s = 0.001\n")  # a day has passed, as it were
    watch(lan)
    lan.crawl()
    alpha = by_host(fetchlog(lan))["alpha"]
    assert len(alpha) == 2 and {(r["reason"], r["status"], r["watched"]) for r in alpha} == {
        ("scheduled", "unchanged", True)
    }


def test_a_hinted_partition_is_listed_around_its_hints_and_matches_a_full_crawl(
    lan: LAN, run_json, tmp_path: Path
) -> None:
    build(lan)
    lan.crawl()
    music = lan.host("alpha") / "music"
    lan.media("alpha", "music/Album 07/new.mp3", artist="Band", title="brand new")
    moved = lan.hosts_dir / "elsewhere" / "Live"  # not a host: a folder moved in from there
    lan.media("alpha", "../elsewhere/Live/disc 1/live.mp3", artist="Band", title="on stage")
    shutil.move(moved, music / "Live")
    shutil.rmtree(music / "Album 03")
    watch(lan, hints=[("alpha", "music", p) for p in ("Album 07/new.mp3", "Live", "Album 03")])
    lan.crawl()
    alpha = by_host(fetchlog(lan))["alpha"]
    assert [(r["share"], r["reason"], r["status"], r["watched"]) for r in alpha] == [
        ("music", "hint", "changed", True)
    ]
    assert alpha[0]["n_folders"] <= 4  # Album 07, the share root, Live and disc 1: not 13
    titles = {hit["title"] for hit in run_json(lan, "search", "band")}
    assert {"brand new", "on stage"} <= titles and "song 3" not in titles
    status = run_json(lan, "status")
    assert status["hints"]["consumed"] == 3 and status["hints"]["waiting"] == 0
    assert status["scan_reasons"] == {"hint": 1, "scheduled": 1}  # beta's, by the policy
    partitions = CrawlDir(lan.crawl_dir).read(2, "partitions").to_pylist()
    music_row = next(p for p in partitions if p["share"] == "music")
    assert music_row["history"][-1]["complete"]  # a complete signal for the rate estimate
    # A full crawl of the same hosts in a new crawl directory finds the same rows and hashes.
    fresh = LAN(tmp_path / "fresh")
    fresh.hosts_file = lan.hosts_file
    fresh.crawl()
    assert files(lan.crawl_dir, "alpha") == files(fresh.crawl_dir, "alpha")
    assert hashes(lan.crawl_dir) == hashes(fresh.crawl_dir)


def test_a_broken_watch_ends_the_trust_until_the_next_scan(lan: LAN) -> None:
    build(lan)
    lan.crawl()
    watch(lan, since=datetime.now(UTC))  # the watcher restarted after the last scans
    lan.crawl()
    alpha = by_host(fetchlog(lan))["alpha"]
    assert {(r["reason"], r["watched"]) for r in alpha} == {("scheduled", False)}
    watch(lan, since=datetime.now(UTC) - timedelta(hours=1))  # hours later, still unbroken
    lan.crawl()
    assert "alpha" not in by_host(fetchlog(lan))  # scanned since it was armed: trusted again


def test_an_overflow_lists_the_share_again_with_the_hash_skip(lan: LAN) -> None:
    build(lan)
    lan.crawl()
    watch(lan, hints=[("alpha", "music", "", True)])
    lan.crawl()
    alpha = by_host(fetchlog(lan))["alpha"]
    assert [(r["share"], r["reason"], r["status"], r["watched"]) for r in alpha] == [
        ("music", "overflow", "unchanged", False)
    ]
    assert alpha[0]["n_folders"] == 13  # listed whole, and found unchanged


def test_an_untrusted_hosts_hints_come_first_and_its_silence_means_nothing(lan: LAN) -> None:
    build(lan)
    lan.crawl()
    lan.media("beta", "share/x/song_02.ogg", "ogg", artist="Kino", title="Gruppa krovi")
    watch(lan, hints=[("beta", "share", "x/song_02.ogg")])
    lan.crawl()
    beta = by_host(fetchlog(lan))["beta"]
    assert [(r["reason"], r["status"], r["watched"]) for r in beta] == [("hint", "changed", False)]
    assert beta[0]["n_folders"] == 2  # an untrusted host is listed whole: root and x


def test_a_hinted_only_round_takes_the_hinted_partitions_alone(lan: LAN, run_json) -> None:
    build(lan)
    lan.crawl()
    lan.media("gamma", "share/new.mp3", artist="Gamma", title="not discovered yet")
    hosts(lan, extra=("gamma",))
    lan.media("alpha", "films/Film/b.mp3", artist="Film band", title="second theme")
    watch(lan, hints=[("alpha", "films", "Film/b.mp3")])
    assert lan.cli("crawl", "--hinted-only") == 0
    rows = fetchlog(lan)
    assert [(r["host"], r["share"], r["reason"]) for r in rows] == [("alpha", "films", "hint")]
    assert run_json(lan, "search", "second", "theme")
    lan.crawl()  # a scheduled round discovers the new host
    assert "gamma" in by_host(fetchlog(lan))


def test_the_notify_option_in_the_hosts_file(lan: LAN, capsys: pytest.CaptureFixture) -> None:
    build(lan)
    for line, message in [
        (f"file://{lan.host('alpha')}?notify=always", "notify= is hints or trusted"),
        (f"file://{lan.host('alpha')}?trust=yes", "unknown option 'trust=yes'"),
    ]:
        lan.hosts_file.write_text(line + "\n")
        capsys.readouterr()
        assert lan.cli("crawl") == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
    lan.hosts_file.write_text("smb://nas/music?notify=trusted\nsmb://nas/films\n")
    assert lan.cli("crawl") == 2
    assert "notify=trusted on some of its lines" in capsys.readouterr().err
    assert not (lan.crawl_dir / "crawldb").exists()  # bad input: nothing written

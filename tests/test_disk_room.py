"""The room left on the crawl directory's disk (crawl_io.disk_room): what a round adds is
measured on the disk, `status` says how long the room lasts, and a crawl warns on stderr
before the disk fills, saying what to do."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from crawl_io.crawldir import CrawlDir
from crawl_io.disk_room import DAY_S, Room, disk_room, room_warning
from tests.conftest import LAN
from tests.small_disk import leave_free


def three_rounds(lan: LAN) -> None:
    """Round 1 finds two songs; each later round one more."""
    lan.media("alpha", "music/song.mp3", artist="Madonna", title="Music")
    lan.media("beta", "films/clip.mp4", "mp4", title="Clip")
    lan.write_hosts("alpha", "beta")
    lan.crawl()
    for n in (2, 3):
        lan.media("alpha", f"music/new/track{n}.mp3", artist="Kino", title=f"Track {n}")
        lan.crawl()


def unique_blocks(*folders: Path) -> int:
    """The bytes of blocks the regular files below `folders` hold, each file once however
    many names it has: what `du` counts."""
    seen: dict[tuple[int, int], int] = {}
    for folder in folders:
        for root, _, names in os.walk(folder):
            for name in names:
                s = os.stat(os.path.join(root, name), follow_symlinks=False)
                seen[(s.st_dev, s.st_ino)] = s.st_blocks * 512
    return sum(seen.values())


def test_a_round_is_measured_by_the_blocks_it_added(
    lan: LAN, run_json: Callable[..., object]
) -> None:
    lan.media("alpha", "music/song.mp3", artist="Madonna", title="Music")
    lan.media("beta", "films/clip.mp4", "mp4", title="Clip")
    lan.write_hosts("alpha", "beta")
    lan.crawl()
    crawl = CrawlDir(lan.crawl_dir)
    first = run_json(lan, "status")["disk"]
    assert first["rounds_measured"] == 1
    assert first["round_bytes"] == unique_blocks(crawl.version_dir(1), crawl.segment_dir(1))
    for n in (2, 3):
        lan.media("alpha", f"music/new/track{n}.mp3", artist="Kino", title=f"Track {n}")
        lan.crawl()
    # each version links the parts it did not change to the previous one's: rounds 2 and 3
    # took what their versions and segments hold that version 1 does not, counted once;
    # the first round, which lists every host whole, is left out once there are others
    versions = [crawl.version_dir(r) for r in (1, 2, 3)]
    held = unique_blocks(*versions, crawl.segment_dir(2), crawl.segment_dir(3))
    held -= unique_blocks(versions[0])
    disk = run_json(lan, "status")["disk"]
    assert disk["rounds_measured"] == 2
    assert disk["round_bytes"] == round(held / 2)
    assert disk["keep_rounds"] == 0
    assert disk["index_bytes"] == os.stat(crawl.index).st_blocks * 512 > 0
    free = os.statvfs(lan.crawl_dir)
    assert abs(disk["free_bytes"] - free.f_bavail * free.f_frsize) < 64 << 20
    assert disk["rounds_left"] == (disk["free_bytes"] - disk["index_bytes"]) // disk["round_bytes"]
    # three rounds in a few seconds say nothing of the pace a crawl keeps
    assert disk["round_interval_s"] is None and disk["days_left"] is None
    assert disk["warning"] is None


def test_the_pace_is_that_of_rounds_spanning_an_hour_or_more(
    lan: LAN, run_json: Callable[..., object], capsys: pytest.CaptureFixture[str]
) -> None:
    three_rounds(lan)
    crawl = CrawlDir(lan.crawl_dir)
    start = time.time() - 3 * 3600
    for version in (1, 2, 3):  # published an hour apart, as by cron
        stamp = start + version * 3600
        os.utime(crawl.version_dir(version) / "MANIFEST.json", (stamp, stamp))
    disk = run_json(lan, "status")["disk"]
    assert disk["round_interval_s"] == pytest.approx(3600)
    assert disk["days_left"] == pytest.approx(disk["rounds_left"] / 24, abs=0.1)
    assert lan.cli("status") == 0
    line = capsys.readouterr().out.splitlines()[-1]
    assert line.startswith("  disk: ") and "a round adds" in line
    assert "one round every 1.0 h; full in about" in line and line.endswith(" days")


def test_with_keep_rounds_a_round_adds_only_its_fetchlog_for_good(
    lan: LAN, luigi_cfg: Callable[[str], None], run_json: Callable[..., object]
) -> None:
    luigi_cfg("[sharecrawl]\nkeep_rounds = 2\n")
    three_rounds(lan)
    crawl = CrawlDir(lan.crawl_dir)
    disk = run_json(lan, "status")["disk"]
    kept = [os.stat(crawl.segment_dir(r) / "fetchlog.parquet").st_blocks * 512 for r in (2, 3)]
    assert disk["keep_rounds"] == 2
    assert disk["rounds_measured"] == 2  # round 1 went
    assert disk["round_bytes"] == round(sum(kept) / 2)


def test_a_crawl_warns_on_stderr_when_the_disk_fills_within_a_day_of_rounds(
    small_disk: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On a real disk, nearly full: the round still runs, and says what to do."""
    lan = LAN(small_disk)
    three_rounds(lan)
    assert "disk" not in capsys.readouterr().err
    room = disk_room(CrawlDir(lan.crawl_dir), 0)
    assert room.round_bytes
    # an update rewrites some of the index's blocks: the file is 0.8 MB bigger after it
    leave_free(small_disk, room.index_bytes + (2 << 20) + 5 * room.round_bytes)
    lan.media("alpha", "music/new/track4.mp3", artist="Kino", title="Track 4")
    assert lan.cli("crawl", "--rounds", "1") == 0
    err = capsys.readouterr().err.splitlines()
    warnings = [line for line in err if "the disk of the crawl directory" in line]
    assert len(warnings) == 1
    assert warnings[0].startswith("sharecrawl: the disk of the crawl directory fills in about ")
    assert "set keep_rounds under [sharecrawl] in luigi.cfg" in warnings[0]
    assert CrawlDir(lan.crawl_dir).current() == 4


def room(**changes: object) -> Room:
    """An hourly crawl adding 10 MiB a round, with a 100 MiB index and 100 GiB free."""
    fields: dict = {
        "free_bytes": 100 << 30,
        "index_bytes": 100 << 20,
        "round_bytes": 10 << 20,
        "rounds_measured": 8,
        "round_interval_s": 3600.0,
        "keep_rounds": 0,
    }
    return Room(**{**fields, **changes})


def test_the_warning_comes_a_week_before_the_disk_fills() -> None:
    assert room_warning(room()) is None  # 10,230 rounds: 426 days
    week = 7 * 24 * (10 << 20) + (100 << 20)
    assert room_warning(room(free_bytes=week + (20 << 20))) is None
    warning = room_warning(room(free_bytes=week - (20 << 20)))
    assert warning is not None
    assert warning.startswith("the disk of the crawl directory fills in about 6.9 days")
    assert "(166 rounds)" in warning and "one round every 1.0 h" in warning
    assert warning.endswith("(docs/crawl-dir.md), or free space")
    # the pace unknown: fewer than a day of hourly rounds left
    assert room_warning(room(round_interval_s=None, free_bytes=week)) is None
    unknown = room_warning(room(round_interval_s=None, free_bytes=(100 + 200) << 20))
    assert unknown is not None and "fills in about 20 rounds" in unknown
    # keeping the last rounds already: only space can be freed
    kept = room_warning(room(keep_rounds=48, round_bytes=45 << 10, free_bytes=101 << 20))
    assert kept is not None and kept.endswith("keeps only the last 48 rounds)")
    # less free than the index: its new file cannot be written beside it
    full = room_warning(room(free_bytes=50 << 20))
    assert full is not None and "too full to write the search index anew" in full
    assert room(round_interval_s=DAY_S).days_left == pytest.approx(10230)

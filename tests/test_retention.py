"""Old rounds removed (crawl_io.crawldb.retention, luigi.cfg keep_rounds): after each round the
versions and segments of the rounds before the last N go; what they held that later rounds
still use stays (hard links), and so do their scans (the segments' fetchlogs are kept);
every face reads the crawl as before, `check --repair` falls back on the version kept
before the live one, and a removal cut short is finished by the next crawl. keep_rounds = 0
keeps every round."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from sharecrawl.crawl_io.crawldb.atomic import machine
from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir
from tests.conftest import LAN


def four_rounds(lan: LAN) -> None:
    """Round 1 finds a song; each later round finds one more."""
    lan.media("alpha", "music/song.mp3", artist="Madonna", title="Music")
    lan.write_hosts("alpha")
    lan.crawl()
    for n in (2, 3, 4):
        lan.media("alpha", f"music/new/track{n}.mp3", artist="Kino", title=f"Track {n}")
        lan.crawl()


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def titles(run_json: Callable[..., object], lan: LAN, *words: str) -> list[str]:
    return sorted(work["title"] for work in run_json(lan, "search", *words))


def test_the_last_rounds_are_kept_and_the_crawl_reads_as_before(
    lan: LAN, luigi_cfg: Callable[[str], None], run_json: Callable[..., object]
) -> None:
    luigi_cfg("[sharecrawl]\nkeep_rounds = 2\n")
    four_rounds(lan)
    crawl = CrawlDir(lan.crawl_dir)
    assert names(crawl.crawldb) == ["CURRENT", "FORMAT", "changes", "v000003", "v000004"]
    assert len(names(crawl.crawldb / "changes")) == 4  # the history stays (history_days)
    assert names(crawl.segments) == ["fetchlogs", "r000003", "r000004"]
    # round 1's song lives on in the parts rounds 3 and 4 linked forward
    assert titles(run_json, lan, "madonna") == ["Music"]
    assert titles(run_json, lan, "kino") == ["Track 2", "Track 3", "Track 4"]
    assert lan.cli("check") == 0
    # the scans of every round stay: the removed segments' fetchlogs are kept
    assert names(crawl.segments / "fetchlogs") == ["r000001.parquet", "r000002.parquet"]
    rounds = run_json(lan, "sql", "SELECT DISTINCT round FROM fetchlog ORDER BY round")
    assert [r["round"] for r in rounds] == [1, 2, 3, 4]
    assert run_json(lan, "status")["round"] == 4

    # the live version damaged: repair falls back on the one kept before it
    (crawl.version_dir(4) / "MANIFEST.json").unlink()
    assert lan.cli("check", "--repair") == 0
    assert crawl.current() == 3
    assert titles(run_json, lan, "kino") == ["Track 2", "Track 3"]
    lan.crawl()  # round 4 again, then rounds 2 back are gone
    assert [p for p in names(crawl.crawldb) if p.startswith("v")] == ["v000003", "v000004"]


def test_keep_rounds_0_keeps_every_round(lan: LAN) -> None:
    four_rounds(lan)  # luigi.cfg's default
    crawl = CrawlDir(lan.crawl_dir)
    assert crawl.versions() == [1, 2, 3, 4]
    assert names(crawl.segments) == ["r000001", "r000002", "r000003", "r000004"]


def test_a_removal_cut_short_is_finished_by_the_next_crawl(
    lan: LAN, luigi_cfg: Callable[[str], None]
) -> None:
    """A crawl killed while it deleted an old version leaves it under a temporary name
    (renamed first, so that no reader sees half of it): the next crawl removes it."""
    lan.media("alpha", "music/song.mp3", artist="Madonna", title="Music")
    lan.write_hosts("alpha")
    lan.crawl()
    crawl = CrawlDir(lan.crawl_dir)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    for folder, name in ((crawl.crawldb, "v000001"), (crawl.segments, "r000001")):
        left = folder / f".{name}.tmp{dead}@{machine()}"
        (left / "files").mkdir(parents=True)
        (left / "files" / "alpha.parquet").write_bytes(b"half deleted")
    luigi_cfg("[sharecrawl]\nkeep_rounds = 2\n")
    lan.crawl()
    assert names(crawl.crawldb) == ["CURRENT", "FORMAT", "changes", "v000001", "v000002"]
    assert names(crawl.segments) == ["r000001", "r000002"]  # nothing old to remove yet


def test_a_keep_of_one_is_refused_before_anything_is_written(
    lan: LAN, luigi_cfg: Callable[[str], None], capsys: pytest.CaptureFixture[str]
) -> None:
    lan.media("alpha", "music/song.mp3", artist="Madonna", title="Music")
    lan.write_hosts("alpha")
    luigi_cfg("[sharecrawl]\nkeep_rounds = 1\n")
    assert lan.cli("crawl") == 2
    assert "keep_rounds" in capsys.readouterr().err
    assert not lan.crawl_dir.exists()


def test_an_old_round_that_cannot_be_removed_is_one_warning_and_the_round_stands(
    lan: LAN, luigi_cfg: Callable[[str], None], capsys: pytest.CaptureFixture[str]
) -> None:
    """Version 1 made immutable (chattr +i: even root cannot rename it): the round after
    round 2 publishes, says in one warning what stayed, and the next round tries again."""
    lan.media("alpha", "music/song.mp3", artist="Madonna", title="Music")
    lan.write_hosts("alpha")
    lan.crawl()
    lan.crawl()
    crawl = CrawlDir(lan.crawl_dir)
    pinned = crawl.version_dir(1)
    if subprocess.run(["chattr", "+i", str(pinned)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is refused here (needs root and a file system that has it)")
    try:
        luigi_cfg("[sharecrawl]\nkeep_rounds = 2\n")
        capsys.readouterr()
        lan.crawl()
        assert crawl.current() == 3
        assert names(crawl.segments) == ["fetchlogs", "r000002", "r000003"]  # round 1's went
        assert capsys.readouterr().err.splitlines() == [
            "alpha: 1 partition (1 unchanged), 1 entry, 0 tags read",
            f"sharecrawl: cannot remove the old round's {pinned} (Operation not permitted)",
        ]
    finally:
        subprocess.run(["chattr", "-i", str(pinned)], check=True)
    lan.crawl()
    assert crawl.versions() == [3, 4]

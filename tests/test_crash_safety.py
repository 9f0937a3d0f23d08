"""A round killed after fetch and before publish leaves the previous version whole and
readable; running again completes the round, even from another path."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import luigi

from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir
from sharecrawl.jobs.mr_listing import MRListingJobs
from sharecrawl.jobs.runner import run_job, write_manifest
from sharecrawl.pipeline.fetch import Fetch
from sharecrawl.pipeline.settings import read_settings
from sharecrawl.pipeline.update import listing_parts
from tests.conftest import LAN
from tests.test_lock import crawl_command
from tests.test_pipeline import build


def snapshot(crawl: CrawlDir, version: int) -> dict[str, int]:
    return {name: crawl.read(version, name).num_rows for name in ("files", "media", "partitions")}


def test_round_stopped_before_publish_is_finished_by_the_next_run(lan: LAN, run_json) -> None:
    build(lan)
    lan.crawl()
    crawl = CrawlDir(lan.crawl_dir)
    before = snapshot(crawl, 1)
    lan.media("alpha", "music/new/track09.mp3", artist="Nautilus Pompilius", title="Skovannye")

    # Round 2 fetched, then the process "died" while writing version 2: a half-written
    # temporary folder and even a finished but unpublished v000002.
    settings = read_settings(hosts_file=lan.hosts_file, crawl_dir=lan.crawl_dir, runner="inline")
    assert luigi.build(
        [Fetch(crawl_dir=str(lan.crawl_dir), round=2, settings=settings)],
        local_scheduler=True,
        log_level="WARNING",
    )
    (crawl.crawldb / ".v000002.tmp" / "files").mkdir(parents=True)
    (crawl.crawldb / ".v000002.tmp" / "files" / "alpha.parquet").write_bytes(b"PAR1 half")
    (crawl.version_dir(2) / "files").mkdir(parents=True)

    assert crawl.current() == 1
    assert snapshot(crawl, 1) == before
    assert run_json(lan, "search", "skovannye") == []
    assert run_json(lan, "status")["round"] == 1

    fetched = os.path.getmtime(crawl.segment_dir(2) / "fetchlog.parquet")
    lan.crawl()
    assert crawl.current() == 2
    assert os.path.getmtime(crawl.segment_dir(2) / "fetchlog.parquet") == fetched  # not refetched
    assert [r["title"] for r in run_json(lan, "search", "skovannye")] == ["Skovannye"]
    assert snapshot(crawl, 2)["media"] == before["media"] + 1
    assert not (crawl.crawldb / ".v000002.tmp").exists()


def test_killed_crawl_process_leaves_a_whole_version(lan: LAN, run_json) -> None:
    """SIGKILL a real `sharecrawl crawl` as soon as round 2's fetch is done: whatever moment
    it hits, the live version is whole and the next run completes round 2."""
    build(lan)
    lan.crawl()
    crawl = CrawlDir(lan.crawl_dir)
    lan.media("beta", "share/late/track10.mp3", artist="Kino", title="Gruppa krovi")
    cmd = crawl_command(lan)
    proc = subprocess.Popen(cmd, start_new_session=True, stderr=subprocess.DEVNULL)
    fetchlog = crawl.segment_dir(2) / "fetchlog.parquet"
    deadline = time.monotonic() + 120
    while not fetchlog.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    live = crawl.current()
    assert live in (1, 2)
    assert crawl.read(live, "files").num_rows > 0
    assert run_json(lan, "status")["round"] == live
    lan.crawl()
    assert crawl.current() >= 2
    assert [r["title"] for r in run_json(lan, "search", "gruppa", "krovi")] == ["Gruppa krovi"]


def test_a_killed_attempts_listing_part_does_not_outlive_the_refetch(lan: LAN) -> None:
    """An attempt of round 2 died after writing alpha's listing and tag parts, before its
    fetchlog part; the rerun finds alpha unchanged, so those parts must not reach Update."""
    build(lan)
    lan.crawl()
    crawl = CrawlDir(lan.crawl_dir)
    before = snapshot(crawl, 1)
    seg = crawl.segment_dir(2)
    for folder in ("listing", "media"):  # round 1's full parts, as if fetched again
        (seg / folder).mkdir(parents=True)
        os.link(crawl.segment_dir(1) / folder / "alpha.parquet", seg / folder / "alpha.parquet")
    lan.crawl()
    assert crawl.current() == 2
    assert not (seg / "listing" / "alpha.parquet").exists()
    assert not (seg / "media" / "alpha.parquet").exists()
    assert snapshot(crawl, 2) == before


def files_naming(root: Path, text: str) -> list[str]:
    """The files under `root` whose bytes hold `text`."""
    needle = text.encode()
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and needle in p.read_bytes()
    )


def test_a_crawl_dir_moved_mid_round_finishes_the_round_at_its_new_path(
    lan: LAN, run_json, tmp_path: Path
) -> None:
    """Round 2 stopped after its Fetch, and its Update's first job manifest written; then
    the crawl directory moves (another disk, another mount point). At its new path the
    manifest still reads, the next run finishes round 2 and crawls round 3, search and sql
    answer, and no file of the crawl directory names its old path or its new one."""
    build(lan)
    lan.crawl()
    lan.media("alpha", "music/new/track09.mp3", artist="Nautilus Pompilius", title="Skovannye")
    settings = read_settings(hosts_file=lan.hosts_file, crawl_dir=lan.crawl_dir, runner="inline")
    assert luigi.build(
        [Fetch(crawl_dir=str(lan.crawl_dir), round=2, settings=settings)],
        local_scheduler=True,
        log_level="WARNING",
    )
    old = lan.crawl_dir
    seg = CrawlDir(old).segment_dir(2)
    manifest = write_manifest(listing_parts(seg), seg / "jobs" / "listing.manifest", groups=2)
    expected = {tuple(k): v for k, v in run_job(MRListingJobs, manifest, "inline")}
    assert expected  # as a killed Update left it: a manifest naming the round's listings

    new = tmp_path / "elsewhere" / "mounted" / "crawl"
    new.parent.mkdir(parents=True)
    shutil.move(old, new)
    assert not old.exists()
    lan.crawl_dir = new
    crawl = CrawlDir(new)
    moved = crawl.segment_dir(2) / manifest.relative_to(CrawlDir(old).segment_dir(2))
    got = {tuple(k): v for k, v in run_job(MRListingJobs, moved, "local")}
    assert got == expected  # read by job processes

    lan.crawl(runner="local")
    assert crawl.current() == 2
    assert [r["title"] for r in run_json(lan, "search", "skovannye")] == ["Skovannye"]
    rows = run_json(lan, "sql", "SELECT count(*) AS n FROM media")
    assert rows == [{"n": 6}]
    lan.media("beta", "share/late/track10.mp3", artist="Kino", title="Gruppa krovi")
    lan.crawl(runner="local")
    assert crawl.current() == 3
    assert [r["title"] for r in run_json(lan, "search", "gruppa", "krovi")] == ["Gruppa krovi"]
    assert list((crawl.segment_dir(3) / "jobs").glob("*.manifest"))  # the jobs ran there
    assert files_naming(new, str(old)) == []
    assert files_naming(new, str(new)) == []

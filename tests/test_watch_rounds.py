"""The watcher and the rounds together, on real Samba: `watch --crawl` makes a file copied onto
a watched share searchable; a round on a trusted host whose watch stayed silent lists nothing;
a restarted or killed watcher ends that trust and the schedule takes over."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import LAN
from tests.media import make_media
from tests.smbd import SmbServer, make_base_dir
from tests.test_hinted_rounds import by_host, fetchlog
from tests.watchtools import SmbWriter, WatchProcess, wait_for

pytestmark = pytest.mark.smb
FOUND_LIMIT_S = 180.0  # a failure bound, not a goal: the time measured is printed


def host_key(server: SmbServer) -> str:
    return f"127.0.0.1:{server.port}"


@pytest.fixture
def server(smbd_factory: Callable[..., SmbServer]) -> SmbServer:
    root = make_base_dir() / "tree"
    for album in range(6):
        make_media(
            root / "media" / f"Album {album}" / "track.mp3",
            artist="Smb band",
            title=f"old song {album}",
        )
    return smbd_factory(root_dir=root)


@pytest.fixture
def watches(tmp_path: Path):
    started: list[WatchProcess] = []

    def start(hosts: list[str], *args: str, **kw: object) -> WatchProcess:
        watch = WatchProcess(tmp_path / f"w{len(started)}", hosts, *args, **kw)
        started.append(watch)
        return watch

    yield start
    for watch in started:
        watch.kill()


def found(lan: LAN, run_json, *words: str) -> list[dict]:
    if not (lan.crawl_dir / "index" / "search.duckdb").exists():
        return []
    return run_json(lan, "search", *words)


def test_watch_crawl_makes_a_copied_file_searchable(
    server, lan, watches, run_json, tmp_path
) -> None:
    url = f"{server.url}/media?notify=trusted"
    lan.hosts_file.write_text(url + "\n")
    lan.crawl()
    watch = watches(
        [url], "--crawl", "--settle", "2", crawl_dir=lan.crawl_dir, config="runner = inline\n"
    )
    watch.wait_watching(host_key(server), ["media"])
    watch.prime(server.root_dir / "media")  # its own round comes and goes
    wait_for(lambda: "the round for the hints took" in watch.stderr(), 120, "probe round", watch)
    song = make_media(tmp_path / "new.mp3", artist="Smb band", title="copied just now")
    writer = SmbWriter(server)
    try:
        writer.makedirs("Album 9")
        writer.write("Album 9/copied.mp3", song.read_bytes(), mode="wb")
    finally:
        writer.close()
    copied = time.monotonic()
    hits = wait_for(
        lambda: found(lan, run_json, "copied", "just", "now"),
        FOUND_LIMIT_S,
        "the copied file found by search",
        watch,
    )
    took = time.monotonic() - copied
    print(f"\ncopied onto the watched share -> found by search: {took:.1f} s")
    assert hits[0]["best"]["path"] == "Album 9/copied.mp3"
    rows = by_host(fetchlog(lan))[host_key(server)]
    assert {r["reason"] for r in rows} == {"hint"}  # a round of the hinted partition alone
    assert all(r["n_folders"] <= 3 for r in rows)  # around the hints, not the whole share
    assert watch.stop() == 0


def test_silence_lists_nothing_and_a_restart_or_a_kill_ends_the_trust(server, lan, watches) -> None:
    url = f"{server.url}/media?notify=trusted"
    lan.hosts_file.write_text(url + "\n")
    lan.crawl()
    watch = watches([url], crawl_dir=lan.crawl_dir)
    key = host_key(server)
    watch.wait_watching(key, ["media"])
    lan.crawl()  # armed after round 1's scans: nothing trusted yet, all listed
    assert {r["watched"] for r in by_host(fetchlog(lan))[key]} == {False}
    lan.crawl()  # scanned while watched, nothing changed since: nothing listed
    assert key not in by_host(fetchlog(lan))
    assert watch.stop() == 0
    again = watches([url], crawl_dir=lan.crawl_dir)  # a restart: changes meanwhile unknown
    again.wait_watching(key, ["media"])
    lan.crawl()
    assert {r["reason"] for r in by_host(fetchlog(lan))[key]} == {"scheduled"}
    lan.crawl()
    assert key not in by_host(fetchlog(lan))
    again.kill()  # SIGKILL: the heartbeat stops; after 30 s its watches count as broken
    assert again.process.returncode == -signal.SIGKILL
    time.sleep(31)
    lan.crawl()
    assert {(r["reason"], r["watched"]) for r in by_host(fetchlog(lan))[key]} == {
        ("scheduled", False)
    }


def test_lock_held_reads_the_lock_without_taking_it(tmp_path: Path) -> None:
    from sharecrawl.crawl_io.crawldb.lock import LOCK_NAME, CrawlLock
    from sharecrawl.sensors.rounds import lock_held

    assert not lock_held(tmp_path / LOCK_NAME)  # no file yet
    lock = CrawlLock(tmp_path).acquire()
    try:
        assert lock_held(tmp_path / LOCK_NAME)
        assert lock_held(tmp_path / LOCK_NAME)  # looking did not take or drop it
    finally:
        lock.release()
    assert not lock_held(tmp_path / LOCK_NAME)
    again = CrawlLock(tmp_path).acquire()  # nobody else holds it after a look
    again.release()


def test_watch_crawl_waits_for_a_running_crawl(server, lan, watches, run_json) -> None:
    from sharecrawl.crawl_io.crawldb.lock import CrawlLock

    url = f"{server.url}/media?notify=trusted"
    lan.hosts_file.write_text(url + "\n")
    lan.crawl()
    watch = watches(
        [url], "--crawl", "--settle", "1", crawl_dir=lan.crawl_dir, config="runner = inline\n"
    )
    watch.wait_watching(host_key(server), ["media"])
    watch.prime(server.root_dir / "media")
    wait_for(lambda: "the round for the hints took" in watch.stderr(), 120, "probe round", watch)
    started = watch.stderr().count("a round for the hints started")  # the probe's round
    lock = CrawlLock(lan.crawl_dir).acquire()  # a scheduled crawl, as it were
    try:
        (server.root_dir / "media" / "while locked.txt").write_text("x")  # top folder: hinted
        wait_for(lambda: "a crawl is running" in watch.stderr(), 60, "waiting said", watch)
        time.sleep(3)
        assert watch.stderr().count("a round for the hints started") == started
    finally:
        lock.release()
    wait_for(
        lambda: watch.stderr().count("the round for the hints took") >= 2,
        120,
        "the round after the crawl",
        watch,
    )
    paths = {r["path"] for r in run_json(lan, "sql", "SELECT path FROM files")}
    assert "while locked.txt" in paths
    assert watch.stop() == 0

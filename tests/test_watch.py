"""`sharecrawl watch` against real Samba servers (tests/smbd.py): changes become hints, lost
connections come back with overflow hints, refusals are reported once, signals end it."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sharecrawl.crawl_io.checked import stored_path
from tests.small_disk import free_all, leave_free
from tests.smbd import SmbServer, free_port, make_base_dir, make_tree, remove_tree, start_smbd
from tests.watchtools import SmbWriter, WatchProcess, hinted_paths, smbclient_burst, wait_for

pytestmark = pytest.mark.smb


def host_key(server: SmbServer) -> str:
    return f"127.0.0.1:{server.port}"


@pytest.fixture
def server(smbd_factory: Callable[..., SmbServer]) -> SmbServer:
    root = make_base_dir() / "tree"  # pytest's tmp_path is closed to smbd's guest user
    (root / "media").mkdir(parents=True)
    (root / "private").mkdir()
    return smbd_factory(root_dir=root)


@pytest.fixture
def writer(server: SmbServer):
    w = SmbWriter(server)
    yield w
    w.close()


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


def test_smb_changes_at_any_depth_are_hinted(server, writer, watches) -> None:
    watch = watches([f"{server.url}/media"])
    watch.wait_watching(host_key(server), ["media"])
    watch.prime(server.root_dir / "media")
    writer.makedirs("one/two/three")
    writer.write("one/two/three/new\uf022song\uf025.txt", "hello")  # ":", "?" as a Mac sends
    wait_for(lambda: "one/two/three/new:song?.txt" in hinted_paths(watch), 30, "create", watch)
    writer.rename("one/two/three/new\uf022song\uf025.txt", "one/two/moved.txt")
    wait_for(lambda: "one/two/moved.txt" in hinted_paths(watch), 30, "rename", watch)
    writer.write("one/two/moved.txt", "rewritten, longer")  # an overwrite: truncate + write
    wait_for(
        lambda: "modified" in hinted_paths(watch).get("one/two/moved.txt", ()), 30, "write", watch
    )
    writer.remove("one/two/moved.txt")
    wait_for(
        lambda: "removed" in hinted_paths(watch).get("one/two/moved.txt", ()), 30, "delete", watch
    )
    paths = hinted_paths(watch)
    assert {"one", "one/two", "one/two/three"} <= set(paths)
    assert "added" in paths["one/two/three"]
    assert paths["one/two/three/new:song?.txt"] & {"added", "removed", "renamed_from"} >= {"added"}
    rows = [r for r in watch.hints() if r["path"] == "one/two/moved.txt"]
    assert all(r["host"] == host_key(server) and not r["overflow"] for r in rows)
    assert watch.stop() == 0


def test_disk_changes_in_the_top_folder_are_hinted(server, watches) -> None:
    watch = watches([f"{server.url}/media"])
    watch.wait_watching(host_key(server), ["media"])
    watch.prime(server.root_dir / "media")
    (server.root_dir / "media" / "copied on the host: a|b.mp3").write_bytes(b"x")
    wait_for(lambda: "copied on the host: a|b.mp3" in hinted_paths(watch), 30, "disk create", watch)
    assert watch.stop() == 0


def test_a_burst_of_creates_loses_nothing(smbd_factory, watches) -> None:
    root = make_base_dir() / "tree"
    (root / "media").mkdir(parents=True)
    server = smbd_factory(root_dir=root, audit=False)  # the audit log would triple the time
    watch = watches([f"{server.url}/media"])
    watch.wait_watching(host_key(server), ["media"])
    watch.prime(root / "media")
    created = smbclient_burst(server, "media", folders=30, per_folder=100)
    assert len(created) == 3000

    def accounted() -> bool:
        rows = [r for r in watch.hints() if r["share"] == "media"]
        if any(r["overflow"] for r in rows):
            return True  # the server lost count and said so: the share is listed again
        return set(created) <= {r["path"] for r in rows}

    wait_for(accounted, 120, "every create hinted, or an overflow hint", watch)
    assert watch.stop() == 0


def test_smbd_killed_and_restarted_under_a_running_watch(server, watches) -> None:
    watch = watches([server.url], "--max-backoff", "2")  # every share: media, and private
    key = host_key(server)
    watch.wait_watching(key, ["media"])
    assert watch.states()[(key, "private")]["state"] == "refused"  # guest may not open it
    server.kill()
    # (a read of the watches file that fails gives no states at all, as it gives a round
    # no trust; the next read has them)
    wait_for(
        lambda: watch.states().get((key, "media"), {}).get("state") == "down", 60, "down", watch
    )
    restarted = start_smbd(server.base, server.root_dir, port=server.port)
    try:
        watch.wait_watching(key, ["media"])

        def reconnected() -> list[dict]:
            return [r for r in watch.hints() if r["action"] == "reconnected"]

        rows = wait_for(reconnected, 30, "an overflow hint once back", watch)
        assert [(r["share"], r["path"], r["overflow"]) for r in rows] == [("media", "", True)]
        watch.prime(restarted.root_dir / "media", "after")  # hints after the restart
        assert watch.stop() == 0
    finally:
        restarted.stop()
    log = watch.stderr()
    assert log.count("refused") == 1, log  # reported once, not again after the reconnect
    assert log.count("watching again") == 1, log


def test_a_host_refusing_notifications_is_reported_once(
    server, smbd_factory, writer, watches
) -> None:
    root = make_base_dir() / "tree"
    (root / "media").mkdir(parents=True)
    # Samba's `change notify` is a global parameter: no share of this server sends any
    quiet = smbd_factory(root_dir=root, extra_config="\n[global]\n  change notify = no\n")
    watch = watches([f"{quiet.url}/media", f"{server.url}/media"])
    watch.wait_watching(host_key(server), ["media"])
    watch.prime(server.root_dir / "media")
    refused = wait_for(lambda: watch.states().get((host_key(quiet), "media")), 30, "refusal", watch)
    assert refused["state"] == "refused" and "not implemented" in refused["detail"]
    writer.write("still watched.txt")
    wait_for(lambda: "still watched.txt" in hinted_paths(watch), 30, "other host", watch)
    assert watch.stop() == 0
    lines = [line for line in watch.stderr().splitlines() if "refused" in line]
    assert len(lines) == 1 and f"{host_key(quiet)}/media" in lines[0]


def test_sigterm_and_sigint_end_it_with_status_0(server, smbd_factory, watches) -> None:
    hung = smbd_factory(root_dir=make_base_dir() / "tree")
    hung.pause()  # it accepts TCP (the kernel does) and never answers: a connect in progress
    try:
        for signum in (signal.SIGTERM, signal.SIGINT):
            watch = watches([f"{server.url}/media", f"{hung.url}/media"])
            watch.wait_watching(host_key(server), ["media"])
            assert watch.stop(signum, limit_s=60) == 0, watch.stderr()
            states = watch.states()
            assert states[(host_key(server), "media")]["state"] == "stopped"
    finally:
        hung.resume()


def test_seconds_ends_it_with_status_0(server, watches) -> None:
    watch = watches([f"{server.url}/media"], "--seconds", "3")
    assert watch.process.wait(60) == 0, watch.stderr()
    assert watch.states()[(host_key(server), "media")]["state"] == "stopped"


def test_hints_for_excluded_paths_are_dropped(server, writer, watches) -> None:
    watch = watches([f"{server.url}/media"])
    watch.rules_file.write_text("exclude path=node_modules\nexclude ext=tmp\n")
    watch.wait_watching(host_key(server), ["media"])
    watch.prime(server.root_dir / "media")
    writer.makedirs("app/node_modules/lib")
    writer.write("app/node_modules/lib/index.js")
    writer.write("app/scratch.tmp")
    writer.write("app/kept.txt")
    wait_for(lambda: "app/kept.txt" in hinted_paths(watch), 30, "kept", watch)
    watch.rules_file.write_text("exclude path=node_modules\nexclude ext=tmp\nexclude path=later\n")
    wait_for(lambda: "crawl rules read again" in watch.stderr(), 30, "rules reread", watch)
    writer.makedirs("later")
    writer.write("later/dropped.txt")
    writer.write("app/sentinel.txt")
    wait_for(lambda: "app/sentinel.txt" in hinted_paths(watch), 30, "sentinel", watch)
    paths = set(hinted_paths(watch))
    assert "app/kept.txt" in paths and "app" in paths
    assert not [p for p in paths if "node_modules" in p or p.endswith(".tmp")], paths
    assert "later/dropped.txt" not in paths
    assert watch.stop() == 0


def test_bad_input_and_a_second_watcher_get_one_line(server, watches) -> None:
    empty = watches([])
    assert empty.process.wait(60) == 2
    assert (
        empty.stderr().startswith("sharecrawl: error: hosts file")
        and empty.stderr().count("\n") == 1
    )
    first = watches([f"{server.url}/media"])
    first.wait_watching(host_key(server), ["media"])
    second = watches([f"{server.url}/media"], crawl_dir=first.crawl_dir)
    assert second.process.wait(60) == 2
    assert f"another `sharecrawl watch` (pid {first.pid})" in second.stderr()
    assert first.process.poll() is None and first.stop() == 0


def test_watch_killed_during_a_round_leaves_the_round_whole(smbd_factory, lan, watches) -> None:
    root = make_base_dir() / "tree"
    make_tree(root)
    server = smbd_factory(root_dir=root)
    lan.hosts_file.write_text(f"{server.url}/media\n")
    watch = watches([f"{server.url}/media"], crawl_dir=lan.crawl_dir)
    watch.wait_watching(host_key(server), ["media"])
    watch.prime(root / "media")  # the store has a part when the round starts
    segment = lan.crawl_dir / "segments" / "r000001"
    killer = threading.Thread(target=lambda: (wait_for(segment.exists, 120), watch.kill()))
    killer.start()
    lan.crawl()
    killer.join(150)
    assert watch.process.returncode == -signal.SIGKILL
    files = {r["path"] for r in run_sql_rows(lan, "SELECT path FROM files WHERE NOT is_dir")}
    on_disk = {
        str(p.relative_to(root / "media")) for p in (root / "media").rglob("*") if p.is_file()
    }
    assert files == set(map(stored_path, on_disk))  # `back\slash` is stored `back\\slash`
    assert run_sql_rows(lan, "SELECT count(*) AS n FROM hints")[0]["n"] >= 1
    again = watches([f"{server.url}/media"], crawl_dir=lan.crawl_dir)  # the lock went with it
    again.wait_watching(host_key(server), ["media"])
    assert again.stop() == 0


def run_sql_rows(lan, sql: str) -> list[dict]:
    from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir
    from sharecrawl.queries.views import run_sql

    columns, rows = run_sql(CrawlDir(lan.crawl_dir), sql)
    return [dict(zip(columns, row, strict=True)) for row in rows]


def test_a_host_that_comes_later_is_watched_and_its_absence_told_once(watches) -> None:
    root = make_base_dir() / "tree"
    (root / "media").mkdir(parents=True)
    port = free_port()
    watch = watches([f"smb://127.0.0.1:{port}/media"], "--max-backoff", "1")
    wait_for(lambda: "trying again" in watch.stderr(), 60, "the failure reported", watch)
    time.sleep(3)  # several quiet attempts (backoff capped at 1 s)
    server = start_smbd(root.parent / "server", root, port=port)
    try:
        watch.wait_watching(f"127.0.0.1:{port}", ["media"])
        watch.prime(root / "media")
        assert watch.stop() == 0
    finally:
        server.stop()
        remove_tree(root.parent)
    log = watch.stderr()
    assert log.count("trying again") == 1 and "connection refused" in log, log
    assert not [r for r in watch.hints() if r["overflow"]]  # never connected: nothing was missed


def test_a_full_disk_keeps_hints_in_memory_until_there_is_room(
    server, writer, watches, small_disk: Path
) -> None:
    """The crawl directory on a small tmpfs (tests/small_disk.py), filled while the watch
    runs: a change is kept in memory, one line says to free space, the watch goes on, and
    the hint is written once there is room."""
    crawl_dir = small_disk / "crawl"
    watch = watches([f"{server.url}/media"], crawl_dir=crawl_dir)
    watch.wait_watching(host_key(server), ["media"])
    watch.prime(server.root_dir / "media")
    leave_free(small_disk, 0)
    writer.write("while-full.txt", "hello")

    def failing() -> list[str]:
        return [line for line in watch.stderr().splitlines() if "cannot write" in line]

    [line] = wait_for(failing, 60, "one line saying the hints wait", watch)
    assert "No space left on device" in line, line
    assert line.endswith(f"trying again: free space where {crawl_dir} lives"), line
    assert watch.process.poll() is None
    assert "while-full.txt" not in hinted_paths(watch)
    free_all(small_disk)
    wait_for(lambda: "while-full.txt" in hinted_paths(watch), 60, "the hint, written", watch)
    assert watch.stop() == 0
    assert len(failing()) == 1 and "hints are written again" in watch.stderr()

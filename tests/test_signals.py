"""SIGINT and SIGTERM stop a real `sharecrawl crawl` cleanly: exit 130 / 143, one line on
stderr naming the live version, no traceback; no process of the crawl outlives it, nothing
is written into the crawl directory after it exits, its temporary files are gone (the crawl
directory's, multiprocessing's /tmp/pymp-*, mrjob's). A rerun finishes the interrupted
round. Processes are told apart by their session (each crawl starts in its own)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import luigi
import pytest

from sharecrawl.crawl_io.crawldb.atomic import machine, write_atomic
from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir, host_file
from sharecrawl.crawl_io.crawldb.tempfiles import (
    FOREIGN_STALE_S,
    TEMP_NAME,
    remove_stale_temp_files,
    stale_temp_files,
)
from sharecrawl.pipeline.settings import read_settings
from sharecrawl.pipeline.update import Update
from sharecrawl.queries.index_store import index_version
from tests.cliproc import cli_argv
from tests.conftest import LAN
from tests.media import make_media
from tests.smbd import SmbServer, make_base_dir
from tests.test_pipeline import build

HOST_TIMEOUT_S = 5  # a fetch worker left alive would write its host's part this much later
TEMP = re.compile(r"^\..+\.tmp")


# -- helpers ---------------------------------------------------------------------------


def session_processes(sid: int) -> dict[int, str]:
    """Living processes of session `sid` (zombies are dead): pid -> command line."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[3]) == sid:
            found[int(name)] = cmdline.decode(errors="replace")
    return found


def wait_until_gone(sid: int, limit_s: float = 20.0) -> dict[int, str]:
    """Poll until no process of the session lives (the resource tracker ends when the
    crawl has exited); return those left at the limit."""
    deadline = time.monotonic() + limit_s
    while (left := session_processes(sid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def tree_state(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under root: (mtime_ns, size)."""
    state = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            st = os.lstat(os.path.join(folder, name))
            state[os.path.relpath(os.path.join(folder, name), root)] = (st.st_mtime_ns, st.st_size)
    return state


def temp_names(root: Path) -> list[str]:
    return [
        os.path.join(f, n)
        for f, dirs, files in os.walk(root)
        for n in dirs + files
        if TEMP.match(n)
    ]


def wait_for(condition: Callable[[], bool], proc: subprocess.Popen, limit_s: float = 120.0) -> None:
    deadline = time.monotonic() + limit_s
    while not condition():
        assert proc.poll() is None, f"the crawl ended early ({proc.returncode})"
        assert time.monotonic() < deadline, "the crawl never got there"
        time.sleep(0.02)


@dataclass
class CrawlProcess:
    proc: subprocess.Popen
    stderr: Path
    tmpdir: Path  # the crawl's TMPDIR: pymp-* and mrjob's folders go there

    def lines(self) -> list[str]:
        return self.stderr.read_text().splitlines()


@pytest.fixture
def crawl_tmpdir() -> Iterator[Path]:
    """A short private TMPDIR for a crawl subprocess (a forkserver's socket path is short)."""
    path = Path(tempfile.mkdtemp(prefix="sc-sig-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def start_crawl(lan: LAN, cfg: Path, tmpdir: Path, runner: str = "inline") -> CrawlProcess:
    stderr = lan.root / "crawl.stderr"
    cmd = cli_argv(
        "crawl",
        "--rounds",
        "1",
        "--crawl-dir",
        str(lan.crawl_dir),
        "--hosts-file",
        str(lan.hosts_file),
        "--runner",
        runner,
    )
    env = {**os.environ, "LUIGI_CONFIG_PATH": str(cfg), "TMPDIR": str(tmpdir)}
    with open(stderr, "wb") as err:
        proc = subprocess.Popen(
            cmd,
            cwd=lan.root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )
    return CrawlProcess(proc, stderr, tmpdir)


def fetch_workers(processes: dict[int, str]) -> int:
    """The fork server and its fetch workers (forks of it, with its command line)."""
    return sum("multiprocessing.forkserver" in cmd for cmd in processes.values())


def assert_stopped_cleanly(run: CrawlProcess, signum: int, lan: LAN, live: int) -> None:
    """The exit status, the one line, no process left, no temporary file, no late write."""
    run.proc.wait(timeout=120)
    after_exit = tree_state(lan.crawl_dir)
    assert run.proc.returncode == 128 + signum
    lines = run.lines()
    assert not [line for line in lines if "Traceback" in line], lines
    said = [line for line in lines if "interrupted" in line]
    assert said == [
        f"sharecrawl: interrupted: the live version is still v{live:06d}; run the "
        f"same command again to finish round {live + 1}"
    ], lines
    assert lines[-1] == said[0]
    assert wait_until_gone(run.proc.pid) == {}
    assert temp_names(lan.crawl_dir) == []
    assert list(run.tmpdir.iterdir()) == []  # /tmp/pymp-* and mrjob's folders of this crawl
    time.sleep(HOST_TIMEOUT_S + 1)  # a worker still fetching would have written by now
    assert tree_state(lan.crawl_dir) == after_exit
    assert CrawlDir(lan.crawl_dir).current() == live


# -- a LAN whose round waits on a stopped Samba server ---------------------------------


@pytest.fixture
def stalled_round(
    lan: LAN, smbd_factory: Callable[..., SmbServer], luigi_cfg: Callable[[str], None]
) -> Iterator[tuple[LAN, SmbServer, Path]]:
    """Round 1 crawled (two file:// hosts, one smbd); then a change, and the smbd stopped
    (SIGSTOP: TCP still accepts, SMB never answers), so round 2's fetch waits on it."""
    text = f"[sharecrawl]\nhost_timeout_s = {HOST_TIMEOUT_S}\nliveness_timeout_s = 1\n"
    cfg = lan.root / "signals.cfg"
    cfg.write_text(text)
    luigi_cfg(text)
    root = make_base_dir() / "tree"
    make_media(root / "media" / "Kino" / "track01.mp3", artist="Kino", title="Kukushka")
    (root / "private").mkdir(parents=True)
    server = smbd_factory(root_dir=root)
    build(lan)
    lan.hosts_file.write_text(lan.hosts_file.read_text() + f"{server.url}/media\n")
    lan.crawl()
    lan.media("alpha", "music/new/track09.mp3", artist="Nautilus Pompilius", title="Skovannye")
    server.pause()
    try:
        yield lan, server, cfg
    finally:
        server.resume()
        shutil.rmtree(root.parent, ignore_errors=True)


def start_stalled(lan: LAN, cfg: Path, tmpdir: Path) -> CrawlProcess:
    """Start round 2 and wait until the file hosts are fetched and a worker waits on smbd."""
    run = start_crawl(lan, cfg, tmpdir)
    seg = CrawlDir(lan.crawl_dir).segment_dir(2)
    wait_for(
        lambda: all((seg / "fetchlog" / host_file(h)).exists() for h in ("alpha", "beta")), run.proc
    )
    assert not (seg / "fetchlog.parquet").exists()  # the fetch is still running
    assert fetch_workers(session_processes(run.proc.pid)) >= 2  # the server and a worker
    return run


def finish_round_two(lan: LAN, server: SmbServer, run_json) -> None:
    """The same command again (smbd well again) finishes round 2, and only round 2."""
    server.resume()
    lan.crawl()
    crawl = CrawlDir(lan.crawl_dir)
    assert crawl.current() == 2
    assert [r["title"] for r in run_json(lan, "search", "skovannye")] == ["Skovannye"]
    assert run_json(lan, "search", "kukushka")[0]["online_copies"] == 1
    assert stale_temp_files(lan.crawl_dir) == []


@pytest.mark.smb
@pytest.mark.slow
def test_sigterm_to_the_crawl_ends_its_workers_and_says_where_it_stopped(
    stalled_round, crawl_tmpdir: Path, run_json
) -> None:
    """`kill PID`: only the crawl process gets the signal; its workers must be ended by it."""
    lan, server, cfg = stalled_round
    run = start_stalled(lan, cfg, crawl_tmpdir)
    os.kill(run.proc.pid, signal.SIGTERM)
    assert_stopped_cleanly(run, signal.SIGTERM, lan, live=1)
    smb_part = CrawlDir(lan.crawl_dir).segment_dir(2) / "fetchlog"
    assert sorted(p.name for p in smb_part.iterdir()) == ["alpha.parquet", "beta.parquet"]
    finish_round_two(lan, server, run_json)


@pytest.mark.smb
@pytest.mark.slow
def test_ctrl_c_to_the_process_group_stops_the_round(
    stalled_round, crawl_tmpdir: Path, run_json
) -> None:
    """Ctrl-C in a terminal: SIGINT reaches every process of the foreground group."""
    lan, server, cfg = stalled_round
    run = start_stalled(lan, cfg, crawl_tmpdir)
    os.killpg(run.proc.pid, signal.SIGINT)
    assert_stopped_cleanly(run, signal.SIGINT, lan, live=1)
    finish_round_two(lan, server, run_json)


@pytest.mark.smb
@pytest.mark.slow
def test_sigkill_to_the_crawl_alone_takes_its_workers_along(
    stalled_round, crawl_tmpdir: Path, run_json
) -> None:
    """SIGKILL (the OOM killer) cleans nothing up, but the fork server and the workers die
    with the crawl process (PR_SET_PDEATHSIG), so none writes into the crawl afterwards."""
    lan, server, cfg = stalled_round
    run = start_stalled(lan, cfg, crawl_tmpdir)
    os.kill(run.proc.pid, signal.SIGKILL)
    run.proc.wait(timeout=60)
    assert wait_until_gone(run.proc.pid) == {}
    after_exit = tree_state(lan.crawl_dir)
    time.sleep(HOST_TIMEOUT_S + 1)
    assert tree_state(lan.crawl_dir) == after_exit
    assert CrawlDir(lan.crawl_dir).current() == 1
    finish_round_two(lan, server, run_json)


# -- file:// hosts only ----------------------------------------------------------------


@pytest.mark.slow
def test_sigint_to_the_group_while_many_files_are_fetched(lan: LAN, crawl_tmpdir: Path) -> None:
    build(lan)
    lan.crawl()
    template = lan.media("big", "share/template.mp3", artist="Kino", title="Zvezda")
    for i in range(3000):  # tags to read for a while
        path = lan.host("big") / "share" / f"d{i // 100:02d}" / f"song{i:04d}.mp3"
        path.parent.mkdir(parents=True, exist_ok=True)
        os.link(template, path)
    lan.media("alpha", "music/new/track09.mp3", artist="Nautilus Pompilius", title="Skovannye")
    lan.write_hosts("alpha", "beta", "big")
    cfg = lan.root / "signals.cfg"
    cfg.write_text("[sharecrawl]\nliveness_timeout_s = 1\n")
    run = start_crawl(lan, cfg, crawl_tmpdir)
    fetchlog = CrawlDir(lan.crawl_dir).segment_dir(2) / "fetchlog"
    wait_for(lambda: (fetchlog / "alpha.parquet").exists(), run.proc)
    assert not (fetchlog / "big.parquet").exists()  # still reading its tags
    os.killpg(run.proc.pid, signal.SIGINT)
    assert_stopped_cleanly(run, signal.SIGINT, lan, live=1)
    assert not (fetchlog / "big.parquet").exists()
    lan.crawl()
    assert CrawlDir(lan.crawl_dir).current() == 2


@pytest.mark.slow
def test_sigterm_to_the_group_while_mrjob_runs_locally(lan: LAN, crawl_tmpdir: Path) -> None:
    """cron's `timeout` signals the whole group; in Update, mrjob's local runner has workers
    (forked processes) running tasks: they must not leave the crawl waiting for them."""
    build(lan)
    lan.crawl()
    lan.media("beta", "share/late/track10.mp3", artist="Kino", title="Gruppa krovi")
    cfg = lan.root / "signals.cfg"
    cfg.write_text("[sharecrawl]\nliveness_timeout_s = 1\n")
    run = start_crawl(lan, cfg, crawl_tmpdir, runner="local")
    seg = CrawlDir(lan.crawl_dir).segment_dir(2)
    wait_for(lambda: (seg / "jobs" / "listing.manifest").exists(), run.proc)
    os.killpg(run.proc.pid, signal.SIGTERM)
    assert_stopped_cleanly(run, signal.SIGTERM, lan, live=1)


# -- in the test process ---------------------------------------------------------------


def test_a_round_killed_after_publish_is_finished_by_its_index(lan: LAN, run_json) -> None:
    """Killed between publish and Index: `crawl --rounds 1` runs Index for that round and
    counts it as the round (not a whole extra round)."""
    build(lan)
    lan.crawl()
    lan.media("alpha", "music/new/track09.mp3", artist="Nautilus Pompilius", title="Skovannye")
    settings = read_settings(hosts_file=lan.hosts_file, crawl_dir=lan.crawl_dir, runner="inline")
    assert luigi.build(
        [Update(crawl_dir=str(lan.crawl_dir), round=2, settings=settings)],
        local_scheduler=True,
        log_level="WARNING",
    )
    crawl = CrawlDir(lan.crawl_dir)
    assert crawl.current() == 2 and index_version(crawl.index) == "v000001"
    lan.crawl()
    assert crawl.current() == 2
    assert index_version(crawl.index) == "v000002"
    assert not crawl.segment_dir(3).exists()
    assert [r["title"] for r in run_json(lan, "search", "skovannye")] == ["Skovannye"]


def test_a_crawl_starts_by_removing_a_killed_runs_temporary_files(lan: LAN) -> None:
    build(lan)
    lan.crawl()
    crawl = CrawlDir(lan.crawl_dir)
    gone = f"{_dead_pid()}@{machine()}"
    left = [
        crawl.crawldb / f".CURRENT.tmp{gone}",
        crawl.crawldb / ".v000002.tmp" / "files" / f".alpha.parquet.tmp{gone}",
        crawl.segment_dir(2) / "listing" / f".alpha.parquet.tmp{gone}",
        crawl.index.parent / f".search.duckdb.tmp{gone}",
        crawl.index.parent / f".search.duckdb.tmp{gone}.wal",
        lan.crawl_dir / f".rules.auto.tmp{gone}",
    ]
    for path in left:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"half")
    alive = f"{os.getppid()}@{machine()}"
    alive_writer = crawl.segment_dir(2) / "media" / f".beta.parquet.tmp{alive}"
    alive_writer.parent.mkdir(parents=True, exist_ok=True)
    alive_writer.write_bytes(b"still being written")
    kept = crawl.segment_dir(1) / "fetchlist.parquet"  # an old, finished segment: not looked at
    version_tmp = crawl.crawldb / ".v000002.tmp"  # found as a whole
    found = set(stale_temp_files(lan.crawl_dir))
    assert found == {p for p in left if version_tmp not in p.parents} | {version_tmp}
    lan.crawl()
    assert [p for p in left if p.exists()] == []
    assert alive_writer.exists() and kept.exists()
    alive_writer.unlink()
    assert remove_stale_temp_files(lan.crawl_dir) == []


def test_a_temporary_name_of_another_machine_goes_only_once_it_is_old(tmp_path: Path) -> None:
    """A pid is checked only on its own machine: another machine's writer (a fetch worker
    sharing the crawl directory) may be alive, so its file goes only when it has not changed
    for FOREIGN_STALE_S."""
    seg = CrawlDir(tmp_path).segment_dir(1) / "listing"
    seg.mkdir(parents=True)
    gone, here = _dead_pid(), machine()
    written, used = seg / "alpha.parquet", []
    write_atomic(written, lambda tmp: (used.append(tmp.name), tmp.write_bytes(b"x")))
    assert used == [f".alpha.parquet.tmp{os.getpid()}@{here}"] and written.read_bytes() == b"x"
    assert TEMP_NAME.match(used[0])["machine"] == here  # type: ignore[index]
    own_dead = seg / f".a.parquet.tmp{gone}@{here}"
    own_alive = seg / f".b.parquet.tmp{os.getppid()}@{here}"
    other_fresh = seg / f".c.parquet.tmp{gone}@elsewhere.example.org"
    other_old = seg / f".d.parquet.tmp{gone}@elsewhere.example.org"
    other_old_wal = seg / f".search.duckdb.tmp{gone}@elsewhere.wal"
    for path in (own_dead, own_alive, other_fresh, other_old, other_old_wal):
        path.write_bytes(b"half")
    long_ago = time.time() - FOREIGN_STALE_S - 60
    for path in (other_old, other_old_wal):
        os.utime(path, (long_ago, long_ago))
    # a fresh file of another machine is kept whatever its pid (even one dead here)
    found = set(stale_temp_files(tmp_path))
    assert found == {own_dead, other_old, other_old_wal}
    assert set(remove_stale_temp_files(tmp_path)) == found
    assert sorted(p.name for p in seg.iterdir()) == sorted(
        ["alpha.parquet", own_alive.name, other_fresh.name]
    )


def _dead_pid() -> int:
    """The pid of a process that has exited."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


WAITING = """
import sys, threading
from pathlib import Path
from sharecrawl.crawl_io.processes import stop_on_signals, stopping
marker = Path(sys.argv[1])
stop_on_signals()
with stopping(lambda: marker.write_text("cleaned") and "interrupted: cleaned up"):
    child = threading.Thread(target=threading.Event().wait, daemon=True)
    child.start()
    marker.with_suffix(".ready").touch()
    child.join()  # a library that waits for its helpers, which never end
"""


def test_a_crawl_waiting_on_a_thread_cleans_up_and_exits_at_once(tmp_path: Path) -> None:
    """The stop happens where the main thread waits: nothing has to unwind."""
    marker = tmp_path / "marker"
    proc = subprocess.Popen(
        [sys.executable, "-c", WAITING, str(marker)],
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while not marker.with_suffix(".ready").exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGTERM)
    try:
        _, stderr = proc.communicate(timeout=50)
    finally:
        proc.kill()
    assert proc.returncode == 143
    assert stderr.decode().splitlines() == ["sharecrawl: interrupted: cleaned up"]
    assert marker.read_text() == "cleaned"


def test_the_stop_waits_for_a_killed_worker_that_its_parents_death_made_inits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A unit test of end_children's waiting, the kernel faked: the fork server (10) and its
    worker (11) are killed together; the server's death makes the worker init's child (no
    longer below the crawl) while it is still dying, and its files must outlive the cleanup
    only if it does."""
    from sharecrawl.crawl_io import processes

    dying = {10: 1, 11: 4}  # pid -> how many more looks find it still running
    killed: list[int] = []

    def descendants(_pid: int) -> list[int]:
        return [10, 11] if 10 not in killed else []  # the server gone: the worker is init's

    def alive(pid: int) -> bool:
        if pid not in killed:
            return True
        dying[pid] -= 1
        return dying[pid] >= 0

    monkeypatch.setattr(processes, "descendants", descendants)
    monkeypatch.setattr(processes, "alive", alive)
    monkeypatch.setattr(processes.os, "kill", lambda pid, _sig: killed.append(pid))
    processes.end_children()
    assert sorted(killed) == [10, 11]  # each killed once
    assert dying[11] < 0  # returned only once the worker was seen gone

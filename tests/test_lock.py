"""One crawl per crawl directory: real `sharecrawl crawl` processes on one crawl dir."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir
from sharecrawl.crawl_io.crawldb.lock import EXIT_LOCKED, CrawlLock, CrawlLocked
from tests.cliproc import cli_argv
from tests.conftest import LAN
from tests.test_pipeline import build


def tree(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")
    }


def crawl_command(lan: LAN) -> list[str]:
    return cli_argv(
        "crawl",
        "--crawl-dir",
        str(lan.crawl_dir),
        "--hosts-file",
        str(lan.hosts_file),
        "--runner",
        "inline",
    )


def test_a_second_lock_is_refused_at_once_naming_the_holder(tmp_path: Path) -> None:
    with CrawlLock(tmp_path).acquire() as held:
        holder = held.holder()
        assert holder is not None and holder.pid == os.getpid()
        with pytest.raises(CrawlLocked) as refused:
            CrawlLock(tmp_path).acquire()  # another open file description: refused
        assert refused.value.holder == holder
        message = str(refused.value)
        assert message.startswith(f"another crawl (pid {os.getpid()}, started ")
        assert message.endswith(f"UTC) holds {tmp_path / 'LOCK'}; wait for it or stop it")
    with CrawlLock(tmp_path).acquire():  # released: free again
        pass
    assert CrawlLock(tmp_path).holder() is None  # a finished crawl names no holder


def test_a_second_crawl_is_refused_readers_run_and_a_killed_holder_frees_the_lock(
    lan: LAN, capsys
) -> None:
    build(lan)
    lan.crawl()
    crawl = CrawlDir(lan.crawl_dir)
    lan.media("alpha", "music/new/track09.mp3", artist="Nautilus Pompilius", title="Skovannye")
    first = subprocess.Popen(
        crawl_command(lan),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        lock = CrawlLock(lan.crawl_dir)
        deadline = time.monotonic() + 120
        while (held := lock.holder()) is None or held.pid != first.pid:
            assert first.poll() is None and time.monotonic() < deadline, "no lock taken"
            time.sleep(0.01)
        os.killpg(first.pid, signal.SIGSTOP)  # the holder, frozen wherever it was
        before = tree(lan.crawl_dir)

        second = subprocess.run(crawl_command(lan), capture_output=True, text=True, timeout=120)
        assert second.returncode == EXIT_LOCKED
        assert second.stderr.splitlines() == [
            f"sharecrawl: error: another crawl (pid {first.pid}, started "
            f"{held.started:%Y-%m-%d %H:%M} UTC) holds {lan.crawl_dir / 'LOCK'}; "
            "wait for it or stop it"
        ]
        assert tree(lan.crawl_dir) == before  # the refused crawl wrote nothing

        # readers neither take nor wait for the lock (its holder is stopped)
        for command in (
            ["status"],
            ["search", "madonna"],
            ["sql", "SELECT count(*) FROM files"],
            ["check"],
        ):
            capsys.readouterr()
            assert lan.cli(*command) == 0, command
        assert tree(lan.crawl_dir) == before

        os.killpg(first.pid, signal.SIGKILL)  # the kernel drops a dead holder's flock
        first.wait(timeout=60)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    lan.crawl()
    assert crawl.current() == 2
    capsys.readouterr()
    assert lan.cli("search", "skovannye") == 0
    assert "Skovannye" in capsys.readouterr().out


def test_a_first_crawl_may_find_only_the_lock_file_in_its_folder(lan: LAN) -> None:
    build(lan)
    lan.crawl_dir.mkdir()
    with CrawlLock(lan.crawl_dir).acquire():  # another first crawl, before its crawldb/
        pass
    lan.crawl()
    assert CrawlDir(lan.crawl_dir).current() == 1


def test_repair_is_refused_while_a_crawl_holds_the_lock(lan: LAN, capsys) -> None:
    build(lan)
    lan.crawl()
    (lan.crawl_dir / "crawldb" / "CURRENT").write_text("")
    with CrawlLock(lan.crawl_dir).acquire():
        capsys.readouterr()
        assert lan.cli("check", "--repair") == EXIT_LOCKED
        assert "holds" in capsys.readouterr().err
        assert (lan.crawl_dir / "crawldb" / "CURRENT").read_text() == ""  # untouched
    assert lan.cli("check", "--repair") == 0
    assert CrawlDir(lan.crawl_dir).current() == 1


def test_held_says_whether_a_process_holds_the_lock_and_never_blocks_it(tmp_path: Path) -> None:
    """What a fetch worker checks before it joins a round: held while a process holds it,
    not after it released it or was killed (its record stays); probing leaves it free."""
    probe = CrawlLock(tmp_path)
    assert not probe.held()
    code = (
        "import time; from sharecrawl.crawl_io.crawldb.lock import CrawlLock; "
        f"CrawlLock({str(tmp_path)!r}).acquire(); print('locked', flush=True); time.sleep(60)"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
        start_new_session=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        assert probe.held() and probe.held()  # probing twice: no lock of its own is left
        with pytest.raises(CrawlLocked):
            CrawlLock(tmp_path).acquire()
    finally:
        holder.kill()
        holder.wait(10)
    assert probe.holder() is not None and probe.holder().pid == holder.pid  # record stays
    assert not probe.held()
    with CrawlLock(tmp_path).acquire():  # the probes never kept it
        assert CrawlLock(tmp_path).held()
    assert not probe.held()

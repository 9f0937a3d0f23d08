"""The command's start-up: a second crawl on a locked crawl directory is refused before any
heavy import (what bench/cli_startup.py times), Ctrl-C while a command starts gets one line
and never a traceback, and `sharecrawl demo` takes the crawl lock as `crawl` does. Real
processes, a real lock held by another process."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sharecrawl.crawl_io.crawldb.lock import EXIT_LOCKED
from tests.cliproc import REPO, cli_argv
from tests.conftest import LAN
from tests.test_lock import crawl_command, tree
from tests.test_pipeline import build

HOLD = """
import sys, time
from sharecrawl.crawl_io.crawldb.lock import CrawlLock
lock = CrawlLock(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(600)
"""
# What a refused crawl must not need: each costs tens to hundreds of milliseconds to import.
HEAVY = ("luigi", "pyarrow", "numpy", "duckdb", "mrjob", "rich", "pipeline", "queries")  # ours too


@pytest.fixture
def held_lock(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A crawl directory whose LOCK another process holds: (its path, the holder's pid)."""
    crawl = tmp_path / "work" / "crawl"
    (crawl / "crawldb").mkdir(parents=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(crawl)],
        cwd=REPO,
        text=True,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    yield crawl, holder.pid
    holder.kill()
    holder.wait()


def test_a_refused_crawl_imports_nothing_heavy_and_writes_nothing(
    lan: LAN, held_lock: tuple[Path, int]
) -> None:
    crawl, pid = held_lock
    lan.media("alpha", "music/song.mp3", artist="Madonna", title="Music")
    lan.write_hosts("alpha")
    before = tree(crawl)
    done = subprocess.run(
        cli_argv("crawl", "--crawl-dir", str(crawl), "--hosts-file", str(lan.hosts_file)),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"},  # -X importtime
    )
    assert done.returncode == EXIT_LOCKED
    lines = [ln for ln in done.stderr.splitlines() if not ln.startswith("import time:")]
    assert lines == [
        f"sharecrawl: error: another crawl (pid {pid}, started "
        f"{lines[0].split('started ')[1].split(')')[0]}) holds {crawl / 'LOCK'}; "
        "wait for it or stop it"
    ]
    found = re.finditer(r"^import time:\s+\d+ \|\s+\d+ \| +(\S+)", done.stderr, re.M)
    imported = {".".join(m.group(1).removeprefix("sharecrawl.").split(".")[:1]) for m in found}
    assert "cli" in imported and not imported & set(HEAVY), sorted(imported & set(HEAVY))
    assert tree(crawl) == before  # not even the LOCK file's time changed


def test_a_refused_crawl_without_crawl_dir_flag_reads_the_config(
    lan: LAN, held_lock: tuple[Path, int], tmp_path: Path
) -> None:
    crawl, _ = held_lock
    lan.media("alpha", "music/song.mp3", artist="Madonna", title="Music")
    lan.write_hosts("alpha")
    cfg = tmp_path / "site.cfg"
    cfg.write_text(f"[sharecrawl]\ncrawl_dir = {crawl}\nhosts_file = {lan.hosts_file}\n")
    done = subprocess.run(
        cli_argv("crawl"),
        cwd=REPO,
        text=True,
        capture_output=True,
        timeout=120,
        env={**os.environ, "LUIGI_CONFIG_PATH": str(cfg)},
    )
    assert done.returncode == EXIT_LOCKED, done.stderr
    assert done.stderr.count("\n") == 1 and "another crawl (pid" in done.stderr


def test_demo_takes_the_crawl_lock_and_clears_nothing(
    tmp_path: Path, held_lock: tuple[Path, int]
) -> None:
    crawl, pid = held_lock
    workdir = crawl.parent
    (workdir / "hosts.txt").write_text("# a demo's\n")  # what a demo folder holds
    (workdir / "hosts").mkdir()
    before = tree(workdir)
    done = subprocess.run(
        cli_argv("demo", "--workdir", str(workdir)),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == EXIT_LOCKED
    assert done.stderr.startswith(f"sharecrawl: error: another crawl (pid {pid}, ")
    assert done.stderr.count("\n") == 1
    assert tree(workdir) == before


def _interrupt_at(command: list[str], delay_s: float) -> subprocess.CompletedProcess[str]:
    child = subprocess.Popen(
        command,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    time.sleep(delay_s)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=120)
    return subprocess.CompletedProcess(command, child.returncode, out, err)


def _run_s(command: list[str]) -> float:
    """How long `command` takes to run whole here, now: the faster of two runs."""
    times = []
    for _ in range(2):
        started = time.perf_counter()
        subprocess.run(command, cwd=REPO, capture_output=True, check=True, timeout=120)
        times.append(time.perf_counter() - started)
    return min(times)


def _interpreter_start_s() -> float:
    """How long a bare interpreter takes to start here, now (machines are shared)."""
    times = []
    for _ in range(3):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.perf_counter() - started)
    return min(times)


@pytest.mark.slow
def test_ctrl_c_while_a_command_starts_is_one_line(lan: LAN) -> None:
    """SIGINT at eight points through the run of `search` (duckdb, numpy, pyarrow being
    imported) and of `crawl` (Luigi, the policies, the round starting): from well after
    Python's own start-up (it comes before any code of ours) to the end of the first second,
    or of the time the command takes here, now, when it takes less (machines differ)."""
    build(lan)
    lan.crawl()
    first = max(0.1, 3 * _interpreter_start_s())
    commands = {
        "search": cli_argv("search", "--crawl-dir", str(lan.crawl_dir), "madonna"),
        "crawl": crawl_command(lan),
    }
    stopped, outcomes = 0, []
    for name, command in commands.items():
        last = min(1.0, 0.9 * _run_s(command))
        for step in range(8):
            delay = first + step * max(0.0, last - first) / 7
            done = _interrupt_at(command, delay)
            where = f"{name} interrupted after {delay:.2f} s"
            outcomes.append((where, done.returncode, bool(done.stderr)))
            assert "Traceback" not in done.stderr, (where, done.stderr)
            if done.returncode == 0 or (done.returncode == -signal.SIGINT and not done.stderr):
                continue  # it had finished (or was leaving, its work done)
            stopped += 1
            # 130, or killed by the signal itself (a shell reports both as 130): a Ctrl-C
            # that lands while Python shuts down ends it the default way.
            assert done.returncode in (130, -signal.SIGINT), (where, done.returncode, done.stderr)
            lines = done.stderr.strip().splitlines()
            assert lines[-1].startswith("sharecrawl: interrupted"), (where, done.stderr)
            assert sum(ln.startswith("sharecrawl: interrupted") for ln in lines) == 1, where
    assert stopped >= 6, outcomes  # most points fall inside the commands' runs

"""`watch --crawl`: once hints have come and none for `settle_s` (an album copied is a burst),
run `sharecrawl crawl --rounds 1 --hinted-only` in a child, unless a crawl holds the lock (read
from /proc/locks, never taken, so a scheduled crawl never finds it held by the watcher)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sharecrawl.crawl_io.crawldb.crawldir import CrawlDamaged, CrawlDir
from sharecrawl.crawl_io.crawldb.hints import HintsStore
from sharecrawl.crawl_io.crawldb.lock import EXIT_LOCKED, LOCK_NAME, CrawlLock
from sharecrawl.crawl_io.processes import alive
from sharecrawl.crawl_io.terminal_log import verbose
from sharecrawl.jobs.hint_counts import count_hints

log = logging.getLogger("sharecrawl")
STOP_WAIT_S = 3.0  # at shutdown, how long a running round is given to stop (SIGTERM)


def lock_held(path: Path) -> bool:
    """Does a process hold the flock on `path`? Read from /proc/locks (Linux), never by
    trying to take it; elsewhere from the holder record the lock file keeps."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    try:
        table = Path("/proc/locks").read_text()
    except OSError:
        holder = CrawlLock(path.parent).holder()
        return holder is not None and alive(holder.pid)
    wanted = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    return any(
        fields[1] == "FLOCK" and fields[5] == wanted
        for fields in (line.split() for line in table.splitlines())
        if len(fields) > 5
    )


class HintRounds:
    """Starts and follows the rounds for the hints; driven by the watcher's loop."""

    def __init__(self, crawl_dir: Path, crawl_args: list[str], settle_s: float) -> None:
        self.crawl = CrawlDir(crawl_dir)
        self.crawl_args = crawl_args
        self.settle_s = settle_s
        self.pending = False  # a hint came after the last round started
        self.next_check = 0.0
        self.child: subprocess.Popen | None = None
        self.child_started = 0.0
        self.waiting_told = False

    def hinted(self) -> None:
        self.pending = True
        self.next_check = max(self.next_check, time.monotonic() + self.settle_s)

    def next_due(self) -> float:
        """When `tick` has something to do (monotonic seconds)."""
        if self.child is not None:
            return time.monotonic() + 0.5
        return self.next_check if self.pending else float("inf")

    def tick(self) -> None:
        now = time.monotonic()
        if self.child is not None:
            if self.child.poll() is None:
                return
            self._finished(now)
        if not self.pending or now < self.next_check:
            return
        if lock_held(self.crawl.root / LOCK_NAME):
            if not self.waiting_told:
                log.info("sharecrawl: watch: a crawl is running; the round for the hints waits")
                self.waiting_told = True
            self.next_check = now + self.settle_s
            return
        self.waiting_told = False
        self.pending = False
        if not self._hints_waiting():
            return  # a scheduled round scanned them meanwhile
        self._start(now)

    def _hints_waiting(self) -> bool:
        live = self.crawl.current()
        if not live:
            return True  # no round yet: the first one lists everything anyway
        try:
            partitions = self.crawl.read(live, "partitions")
        except (CrawlDamaged, OSError):  # the round says what is wrong, in one line
            return True
        return count_hints(HintsStore(self.crawl.root).snapshot(), partitions).waiting > 0

    def _start(self, now: float) -> None:
        args = list(self.crawl_args)
        if "--rules-file" in args and not Path(args[args.index("--rules-file") + 1]).exists():
            del args[args.index("--rules-file") : args.index("--rules-file") + 2]
        # A round for hints lists a few folders: the inline runner runs its jobs in the round's
        # own process, where the local runner would start a process per job step.
        crawl = ["crawl", "--rounds", "1", "--hinted-only", "--runner", "inline"]
        if verbose():
            crawl.append("--verbose")
        # -P: the folder watch runs in is not on the child's sys.path to shadow a library
        command = [sys.executable, "-P", "-m", "sharecrawl", *crawl, *args]
        self.child = subprocess.Popen(command, stdin=subprocess.DEVNULL)
        self.child_started = now
        log.info("sharecrawl: watch: a round for the hints started (pid %d)", self.child.pid)

    def _finished(self, now: float) -> None:
        assert self.child is not None
        code, took = self.child.returncode, now - self.child_started
        self.child = None
        if code == 0:
            log.info("sharecrawl: watch: the round for the hints took %.1f s", took)
        elif code == EXIT_LOCKED:  # a crawl took the lock first: after it, then
            self.pending = True
            self.next_check = now + self.settle_s
        else:
            log.warning(
                "sharecrawl: watch: the round for the hints failed (exit status %s); "
                "the next hints start another",
                code,
            )

    def stop(self) -> None:
        """End a running round (it stops within seconds; the next crawl finishes it)."""
        child, self.child = self.child, None
        if child is None or child.poll() is not None:
            return
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            log.info(
                "sharecrawl: watch: the round for the hints (pid %d) is still stopping", child.pid
            )

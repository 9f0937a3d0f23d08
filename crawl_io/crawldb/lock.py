"""One crawl per crawl directory: an exclusive flock on `crawl/LOCK`, which the kernel drops
with its holder (so it never goes stale), recording pid, host and start time for a refused
crawl's message. Readers never take it."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sharecrawl.crawl_io.crawldb.layout import LOCK_NAME

EXIT_LOCKED = 75  # sysexits' EX_TEMPFAIL: another crawl runs; try again later


class LockError(Exception):
    """The crawl lock could not be taken; the message is one line saying what to do."""


@dataclass(frozen=True)
class Holder:
    pid: int
    host: str
    started: datetime


class CrawlLocked(LockError):
    def __init__(self, path: Path, holder: Holder | None) -> None:
        who = "holder not yet recorded"
        if holder:
            where = "" if holder.host == socket.gethostname() else f" on {holder.host}"
            who = f"pid {holder.pid}{where}, started {holder.started:%Y-%m-%d %H:%M} UTC"
        super().__init__(f"another crawl ({who}) holds {path}; wait for it or stop it")
        self.holder = holder


class CrawlLock:
    """`with CrawlLock(crawl_dir).acquire(): ...` runs a crawl's rounds; raises CrawlLocked
    at once (never waits) when another process holds the lock."""

    def __init__(self, crawl_dir: str | os.PathLike) -> None:
        self.path = Path(crawl_dir) / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> CrawlLock:
        """Take the lock or raise CrawlLocked; a refused attempt changes nothing on disk."""
        try:
            flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
            fd = os.open(self.path, flags, 0o644)
        except OSError as e:
            raise LockError(f"cannot open {self.path}: {e.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            deadline = time.monotonic() + 0.5  # the holder writes its record right after locking
            while (holder := self.holder()) is None and time.monotonic() < deadline:
                time.sleep(0.02)
            raise CrawlLocked(self.path, holder) from None
        except OSError as e:
            os.close(fd)
            raise LockError(f"cannot lock {self.path}: {e.strerror}") from None
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Drop the lock; the file stays (a waiter could lock an inode no longer named)."""
        if self._fd is not None:
            os.ftruncate(self._fd, 0)  # a finished crawl leaves no holder to name
            os.close(self._fd)  # closing the last descriptor drops the flock
            self._fd = None

    def holder(self) -> Holder | None:
        """Who holds the lock (or held it when killed), as its file says."""
        try:
            record = json.loads(self.path.read_text())
            return Holder(
                int(record["pid"]), str(record["host"]), datetime.fromisoformat(record["started"])
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def held(self) -> bool:
        """Whether a process holds the lock now (a killed holder's record stays, its lock not)."""
        if self.holder() is None:
            return False
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # drops the shared lock, if taken
        return False

    def __enter__(self) -> CrawlLock:
        if self._fd is None:
            self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

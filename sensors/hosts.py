"""The watched hosts: their shares, when to retry a lost one (backoff 1 s, 2 s, 4 s ... jittered
in [½, 1] so hosts lost together do not return in step), and the threads that connect them
(connecting blocks; the watch loop never does)."""

from __future__ import annotations

import random
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir
from sharecrawl.crawl_io.liveness import check_host
from sharecrawl.crawl_io.notify import NotifySession
from sharecrawl.crawl_io.sources import (
    AddressRange,
    ConfigError,
    HostUnreachable,
    HostURL,
    SourceError,
    credentials_for,
)
from sharecrawl.jobs.crawl_rules import Rules

STEADY_S = 60.0  # a connection that lasted this long resets the backoff


class Connected(NamedTuple):
    session: NotifySession
    watched: list[str]
    refused: list[tuple[str, str]]  # (share, reason)


@dataclass
class HostWatch:
    url: HostURL
    shares: list[str] | None  # None: every share of the host
    session: NotifySession | None = None
    fd: int = -1  # its socket's, as registered with the loop's selector
    connecting: bool = False
    idle: bool = False  # nothing left to watch on it (every share refused)
    failures: int = 0
    next_try: float = 0.0
    connected_at: float = 0.0
    was_up: bool = False  # lost a connection: the next one starts with overflow hints
    quiet: bool = False  # its failure was reported; say nothing until it is back
    refused: set[str] = field(default_factory=set)  # shares reported as refused

    @property
    def key(self) -> str:
        return self.url.host

    def backoff(self, now: float, max_backoff_s: float) -> float:
        """Schedule the next attempt after a failure; returns the delay."""
        if self.connected_at and now - self.connected_at >= STEADY_S:
            self.failures = 0
        self.connected_at = 0.0
        delay = min(max_backoff_s, 2.0**self.failures) * random.uniform(0.5, 1.0)
        self.failures += 1
        self.next_try = now + delay
        return delay


def watched_hosts(hosts: list[HostURL]) -> list[HostWatch]:
    """One entry per SMB host key, lines naming shares of the same host merged (a line
    without a share means every share)."""
    lines: dict[str, list[HostURL]] = {}
    for host in hosts:
        if host.scheme == "smb":
            lines.setdefault(host.host, []).append(host)
    watches = []
    for same in lines.values():
        shares = {h.share for h in same}
        watches.append(HostWatch(same[0], None if None in shares else sorted(filter(None, shares))))
    return watches


def range_found(crawl: CrawlDir, ranges: list[AddressRange]) -> list[HostURL]:
    """The hosts the hosts file's ranges found, as the live version knows them: under their
    key, at the address that answered last (a host found or moved later waits for a restart
    of the watch, which never sweeps)."""
    by_line = {r.line: r for r in ranges}
    rows = crawl.read(crawl.current(), "hosts").select(["host", "address", "discovered_by"])
    return [
        by_line[row["discovered_by"]].at(row["address"], row["host"])
        for row in rows.to_pylist()
        if row["discovered_by"] in by_line and row["address"]
    ]


def open_watches(
    host: HostWatch, rules: Rules, timeout_s: float, liveness_timeout_s: float
) -> Connected:
    """Connect a host and watch each of its shares the rules do not exclude; SourceError when
    the host cannot be reached, shares that refuse are returned."""
    reason = check_host(host.url, liveness_timeout_s)  # a switched-off host costs 2 s, not 10
    if reason:
        raise HostUnreachable(f"{host.key}: {reason}")
    try:
        credentials = credentials_for(host.url)
    except (ConfigError, OSError) as e:
        raise SourceError(f"{host.key}: {e}") from None
    session = NotifySession(host.url, credentials, timeout_s)
    try:
        names = host.shares if host.shares is not None else session.shares()
        watched, refused = [], []
        for share in names:
            if rules.excludes_share(host.key, share):
                continue
            try:
                session.watch(share)
            except SourceError as e:
                if not session.usable:
                    raise
                refused.append((share, str(e).removeprefix(f"{host.key}: ")))
            else:
                watched.append(share)
        if watched:
            session.confirm()
        return Connected(session, watched, refused)
    except BaseException:
        session.abandon()
        raise


class Connector:
    """Runs connect jobs in at most `limit` threads, which exist only while there is work;
    each result (a Connected or the exception) is queued and `wake` called."""

    def __init__(self, limit: int, wake: Callable[[], None]) -> None:
        self._limit = max(1, limit)
        self._wake = wake
        self._lock = threading.Lock()
        self._jobs: deque[tuple[HostWatch, Callable[[], Connected]]] = deque()
        self._results: list[tuple[HostWatch, Connected | BaseException]] = []
        self._threads = 0
        self._stopped = False

    def submit(self, host: HostWatch, job: Callable[[], Connected]) -> None:
        with self._lock:
            self._jobs.append((host, job))
            if self._threads < self._limit:
                self._threads += 1
                threading.Thread(target=self._run, name="watch-connect", daemon=True).start()

    def results(self) -> list[tuple[HostWatch, Connected | BaseException]]:
        with self._lock:
            done, self._results = self._results, []
        return done

    def stop(self) -> None:
        """No job starts any more; a connection made after this is closed by its thread."""
        with self._lock:
            self._stopped = True
            self._jobs.clear()
        for _host, result in self.results():
            if isinstance(result, Connected):
                result.session.abandon()

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._jobs or self._stopped:
                    self._threads -= 1
                    return
                host, job = self._jobs.popleft()
            try:
                result: Connected | BaseException = job()
            except Exception as e:  # reported by the loop, one line per host
                result = e
            with self._lock:
                stopped = self._stopped
                if not stopped:
                    self._results.append((host, result))
            if stopped and isinstance(result, Connected):
                result.session.abandon()
            self._wake()

"""`sharecrawl watch` (docs/watch.md): one thread's select loop over every host's connection
(crawl_io.notify), a few threads to connect; notifications become hints (crawl_io.crawldb.hints)
and the watches file is a heartbeat. The watcher never takes the crawl lock."""

from __future__ import annotations

import contextlib
import logging
import math
import resource
import selectors
import signal
import threading
import time
from datetime import UTC, datetime
from functools import partial

import pyarrow as pa

from sharecrawl.crawl_io.crawldb.disk_full import is_disk_full
from sharecrawl.crawl_io.crawldb.hints import storable
from sharecrawl.crawl_io.crawldb.hints_writer import HintsWriter
from sharecrawl.crawl_io.notify import Change, Refusal, Waker
from sharecrawl.crawl_io.readable import readable_text
from sharecrawl.crawl_io.sources import ConfigError, SourceError
from sharecrawl.sensors.hosts import Connected, Connector, HostWatch, open_watches, watched_hosts
from sharecrawl.sensors.options import WatchOptions
from sharecrawl.sensors.rounds import HintRounds
from sharecrawl.sensors.rules import HintRules

log = logging.getLogger("sharecrawl")
MAX_BUFFERED = 200_000  # hints kept in memory while they cannot be written (a full disk)
SHUTDOWN_S = 1.5  # at most this long waiting for the servers to confirm the cancels
RECONNECTED = "reconnected"


class Watcher:
    def __init__(self, options: WatchOptions) -> None:
        self.options = options
        self.writer = HintsWriter(options.crawl_dir, options.keep_days)
        self.rules = HintRules(options.crawl_dir, options.rules_file)
        self.hosts = watched_hosts(options.hosts)
        self._selector = selectors.DefaultSelector()
        self._waker = Waker()  # connect threads and signals end the loop's wait
        self._selector.register(self._waker.read_fd, selectors.EVENT_READ, None)
        self._connector = Connector(options.connectors, self._waker.wake)
        self.rounds = None
        if options.crawl_args is not None:
            self.rounds = HintRounds(options.crawl_dir, options.crawl_args, options.settle_s)
        self._stopping = False
        self._buffer: dict[tuple[str, str, str, str, bool], datetime] = {}
        self._states: dict[tuple[str, str], dict] = {}
        self._states_dirty = False
        self._write_failing = False
        self._next_beat = self._next_rules = 0.0
        self._next_flush = float("inf")  # set when the first hint of a part arrives

    def stop(self) -> None:
        """Ask the loop to end (from any thread or a signal handler)."""
        self._stopping = True
        self._waker.wake()

    def run(self) -> int:
        seconds = self.options.seconds
        deadline = time.monotonic() + (math.inf if seconds is None else seconds)
        skipped = sum(h.scheme != "smb" for h in self.options.hosts)
        note = f" ({skipped} file:// hosts are not watched)" if skipped else ""
        log.info(
            "sharecrawl: watch: %d SMB hosts; hints go to %s%s",
            len(self.hosts),
            self.writer.store.dir,
            note,
        )
        try:
            while not self._stopping:
                now = time.monotonic()
                if now >= deadline:
                    break
                self._tick(now)
                timeout = min(self._next_due(now), 1.0, deadline - now)
                for key, _mask in self._selector.select(max(0.0, timeout)):
                    if key.data is None:
                        self._waker.drain()
                    else:
                        self._receive(key.data)
                self._collect()
            return 0
        finally:
            self._shutdown()

    def _next_due(self, now: float) -> float:
        retries = [h.next_try for h in self.hosts if self._needs_connect(h)]
        if self.rounds is not None:
            retries.append(self.rounds.next_due())
        due = min([self._next_flush, self._next_beat, self._next_rules, *retries])
        return max(0.0, due - now)

    def _needs_connect(self, host: HostWatch) -> bool:
        return host.session is None and not host.connecting and not host.idle

    def _tick(self, now: float) -> None:
        options = self.options
        for host in self.hosts:
            if self._needs_connect(host) and host.next_try <= now:
                host.connecting = True
                timeouts = (options.timeout_s, options.liveness_timeout_s)
                job = partial(open_watches, host, self.rules.rules, *timeouts)
                self._connector.submit(host, job)
            elif host.session is not None:
                try:
                    host.session.keepalive(options.keepalive_s)
                except SourceError as e:
                    self._lost(host, e)
        if now >= self._next_rules:
            self.rules.check()
            self._next_rules = now + 2.0
        if now >= self._next_flush:
            self._flush()
        if now >= self._next_beat or self._states_dirty:
            self._heartbeat()
            self._next_beat = now + options.heartbeat_s
        if self.rounds is not None and not self._buffer:  # its hints are written first
            self.rounds.tick()

    def _collect(self) -> None:
        for host, result in self._connector.results():
            host.connecting = False
            if self._stopping:
                if isinstance(result, Connected):
                    result.session.abandon()
            elif isinstance(result, Connected):
                self._connected(host, result)
            else:
                self._failed(host, result)

    def _connected(self, host: HostWatch, result: Connected) -> None:
        session = result.session
        now = datetime.now(UTC)
        for share, reason in result.refused:
            self._refused(host, share, reason)
        if not result.watched:
            session.abandon()
            host.idle = True
            log.info("sharecrawl: watch: %s: no share to watch; left to the schedule", host.key)
            return
        host.session = session
        host.connected_at = time.monotonic()
        host.fd = session.fileno()
        self._selector.register(host.fd, selectors.EVENT_READ, host)
        for share in result.watched:
            self._set_state(host.key, share, "watching", now)
            if host.was_up:  # changes while the connection was down are unknown
                self._hint(host.key, share, "", RECONNECTED, True, now)
        if host.quiet or host.was_up:
            log.info(
                "sharecrawl: watch: %s: watching %s(%d shares)",
                host.key,
                "again " if host.was_up else "",
                len(result.watched),
            )
        host.quiet = False
        self._receive(host)  # answers that came while it was being set up

    def _failed(self, host: HostWatch, error: BaseException) -> None:
        delay = host.backoff(time.monotonic(), self.options.max_backoff_s)
        now = datetime.now(UTC)
        for (key, share), state in self._states.items():
            if key == host.key and state["state"] not in ("down", "refused"):
                self._set_state(key, share, "down", now, str(error))
        if not host.quiet:
            host.quiet = True
            log.warning(
                "sharecrawl: watch: %s; trying again in %.0f s, then less often",
                _text(error, host),
                delay,
            )

    def _lost(self, host: HostWatch, error: BaseException) -> None:
        if self._drop(host):
            host.was_up = True
            self._failed(host, error)

    def _drop(self, host: HostWatch) -> bool:
        """Close a host's connection, if it has one."""
        session = host.session
        if session is None:
            return False
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(host.fd)
        host.session, host.fd = None, -1
        session.abandon()
        return True

    def _receive(self, host: HostWatch) -> None:
        session = host.session
        if session is None:
            return
        try:
            events = session.take()
        except SourceError as e:
            self._lost(host, e)
            return
        now = datetime.now(UTC)
        for event in events:
            if isinstance(event, Change):
                self._hint(host.key, event.share, event.path, event.action, event.overflow, now)
            elif isinstance(event, Refusal):
                self._refused(host, event.share, event.reason)
        if not session.watched and not self._stopping and self._drop(host):
            host.idle = True
            log.info(
                "sharecrawl: watch: %s: no share left to watch; left to the schedule", host.key
            )

    def _refused(self, host: HostWatch, share: str, reason: str) -> None:
        self._set_state(host.key, share, "refused", datetime.now(UTC), reason)
        if share not in host.refused:
            host.refused.add(share)
            log.warning(
                "sharecrawl: watch: %s/%s: change notifications refused (%s); left to the schedule",
                host.key,
                readable_text(share),
                readable_text(reason),
            )

    def _hint(
        self, host: str, share: str, path: str, action: str, overflow: bool, now: datetime
    ) -> None:
        path = storable(path)
        if self.rules.excludes(host, share, path):
            return
        if not self._buffer:  # the first hint of the next part
            self._next_flush = min(self._next_flush, time.monotonic() + self.options.flush_s)
        self._buffer[(host, share, path, action, overflow)] = now  # the latest sighting
        if self.rounds is not None:
            self.rounds.hinted()
        if len(self._buffer) > MAX_BUFFERED:  # cannot write: keep the meaning, not the detail
            shares = {(h, s) for h, s, *_ in self._buffer}
            self._buffer = {(h, s, "", "overflow", True): now for h, s in shares}

    def _set_state(
        self, host: str, share: str, state: str, since: datetime, detail: str | None = None
    ) -> None:
        self._states[(host, share)] = {"state": state, "since": since, "detail": detail}
        self._states_dirty = True

    def _flush(self) -> None:
        rows = [
            {"host": h, "share": s, "path": p, "action": a, "overflow": o, "seen_at": t}
            for (h, s, p, a, o), t in sorted(self._buffer.items(), key=lambda item: item[1])
        ]
        try:
            self.writer.append(rows)
        except OSError as e:
            self._write_failed(e, "hints", f"keeping {len(rows)} in memory and ")
            self._next_flush = time.monotonic() + 5.0
            return
        if self._write_failing:
            log.info("sharecrawl: watch: hints are written again")
        self._write_failing = False
        self._buffer.clear()
        self._next_flush = float("inf")

    def _heartbeat(self) -> None:
        """Rewrite the watches file; alive_at is now, so flush the hints received before."""
        alive_at = datetime.now(UTC)
        self._flush()
        if self._write_failing:
            return  # hints before alive_at are not all written: the old heartbeat stands
        rows = [
            {"host": h, "share": s, **state, "alive_at": alive_at}
            for (h, s), state in sorted(self._states.items())
        ]
        try:
            self.writer.write_watches(rows)
            self._states_dirty = False
        except OSError as e:
            self._write_failed(e, "the watches' states", "")

    def _write_failed(self, error: OSError, what: str, keeping: str) -> None:
        """Say once, until hints are written again, what failed and what to do."""
        if not self._write_failing:
            room = f": free space where {self.options.crawl_dir.resolve()} lives"
            then = "trying again" + (room if is_disk_full(error) else "")  # as a round says
            why = error.strerror or error
            log.error("sharecrawl: watch: cannot write %s (%s); %s%s", what, why, keeping, then)
        self._write_failing = True

    def _shutdown(self) -> None:
        self._stopping = True
        if self.rounds is not None:
            self.rounds.stop()
        self._connector.stop()  # it closes the connections made since
        sessions = [h for h in self.hosts if h.session is not None]
        for host in sessions:
            try:
                host.session.cancel()
            except SourceError as e:
                self._lost(host, e)
        limit = time.monotonic() + SHUTDOWN_S
        while time.monotonic() < limit and any(
            h.session is not None and h.session.outstanding for h in self.hosts
        ):
            for key, _mask in self._selector.select(max(0.0, limit - time.monotonic())):
                if key.data is not None:
                    self._receive(key.data)
        now = datetime.now(UTC)
        for host in self.hosts:
            self._drop(host)
        for (key, share), state in self._states.items():
            if state["state"] != "refused":
                self._set_state(key, share, "stopped", now, None)
        self._heartbeat()
        self.writer.close()
        self._selector.close()
        self._waker.close()
        log.info("sharecrawl: watch: stopped")


def _text(error: BaseException, host: HostWatch) -> str:
    """An error for the log: what a server said may hold escapes a terminal would obey."""
    text = readable_text(str(error) or type(error).__name__)
    return text if text.startswith(host.key) else f"{host.key}: {text}"


def run_watch(options: WatchOptions) -> int:
    """The watch command: SIGTERM and SIGINT (from the main thread's start on) end it, 0."""
    pa.set_cpu_count(1)  # its parts are small: no thread pools idling for the process's life
    pa.set_io_thread_count(1)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # a socket per host
    wanted = max(soft, min(hard, 65536)) if hard != resource.RLIM_INFINITY else max(soft, 65536)
    if wanted > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    watcher: list[Watcher] = []
    asked = threading.Event()

    def on_signal(*_: object) -> None:
        asked.set()
        if watcher:
            watcher[0].stop()

    previous = {}
    if threading.current_thread() is threading.main_thread():  # only there can it have them
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, on_signal)
    try:
        try:
            watcher.append(Watcher(options))
        except OSError as e:
            hints = options.crawl_dir / "hints"
            raise ConfigError(f"cannot write hints to {str(hints)!r}: {e.strerror or e}") from None
        if asked.is_set():
            watcher[0].stop()  # a signal while it was being set up
        return watcher[0].run()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

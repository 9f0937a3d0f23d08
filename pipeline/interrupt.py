"""Stopping a crawl on SIGINT or SIGTERM (Ctrl-C, cron's `timeout`, a shutdown).

Within `interruptible()`, the first signal raises Interrupted in the crawl's main thread,
wherever it is, and later ones are ignored while the stack unwinds and the crawl cleans up
(`stop()`). Libraries may turn the exception into one of their own (DuckDB reports "Query
interrupted"), so the signal is also recorded: an error raised after it is the interruption.
Unwinding can hang where a library waits for its helpers (mrjob's local runner joins a
process pool; a thread pool finishes its queue), so in a command that ends with the crawl, a
watchdog stops the process itself, cleaned up all the same, when it has not exited
`WATCHDOG_S` after the signal.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing import current_process, resource_tracker
from types import FrameType

from crawl_io.processes import descendants, end_processes

SIGNALS = (signal.SIGINT, signal.SIGTERM)
WATCHDOG_S = 2.5
STOPPED = "interrupted; run the same command again"  # when no round was under way

_received: int | None = None
_cleanup: Callable[[], str] | None = None  # set by the crawl: stops it, says where it stands
_message: str | None = None
_reported = False
_lock = threading.Lock()  # the cleanup's
_report_lock = threading.Lock()
_depth = 0  # nested interruptible() blocks: the outermost one handles the signals


class Interrupted(KeyboardInterrupt):
    """A crawl stopped by a signal; it exits with 128 + the signal's number (130, 143)."""

    def __init__(self, signum: int, message: str = STOPPED) -> None:
        super().__init__(message)
        self.signum, self.message = signum, message

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


def received() -> int | None:
    """The signal that interrupted the crawl, if one did."""
    return _received


def on_interrupt(cleanup: Callable[[], str] | None) -> None:
    """What stops the crawl once interrupted (None: nothing to stop): it ends the crawl's
    helper processes, removes temporary files and returns the line for the operator."""
    global _cleanup
    _cleanup = cleanup


def stop() -> str:
    """Run the crawl's cleanup once, whoever asks first (the unwinding main thread or the
    watchdog); return its line."""
    global _message
    locked = _lock.acquire(timeout=WATCHDOG_S)  # not taken: the other one is stuck in it
    try:
        if _message is None:
            try:
                _message = _cleanup() if _cleanup is not None else STOPPED
            except Exception as e:  # the line still goes out, and the exit status
                _message = f"interrupted ({e}); run the same command again"
        return _message
    finally:
        if locked:
            _lock.release()


def report(error: KeyboardInterrupt) -> int:
    """Print the one line of an interrupted crawl (once); return its exit status."""
    global _reported
    with _report_lock:
        if not _reported:
            _reported = True
            print(f"sharecrawl: {getattr(error, 'message', 'interrupted')}", file=sys.stderr)
    return getattr(error, "exit_status", 130)


def _watchdog(signum: int) -> None:
    """Leave, cleaned up, if the process has not exited WATCHDOG_S after the signal."""
    time.sleep(WATCHDOG_S)
    report(Interrupted(signum, stop()))
    tempdir = current_process()._config.get("tempdir")  # multiprocessing's, removed at exit
    if tempdir:
        shutil.rmtree(tempdir, ignore_errors=True)
    sys.stderr.flush()
    os._exit(128 + signum)


class _QuietAfterSignal(logging.Filter):
    """Luigi logs the failure of a task a signal stopped, traceback and all: not news."""

    def filter(self, record: logging.LogRecord) -> bool:
        return _received is None


@contextmanager
def interruptible(watchdog: bool = False) -> Iterator[None]:
    """SIGINT and SIGTERM raise Interrupted within (in the main thread; elsewhere, where
    Python cannot set handlers, nothing changes). Nested blocks share the outermost's.
    With `watchdog`, for a process that exits once interrupted (the command line), the
    process ends itself if it is still there WATCHDOG_S after the signal."""
    global _received, _message, _reported, _depth
    if _depth or threading.current_thread() is not threading.main_thread():
        _depth += 1
        try:
            yield
        finally:
            _depth -= 1
        return
    owner = os.getpid()

    def handler(signum: int, frame: FrameType | None) -> None:
        global _received
        if os.getpid() != owner:
            # A forked helper (mrjob's local runner forks a process pool): end the task it
            # runs, and exit by unwinding, which releases the pool's locks it may hold (an
            # exit on the spot would leave the crawl process waiting for them for ever).
            end_processes(descendants(os.getpid()), grace_s=1.0)
            raise SystemExit(128 + signum)
        if _received is None:
            _received = signum
            if watchdog:
                threading.Thread(target=_watchdog, args=(signum,), daemon=True).start()
            raise Interrupted(signum)

    _received, _message, _reported = None, None, False
    quiet = _QuietAfterSignal()
    loggers = [logging.getLogger(name) for name in ("luigi-interface", "luigi")]
    previous = {signum: signal.signal(signum, handler) for signum in SIGNALS}
    for logger in loggers:
        logger.addFilter(quiet)
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        for signum, before in previous.items():
            signal.signal(signum, before)
        for logger in loggers:
            logger.removeFilter(quiet)


def end_child_processes(grace_s: float = 2.0) -> list[int]:
    """End every process this one started, directly or not (fetch workers, the fork server,
    mrjob's tasks), keeping to this session. multiprocessing's resource tracker stays: it
    ends by itself with this process and must be there to hear this process's exit."""
    tracker = getattr(resource_tracker._resource_tracker, "_pid", None)
    session = os.getsid(0)
    ours = [pid for pid in descendants(os.getpid()) if pid != tracker and _session(pid) == session]
    return end_processes(ours, grace_s)


def _session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None

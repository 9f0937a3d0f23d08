"""Processes a crawl starts, and the one way a command stops on SIGINT or SIGTERM.

`main` installs `stop_on_signals()` first. The handler never raises (an exception landing in an
import or a library's cleanup is a traceback, or dropped); in the main thread it SIGKILLs every
process below this one and waits until none runs (none writes after the crawl), runs the
cleanup the crawl registered (`stopping`), prints the line it returns and leaves at once with
128 + the signal's number: safe, as every file is written whole or not at all
(crawl_io.crawldb.atomic) and the kernel drops the lock. A worker whose crawl was SIGKILLed
exits when its pipe hangs up (`exit_with_parent`).
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_cleanup: Callable[[], str] | None = None  # the running crawl's: says where it stopped


def stop_on_signals() -> None:
    """From now on SIGINT and SIGTERM stop this process as the module docstring says."""
    for signum in SIGNALS:
        signal.signal(signum, _stop)


@contextmanager
def stopping(cleanup: Callable[[], str]) -> Iterator[None]:
    """Within, a stop runs `cleanup` (once the processes below are gone) and prints its line."""
    global _cleanup
    _cleanup = cleanup
    try:
        yield
    finally:
        _cleanup = None


def _stop(signum: int, _frame: object) -> None:
    for other in SIGNALS:  # one stop: a second Ctrl-C changes nothing
        signal.signal(other, signal.SIG_IGN)
    line = "interrupted"
    try:
        end_children()
        if _cleanup is not None:
            line = _cleanup()
        # multiprocessing's pymp-* folder, which only a normal exit removes; nothing is
        # imported here: the main thread may be half way through importing it
        get_temp_dir = getattr(sys.modules.get("multiprocessing.util"), "get_temp_dir", None)
        if get_temp_dir is not None:
            shutil.rmtree(get_temp_dir(), ignore_errors=True)
    except Exception as e:  # the line still goes out, and the exit status
        line = f"interrupted ({e}); run the same command again"
    finally:
        with suppress(Exception):  # the main thread may be inside a write to stderr
            sys.stderr.flush()
        # a progress display may have hidden the cursor: show it again on a terminal
        cursor = "\x1b[?25h\n" if os.isatty(2) else ""
        os.write(2, f"{cursor}sharecrawl: {line}\n".encode())
        os._exit(128 + signum)


def exit_with_parent(pipe: int) -> None:
    """In a worker: exit when `pipe`, its end of a pipe whose other end only the crawl holds,
    hangs up (the kernel closes it even on SIGKILL). Not on the fork server's exit: every
    worker holds the pipe that would tell the server, so it waits for them."""
    fd = os.dup(pipe)  # the watch's own: the worker may close its end

    def watch() -> None:
        poller = select.poll()
        poller.register(fd, select.POLLRDHUP)  # hang-ups, not data (POLLHUP comes unasked)
        poller.poll()
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def children(pid: int) -> list[int]:
    """The processes `pid` started that are still there (zombies too), from /proc."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        with suppress(OSError):
            found += [int(child) for child in task.read_text().split()]
    return found


def descendants(pid: int) -> list[int]:
    """Every process below `pid`: its children, theirs, and so on."""
    level = children(pid)
    found = list(level)
    while level:
        level = [c for p in level for c in children(p)]
        found += level
    return found


def end_children(limit_s: float = 5.0) -> None:
    """SIGKILL every process below this one; return once none runs (or after `limit_s`).
    A process killed is waited for by its pid: once its parent is gone it is init's child,
    no longer below this one, and may still be dying (and its files, to a cleanup, alive)."""
    deadline = time.monotonic() + limit_s
    killed: set[int] = set()
    while (left := {p for p in killed.union(descendants(os.getpid())) if alive(p)}) and (
        time.monotonic() < deadline
    ):
        for pid in left - killed:
            with suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        killed |= left
        time.sleep(0.02)


def alive(pid: int) -> bool:
    """Does process `pid` exist and run? A zombie (dead, not yet reaped) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(errors="replace")
    except OSError:
        return not os.path.isdir("/proc")  # without /proc, kill(0) is all there is to know
    return stat[stat.rindex(")") + 2] != "Z"  # the name may hold spaces and ')'

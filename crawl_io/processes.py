"""Processes a crawl starts: tying a helper process's life to its parent's, and ending a
process tree (Linux /proc; elsewhere a watcher thread and whatever the standard library sees).

A crawl's fetch workers are children of multiprocessing's fork server, which is a child of the
crawl process. Each asks the kernel to kill it when its parent exits (PR_SET_PDEATHSIG,
prctl(2)), so killing the crawl process, even with SIGKILL, takes the server and then the
workers along: none of them writes into the crawl directory after the crawl is gone.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _prctl_pdeathsig(signum: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent(watch: int | None = None) -> None:
    """End this process when its parent exits, and at once if process `watch` (the crawl
    process, for a grandchild) is gone already.

    The kernel's signal covers the parent; the check after asking for it closes the window
    in which `watch` died before. (A fork server that lost its parent before asking ends by
    itself: multiprocessing's alive pipe closes.) Without prctl a daemon thread polls."""
    if _prctl_pdeathsig(signal.SIGKILL):
        if watch is not None and not alive(watch):
            os._exit(1)
        return
    parent = os.getppid()

    def poll() -> None:
        while os.getppid() == parent and (watch is None or alive(watch)):
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=poll, name="die-with-parent", daemon=True).start()


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process from /proc, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the name may hold spaces and ')'
    return fields[0], int(fields[1])


def alive(pid: int) -> bool:
    """Does process `pid` exist and run? A zombie (dead, not yet reaped) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = _stat(pid)
    if stat is None:
        return not os.path.isdir("/proc")  # without /proc, kill(0) is all there is to know
    return stat[0] != "Z"


def descendants(pid: int) -> list[int]:
    """Living processes below `pid` (children first, then theirs), from /proc."""
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if name.isdigit():
            stat = _stat(int(name))
            if stat is not None and stat[0] != "Z":
                children.setdefault(stat[1], []).append(int(name))
    found: list[int] = []
    level = children.get(pid, [])
    while level:
        found += level
        level = [c for p in level for c in children.get(p, [])]
    return found


def end_processes(pids: Iterable[int], grace_s: float = 2.0) -> list[int]:
    """SIGTERM each process, SIGKILL those still there after `grace_s`; return any that
    outlived both (stuck in the kernel)."""
    pids = list(pids)
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 1.0)):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + wait_s
        while True:
            pids = [pid for pid in pids if alive(pid)]
            if not pids or time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        if not pids:
            break
    return pids

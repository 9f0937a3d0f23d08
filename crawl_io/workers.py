"""The crawl's worker processes: one fork server per crawl process, which has imported what
every worker runs (the fetcher, the update jobs' tasks), so that a worker starts as a cheap
fork of it rather than an interpreter importing pyarrow, numpy and mrjob anew.

A fork server, not fork: the crawl process holds threads (Luigi, DuckDB, Arrow) that fork
would copy without their owners, and a forked child that touches their locks waits for ever
(a DuckDB query in a forked child does). The server forks before any of those start.
"""

from __future__ import annotations

import multiprocessing
import signal
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from multiprocessing import forkserver, resource_tracker
from multiprocessing.process import BaseProcess

# What the fork server imports once; its guard first (it dies with the crawl process).
PRELOADED = [
    "crawl_io.forkserver_guard",
    "pipeline.fetch_workers",
    "crawl_io.tags",
    "crawl_io.smb",
    "jobs.forked_local",
    "jobs.mr_listing",
    "jobs.mr_prefix_stats",
]


def worker_context() -> multiprocessing.context.BaseContext:
    """The workers' start method, its server started (once per process).

    Starting it is asynchronous: called before a round's Inject, its imports overlap Inject
    and Generate. The server dies with this process (crawl_io.forkserver_guard), and starts
    with SIGINT blocked, a mask its workers inherit: a Ctrl-C reaches the whole process
    group and is this process's to handle (it ends the workers), not a traceback of theirs.
    multiprocessing starts its own resource tracker the same way."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOADED)
    resource_tracker.ensure_running()  # first: it would unblock SIGINT after starting
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    return context


def server_pid() -> int | None:
    """The fork server's process id, once started: its children are the workers."""
    return forkserver._forkserver._forkserver_pid


@contextmanager
def main_module_hidden() -> Iterator[None]:
    """Start worker processes without re-running the main script in each of them.

    multiprocessing runs the parent's main script (as __mp_main__) in every forkserver
    child, and Python 3.11 ignores a '__main__' preload; a script that imports the whole
    pipeline costs each worker half a second. The workers need nothing from it: everything
    they run lives in the modules the server preloads."""
    main = sys.modules["__main__"]
    file, spec = getattr(main, "__file__", None), getattr(main, "__spec__", None)
    main.__spec__ = None
    if file is not None:
        del main.__file__
    try:
        yield
    finally:
        main.__spec__ = spec
        if file is not None:
            main.__file__ = file


def stop_workers(pool: ProcessPoolExecutor, grace_s: float = 2.0) -> None:
    """End a pool's workers now (stop_processes). Python 3.14's
    ProcessPoolExecutor.terminate_workers() does this; 3.11 has only its `_processes`."""
    processes = list((pool._processes or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    stop_processes(processes, grace_s)


def stop_processes(processes: list[BaseProcess], grace_s: float = 2.0) -> None:
    """End worker processes now, SIGKILL after `grace_s`; what they were doing is lost (a
    rerun fetches those hosts or runs that job again)."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    deadline = time.monotonic() + grace_s
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.kill()
            process.join(1.0)

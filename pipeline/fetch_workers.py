"""Fetch workers (crawl_io.workers' processes) fetch hosts one after another, `crawlers` at once,
each over a pipe of its own: one that dies takes only its host (a pool lost every host in flight,
and a worker killed mid-write could hold a shared queue's lock for ever)."""

from __future__ import annotations

import errno
import gc
import logging
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_ready
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess

from sharecrawl.crawl_io.crawldb.disk_full import is_disk_full
from sharecrawl.crawl_io.processes import exit_with_parent
from sharecrawl.crawl_io.workers import ended, start_worker, stop_processes, worker_context
from sharecrawl.pipeline.fetch_host import HostJob, HostResult, fetch_host, host_lost, set_progress
from sharecrawl.pipeline.progress import FetchProgress, HostProgress

log = logging.getLogger("sharecrawl.fetch")


def serve_hosts(conn: Connection) -> None:
    """A fetch worker: fetch the hosts whose jobs come down `conn` until None comes, sending
    progress, then ("result", HostResult) or ("failed", why) for a bug. It exits once the
    crawl process is gone; SIGINT is blocked in it (the crawl process ends it)."""
    exit_with_parent(conn.fileno())
    gc.freeze()  # what the fork server imported is never garbage: collections skip it
    set_progress(lambda message: conn.send(("progress", message)))
    try:
        while (job := conn.recv()) is not None:
            try:
                conn.send(("result", fetch_host(job)))
            except Exception as e:
                why = f"{type(e).__name__}: {e}"
                conn.send(("failed", (why, traceback.format_exc(), is_disk_full(e))))
    finally:
        conn.close()


@dataclass
class _Worker:
    process: BaseProcess
    conn: Connection
    job: HostJob | None = None  # the host it is fetching; None: idle


def fetch_hosts(jobs: list[HostJob], crawlers: int) -> None:
    """Fetch hosts in worker processes, `crawlers` at once, showing progress."""
    context = worker_context()
    progress = FetchProgress({job.host: HostProgress(due=len(job.due)) for job in jobs})
    waiting = list(reversed(jobs))
    workers: dict[Connection, _Worker] = {}
    with progress:
        try:
            for _ in range(max(1, min(crawlers, len(jobs)))):
                _carry_on(context, workers, _start(context, workers), waiting)
            while workers:
                for conn in wait_ready(list(workers), timeout=0.25):
                    result = _receive(workers[conn], progress)
                    if result is not None:
                        progress.event(result.host, "done", summary=result.summary)
                        _carry_on(context, workers, workers[conn], waiting)
        except BaseException:  # a host not recorded: its worker must not write on
            stop_processes([w.process for w in workers.values()])
            raise


def _start(context: BaseContext, workers: dict[Connection, _Worker]) -> _Worker:
    process, conn = start_worker(context, serve_hosts)
    workers[conn] = _Worker(process, conn)
    return workers[conn]


def _carry_on(
    context: BaseContext,
    workers: dict[Connection, _Worker],
    worker: _Worker,
    waiting: list[HostJob],
) -> None:
    """Give `worker`, done with its host, the next one; with none left, it ends. A worker
    that died (`_receive` closed its pipe) gives way to a new one while hosts are left."""
    fresh = False
    while True:
        if worker.conn.closed:
            del workers[worker.conn]
            if not waiting:
                return
            worker, fresh = _start(context, workers), True
        job = waiting.pop() if waiting else None
        try:
            worker.conn.send(job)
        except OSError:  # it died after its last result: its next host goes back
            if job is not None:
                waiting.append(job)
            worker.conn.close()
            worker.process.join()
            if fresh:
                # a new worker dying at once is not a host's doing: more would never end
                raise RuntimeError(
                    "sharecrawl: a fetch worker died as it started (its process "
                    f"{ended(worker.process.exitcode)}): see the system log, then run the "
                    "round again"
                ) from None
            continue
        worker.job = job
        if job is None:
            worker.conn.close()
            worker.process.join()
            del workers[worker.conn]
        return


def _receive(worker: _Worker, progress: FetchProgress) -> HostResult | None:
    """A busy worker's result once it has one, else None; a worker gone without one is
    joined and its host recorded as lost."""
    try:
        kind, payload = worker.conn.recv()
    except Exception:  # the end of the pipe, or a message cut short: the worker died
        kind, payload = "died", None
    if kind == "progress":
        host, kind, counts = payload
        progress.event(host, kind, **counts)
        return None
    job = worker.job
    assert job is not None
    if kind == "result":
        return payload
    if kind == "failed":
        why, trace, disk_full = payload
        if disk_full:  # no fault of the host's: the round stops (pipeline.rounds says why)
            raise OSError(errno.ENOSPC, f"{why} (fetching {job.host})")
        log.error("sharecrawl: fetching %s failed:\n%s", job.host, trace)
        return host_lost(job, f"its fetch failed ({why}): a bug, please report it")
    worker.conn.close()
    worker.process.join()
    return host_lost(
        job,
        f"its fetch process {ended(worker.process.exitcode)}: "
        "see the system log if it happens again",
    )

"""Fetch: scan the fetch list, up to `crawlers` hosts at once, one connection and one worker
process per host.

The fetch list is split into shards, each a Luigi task (`FetchShard`): a host belongs to one
shard, so one host is only ever fetched by one worker in a round (politeness, as Nutch's
fetchers partitioned by host), and shards are of about equal cost (pipeline.shards). Under
the local scheduler a round has one shard (one process fetches them all at once anyway);
under a central scheduler (luigid) it has `fetch_shards`, which crawl processes on several
machines share.
Each shard holds `crawlers` units of the Luigi resource `smb_connections`, so the scheduler
caps the SMB connections open at once by all of them.

Output: the round's `fetchlog.parquet`, written after every host's listing/, media/ and
fetchlog/ parts. A host whose parts are already there (a killed round) is not fetched again.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_ready
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from pathlib import Path

import luigi
import pyarrow.parquet as pq

from crawl_io.crawldir import CrawlDir, read_parquet, write_parquet
from crawl_io.schema import FETCHLOG
from crawl_io.workers import main_module_hidden, stop_processes, worker_context
from pipeline.fetch_host import HostJob, HostResult, host_done, host_lost, serve_hosts
from pipeline.generate import Generate
from pipeline.inject import Inject
from pipeline.progress import FetchProgress, HostProgress
from pipeline.settings import (
    SMB_CONNECTIONS,
    round_shards,
    shard_connections,
    sharecrawl,
    smb_connections,
)
from pipeline.shards import shard_hosts

log = logging.getLogger("sharecrawl.fetch")

KNOWN = ["partition_id", "share", "root", "lo", "hi", "hash"]


def host_jobs(
    crawl: CrawlDir, round_: int, fetchlist: list[dict], inject: list[dict], timeout_s: float
) -> list[HostJob]:
    partitions = crawl.read(round_ - 1, "partitions").select(["host", *KNOWN]).to_pylist()
    shares = {h["host"]: h["shares"] for h in inject}
    jobs: dict[str, HostJob] = {}
    for row in fetchlist:
        if row["host"] not in jobs:
            known = [{k: p[k] for k in KNOWN} for p in partitions if p["host"] == row["host"]]
            jobs[row["host"]] = HostJob(
                crawl_dir=str(crawl.root),
                round=round_,
                version=round_ - 1,
                host=row["host"],
                url=row["url"],
                shares=shares[row["host"]],
                due=[],
                known=known,
                timeout_s=timeout_s,
            )
        jobs[row["host"]].due.append(row)
    return list(jobs.values())


@dataclass
class _Worker:
    """A worker process, the pipe its jobs go down and its progress and results come up,
    and the job of the host it is fetching (None: idle)."""

    process: BaseProcess
    conn: Connection
    job: HostJob | None = None


def fetch_hosts(jobs: list[HostJob], crawlers: int) -> None:
    """Fetch hosts in worker processes, `crawlers` at once, showing progress.

    Each worker has a pipe of its own and fetches one host at a time, so a worker that dies
    (the kernel's out-of-memory killer, a signal, a crash in native code) or fails takes only
    the host it was fetching: that host is recorded as not fetched, with why
    (pipeline.fetch_host.host_lost), and fetched again next round; a new worker takes the
    hosts left. (A pool lost every host in flight and failed the round, every round a host
    killed its worker.) Interrupted (a signal), it ends the workers at once: a worker must
    not write into the crawl after it stopped."""
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
                        progress.event(result.host, "done", summary=result.summary())
                        _carry_on(context, workers, workers[conn], waiting)
        except BaseException:  # a signal (KeyboardInterrupt), or a host not recorded
            stop_processes([w.process for w in workers.values()])
            raise


def _start(context: BaseContext, workers: dict[Connection, _Worker]) -> _Worker:
    ours, theirs = context.Pipe()
    process = context.Process(target=serve_hosts, args=(theirs, os.getpid()))
    with main_module_hidden():
        process.start()
    theirs.close()  # the worker's end: once it is gone, reading ours finds the end
    worker = workers[ours] = _Worker(process, ours)
    return worker


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
                raise RuntimeError(
                    "sharecrawl: a fetch worker died as it started "
                    f"(exit status {worker.process.exitcode}): see the system log"
                ) from None
            continue
        worker.job = job
        if job is None:
            worker.conn.close()
            worker.process.join()
            del workers[worker.conn]
        return


def _receive(worker: _Worker, progress: FetchProgress) -> HostResult | None:
    """Read one message of a busy worker: the result for its host once it has one, else
    None. A worker gone without one is joined, its pipe closed, and its host recorded as
    lost."""
    try:
        kind, payload = worker.conn.recv()
    except Exception:  # the end of the pipe, or a message cut short: the worker died
        kind, payload = "died", None
    if kind == "progress":
        progress.receive(payload)
        return None
    job = worker.job
    assert job is not None
    if kind == "result":
        return payload
    if kind == "failed":
        why, trace = payload
        log.error("sharecrawl: fetching %s failed:\n%s", job.host, trace)
        return host_lost(job, f"its fetch failed ({why}): a bug, please report it")
    worker.conn.close()
    worker.process.join()
    return host_lost(job, _death(worker.process.exitcode))


def _death(exitcode: int | None) -> str:
    """Why a worker that sent no result ended, in words."""
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name
        cause = "the kernel's out-of-memory killer, or " if name == "SIGKILL" else ""
        return (
            f"its fetch process was killed by {name} ({cause}a signal sent to it): "
            "see the system log if it happens again"
        )
    return f"its fetch process ended with status {exitcode} and no result"


def fetch_pending(crawl_dir: str, round_: int, hosts: set[str] | None, crawlers: int) -> None:
    """Fetch the round's fetch list (only `hosts`, when given), but for the hosts already
    fetched, `crawlers` at once."""
    crawl = CrawlDir(crawl_dir)
    seg = crawl.segment_dir(round_)
    fetchlist = pq.read_table(seg / "fetchlist.parquet").to_pylist()
    inject = pq.read_table(seg / "inject.parquet").to_pylist()
    timeout_s = sharecrawl().host_timeout_s
    jobs = [
        job
        for job in host_jobs(crawl, round_, fetchlist, inject, timeout_s)
        if (hosts is None or job.host in hosts) and not host_done(crawl.root, round_, job.host)
    ]
    if jobs:
        fetch_hosts(jobs, crawlers)


class FetchShard(luigi.Task):
    """The hosts of one shard of a round's fetch list (pipeline.shards)."""

    crawl_dir = luigi.Parameter()
    round = luigi.IntParameter()
    shard = luigi.IntParameter()
    shards = luigi.IntParameter()

    @property
    def resources(self) -> dict[str, int]:  # type: ignore[override]
        # no cap set (0): no resource, which a scheduler would otherwise cap at 1
        if smb_connections() <= 0:
            return {}
        return {SMB_CONNECTIONS: shard_connections(sharecrawl())}

    def requires(self) -> dict[str, luigi.Task]:
        return {
            "fetchlist": Generate(crawl_dir=self.crawl_dir, round=self.round),
            "inject": Inject(crawl_dir=self.crawl_dir, round=self.round),
        }

    def output(self) -> luigi.LocalTarget:
        seg = CrawlDir(self.crawl_dir).segment_dir(self.round)
        return luigi.LocalTarget(seg / "fetch" / f"shard-{self.shard:03d}-of-{self.shards:03d}")

    def run(self) -> None:
        fetchlist = pq.read_table(self.input()["fetchlist"].path)
        assigned = shard_hosts(fetchlist, self.shards)
        hosts = {h for h, shard in assigned.items() if shard == self.shard}
        fetch_pending(self.crawl_dir, self.round, hosts, shard_connections(sharecrawl()))
        with self.output().open("w") as out:  # Luigi's atomic write: whole or absent
            out.write(f"{len(hosts)} hosts, worker {socket.gethostname()} pid {os.getpid()}\n")


class Fetch(luigi.Task):
    """The round's fetch: its shards, then the fetch log of every host."""

    crawl_dir = luigi.Parameter()
    round = luigi.IntParameter()

    def requires(self) -> dict[str, luigi.Task | list[FetchShard]]:
        shards = round_shards(sharecrawl())
        return {
            "fetchlist": Generate(crawl_dir=self.crawl_dir, round=self.round),
            "inject": Inject(crawl_dir=self.crawl_dir, round=self.round),
            "shards": [
                FetchShard(crawl_dir=self.crawl_dir, round=self.round, shard=i, shards=shards)
                for i in range(shards)
            ],
        }

    def output(self) -> luigi.LocalTarget:
        seg = CrawlDir(self.crawl_dir).segment_dir(self.round)
        return luigi.LocalTarget(seg / "fetchlog.parquet")

    def run(self) -> None:
        # the shards fetched every host; a host missed (shards of another count done by a
        # killed run) is fetched here
        fetch_pending(self.crawl_dir, self.round, None, sharecrawl().crawlers)
        seg = CrawlDir(self.crawl_dir).segment_dir(self.round)
        write_parquet(read_parquet(seg / "fetchlog", FETCHLOG), Path(self.output().path))

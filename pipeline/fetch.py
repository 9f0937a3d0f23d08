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
import multiprocessing
import os
import socket
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path
from queue import Empty

import luigi
import pyarrow.parquet as pq

from crawl_io.crawldir import CrawlDir, read_parquet, write_parquet
from crawl_io.schema import FETCHLOG
from crawl_io.workers import main_module_hidden, stop_workers, worker_context
from pipeline.fetch_host import HostJob, fetch_host, host_done, init_worker
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


def fetch_hosts(jobs: list[HostJob], crawlers: int) -> None:
    """Fetch hosts in worker processes, `crawlers` at once, showing progress.

    Interrupted (a signal), it ends the workers at once: leaving the pool would wait for
    every host being fetched, and a worker must not write into the crawl after it stopped."""
    context = worker_context()
    queue = context.Queue()
    progress = FetchProgress({job.host: HostProgress(due=len(job.due)) for job in jobs})
    workers = max(1, min(crawlers, len(jobs)))
    with progress, ProcessPoolExecutor(workers, context, init_worker, (queue, os.getpid())) as pool:
        try:
            with main_module_hidden():  # the workers start on the first submits
                pending = {pool.submit(fetch_host, job) for job in jobs}
            while pending:
                finished, pending = wait(pending, timeout=0.25, return_when=FIRST_COMPLETED)
                _drain(queue, progress)
                for future in finished:
                    result = future.result()
                    progress.event(result.host, "done", summary=result.summary())
        except KeyboardInterrupt:
            stop_workers(pool)
            raise


def _drain(queue: multiprocessing.Queue, progress: FetchProgress) -> None:
    while True:
        try:
            message = queue.get_nowait()
        except Empty:
            return
        progress.receive(message)


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

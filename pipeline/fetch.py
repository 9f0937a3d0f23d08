"""Fetch: scan the fetch list, up to `crawlers` hosts at once, one connection and one worker
process per host.

Output: the round's `fetchlog.parquet`, written after every host's listing/, media/ and
fetchlog/ parts. A host whose parts are already there (a killed round) is not fetched again.
"""

from __future__ import annotations

import logging
import multiprocessing
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import luigi
import pyarrow.parquet as pq

from crawl_io.crawldir import CrawlDir, read_parquet, write_parquet
from crawl_io.schema import FETCHLOG
from pipeline.fetcher import HostJob, HostResult, fetch_host, host_done
from pipeline.generate import Generate
from pipeline.inject import Inject
from pipeline.settings import sharecrawl

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


def report(result: HostResult) -> None:
    counts = ", ".join(f"{n} {status}" for status, n in sorted(result.statuses.items()))
    error = f" -- {result.error}" if result.error else ""
    log.info(
        "%s: %d partitions (%s), %d entries, %d tags read%s",
        result.host,
        result.partitions,
        counts or "none",
        result.entries,
        result.tags_read,
        error,
    )


class Fetch(luigi.Task):
    crawl_dir = luigi.Parameter()
    round = luigi.IntParameter()

    def requires(self) -> dict[str, luigi.Task]:
        return {
            "fetchlist": Generate(crawl_dir=self.crawl_dir, round=self.round),
            "inject": Inject(crawl_dir=self.crawl_dir, round=self.round),
        }

    def output(self) -> luigi.LocalTarget:
        seg = CrawlDir(self.crawl_dir).segment_dir(self.round)
        return luigi.LocalTarget(seg / "fetchlog.parquet")

    def run(self) -> None:
        settings = sharecrawl()
        crawl = CrawlDir(self.crawl_dir)
        fetchlist = pq.read_table(self.input()["fetchlist"].path).to_pylist()
        inject = pq.read_table(self.input()["inject"].path).to_pylist()
        jobs = [
            job
            for job in host_jobs(crawl, self.round, fetchlist, inject, settings.host_timeout_s)
            if not host_done(crawl.root, self.round, job.host)
        ]
        if jobs:
            workers = max(1, min(settings.crawlers, len(jobs)))
            # spawn, not fork: the parent holds threads (Luigi, DuckDB) that fork would copy
            context = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
                futures = [pool.submit(fetch_host, job) for job in jobs]
                for future in as_completed(futures):
                    report(future.result())
        seg = crawl.segment_dir(self.round)
        write_parquet(read_parquet(seg / "fetchlog", FETCHLOG), Path(self.output().path))

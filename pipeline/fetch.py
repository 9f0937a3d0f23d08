"""Fetch: the round's fetch list in shards (`FetchShard`, pipeline.shards), one under the local
scheduler and `fetch_shards` under a central one, each holding `crawlers` units of the Luigi
resource `smb_connections`. Output: fetchlog.parquet, written after every host's parts."""

from __future__ import annotations

import os
import socket
from collections import defaultdict
from pathlib import Path

import luigi
import pyarrow.parquet as pq

from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir, read_parquet, write_parquet
from sharecrawl.crawl_io.crawldb.tempfiles import remove_stale_temp_files
from sharecrawl.crawl_io.schema import FETCHLOG
from sharecrawl.pipeline.fetch_host import HostJob, host_done
from sharecrawl.pipeline.fetch_workers import fetch_hosts
from sharecrawl.pipeline.generate import Generate
from sharecrawl.pipeline.settings import (
    SMB_CONNECTIONS,
    Settings,
    SettingsParameter,
    round_shards,
    shard_connections,
)
from sharecrawl.pipeline.shards import shard_hosts

KNOWN = ["partition_id", "share", "root", "lo", "hi", "hash"]


def fetch_pending(
    crawl_dir: str, round_: int, hosts: set[str] | None, crawlers: int, timeout_s: float
) -> None:
    """Fetch the round's fetch list (only `hosts`, when given), but for the hosts already
    fetched, `crawlers` at once, every SMB call within `timeout_s`."""
    crawl = CrawlDir(crawl_dir)
    seg = crawl.segment_dir(round_)
    shares = {h["host"]: h["shares"] for h in pq.read_table(seg / "inject.parquet").to_pylist()}
    known: dict[str, list[dict]] = defaultdict(list)
    for p in crawl.read(round_ - 1, "partitions").select(["host", *KNOWN]).to_pylist():
        known[p.pop("host")].append(p)
    jobs: dict[str, HostJob] = {}
    for row in pq.read_table(seg / "fetchlist.parquet").to_pylist():
        host = row["host"]
        if host not in jobs:
            jobs[host] = HostJob(
                crawl_dir=str(crawl.root),
                round=round_,
                version=round_ - 1,
                host=host,
                url=row["url"],
                shares=shares[host],
                due=[],
                known=known[host],
                timeout_s=timeout_s,
            )
        jobs[host].due.append(row)
    todo = [
        job
        for job in jobs.values()
        if (hosts is None or job.host in hosts) and not host_done(crawl.root, round_, job.host)
    ]
    if todo:
        fetch_hosts(todo, crawlers)


class FetchShard(luigi.Task):
    """The hosts of one shard of a round's fetch list (pipeline.shards)."""

    crawl_dir = luigi.Parameter()
    round = luigi.IntParameter()
    shard = luigi.IntParameter()
    shards = luigi.IntParameter()
    settings = SettingsParameter()

    @property
    def resources(self) -> dict[str, int]:  # type: ignore[override]
        # no cap set (0): no resource, which a scheduler would otherwise cap at 1
        if self.settings.smb_connections <= 0:
            return {}
        return {SMB_CONNECTIONS: shard_connections(self.settings)}

    def requires(self) -> Generate:  # and Inject, which Generate requires
        return Generate(crawl_dir=self.crawl_dir, round=self.round, settings=self.settings)

    def output(self) -> luigi.LocalTarget:
        seg = CrawlDir(self.crawl_dir).segment_dir(self.round)
        return luigi.LocalTarget(seg / "fetch" / f"shard-{self.shard:03d}-of-{self.shards:03d}")

    def run(self) -> None:
        fetchlist = pq.read_table(self.input().path)
        assigned = shard_hosts(fetchlist, self.shards)
        hosts = {h for h, shard in assigned.items() if shard == self.shard}
        at_once, timeout_s = shard_connections(self.settings), self.settings.host_timeout_s
        fetch_pending(self.crawl_dir, self.round, hosts, at_once, timeout_s)
        with self.output().open("w") as out:  # Luigi's atomic write: whole or absent
            out.write(f"{len(hosts)} hosts, worker {socket.gethostname()} pid {os.getpid()}\n")


def shard_tasks(crawl_dir: str, round_: int, shards: int, settings: Settings) -> list[FetchShard]:
    return [
        FetchShard(crawl_dir=crawl_dir, round=round_, shard=i, shards=shards, settings=settings)
        for i in range(shards)
    ]


class Fetch(luigi.Task):
    """The round's fetch: its shards, then the fetch log of every host."""

    crawl_dir = luigi.Parameter()
    round = luigi.IntParameter()
    settings = SettingsParameter()

    def requires(self) -> list[FetchShard]:
        shards = round_shards(self.settings)
        return shard_tasks(self.crawl_dir, self.round, shards, self.settings)

    def output(self) -> luigi.LocalTarget:
        seg = CrawlDir(self.crawl_dir).segment_dir(self.round)
        return luigi.LocalTarget(seg / "fetchlog.parquet")

    def run(self) -> None:
        # the shards fetched every host; a host missed (shards of another count done by a
        # killed run) is fetched here
        settings = self.settings
        fetch_pending(self.crawl_dir, self.round, None, settings.crawlers, settings.host_timeout_s)
        # (the driver, under the crawl lock) a fetch worker killed mid-shard left its part's
        # temporary file: gone with it, or another machine's once stale (crawl_io.crawldb.tempfiles)
        remove_stale_temp_files(self.crawl_dir)
        seg = CrawlDir(self.crawl_dir).segment_dir(self.round)
        write_parquet(read_parquet(seg / "fetchlog", FETCHLOG), Path(self.output().path))

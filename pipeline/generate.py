"""Generate: score every partition with the scheduling policy and choose the round's fetch list.

Output: the round's `fetchlist.parquet`: the partitions to scan, with their stored hashes, and
one 'discover' row for each online host that has no partition yet. Partitions without a stored
hash (never listed, or their rows lost to a damaged part: crawl_io.crawldir.CrawlDir.read)
come first, whatever the policy says: until listed again they have no rows in the crawldb.
"""

from __future__ import annotations

import time
from pathlib import Path

import luigi
import pyarrow as pa
import pyarrow.parquet as pq

from crawl_io.crawldir import CrawlDir, write_parquet
from crawl_io.schema import FETCHLIST
from jobs.scan_cost import scheduled_seconds
from pipeline.inject import Inject
from pipeline.scheduling.choice import Budget, PartitionState
from pipeline.scheduling.history import Histories
from pipeline.scheduling.policies import get_policy
from pipeline.settings import sharecrawl


def partition_states(
    partitions: pa.Table, rows: list[dict], online: dict[str, bool], default_cost_s: float
) -> list[PartitionState]:
    """The policies' view of `partitions`, whose rows (history left out) are `rows`."""
    states = []
    histories = Histories.of(partitions).events()
    for p, history in zip(rows, histories, strict=True):
        if p["host"] not in online:
            continue  # retired host
        last = p["last_scan"].timestamp() if p["last_scan"] else None
        states.append(
            PartitionState(
                partition_id=p["partition_id"],
                host=p["host"],
                cost_s=scheduled_seconds(p["est_scan_s"], default_cost_s),
                last_scan=last,
                history=history,
                rate_per_h=p["rate_per_h"],
                online=online[p["host"]],
            )
        )
    return states


class Generate(luigi.Task):
    crawl_dir = luigi.Parameter()
    round = luigi.IntParameter()

    def requires(self) -> Inject:
        return Inject(crawl_dir=self.crawl_dir, round=self.round)

    def output(self) -> luigi.LocalTarget:
        seg = CrawlDir(self.crawl_dir).segment_dir(self.round)
        return luigi.LocalTarget(seg / "fetchlist.parquet")

    def run(self) -> None:
        settings = sharecrawl()
        crawl = CrawlDir(self.crawl_dir)
        hosts = pq.read_table(self.input().path).to_pylist()
        online = {h["host"]: h["online"] for h in hosts}
        urls = {h["host"]: h["url"] for h in hosts}
        partitions = crawl.read(self.round - 1, "partitions")
        rows = partitions.drop_columns(["history"]).to_pylist()
        states = partition_states(partitions, rows, online, settings.partition_max_seconds)
        policy = get_policy(settings.policy)
        budget = Budget(crawlers=settings.crawlers, round_seconds=settings.round_seconds)
        refetch = [p["partition_id"] for p in rows if p["hash"] is None and online.get(p["host"])]
        first = set(refetch)
        chosen = refetch + [pid for pid in policy.choose(states, time.time(), budget)
                            if pid not in first]  # fmt: skip
        by_id = {p["partition_id"]: p for p in rows}
        score = {pid: float(len(chosen) - i) for i, pid in enumerate(chosen)}
        fetchlist = [
            {
                **{
                    k: by_id[pid][k]
                    for k in ("host", "partition_id", "share", "root", "lo", "hi", "hash")
                },
                "url": urls[by_id[pid]["host"]],
                "score": score[pid],
                "reason": "refetch" if pid in first else policy.name,
            }
            for pid in chosen
        ]
        with_partitions = {p["host"] for p in by_id.values()}
        fetchlist += [
            {"host": h["host"], "url": h["url"], "reason": "discover", "score": 0.0}
            for h in hosts
            if h["online"] and h["host"] not in with_partitions
        ]
        write_parquet(pa.Table.from_pylist(fetchlist, FETCHLIST), Path(self.output().path))

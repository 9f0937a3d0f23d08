"""Inject: read the hosts file and the crawl rules (again every round) and check every host
is alive.

Output: the round's `inject.parquet`, one row per listed host with its liveness, written
after `rules.txt`, the rules every fetcher of the round uses. Hosts new to the file start
being crawled this round; hosts no longer listed are retired by Update. A malformed rules
file is reported and the last good rules stay in force.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path

import luigi
import pyarrow as pa

from crawl_io.crawldir import CrawlDir, write_parquet
from crawl_io.liveness import check_hosts
from crawl_io.sources import HostURL, read_hosts_file
from pipeline.rules_store import RulesStore
from pipeline.settings import sharecrawl
from pipeline.targets import PublishedRound

log = logging.getLogger("sharecrawl")

INJECT = pa.schema(
    [
        ("host", pa.string()),
        ("url", pa.string()),
        ("shares", pa.list_(pa.string())),  # empty: every share of the host
        ("online", pa.bool_()),
        ("error", pa.string()),
        ("checked_at", pa.timestamp("us", tz="UTC")),
        ("status", pa.string()),  # the liveness check's hosts.status: ok, refused, ...
        ("notify_trusted", pa.bool_()),  # the hosts file's ?notify=trusted: silence is trusted
    ]
)


def host_rows(hosts: list[HostURL], timeout_s: float) -> list[dict]:
    """One row per host key, merging lines that name shares of the same host."""
    by_key: dict[str, list[HostURL]] = {}
    for h in hosts:
        by_key.setdefault(h.host, []).append(h)
    firsts = [lines[0] for lines in by_key.values()]
    checks = check_hosts(firsts, timeout_s)  # names and ports of all hosts at once
    now = datetime.now(UTC)
    rows = []
    for (key, lines), check in zip(by_key.items(), checks, strict=True):
        every = any(h.share is None for h in lines)
        shares = [] if every else sorted({h.share for h in lines if h.share})
        rows.append(
            {
                "host": key,
                "url": lines[0].line_url if len({h.share for h in lines}) == 1 else lines[0].url,
                "shares": shares,
                "online": check.online,
                "error": check.error,
                "checked_at": now,
                "status": check.status,
                "notify_trusted": lines[0].notify_trusted,  # the same on every line of a host
            }
        )
    return rows


class Inject(luigi.Task):
    crawl_dir = luigi.Parameter()
    round = luigi.IntParameter()

    def requires(self) -> list[luigi.Task]:
        # rounds chain: this round reads the last one's version
        if self.round <= 1:
            return []
        return [PublishedRound(crawl_dir=self.crawl_dir, round=self.round - 1)]

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(
            CrawlDir(self.crawl_dir).segment_dir(self.round) / "inject.parquet"
        )

    def run(self) -> None:
        settings = sharecrawl()
        hosts = read_hosts_file(settings.hosts_file)
        seg = CrawlDir(self.crawl_dir).segment_dir(self.round)
        store = RulesStore(self.crawl_dir, settings.rules_file or None)
        rules = store.snapshot(seg / "rules.txt")
        if rules.error:
            log.warning("sharecrawl: rules: %s (the last good rules stay in force)", rules.error)
        rows = host_rows(hosts, settings.liveness_timeout_s)
        write_parquet(pa.Table.from_pylist(rows, INJECT), Path(self.output().path))

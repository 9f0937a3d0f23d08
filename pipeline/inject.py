"""Inject: read the hosts file and the crawl rules again and check every host is alive.
Writes the segment's rules.txt, then inject.parquet: one row per host, listed or found by a
range (pipeline.discovery, whose sweeps discover.parquet sums up)."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import luigi
import pyarrow as pa

from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir, read_parquet, write_parquet
from sharecrawl.crawl_io.discover import NOT_SMB, PROBE_THREADS, probe
from sharecrawl.crawl_io.liveness import check_hosts
from sharecrawl.crawl_io.schema import HOSTS
from sharecrawl.crawl_io.sources import HostURL, read_hosts_lines
from sharecrawl.pipeline.discovery import IDENTITY_COLUMNS, SWEEPS, Sweeper, identity_fields
from sharecrawl.pipeline.rules_store import RulesStore
from sharecrawl.pipeline.settings import SettingsParameter
from sharecrawl.pipeline.targets import PublishedRound

log = logging.getLogger("sharecrawl")


def last_sweeps(path: Path) -> list[dict]:
    """The last round's sweeps (absent: none); a damaged file is one line, and none: every
    range is swept now, which never misses a machine."""
    try:
        return read_parquet(path, SWEEPS).to_pylist()
    except (OSError, ValueError, pa.ArrowException) as e:
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        log.warning("sharecrawl: %s: damaged (%s): every range is swept now", path, why)
        return []


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
        *((c, HOSTS.field(c).type) for c in IDENTITY_COLUMNS),
        ("moved_from", pa.string()),  # a known machine found at a new address: its old one
    ]
)


def host_rows(hosts: list[HostURL], timeout_s: float) -> list[dict]:
    """One row per host key, merging lines that name shares of the same host."""
    by_key: dict[str, list[HostURL]] = {}
    for h in hosts:
        by_key.setdefault(h.host, []).append(h)
    firsts = [lines[0] for lines in by_key.values()]
    checks = check_hosts(firsts, timeout_s)  # names and ports of all hosts at once
    pairs = zip(firsts, checks, strict=True)
    smb = [h if c.online and h.scheme == "smb" else None for h, c in pairs]
    with ThreadPoolExecutor(max_workers=max(1, min(PROBE_THREADS, len(firsts)))) as pool:
        said = list(pool.map(lambda h: h and probe(h.hostname, h.port or 445, timeout_s), smb))
    now = datetime.now(UTC)
    rows = []
    for (key, lines), check, identity in zip(by_key.items(), checks, said, strict=True):
        every = any(h.share is None for h in lines)
        shares = [] if every else sorted({h.share for h in lines if h.share})
        garbage = identity is not None and identity.not_smb  # not crawled: it speaks no SMB
        rows.append(
            {
                "host": key,
                "url": lines[0].line_url if len({h.share for h in lines}) == 1 else lines[0].url,
                "shares": shares,
                "online": check.online and not garbage,
                "error": f"{key}: {NOT_SMB}" if garbage else check.error,
                "checked_at": now,
                "status": "error" if garbage else check.status,
                "notify_trusted": lines[0].notify_trusted,  # the same on every line of a host
                **(identity_fields(identity) if identity and not identity.error else {}),
            }
        )
    return rows


class Inject(luigi.Task):
    crawl_dir = luigi.Parameter()
    round = luigi.IntParameter()
    settings = SettingsParameter()

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
        settings = self.settings
        hosts, ranges = read_hosts_lines(settings.hosts_file, settings.allow_wide_ranges)
        seg = CrawlDir(self.crawl_dir).segment_dir(self.round)
        store = RulesStore(self.crawl_dir, settings.rules_file or None)
        rules = store.snapshot(seg / "rules.txt")
        if rules.error:
            log.warning("sharecrawl: rules: %s (the last good rules stay in force)", rules.error)
        rows = host_rows(hosts, settings.liveness_timeout_s)
        if ranges:
            crawl = CrawlDir(self.crawl_dir)
            before = last_sweeps(crawl.segment_dir(self.round - 1) / "discover.parquet")
            urls: dict[str, HostURL] = {}
            for h in hosts:
                urls.setdefault(h.host, h)
            sweeper = Sweeper(
                crawl.read(self.round - 1, "hosts").to_pylist(),
                {s["line"]: s["swept_at"] for s in before if s["swept_at"]},
                {r["host"] for r in rows},
                settings,
                listed=[(r, urls[r["host"]]) for r in rows if urls[r["host"]].scheme == "smb"],
            )
            listed = {(h.hostname, h.port or 445) for h in hosts if h.scheme == "smb"}
            found, sweeps = sweeper.rows(ranges, listed)
            rows += found
            write_parquet(pa.Table.from_pylist(sweeps, SWEEPS), seg / "discover.parquet")
        write_parquet(pa.Table.from_pylist(rows, INJECT), Path(self.output().path))

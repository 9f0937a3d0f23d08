"""Generate: choose the round's fetch list (fetchlist.parquet) with the scheduling policy.
Partitions without a stored hash come first (until listed again they have no rows), then what
`sharecrawl watch` hinted (pipeline.scheduling.signals); `hinted_only` takes those alone. An
online host with no partition gets one row, partition_id null, reason 'new'."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

import luigi
import pyarrow as pa
import pyarrow.parquet as pq

from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir, write_parquet
from sharecrawl.crawl_io.crawldb.hints import HintsSnapshot, HintsStore
from sharecrawl.crawl_io.readable import plural
from sharecrawl.crawl_io.schema import FETCHLIST
from sharecrawl.jobs.crawl_rules import load_rules
from sharecrawl.jobs.hint_counts import partition_signals
from sharecrawl.jobs.scan_cost import scheduled_seconds
from sharecrawl.pipeline.inject import Inject
from sharecrawl.pipeline.scheduling.choice import Budget, PartitionState
from sharecrawl.pipeline.scheduling.history import Histories
from sharecrawl.pipeline.scheduling.policies import get_policy
from sharecrawl.pipeline.scheduling.signals import ScanPlan, apply_signals
from sharecrawl.pipeline.settings import SettingsParameter

log = logging.getLogger("sharecrawl")
KEYS = ("host", "partition_id", "share", "root", "lo", "hi", "hash")


def partition_states(
    partitions: pa.Table, rows: list[dict], online: dict[str, bool], default_cost_s: float
) -> list[PartitionState]:
    """The policies' view of `partitions`, whose rows (history left out) are `rows`."""
    states = []
    histories = Histories.of(partitions).events()
    for p, history in zip(rows, histories, strict=True):
        host = p["host"]
        if host not in online:
            continue  # retired host
        last = p["last_scan"].timestamp() if p["last_scan"] else None
        cost = scheduled_seconds(p["est_scan_s"], default_cost_s)
        rate = p["rate_per_h"]
        states.append(
            PartitionState(p["partition_id"], host, cost, last, history, rate, online=online[host])
        )
    return states


def round_now() -> float:
    """The round's time, read once (a test moves a round in time through it)."""
    return time.time()


def ahead_of(now: float, states: list[PartitionState], snapshot: HintsSnapshot) -> str | None:
    """What this round finds in the future (the clock moved back), in a line, or None."""
    now_us = round(now * 1e6)
    parts = sum(s.last_scan is not None and s.last_scan > now for s in states)
    hints = sum(
        h.seen_at_us > now_us for share in snapshot.shares() for h in snapshot.hints_for(*share)
    )
    found = [plural(parts, "partition") + " last scanned"] if parts else []
    found += [plural(hints, "hint") + " seen"] if hints else []
    if not found:
        return None
    return f"{' and '.join(found)} in the future (the clock moved back?): treated as now"


def rules_changed(crawl: CrawlDir, round_: int) -> bool:
    """Do this round's crawl rules differ from the last round's (so a hinted scan, which
    keeps stored rows, could keep rows the new rules exclude or miss what they include)?"""
    if round_ <= 1:
        return True
    now = load_rules(crawl.segment_dir(round_) / "rules.txt")
    return now.digest != load_rules(crawl.segment_dir(round_ - 1) / "rules.txt").digest


class Generate(luigi.Task):
    crawl_dir = luigi.Parameter()
    round = luigi.IntParameter()
    settings = SettingsParameter()

    def requires(self) -> Inject:
        return Inject(crawl_dir=self.crawl_dir, round=self.round, settings=self.settings)

    def output(self) -> luigi.LocalTarget:
        seg = CrawlDir(self.crawl_dir).segment_dir(self.round)
        return luigi.LocalTarget(seg / "fetchlist.parquet")

    def run(self) -> None:
        settings = self.settings
        crawl = CrawlDir(self.crawl_dir)
        hosts = pq.read_table(self.input().path).to_pylist()
        online = {h["host"]: h["online"] for h in hosts}
        urls = {h["host"]: h["url"] for h in hosts}
        trusted = {h["host"]: bool(h.get("notify_trusted")) for h in hosts}
        partitions = crawl.read(self.round - 1, "partitions")
        rows = partitions.drop_columns(["history"]).to_pylist()
        by_id = {p["partition_id"]: p for p in rows}
        now = round_now()
        default_cost_s = settings.partition_max_seconds
        states = partition_states(partitions, rows, online, default_cost_s)
        snapshot = HintsStore(crawl.root).snapshot(datetime.fromtimestamp(now, UTC))
        ahead = ahead_of(now, states, snapshot)
        if ahead:
            log.warning("sharecrawl: round %d: %s", self.round, ahead)
        signals, whole = partition_signals(snapshot, partitions), rules_changed(crawl, self.round)
        safety_s = settings.safety_interval_s
        seen = apply_signals(states, by_id, signals, trusted, now, safety_s, whole)
        if seen.hinted or seen.silent:
            line = "sharecrawl: round %d: %d partitions hinted, %d watched and silent (skipped)"
            log.info(line, self.round, seen.hinted, seen.silent)
        states = seen.states
        if settings.hinted_only:
            states = [s for s in states if s.hinted]
        extra = {"safety_s": safety_s} if settings.policy == "sensors" else {}
        policy = get_policy(settings.policy, **extra)
        budget = Budget(crawlers=settings.crawlers, round_seconds=settings.round_seconds)
        unlisted = [] if settings.hinted_only else rows
        refetch = [p["partition_id"] for p in unlisted if not p["hash"] and online.get(p["host"])]
        first = set(refetch)
        chosen = refetch + [pid for pid in policy.choose(states, now, budget) if pid not in first]
        score = {pid: float(len(chosen) - i) for i, pid in enumerate(chosen)}
        fetchlist = []
        for pid in chosen:
            row = by_id[pid]
            plan = seen.plans.get(pid) or ScanPlan("new", False)
            fetchlist.append(
                {
                    **{k: row[k] for k in KEYS},
                    "url": urls[row["host"]],
                    "score": score[pid],
                    **asdict(plan),  # reason, watched, hinted_paths, hints_as_of
                    "est_scan_s": scheduled_seconds(row["est_scan_s"], default_cost_s),
                }
            )
        with_partitions = {p["host"] for p in rows}
        if not settings.hinted_only:
            fetchlist += [
                {
                    "host": h["host"],
                    "url": h["url"],
                    "reason": "new",
                    "score": 0.0,
                    "est_scan_s": default_cost_s,  # a new host: as much as a partition may cost
                }
                for h in hosts
                if h["online"] and h["host"] not in with_partitions
            ]
        write_parquet(pa.Table.from_pylist(fetchlist, FETCHLIST), Path(self.output().path))

"""`metrics.prom`: what the last round did, in Prometheus' text format, for node_exporter's
textfile collector (docs/crawl-dir.md). Written after every round, whole or not at all."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from sharecrawl.crawl_io.crawldb.atomic import write_atomic
from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir

METRICS_FILE = "metrics.prom"  # in the crawl directory
LAST_SUCCESS = "sharecrawl_last_success_timestamp_seconds"
SUCCEEDED = "sharecrawl_round_succeeded"
FINISHED = "sharecrawl_round_finished_timestamp_seconds"
PARTITION_STATES = ("unchanged", "changed", "new", "gone", "unreachable")
SCRUB_COUNTS = ("parts_verified", "bytes_verified", "damaged", "restored", "dropped")


def _last_success(path: Path) -> float | None:
    """The last successful round's time, as the file before this one says (None: no file, or
    one that does not parse: a new series starts)."""
    try:
        text = path.read_text(encoding="utf-8")
        for family in text_string_to_metric_families(text):
            if family.name == LAST_SUCCESS and family.samples:
                return float(family.samples[0].value)
    except (OSError, ValueError):
        pass
    return None


def round_metrics(
    report: Mapping,
    *,
    stages: Mapping[str, float],
    crawldb_bytes: int,
    finished: float,
    succeeded: bool,
    last_success: float | None,
) -> bytes:
    """The text of `metrics.prom` for one round: `report` is queries.status.round_report's,
    `stages` each stage's seconds (and the whole round's, `round`), `succeeded` whether the
    round needed no person."""
    registry = CollectorRegistry(auto_describe=True)

    def gauge(name: str, doc: str, value: float) -> None:
        Gauge(f"sharecrawl_{name}", doc, registry=registry).set(value)

    def gauges(name: str, doc: str, label: str, values: Mapping[str, float]) -> None:
        metric = Gauge(f"sharecrawl_{name}", doc, [label], registry=registry)
        for key, value in values.items():
            metric.labels(key).set(value)

    p, scrub = report["partitions"], report.get("scrub") or {}
    gauge("round_duration_seconds", "The last round's time, Inject to Index", stages["round"])
    gauges(
        "stage_duration_seconds",
        "Each stage's time in the last round",
        "stage",
        {name: s for name, s in sorted(stages.items()) if name != "round"},
    )
    gauges("hosts", "Hosts by hosts.status", "status", report["hosts"]["by_status"])
    gauge("hosts_online", "Hosts online after the last round", report["hosts"]["online"])
    gauge("entries_listed", "Entries listed in the last round", report["entries_listed"])
    gauge("tags_read", "Media files whose tags the last round read", report["tags_read"])
    gauge("tag_bytes_read", "Bytes read for tags in the last round", report["bytes_read"])
    gauge("partitions", "Partitions in the live version", p["total"])
    gauge("partitions_scanned", "Partitions the last round scanned", p["scanned"])
    gauges(
        "partition_scans",
        "The last round's scans by outcome",
        "outcome",
        {outcome: p[outcome] for outcome in PARTITION_STATES},
    )
    gauges(
        "scrub",
        "The last round's check of carried parts",
        "count",
        {count: scrub.get(count, 0) for count in SCRUB_COUNTS},
    )
    gauge("crawldb_bytes", "Bytes of the live version's parts", crawldb_bytes)
    gauge("live_version", "The live version's number", report["round"])
    _outcome_gauges(registry, finished, succeeded)
    success = finished if succeeded else last_success
    if success is not None:
        gauge(LAST_SUCCESS.removeprefix("sharecrawl_"), "When a round last succeeded", success)
    return generate_latest(registry)


def _outcome_gauges(registry: CollectorRegistry, finished: float, succeeded: bool) -> None:
    Gauge(FINISHED, "When the last round ended", registry=registry).set(finished)
    doc = "1 when the last round needed no person, else 0"
    Gauge(SUCCEEDED, doc, registry=registry).set(int(succeeded))


class _Carried:
    """A registry's collector of metric families read back from the file before."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def write_failed_round_metrics(crawl: CrawlDir) -> None:
    """After a round that failed: `metrics.prom` says so (round_succeeded 0, round_finished
    now) and keeps the rest as the last round that ended left it, the last success included.
    Best effort: the exit status and its line already say the failure (a full disk may leave
    the file as it was)."""
    path = crawl.root / METRICS_FILE
    try:
        text = path.read_text(encoding="utf-8")
        families = list(text_string_to_metric_families(text))
    except (OSError, ValueError):  # none yet, or not ours to read: a new series starts
        families = []
    registry = CollectorRegistry(auto_describe=True)
    registry.register(_Carried([f for f in families if f.name not in (SUCCEEDED, FINISHED)]))
    _outcome_gauges(registry, time.time(), succeeded=False)
    try:
        write_atomic(path, generate_latest(registry))
    except OSError:
        pass


def write_round_metrics(
    crawl: CrawlDir,
    report: Mapping,
    *,
    stages: Mapping[str, float],
    succeeded: bool,
) -> Path:
    """Write `metrics.prom` of the round `report` describes (atomically: a scrape never sees
    half a file)."""
    path = crawl.root / METRICS_FILE
    manifest = crawl.manifest(report["round"])
    text = round_metrics(
        report,
        stages=stages,
        crawldb_bytes=sum(entry.size for entry in manifest.values()),
        finished=time.time(),
        succeeded=succeeded,
        last_success=_last_success(path),
    )
    write_atomic(path, text)
    return path

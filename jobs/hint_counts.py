"""Hints against partitions: which hold a path hinted since their last scan (for Generate), and
how many hinted paths were scanned or still wait (for `status`). A notification does not say
file or folder: a path counts for the partitions that list it as either; an overflow hint, for
every partition of its share."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pyarrow as pa

from sharecrawl.crawl_io.crawldb.hints import WATCHING, HintsSnapshot, HintsStore, timestamp_us
from sharecrawl.jobs.membership import PartitionKey, Ranges, share_root


@dataclass
class HintCounts:
    waiting: int  # hinted paths whose partition was not scanned since the hint
    consumed: int  # hinted paths scanned since


@dataclass(frozen=True)
class PartitionSignal:
    """What the watch says about one partition since its last scan."""

    paths: frozenset[str]  # hinted paths it holds, seen after its last scan
    overflow: bool  # an overflow hint of its share after its last scan: list it again
    unbroken: bool  # its share watched without a break since its last scan, by a live watcher
    as_of: datetime | None  # hints are known up to this time (None: not watched now)

    @property
    def hinted(self) -> bool:
        return bool(self.paths) or self.overflow


_Scans = dict[PartitionKey, datetime | None]


def _by_share(partitions: pa.Table) -> dict[tuple[str, str], _Scans]:
    """Every partition's key and last scan, by share."""
    found: dict[tuple[str, str], _Scans] = {}
    columns = [
        partitions[c].to_pylist() for c in ("host", "share", "root", "lo", "hi", "last_scan")
    ]
    for host, share, root, lo, hi, last in zip(*columns, strict=True):
        found.setdefault((host, share), {})[PartitionKey(host, share, root, lo, hi)] = last
    return found


def holders(ranges: Ranges, root: PartitionKey, path: str) -> set[PartitionKey]:
    """The partitions that list `path`: as a file and as a folder."""
    return {ranges.owner(path, False, root), ranges.owner(path, True, root)}


def _latest(snapshot: HintsSnapshot, host: str, share: str) -> dict[tuple[str, bool], int]:
    """(path, overflow) -> latest sighting in microseconds, of each hinted path of a share."""
    latest: dict[tuple[str, bool], int] = {}
    for hint in snapshot.hints_for(host, share):
        key = (hint.path, hint.overflow)
        latest[key] = max(latest.get(key, 0), hint.seen_at_us)
    return latest


def _us(t: datetime | None) -> int | None:
    return None if t is None else timestamp_us(t)


def partition_signals(snapshot: HintsSnapshot, partitions: pa.Table) -> dict[str, PartitionSignal]:
    """partition_id -> its signal, for every partition of a share that has hints or a watch
    state."""
    signals: dict[str, PartitionSignal] = {}
    for (host, share), scans in _by_share(partitions).items():
        if not snapshot.hints_for(host, share) and snapshot.watch_state(host, share) is None:
            continue
        last_us = {key: _us(last) for key, last in scans.items()}
        ranges, root = Ranges(scans), share_root(host, share)
        hinted: dict[PartitionKey, set[str]] = {}
        overflow_us = -1  # the latest overflow hint of the share
        for (path, overflow), seen in _latest(snapshot, host, share).items():
            if overflow:
                overflow_us = max(overflow_us, seen)
                continue
            for key in holders(ranges, root, path):
                last = last_us.get(key, -1)
                if last is None or seen > last:
                    hinted.setdefault(key, set()).add(path)
        for key, last in scans.items():
            unbroken, as_of = snapshot.watched_since(host, share, last)
            overflow = overflow_us >= 0 and (last is None or overflow_us > last_us[key])
            paths = frozenset(hinted.get(key, ()))
            signals[key.id] = PartitionSignal(paths, overflow, unbroken, as_of)
    return signals


def count_hints(snapshot: HintsSnapshot, partitions: pa.Table) -> HintCounts:
    """Hinted paths (the latest sighting of each) whose partitions were / were not all scanned
    since (a share never crawled: waiting)."""
    by_share = _by_share(partitions)
    counts = HintCounts(0, 0)
    for host, share in snapshot.shares():
        scans = by_share.get((host, share), {})
        ranges, root = Ranges(scans), share_root(host, share)
        for (path, overflow), seen in _latest(snapshot, host, share).items():
            keys = list(scans) if overflow else holders(ranges, root, path)
            lasts = [_us(scans.get(key)) for key in keys] or [None]
            if all(last is not None and last >= seen for last in lasts):
                counts.consumed += 1
            else:
                counts.waiting += 1
    return counts


def hints_report(
    crawl_dir: str | Path, partitions: pa.Table, scan_reasons: dict[str, int]
) -> dict | None:
    """`status`'s hints (None when `sharecrawl watch` never ran here)."""
    store = HintsStore(crawl_dir)
    if not store.dir.is_dir():
        return None
    counts = count_hints(store.snapshot(), partitions)
    watches, _ = store.watches()
    return {
        "waiting": counts.waiting,
        "consumed": counts.consumed,
        "watched_shares": sum(state == WATCHING for state in watches["state"].to_pylist()),
        "scanned_for_hints": scan_reasons.get("hint", 0) + scan_reasons.get("overflow", 0),
    }

"""Hints against partitions: how many hinted paths a round has scanned since the hint, and
how many still wait (a hinted path counts for the partition that lists it, by the membership
rule of jobs.membership).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from crawl_io.hints import HintsSnapshot, timestamp_us
from jobs.membership import PartitionKey, Ranges, share_root


@dataclass
class HintCounts:
    waiting: int  # hinted paths whose partition was not scanned since the hint
    consumed: int  # hinted paths scanned since


def count_hints(snapshot: HintsSnapshot, partitions: pa.Table) -> HintCounts:
    """Hinted paths (the latest sighting of each) whose partition was / was not scanned since:
    a path counts for the partition that lists it (its folder's), an overflow hint for all of
    its share's partitions. `partitions` has host, share, root, lo, hi and last_scan."""
    by_share: dict[tuple[str, str], dict[PartitionKey, int | None]] = {}
    columns = [
        partitions[c].to_pylist() for c in ("host", "share", "root", "lo", "hi", "last_scan")
    ]
    for host, share, root, lo, hi, last in zip(*columns, strict=True):
        key = PartitionKey(host, share, root, lo, hi)
        by_share.setdefault((host, share), {})[key] = None if last is None else timestamp_us(last)
    counts = HintCounts(0, 0)
    for host, share in snapshot.shares():
        scans = by_share.get((host, share), {})
        ranges = Ranges(scans)
        root = share_root(host, share)
        latest: dict[tuple[str, bool], int] = {}
        for hint in snapshot.hints_for(host, share):
            key = (hint.path, hint.overflow)
            latest[key] = max(latest.get(key, 0), hint.seen_at_us)
        for (path, overflow), seen in latest.items():
            if overflow:
                lasts = list(scans.values()) or [None]
            else:
                lasts = [scans.get(ranges.owner(path, False, root))]
            if all(last is not None and last >= seen for last in lasts):
                counts.consumed += 1
            else:
                counts.waiting += 1
    return counts

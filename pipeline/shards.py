"""Which fetch shard fetches which host of a round: one shard per host (politeness, as Nutch
partitioned fetchers by host), and shards of about equal cost. A hash of the host name leaves
one shard with far more (16 equal hosts in 4 shards: often 6 or 7 in one), so the assignment
is the longest-processing-time rule (Graham, "Bounds on multiprocessing timing anomalies",
1969: within 4/3 of the best) over the fetch list's `est_scan_s`; a function of the fetch list
alone, so every process of a round computes the same shards."""

from __future__ import annotations

import hashlib
from collections import defaultdict

import pyarrow as pa


def shard_hosts(fetchlist: pa.Table, shards: int) -> dict[str, int]:
    """host -> shard (0 .. shards - 1) for every host of `fetchlist`; a partition with
    no estimate weighs one second."""
    costs: dict[str, float] = defaultdict(float)
    hosts, seconds = fetchlist["host"].to_pylist(), fetchlist["est_scan_s"].to_pylist()
    for host, s in zip(hosts, seconds, strict=True):
        costs[host] += 1.0 if s is None else max(float(s), 0.0)
    load = [0.0] * max(shards, 1)
    assigned = {}
    for host in sorted(costs, key=lambda h: (-costs[h], _name_hash(h))):
        shard = min(range(len(load)), key=lambda i: (load[i], i))
        assigned[host] = shard
        load[shard] += costs[host]
    return assigned


def _name_hash(host: str) -> bytes:
    # md5, not Python's hash(), which differs between processes
    return hashlib.md5(host.encode()).digest()

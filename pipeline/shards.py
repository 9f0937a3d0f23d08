"""Which fetch shard fetches which host of a round: one shard per host, so one host is only
ever fetched by one worker in a round (politeness, as Nutch's fetchers partitioned by host),
and shards of about equal cost, so that no worker is left with the round's tail.

A stable hash of the host name (Nutch's partitioning) keeps the first property but not the
second: 16 equal hosts hashed into 4 shards leave the largest with 6 or 7 hosts about as
often as not, and one 1 M-file NAS among PCs weighs more than a shard's worth. So the
assignment is the longest-processing-time rule (Graham, "Bounds on multiprocessing timing
anomalies", 1969: each host, most costly first, to the shard with the least cost so far,
within 4/3 of the best) over the fetch list's `est_scan_s`, the seconds Generate budgeted for
each partition. It is a function of the fetch list alone, which every worker reads from the
same file, so every process of a round computes the same shards. Hosts of equal cost are
taken in the order of a hash of their names, so that shards do not follow name order.
"""

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

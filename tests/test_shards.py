"""Fetch shards: every host in one shard, the same in every process, shards of about equal
cost (pipeline.shards)."""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from sharecrawl.crawl_io.schema import FETCHLIST
from sharecrawl.pipeline.shards import shard_hosts


def fetchlist(costs: dict[str, list[float | None]]) -> pa.Table:
    """A fetch list with one row per partition of each host, at the given est_scan_s."""
    rows = [
        {"host": host, "url": f"smb://{host}/", "partition_id": f"{host}#{i}", "est_scan_s": s}
        for host, seconds in costs.items()
        for i, s in enumerate(seconds)
    ]
    return pa.Table.from_pylist(rows, FETCHLIST)


def loads(assigned: dict[str, int], costs: dict[str, list[float]], shards: int) -> list[float]:
    return [sum(sum(costs[h]) for h, s in assigned.items() if s == i) for i in range(shards)]


def test_hosts_of_equal_cost_fill_the_shards_evenly() -> None:
    costs = {f"127.0.0.1:{4450 + i}": [60.0] for i in range(16)}
    assigned = shard_hosts(fetchlist(costs), 4)
    assert sorted(assigned) == sorted(costs)
    assert [list(assigned.values()).count(i) for i in range(4)] == [4, 4, 4, 4]
    # a hash of the names alone (md5 mod 4) leaves these 16 hosts uneven: the reason for LPT
    by_hash = [int.from_bytes(hashlib.md5(h.encode()).digest()[:8], "big") % 4 for h in costs]
    assert max(by_hash.count(i) for i in range(4)) > 4


def test_a_big_host_has_a_shard_to_itself_and_the_rest_share_the_others() -> None:
    costs = {"nas": [300.0] * 10} | {f"pc{i:02d}": [30.0, 20.0] for i in range(30)}
    assigned = shard_hosts(fetchlist(costs), 3)
    nas = assigned["nas"]
    assert all(s != nas for h, s in assigned.items() if h != "nas")
    others = [load for i, load in enumerate(loads(assigned, costs, 3)) if i != nas]
    assert others == [750.0, 750.0]  # 30 hosts of 50 s: 15 a shard


def test_shards_are_within_four_thirds_of_the_best_on_uneven_hosts() -> None:
    rng = random.Random(5)
    for _ in range(20):
        costs = {
            f"h{i}": [rng.uniform(1, 100) for _ in range(rng.randint(1, 5))] for i in range(25)
        }
        shards = rng.randint(2, 6)
        heaviest = max(loads(shard_hosts(fetchlist(costs), shards), costs, shards))
        total, biggest = sum(map(sum, costs.values())), max(map(sum, costs.values()))
        best_bound = max(total / shards, biggest)  # no assignment does better than this
        assert heaviest <= best_bound * 4 / 3 + 1e-9


def test_a_host_goes_to_the_same_shard_in_every_process(tmp_path: Path) -> None:
    """Python's hash() of a string differs between processes; the shard of a host must not
    (several crawl processes each decide which hosts their shard holds)."""
    costs = {f"file:///srv/lan/pc{i}": [10.0] for i in range(40)}
    path = tmp_path / "fetchlist.parquet"
    pq.write_table(fetchlist(costs), path)
    here = shard_hosts(pq.read_table(path), 4)
    code = (
        "import json, sys, pyarrow.parquet as pq; "
        "from sharecrawl.pipeline.shards import shard_hosts; "
        f"print(json.dumps(shard_hosts(pq.read_table({str(path)!r}), 4)))"
    )
    for seed in ("1", "2"):
        other = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parents[1],
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        assert json.loads(other.stdout) == here
    assert set(here.values()) == {0, 1, 2, 3}

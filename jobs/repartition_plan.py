"""Re-partitioning (thesis §3.3; docs/DESIGN.md, B*-subtrees) as a pure function: what to create,
delete, merge and re-parent among a host's partitions after a round, looking at the partitions
rescanned this round only (pipeline.repartition applies it)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sharecrawl.jobs.bstar_split import MEDIA, MERGE_BELOW, SPLIT_ABOVE, NewRange, split_ranges
from sharecrawl.jobs.membership import PartitionKey, Ranges, descendants, partition_key, share_root
from sharecrawl.jobs.scan_cost import HostCost, Limits, listing_cost, stored_cost
from sharecrawl.jobs.subtree_hash import media_mask


def _rows_by_partition(listings: pa.Table) -> dict[str, pa.Table]:
    """Each partition's rows, with their media mask as column MEDIA (sorted only when a fetch did
    not write them partition after partition)."""
    if listings.num_rows == 0:
        return {}
    listings = listings.combine_chunks()
    media = pc.and_(pc.invert(listings["is_dir"]), media_mask(listings["name"]))
    listings = listings.append_column(MEDIA, media)
    encoded = pc.run_end_encode(listings["partition_id"].chunk(0), run_end_type=pa.int64())
    if len(encoded.values) != len(pc.unique(encoded.values)):
        listings = listings.take(pc.sort_indices(listings["partition_id"])).combine_chunks()
        encoded = pc.run_end_encode(listings["partition_id"].chunk(0), run_end_type=pa.int64())
    ends = encoded.run_ends.to_numpy().tolist()
    starts = [0, *ends[:-1]]
    return {
        pid: listings.slice(start, end - start)
        for pid, start, end in zip(encoded.values.to_pylist(), starts, ends, strict=True)
    }


def plan_repartition(
    partitions: list[Mapping[str, Any]],
    listings: pa.Table,
    *,
    limits: Limits,
    host_costs: Mapping[str, HostCost],
    gone: Iterable[str] = (),
    rescanned: Iterable[str] | None = None,
) -> dict[str, list]:
    """Changes to the hosts' `partitions` (all of each host's), given this round's `listings`, the
    ids found `gone` and those `rescanned` (default: with rows in `listings`): {"create": [rows],
    "delete": [ids, descendants too], "merge": [[child, into]], "reparent": [[id, parent]]}."""
    by_id = {row["partition_id"]: row for row in partitions}
    keys = {pid: partition_key(row) for pid, row in by_id.items()}
    parent_of = {pid: row.get("parent_id") for pid, row in by_id.items()}
    rows = {pid: t for pid, t in _rows_by_partition(listings).items() if pid in by_id}
    for pid in rescanned or ():
        if pid in by_id and pid not in rows:
            empty = listings.schema.empty_table()
            rows[pid] = empty.append_column(MEDIA, pa.array([], pa.bool_()))
    costs: dict[str, tuple[float, float]] = {}

    def cost(pid: str) -> tuple[float, float]:
        if pid not in costs:
            host_cost = host_costs[keys[pid].host]
            costs[pid] = (
                listing_cost(rows[pid], host_cost, rows[pid][MEDIA])
                if pid in rows
                else stored_cost(by_id[pid], host_cost)
            )
        return costs[pid]

    # 1. roots gone: reported by the fetcher, or missing from their rescanned parent
    dead = {pid for pid in gone if pid in by_id}
    folders_of: dict[str, set[str]] = {}
    for pid, key in keys.items():
        parent = parent_of[pid]
        if parent in rows and key.root and not key.is_share_root:
            if parent not in folders_of:
                listed = rows[parent]
                folders_of[parent] = set(pc.filter(listed["path"], listed["is_dir"]).to_pylist())
            if key.root not in folders_of[parent]:
                dead.add(pid)
    dead = descendants(dead, parent_of)

    # 2. split what grew over twice the limits
    created: list[NewRange] = []
    replaced: set[str] = set()
    split_ids: set[str] = set()
    alive: dict[tuple[str, str], list[PartitionKey]] = defaultdict(list)
    for pid, key in keys.items():
        if pid not in dead:
            alive[key.host, key.share].append(key)
    for pid in sorted(rows):
        if pid in dead or limits.load(*cost(pid)) <= SPLIT_ABOVE:
            continue
        key = keys[pid]
        made = split_ranges(
            rows[pid],
            cost=host_costs[key.host],
            limits=limits,
            within=key,
            existing=alive[key.host, key.share],
            media=rows[pid][MEDIA],
        )
        if not made:
            continue
        split_ids.add(pid)
        created.extend(made)
        if not key.is_share_root and any(r.key.root == key.root for r in made):
            replaced.add(pid)

    # 3. merge what shrank under half the limits into its parent
    merges: dict[str, str] = {pid: parent_of[pid] for pid in replaced}  # type: ignore[misc]
    receiving: dict[str, list[float]] = {}
    settled = dead | split_ids
    for pid in sorted(rows):
        parent = parent_of[pid]
        if (
            keys[pid].is_share_root
            or parent not in by_id  # None included
            or {pid, parent} & settled
            or parent in merges
            or pid in receiving
        ):
            continue
        s, b = cost(pid)
        if limits.load(s, b) >= MERGE_BELOW:
            continue
        total = receiving.setdefault(parent, list(cost(parent)))
        if limits.load(total[0] + s, total[1] + b) > SPLIT_ABOVE:
            continue  # it stays small rather than make its parent split next time
        total[0] += s
        total[1] += b
        merges[pid] = parent

    # 4. parents under the final set of partitions
    final = {pid: key for pid, key in keys.items() if pid not in dead and pid not in merges}
    final.update({r.key.id: r.key for r in created})
    by_share: dict[tuple[str, str], list[PartitionKey]] = defaultdict(list)
    for k in final.values():
        by_share[k.host, k.share].append(k)
    ranges = {share: Ranges(found) for share, found in by_share.items()}

    def parent_id(key: PartitionKey) -> str | None:
        if key.is_share_root:
            return None
        default = share_root(key.host, key.share)
        return ranges[key.host, key.share].owner(key.root, True, default).id

    create = [
        {"partition_id": r.key.id, **asdict(r.key), "parent_id": parent_id(r.key)}
        | {"est_scan_s": r.est_scan_s, "mem_bytes": r.mem_bytes}
        for r in created
    ]
    reparent = []
    for pid, key in final.items():
        if pid in by_id:
            new_parent = parent_id(key)
            if new_parent != parent_of[pid]:
                reparent.append([pid, new_parent])
    return {
        "create": sorted(create, key=lambda c: c["partition_id"]),
        "delete": sorted(dead),
        "merge": sorted([child, into] for child, into in merges.items()),
        "reparent": sorted(reparent),
    }

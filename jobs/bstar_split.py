"""B*-subtree splitting (thesis §3.2.1) and re-partitioning (§3.3), as pure functions (the
mrjob shell over them is jobs.mr_partition_split).

Split: walk a partition's folder tree depth first in canonical order. Every folder costs one
listing plus a tag read per media file directly in it (seconds, at the host's measured costs)
and the bytes of those media paths (memory). A folder hands its parent the cost of what stays
with it: its own files plus the children not yet closed into a range. Over a folder's
children a running sum is kept; a range partition (folder, lo, next sibling) is closed when
the sum reaches the limit, or just before the next child would push it over the limit if the
sum is already at FILL of it. So new ranges weigh between FILL and about 1.75 limits: inside
the band [0.5, 2] limits where re-partitioning leaves a partition alone, which is why a
handful of changed files never re-partitions anything. A folder whose own files exceed the
limits cannot be split (the root exception of §3.1).

Loads compare a (seconds, bytes) cost with the limits: load = max(s / max_s, b / max_bytes).

Re-partitioning (§3.3), over the partitions rescanned this round only (their listings are the
segment's), so the work grows with what was fetched: a partition whose root folder is gone is
deleted (with everything under it); one over twice the limits is split; one under half the
limits is merged into its parent (unless that would put the parent over twice the limits).
Splitting a range partition whose own top level must be cut replaces it: it is merged into its
parent and new ranges covering its interval are created.

Applying a plan (what Update does): drop `delete` and the `merge` sources from the partitions,
add `create` (parent_id given), set parent_id per `reparent`, then give the host's file rows
their partition with jobs.membership.assign_partition_ids (Ranges.owner) and recompute the affected
partitions' hashes and sizes with jobs.subtree_hash.summarize.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.membership import PartitionKey, Ranges, parent_path, partition_key, share_root
from jobs.subtree_hash import canonical_sort_key, media_mask

FILL = 0.75  # a range is closed before the limit only once it holds this share of it
MERGE_BELOW = 0.5  # thesis §3.3: merge a partition under half the limits ...
SPLIT_ABOVE = 2.0  # ... split one over twice the limits
DEFAULT_MEDIA_PATH_BYTES = 100  # memory per media file when a partition's paths are unknown


@dataclass(frozen=True)
class HostCost:
    list_s_per_folder: float
    tag_s_per_file: float


@dataclass(frozen=True)
class Limits:
    max_seconds: float = 90.0
    max_bytes: int = 10 * 1024 * 1024

    def load(self, seconds: float, mem_bytes: float) -> float:
        return max(seconds / self.max_seconds, mem_bytes / self.max_bytes)


# -- costs ---------------------------------------------------------------------------------
@dataclass
class FolderCosts:
    """The folders of a listing in canonical (depth first, by name) order and each one's own
    cost: one listing plus its direct media files' tag reads, and their paths' bytes."""

    paths: list[str]
    seconds: np.ndarray
    mem_bytes: np.ndarray
    n_media: np.ndarray


def folder_costs(entries: pa.Table, root: str, cost: HostCost) -> FolderCosts:
    """`entries` has columns path, name, is_dir; `root` is the partition's root folder, which
    its rows do not contain."""
    is_dir = entries["is_dir"]
    dirs = pc.filter(entries["path"], is_dir)
    folders = pa.concat_arrays([pa.array([root], pa.large_string()),
                                pc.cast(dirs, pa.large_string()).combine_chunks()])  # fmt: skip
    folders = folders.take(pc.sort_indices(canonical_sort_key(folders)))
    media = pc.and_(pc.invert(is_dir), media_mask(entries["name"]))
    media_paths = pc.filter(entries["path"], media)
    parents = pc.replace_substring_regex(media_paths, r"(?s)(^|/)[^/]*$", "")
    per_parent = (
        pa.table({"parent": pc.cast(parents, pa.large_string()),
                  "len": pc.binary_length(media_paths)})
        .group_by("parent").aggregate([("len", "sum"), ("len", "count")])
    )  # fmt: skip
    where = pc.index_in(per_parent["parent"], value_set=folders).to_numpy(zero_copy_only=False)
    if np.isnan(where.astype(float)).any():
        raise ValueError(f"media files outside the folders of partition root {root!r}")
    where = where.astype(np.int64)
    n_media = np.zeros(len(folders), np.int64)
    mem = np.zeros(len(folders), np.float64)
    n_media[where] = per_parent["len_count"].to_numpy()
    mem[where] = per_parent["len_sum"].to_numpy()
    seconds = cost.list_s_per_folder + n_media * cost.tag_s_per_file
    return FolderCosts(folders.to_pylist(), seconds, mem, n_media)


# -- split ---------------------------------------------------------------------------------
@dataclass
class _Frame:
    """A folder being walked: its children, and the running sums over them."""

    path: str
    children: list[str]
    own_s: float
    own_b: float
    lo: str | None
    end: str | None  # the upper bound of the last range here
    barriers: list[tuple[str | None, str | None]]  # existing ranges here, by lo
    top_of_range: bool = False
    next_child: int = 0
    next_barrier: int = 0
    run_s: float = 0.0
    run_b: float = 0.0
    kept_s: float = 0.0
    kept_b: float = 0.0
    closed: list[list[Any]] = field(default_factory=list)  # [lo, hi, seconds, bytes]


def _below(barrier: tuple[str | None, str | None], name: str) -> bool:
    return barrier[1] is not None and barrier[1] <= name


@dataclass(frozen=True)
class NewRange:
    key: PartitionKey
    est_scan_s: float
    mem_bytes: float


def split_ranges(
    entries: pa.Table,
    *,
    cost: HostCost,
    limits: Limits,
    within: PartitionKey,
    existing: Iterable[PartitionKey] = (),
) -> list[NewRange]:
    """The range partitions to create inside partition `within`, whose listing rows are
    `entries` (columns path, name, is_dir). `existing` are the share's current partitions:
    new ranges never overlap those rooted at the same folder. If `within` is a range and
    ranges at its own root are returned, they cover its whole interval: they replace it."""
    costs = folder_costs(entries, within.root, cost)
    children: dict[str, list[str]] = defaultdict(list)
    folder_set = set(costs.paths)
    for path in costs.paths[1:]:
        parent = parent_path(path)
        if parent not in folder_set or len(path) <= len(within.root):
            raise ValueError(f"folder {path!r} is not under partition root {within.root!r}")
        children[parent].append(path[len(parent) + 1 if parent else 0 :])
    barriers: dict[str, list[tuple[str | None, str | None]]] = defaultdict(list)
    for key in existing:
        if key.is_share_root or key == within or key.share != within.share:
            continue
        if key.root == within.root and not within.is_share_root:
            continue  # siblings of a range partition: outside its interval
        if key.root in folder_set:
            barriers[key.root].append((key.lo, key.hi))
    for found in barriers.values():
        found.sort(key=lambda b: (b[0] is not None, b[0] or ""))

    made: list[NewRange] = []
    load = limits.load

    def frame(i: int) -> _Frame:
        path = costs.paths[i]
        top = i == 0
        top_of_range = top and not within.is_share_root
        return _Frame(
            path, children.get(path, []),
            0.0 if top_of_range else float(costs.seconds[i]),
            0.0 if top_of_range else float(costs.mem_bytes[i]),
            within.lo if top_of_range else None, within.hi if top_of_range else None,
            barriers.get(path, []), top_of_range,
        )  # fmt: skip

    def close(f: _Frame, lo: str | None, hi: str | None) -> None:
        f.closed.append([lo, hi, f.run_s, f.run_b])
        f.run_s = f.run_b = 0.0

    def next_bound(f: _Frame, index: int) -> str | None:
        bounds = [f.children[index + 1]] if index + 1 < len(f.children) else []
        if f.next_barrier < len(f.barriers) and f.barriers[f.next_barrier][0] is not None:
            bounds.append(f.barriers[f.next_barrier][0])  # type: ignore[arg-type]
        return min(bounds) if bounds else f.end

    def add_child(f: _Frame, s: float, b: float) -> None:
        index = f.next_child
        name = f.children[index]
        f.next_child += 1
        lo_before, first_crossed = f.lo, None
        while f.next_barrier < len(f.barriers) and _below(f.barriers[f.next_barrier], name):
            first_crossed = first_crossed or f.barriers[f.next_barrier]
            f.lo = f.barriers[f.next_barrier][1]
            f.next_barrier += 1
        if first_crossed is not None and (f.run_s or f.run_b):
            # a range cannot reach across an existing one: close what ran so far, or keep
            # it in this folder's partition when too small to stand alone
            if load(f.run_s, f.run_b) >= MERGE_BELOW:
                close(f, lo_before, first_crossed[0])
            else:
                f.kept_s += f.run_s
                f.kept_b += f.run_b
                f.run_s = f.run_b = 0.0
        if load(f.run_s + s, f.run_b + b) > 1 and load(f.run_s, f.run_b) >= FILL:
            close(f, f.lo, name)
            f.lo = name
        f.run_s += s
        f.run_b += b
        if load(f.run_s, f.run_b) >= 1:
            hi = next_bound(f, index)
            close(f, f.lo, hi)
            f.lo = hi

    def finish(f: _Frame) -> tuple[float, float]:
        if f.top_of_range and f.closed and (f.run_s or f.run_b):
            last = f.closed[-1]
            joined = load(last[2] + f.run_s, last[3] + f.run_b)
            if load(f.run_s, f.run_b) < MERGE_BELOW and joined <= SPLIT_ABOVE:
                last[1], last[2], last[3] = f.end, last[2] + f.run_s, last[3] + f.run_b
                f.run_s = f.run_b = 0.0
            else:
                close(f, f.lo, f.end)
        for lo, hi, s, b in f.closed:
            key = PartitionKey(within.host, within.share, f.path, lo, hi)
            made.append(NewRange(key, s + cost.list_s_per_folder, b))
        return f.kept_s + f.run_s + f.own_s, f.kept_b + f.run_b + f.own_b

    # Depth first with an explicit stack (shares can be thousands of folders deep): folders
    # come in canonical order, so a folder's frame is finished when the next folder is not
    # below it.
    stack = [frame(0)]
    for i in range(1, len(costs.paths)):
        parent = parent_path(costs.paths[i])
        while stack[-1].path != parent:
            s, b = finish(stack.pop())
            add_child(stack[-1], s, b)
        stack.append(frame(i))
    while len(stack) > 1:
        s, b = finish(stack.pop())
        add_child(stack[-1], s, b)
    top = stack[0]
    if top.top_of_range and len(top.closed) == 1 and top.closed[0][:2] == [within.lo, within.hi]:
        top.closed = []  # the whole interval in one range: that is the partition itself
    finish(top)
    return made


def split(
    entries: pa.Table,
    *,
    host_costs: Mapping[str, HostCost],
    max_seconds: float = 90.0,
    max_bytes: int = 10 * 1024 * 1024,
    within: PartitionKey,
    existing: Iterable[PartitionKey] = (),
) -> list[PartitionKey]:
    """The keys of split_ranges, with the host's costs looked up and the limits spelled out."""
    return [
        r.key
        for r in split_ranges(entries, cost=host_costs[within.host],
                              limits=Limits(max_seconds, max_bytes), within=within,
                              existing=existing)
    ]  # fmt: skip


# -- re-partitioning -----------------------------------------------------------------------
def _rows_by_partition(listings: pa.Table) -> dict[str, pa.Table]:
    if listings.num_rows == 0:
        return {}
    listings = listings.take(pc.sort_indices(listings["partition_id"])).combine_chunks()
    encoded = pc.run_end_encode(listings["partition_id"].chunk(0), run_end_type=pa.int64())
    ends = encoded.run_ends.to_numpy().tolist()
    starts = [0, *ends[:-1]]
    return {
        pid: listings.slice(start, end - start)
        for pid, start, end in zip(encoded.values.to_pylist(), starts, ends, strict=True)
    }


def listing_cost(rows: pa.Table, cost: HostCost) -> tuple[float, float]:
    """(seconds, media path bytes) to scan a partition whose rows these are."""
    media = pc.and_(pc.invert(rows["is_dir"]), media_mask(rows["name"]))
    n_folders = pc.sum(rows["is_dir"].cast(pa.int64())).as_py() or 0
    n_media = pc.sum(media.cast(pa.int64())).as_py() or 0
    mem = pc.sum(pc.binary_length(pc.filter(rows["path"], media))).as_py() or 0
    return (n_folders + 1) * cost.list_s_per_folder + n_media * cost.tag_s_per_file, mem


def stored_cost(row: Mapping[str, Any], cost: HostCost) -> tuple[float, float]:
    """The same estimate from a partitions row (mem_bytes when known)."""
    n_media = row.get("n_media") or 0
    seconds = ((row.get("n_folders") or 0) + 1) * cost.list_s_per_folder
    mem = row.get("mem_bytes")
    return seconds + n_media * cost.tag_s_per_file, (
        mem if mem is not None else n_media * DEFAULT_MEDIA_PATH_BYTES
    )


def _descendants(roots: Iterable[str], parent_of: Mapping[str, str | None]) -> set[str]:
    children: dict[str | None, list[str]] = defaultdict(list)
    for pid, parent in parent_of.items():
        children[parent].append(pid)
    found, stack = set(roots), list(roots)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def plan_repartition(
    partitions: list[Mapping[str, Any]],
    listings: pa.Table,
    *,
    limits: Limits,
    host_costs: Mapping[str, HostCost],
    gone: Iterable[str] = (),
    rescanned: Iterable[str] | None = None,
) -> dict[str, list]:
    """What to change in the partitions of the hosts whose `partitions` rows are given (all
    of each host's partitions: partition_id, host, share, root, lo, hi, parent_id, n_folders,
    n_media, optional mem_bytes), given this round's `listings` (LISTING rows of the rescanned
    partitions), the ids the fetcher found `gone` and the ids `rescanned` with a new listing
    (changed or new; default: those with rows in `listings`; a rescanned partition without
    rows is empty now).

    Returns {"create": [partition dicts: partition_id, host, share, root, lo, hi, parent_id,
    est_scan_s, mem_bytes], "delete": [ids, descendants included], "merge": [[child_id,
    into_id]], "reparent": [[id, new_parent_id]]}; every list sorted."""
    by_id = {row["partition_id"]: row for row in partitions}
    keys = {pid: partition_key(row) for pid, row in by_id.items()}
    parent_of = {pid: row.get("parent_id") for pid, row in by_id.items()}
    rows = {pid: t for pid, t in _rows_by_partition(listings).items() if pid in by_id}
    for pid in rescanned or ():
        if pid in by_id and pid not in rows:
            rows[pid] = listings.schema.empty_table()

    def cost(pid: str) -> tuple[float, float]:
        host_cost = host_costs[keys[pid].host]
        if pid in rows:
            return listing_cost(rows[pid], host_cost)
        return stored_cost(by_id[pid], host_cost)

    # 1. roots gone: reported by the fetcher, or missing from their rescanned parent
    dead = {pid for pid in gone if pid in by_id}
    for pid, key in keys.items():
        parent = parent_of[pid]
        if parent in rows and key.root and not key.is_share_root:
            folders = rows[parent]
            present = pc.any(
                pc.and_(folders["is_dir"], pc.equal(folders["path"], key.root))
            ).as_py()
            if not present:
                dead.add(pid)
    dead = _descendants(dead, parent_of)

    # 2. split what grew over twice the limits
    created: list[NewRange] = []
    replaced: set[str] = set()
    split_ids: set[str] = set()
    for pid in sorted(rows):
        if pid in dead or limits.load(*cost(pid)) <= SPLIT_ABOVE:
            continue
        key = keys[pid]
        share_keys = [k for i, k in keys.items() if k.share == key.share and i not in dead
                      and k.host == key.host]  # fmt: skip
        made = split_ranges(rows[pid], cost=host_costs[key.host], limits=limits, within=key,
                            existing=share_keys)  # fmt: skip
        if not made:
            continue
        split_ids.add(pid)
        created.extend(made)
        if not key.is_share_root and any(r.key.root == key.root for r in made):
            replaced.add(pid)

    # 3. merge what shrank under half the limits into its parent
    merges: dict[str, str] = {pid: parent_of[pid] for pid in replaced}  # type: ignore[misc]
    receiving: dict[str, list[float]] = {}
    for pid in sorted(rows):
        parent = parent_of[pid]
        if (pid in dead or pid in split_ids or keys[pid].is_share_root or parent is None
                or parent not in by_id or parent in dead or parent in split_ids
                or parent in merges or pid in receiving):  # fmt: skip
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
    ranges: dict[tuple[str, str], Ranges] = {}
    for host, share in {(k.host, k.share) for k in final.values()}:
        ranges[host, share] = Ranges(
            k for k in final.values() if (k.host, k.share) == (host, share)
        )

    def parent_id(key: PartitionKey) -> str | None:
        if key.is_share_root:
            return None
        default = share_root(key.host, key.share)
        return ranges[key.host, key.share].owner(key.root, True, default).id

    create = [
        {"partition_id": r.key.id, "host": r.key.host, "share": r.key.share, "root": r.key.root,
         "lo": r.key.lo, "hi": r.key.hi, "parent_id": parent_id(r.key),
         "est_scan_s": r.est_scan_s, "mem_bytes": r.mem_bytes}
        for r in created
    ]  # fmt: skip
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

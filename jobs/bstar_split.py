"""B*-subtree splitting (thesis §3.2.1; docs/DESIGN.md, B*-subtrees) as pure functions, under
jobs.mr_listing. A folder hands its parent the cost of what stays with it; new ranges weigh
between FILL and about 1.75 limits, inside the band re-partitioning leaves alone."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sharecrawl.jobs.membership import PartitionKey, Ranges, parent_path, parent_paths
from sharecrawl.jobs.scan_cost import HostCost, Limits, listing_seconds
from sharecrawl.jobs.subtree_hash import canonical_sort_key, media_mask

FILL = 0.75  # a range is closed before the limit only once it holds this share of it
MERGE_BELOW = 0.5  # thesis §3.3: merge a partition under half the limits ...
SPLIT_ABOVE = 2.0  # ... split one over twice the limits
MEDIA = "_media"  # the column of listing rows that are media files, while planning


def partition_folders(
    entries: pa.Table, root: str, cost: HostCost, media: pa.Array | None = None
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The folders of a partition (its root first, then its rows' folders, canonical order) and
    each one's own cost: seconds (one listing, its media files' tag reads) and their paths' bytes.
    `entries` has columns path, name, is_dir; `media` its media mask."""
    is_dir = entries["is_dir"]
    dirs = pc.cast(pc.filter(entries["path"], is_dir), pa.large_string())
    folders = pa.concat_arrays(
        [pa.array([root], pa.large_string()), pa.chunked_array(dirs).combine_chunks()]
    )
    folders = folders.take(pc.sort_indices(canonical_sort_key(folders)))
    if media is None:
        media = pc.and_(pc.invert(is_dir), media_mask(entries["name"]))
    media_paths = pc.filter(entries["path"], media)
    where = pc.index_in(parent_paths(media_paths), value_set=folders)
    if where.null_count:
        raise ValueError("media files outside the folders of their partition")
    where = where.to_numpy(zero_copy_only=False)
    n_media = np.bincount(where, minlength=len(folders))
    path_bytes = pc.binary_length(media_paths).to_numpy(zero_copy_only=False)
    mem = np.bincount(where, weights=path_bytes, minlength=len(folders)).astype(np.float64)
    # each folder alone: one listing (a partition of no folder below its root) and its tags
    seconds = listing_seconds(0, cost.list_s_per_folder) + n_media * cost.tag_s_per_file
    return folders.to_pylist(), seconds, mem


@dataclass(slots=True)
class _Frame:
    """A folder being walked: its children, and the running sums over them."""

    path: str
    children: list[str]
    own_s: float
    own_b: float
    barriers: list[PartitionKey]  # existing ranges here, by lo
    top: PartitionKey | None = None  # the range partition whose root this is
    lo: str | None = None
    end: str | None = None  # the upper bound of the last range here
    next_child: int = 0
    next_barrier: int = 0
    run_s: float = 0.0
    run_b: float = 0.0
    kept_s: float = 0.0
    kept_b: float = 0.0
    closed: list[list[Any]] = field(default_factory=list)  # [lo, hi, seconds, bytes]

    def __post_init__(self) -> None:
        if self.top is not None:
            self.lo, self.end = self.top.lo, self.top.hi


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
    media: pa.Array | None = None,
) -> list[NewRange]:
    """The range partitions to create inside partition `within` from its listing `entries` (path,
    name, is_dir; `media` their media mask, when known). New ranges never overlap `existing` ones
    rooted at the same folder; ranges at a range's own root replace it, covering its interval."""
    paths, own_s, own_b = partition_folders(entries, within.root, cost, media)
    seconds, mem = own_s.tolist(), own_b.tolist()
    parents = [parent_path(path) for path in paths]
    children: dict[str, list[str]] = defaultdict(list)
    index = {path: i for i, path in enumerate(paths)}
    leaf = [True] * len(paths)
    for path, parent in zip(paths[1:], parents[1:], strict=True):
        if parent not in index or len(path) <= len(within.root):
            raise ValueError(f"folder {path!r} is not under partition root {within.root!r}")
        children[parent].append(path[len(parent) + 1 if parent else 0 :])
        leaf[index[parent]] = False
    ranges = Ranges(
        key
        for key in existing
        if key.share == within.share
        and key != within
        and key.root in index
        # a range partition's siblings lie outside its interval
        and (within.is_share_root or key.root != within.root)
    )
    made: list[NewRange] = []
    max_s, max_b = limits.max_seconds, limits.max_bytes

    def load(s: float, b: float) -> float:
        return max(s / max_s, b / max_b)

    def close(f: _Frame, lo: str | None, hi: str | None) -> None:
        f.closed.append([lo, hi, f.run_s, f.run_b])
        f.run_s = f.run_b = 0.0

    def next_bound(f: _Frame, index: int) -> str | None:
        bounds = [f.children[index + 1]] if index + 1 < len(f.children) else []
        if f.next_barrier < len(f.barriers) and f.barriers[f.next_barrier].lo is not None:
            bounds.append(f.barriers[f.next_barrier].lo)  # type: ignore[arg-type]
        return min(bounds) if bounds else f.end

    def add_child(f: _Frame, s: float, b: float) -> None:
        index = f.next_child
        name = f.children[index]
        f.next_child = index + 1
        if f.next_barrier < len(f.barriers):
            cross_barriers(f, name)
        run_s, run_b = f.run_s, f.run_b
        # load(run + child) > 1 and load(run) >= FILL, spelled out: this runs once a folder
        if ((run_s + s) / max_s > 1 or (run_b + b) / max_b > 1) and (
            run_s / max_s >= FILL or run_b / max_b >= FILL
        ):
            close(f, f.lo, name)
            f.lo = name
            run_s = run_b = 0.0
        run_s += s
        run_b += b
        f.run_s, f.run_b = run_s, run_b
        if run_s / max_s >= 1 or run_b / max_b >= 1:
            hi = next_bound(f, index)
            close(f, f.lo, hi)
            f.lo = hi

    def cross_barriers(f: _Frame, name: str) -> None:
        """Before child `name`: pass the existing ranges that end at or before it."""
        lo_before, first_crossed = f.lo, None
        while f.next_barrier < len(f.barriers):
            barrier = f.barriers[f.next_barrier]
            if barrier.hi is None or name < barrier.hi:
                break
            first_crossed = first_crossed or barrier
            f.lo = barrier.hi
            f.next_barrier += 1
        if first_crossed is not None and (f.run_s or f.run_b):
            # a range cannot reach across an existing one: close what ran so far, or keep
            # it in this folder's partition when too small to stand alone
            if load(f.run_s, f.run_b) >= MERGE_BELOW:
                close(f, lo_before, first_crossed.lo)
            else:
                f.kept_s += f.run_s
                f.kept_b += f.run_b
                f.run_s = f.run_b = 0.0

    def finish(f: _Frame) -> tuple[float, float]:
        if f.top is not None and f.closed and (f.run_s or f.run_b):
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
    # below it. A folder without subfolders hands its own cost to its parent at once (most
    # folders are such leaves: an album).
    top_of_range = not within.is_share_root
    stack = [
        _Frame(
            paths[0],
            children.get(paths[0], []),
            0.0 if top_of_range else seconds[0],
            0.0 if top_of_range else mem[0],
            ranges.at(paths[0]),
            within if top_of_range else None,
        )
    ]
    for i in range(1, len(paths)):
        path, parent = paths[i], parents[i]
        while stack[-1].path != parent:
            s, b = finish(stack.pop())
            add_child(stack[-1], s, b)
        if leaf[i]:
            add_child(stack[-1], seconds[i], mem[i])
        else:
            stack.append(_Frame(path, children[path], seconds[i], mem[i], ranges.at(path)))
    while len(stack) > 1:
        s, b = finish(stack.pop())
        add_child(stack[-1], s, b)
    top = stack[0]
    if top.top is not None and len(top.closed) == 1 and top.closed[0][:2] == [within.lo, within.hi]:
        top.closed = []  # the whole interval in one range: that is the partition itself
    finish(top)
    return made

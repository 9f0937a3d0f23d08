"""Walk one partition of a share in canonical order, stopping where child partitions begin. A
folder that cannot be opened is yielded without children; a denied one is noted in
`WalkStats.denied` so its stored rows are kept."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa

from sharecrawl.crawl_io.schema import LISTING
from sharecrawl.crawl_io.sources import AccessDenied, Entry, NotFound, Source
from sharecrawl.jobs.membership import PartitionKey, Ranges


@dataclass
class WalkStats:
    folders_listed: int = 0
    folders_unreadable: int = 0
    denied: list[str] = field(default_factory=list)  # folders whose listing was refused
    listed_at: float | None = None  # the oldest listing another partition's walk made for it


@dataclass
class SharedRoots:
    """The roots of the range partitions a host's fetch walks. Each is also a folder of its
    parent partition and of the other ranges of its folder: listed once a round, by the first
    walk that comes to it, and kept for the others (a share root of a million folders split
    into a thousand ranges would otherwise be listed a thousand times)."""

    roots: set[tuple[str, str]]  # (share, folder)
    listed: dict[tuple[str, str], tuple[float, list[Entry]]] = field(default_factory=dict)

    def listdir(self, source: Source, share: str, folder: str, stats: WalkStats) -> list[Entry]:
        kept = self.listed.get((share, folder))
        if kept is not None:  # the walk's snapshot of the folder is from when it was listed
            at, entries = kept
            stats.listed_at = at if stats.listed_at is None else min(stats.listed_at, at)
            return entries
        at = time.time()
        entries = source.listdir(share, folder)
        if (share, folder) in self.roots:
            self.listed[share, folder] = (at, entries)
        return entries

    def kept(self, share: str, folder: str) -> bool:
        return (share, folder) in self.listed


def walk_partition(
    source: Source,
    key: PartitionKey,
    ranges: Ranges,
    stats: WalkStats | None = None,
    shared: SharedRoots | None = None,
) -> Iterator[tuple[str, Entry]]:
    """(share-relative path, entry) of every file and folder of the partition; NotFound when its
    root folder is gone. With `shared`, its folders listed by an earlier walk are not listed
    again (`stats.listed_at` says when they were)."""
    stats = stats if stats is not None else WalkStats()
    shared = shared if shared is not None else SharedRoots(set())
    share, root = key.share, key.root
    # A source that lists ahead (SMB) is told the folders the walk lists next, in its order:
    # guessed from listings, the subfolders that child partitions claim would fill its window.
    expect = getattr(source, "expect", None)

    def children(folder: str) -> list[Entry]:
        stats.folders_listed += 1
        try:
            return shared.listdir(source, share, folder, stats)
        except (AccessDenied, NotFound) as e:
            stats.folders_unreadable += 1
            if isinstance(e, AccessDenied):
                stats.denied.append(folder)
            return []

    def members(folder: str, entries: list[Entry]) -> list[Entry]:
        own = entries  # most folders root no range partition: nothing to leave out
        if ranges.roots(folder):
            own = [e for e in entries if not (e.is_dir and ranges.claiming(folder, e.name))]
        if expect is not None:
            ahead(folder, own)
        return own

    def ahead(folder: str, entries: list[Entry]) -> None:
        paths = (f"{folder}/{e.name}" if folder else e.name for e in entries if e.is_dir)
        expect(share, [p for p in paths if not shared.kept(share, p)])

    if expect is not None and not shared.kept(share, root):
        expect(share, [root])
    top = shared.listdir(source, share, root, stats)
    stats.folders_listed += 1  # listed for it, if not by it: its cost counts the folder
    if key.is_share_root:
        first = members(root, top)
    else:
        first = [e for e in top if e.is_dir and key.covers(e.name)]
        if expect is not None:
            ahead(root, first)

    # a stack, not recursion (shares can be thousands of folders deep) of (path prefix, children
    # to visit); the inner loop runs once an entry of the LAN: a plain for over the children
    stack: list[tuple[str, Iterator[Entry]]] = [(f"{root}/" if root else "", iter(first))]
    while stack:
        prefix, pending = stack[-1]
        for entry in pending:
            path = prefix + entry.name
            yield path, entry
            if entry.is_dir:
                stack.append((path + "/", iter(members(path, children(path)))))
                break
        else:
            stack.pop()


def listing_table(key: PartitionKey, entries: list[tuple[str, Entry]]) -> pa.Table:
    """A partition's walked entries as rows of the `listing` table."""
    n = len(entries)
    paths, items = zip(*entries, strict=True) if entries else ((), ())
    columns = {
        "host": [key.host] * n,
        "share": [key.share] * n,
        "path": paths,
        "name": [e.name for e in items],
        "is_dir": [e.is_dir for e in items],
        "size": [e.size for e in items],
        "mtime": [e.mtime_us for e in items],
        "partition_id": [key.id] * n,
    }
    return pa.Table.from_pydict(columns, LISTING)

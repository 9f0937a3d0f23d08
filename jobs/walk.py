"""Walk one partition of a share in canonical order, stopping where child partitions begin. A
folder that cannot be opened is yielded without children; a denied one is noted in
`WalkStats.denied` so its stored rows are kept."""

from __future__ import annotations

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


def walk_partition(
    source: Source, key: PartitionKey, ranges: Ranges, stats: WalkStats | None = None
) -> Iterator[tuple[str, Entry]]:
    """(share-relative path, entry) of every file and folder of the partition; NotFound when its
    root folder is gone."""
    stats = stats if stats is not None else WalkStats()
    share, root = key.share, key.root

    def children(folder: str) -> list[Entry]:
        stats.folders_listed += 1
        try:
            return source.listdir(share, folder)
        except (AccessDenied, NotFound) as e:
            stats.folders_unreadable += 1
            if isinstance(e, AccessDenied):
                stats.denied.append(folder)
            return []

    def members(folder: str, entries: list[Entry]) -> list[Entry]:
        return [e for e in entries if not (e.is_dir and ranges.claiming(folder, e.name))]

    top = source.listdir(share, root)
    stats.folders_listed += 1
    if key.is_share_root:
        first = members(root, top)
    else:
        first = [e for e in top if e.is_dir and key.covers(e.name)]

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

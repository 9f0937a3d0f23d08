"""A hinted scan (docs/DESIGN.md, Scheduling): list only each hinted path's folder and the one
above it, keep the rest of the stored rows; a folder new or hinted itself is walked whole (a
folder moved in is one notification). Anything unexpected raises `WholeScan`."""

from __future__ import annotations

from collections.abc import Iterable

from sharecrawl.crawl_io.sources import AccessDenied, Entry, NotFound, Source
from sharecrawl.jobs.membership import PartitionKey, Ranges, parent_path, share_root
from sharecrawl.jobs.subtree_hash import canonical_key, walk_hash
from sharecrawl.jobs.walk import WalkStats


class WholeScan(Exception):
    """The hinted scan cannot stand for a full one: walk the partition whole."""


def _under(path: str, folder: str) -> bool:
    return path.startswith(folder + "/") if folder else True


class _Partition:
    """Which folders' listings a partition holds, and which of their entries are its own."""

    def __init__(self, key: PartitionKey, ranges: Ranges, source: Source, stats: WalkStats) -> None:
        self.key, self.ranges, self.source, self.stats = key, ranges, source, stats
        self.root_key = share_root(key.host, key.share)

    def holds_listing(self, folder: str) -> bool:
        """Are (some of) the entries of `folder` this partition's?"""
        if folder == self.key.root and not self.key.is_share_root:
            return True  # a range partition's root: the subfolders in its range
        if folder and not _under(folder, self.key.root) and folder != self.key.root:
            return False
        return self.ranges.owner(folder, True, self.root_key) == self.key

    def own(self, folder: str, entries: list[Entry]) -> list[Entry]:
        if folder == self.key.root and not self.key.is_share_root:
            return [e for e in entries if e.is_dir and self.key.covers(e.name)]
        return [e for e in entries if not (e.is_dir and self.ranges.claiming(folder, e.name))]

    def expect(self, folders: list[str]) -> None:
        """Tell a source that lists ahead (SMBSource.expect) the folders listed next."""
        expect = getattr(self.source, "expect", None)
        if expect is not None and folders:
            expect(self.key.share, folders)

    def listdir(self, folder: str) -> list[Entry]:
        """The partition's entries of `folder`, listed now."""
        try:
            entries = self.source.listdir(self.key.share, folder)
        except (NotFound, AccessDenied) as e:
            raise WholeScan(f"{folder!r}: {type(e).__name__}") from None
        self.stats.folders_listed += 1
        return self.own(folder, entries)


def hinted_walk(
    source: Source,
    key: PartitionKey,
    ranges: Ranges,
    stored: Iterable[tuple[str, Entry]],
    stored_hash: str | None,
    hinted: Iterable[str],
    stats: WalkStats,
) -> list[tuple[str, Entry]]:
    """The partition's entries now, in canonical order, listing only around `hinted` paths
    (SourceError when the host is lost)."""
    rows = dict(stored)
    if stored_hash is None or walk_hash(_canonical(rows)) != stored_hash:
        raise WholeScan("stored rows do not match the stored hash")
    part = _Partition(key, ranges, source, stats)
    hinted = set(hinted)
    folders: set[str] = set()
    for path in hinted:
        folder = parent_path(path)
        folders.add(folder)
        if folder:
            folders.add(parent_path(folder))  # holds the folder's own entry (its mtime)
    replaced: list[str] = []  # folders whose subtree was read afresh (or is gone)
    listed = sorted((f for f in folders if part.holds_listing(f)), key=canonical_key)
    part.expect(listed)
    for folder in listed:
        if any(_under(folder, done) for done in replaced):
            continue  # read afresh already (a new folder walked whole, or gone)
        now = part.listdir(folder)
        prefix = f"{folder}/" if folder else ""
        before = {p: e for p, e in rows.items() if parent_path(p) == folder}
        names = {prefix + e.name: e for e in now}
        for path, entry in before.items():
            if path not in names:
                _drop(rows, path, entry.is_dir)
                replaced.append(path)
        for path, entry in names.items():
            old = rows.get(path)
            fresh = entry.is_dir and (old is None or not old.is_dir or path in hinted)
            if old is not None and old.is_dir and (fresh or not entry.is_dir):
                _drop(rows, path, True)  # what was below it is read again, or gone
            rows[path] = entry
            if fresh:
                rows.update(_walk(part, path))
            if fresh or (old is not None and old.is_dir and not entry.is_dir):
                replaced.append(path)
    return _canonical(rows)


def _drop(rows: dict[str, Entry], path: str, is_dir: bool) -> None:
    rows.pop(path, None)
    if is_dir:
        for below in [p for p in rows if p.startswith(path + "/")]:
            del rows[below]


def _walk(part: _Partition, top: str) -> list[tuple[str, Entry]]:
    """Everything below folder `top` that is the partition's, depth first."""
    found: list[tuple[str, Entry]] = []
    stack = [top]
    while stack:
        folder = stack.pop()
        below = len(stack)
        for entry in part.listdir(folder):
            path = f"{folder}/{entry.name}"
            found.append((path, entry))
            if entry.is_dir:
                stack.append(path)
        part.expect(stack[below:][::-1])  # in the order they are popped
    return found


def _canonical(rows: dict[str, Entry]) -> list[tuple[str, Entry]]:
    return sorted(rows.items(), key=lambda item: canonical_key(item[0]))

"""B*-subtree partitions (thesis §3.1): keys, ids and the one membership rule (docs/DESIGN.md,
B*-subtrees): a folder belongs to the range of its parent folder that covers its name if there
is one, else to its parent's partition; a file to its folder's."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True, order=True)
class PartitionKey:
    host: str
    share: str
    root: str
    lo: str | None
    hi: str | None

    @property
    def is_share_root(self) -> bool:
        return self.root == "" and self.lo is None and self.hi is None

    @property
    def id(self) -> str:
        return partition_id(self.host, self.share, self.root, self.lo, self.hi)

    def covers(self, name: str) -> bool:
        """Does this range claim the subfolder `name` of its root?"""
        within = (self.lo is None or self.lo <= name) and (self.hi is None or name < self.hi)
        return within and not self.is_share_root


def partition_id(host: str, share: str, root: str, lo: str | None, hi: str | None) -> str:
    text = "\0".join(
        [host, share, root, "" if lo is None else "=" + lo, "" if hi is None else "=" + hi]
    )
    return hashlib.md5(text.encode()).hexdigest()[:16]


def share_root(host: str, share: str) -> PartitionKey:
    return PartitionKey(host, share, "", None, None)


class Ranges:
    """The range partitions of one share, indexed by root folder, for membership tests."""

    def __init__(self, keys: Iterable[PartitionKey]) -> None:
        self._by_root: dict[str, list[PartitionKey]] = {}
        for key in keys:
            if not key.is_share_root:
                self._by_root.setdefault(key.root, []).append(key)

    def roots(self, folder: str) -> bool:
        """Does a range partition start at `folder` (a walk asks of every folder it lists)?"""
        return folder in self._by_root

    def at(self, folder: str) -> list[PartitionKey]:
        """The range partitions rooted at `folder`, by lower bound (unbounded first)."""
        found = self._by_root.get(folder, [])
        return sorted(found, key=lambda k: (k.lo is not None, k.lo or ""))

    def claiming(self, folder: str, name: str) -> PartitionKey | None:
        """The range partition that claims subfolder `name` of `folder`, if any."""
        for key in self._by_root.get(folder, ()):
            if key.covers(name):
                return key
        return None

    def owner(self, path: str, is_dir: bool, default: PartitionKey) -> PartitionKey:
        """The partition holding `path`, the share root partition being `default`."""
        parts = path.split("/") if path else []
        owner = default
        folder = ""
        depth = len(parts) if is_dir else len(parts) - 1
        for name in parts[:depth]:
            claim = self.claiming(folder, name)
            if claim is not None:
                owner = claim
            folder = f"{folder}/{name}" if folder else name
        return owner


def descendants(roots: Iterable[str], parent_of: Mapping[str, str | None]) -> set[str]:
    """`roots` and every partition below them (`parent_of`: each partition's parent_id)."""
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


def partition_key(row: Mapping[str, Any]) -> PartitionKey:
    return PartitionKey(row["host"], row["share"], row["root"], row["lo"], row["hi"])


def parent_path(path: str) -> str:
    """The folder holding `path` ('' for the share root's entries)."""
    slash = path.rfind("/")
    return path[:slash] if slash >= 0 else ""


def parent_paths(paths: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """parent_path of every path of a string column (large strings)."""
    paths = pc.cast(paths, pa.large_string())
    split = pc.split_pattern(paths, "/", max_splits=1, reverse=True)
    nested = pc.equal(pc.list_value_length(split), 2)
    return pc.if_else(nested, pc.list_element(split, 0), pa.scalar("", pa.large_string()))


def assign_partition_ids(table: pa.Table, keys: Iterable[PartitionKey]) -> pa.Array:
    """Each row's partition (Ranges.owner) under `keys`, for LISTING/FILES rows of any hosts and
    shares, one lookup a folder."""
    by_share: dict[tuple[str, str], list[PartitionKey]] = defaultdict(list)
    for key in keys:
        by_share[key.host, key.share].append(key)
    ranges = {hs: Ranges(found) for hs, found in by_share.items()}
    folder_owner: dict[tuple[str, str, str], str] = {}

    def owner_of_folder(host: str, share: str, path: str) -> str:
        """The partition holding folder `path` (iterative: shares can be very deep)."""
        pending = []
        while (host, share, path) not in folder_owner and path:
            pending.append(path)
            path = parent_path(path)
        if (host, share, path) not in folder_owner:  # path == '' : the share root
            folder_owner[host, share, ""] = share_root(host, share).id
        owner = folder_owner[host, share, path]
        ranged = ranges.get((host, share))
        for folder in reversed(pending):
            parent = parent_path(folder)
            claim = ranged and ranged.claiming(parent, folder[len(parent) + 1 if parent else 0 :])
            owner = claim.id if claim is not None else owner
            folder_owner[host, share, folder] = owner
        return owner

    out = []
    columns = (table[c].to_pylist() for c in ("host", "share", "path", "is_dir"))
    for host, share, path, is_dir in zip(*columns, strict=True):
        out.append(owner_of_folder(host, share, path if is_dir else parent_path(path)))
    return pa.array(out, pa.string())

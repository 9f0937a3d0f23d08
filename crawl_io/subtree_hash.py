"""The one definition of partition and folder hashes (thesis §3.4.1).

A partition's hash is md5 over its entries in canonical order (children sorted by name, depth
first), each as (path relative to the share, is_dir, size, mtime). The fetcher
feeds it while streaming a walk; the jobs feed it from stored listings; both must agree.
A folder's Merkle hash covers its child folders' hashes and its files' names, sizes and
mtimes; the content hash leaves times out so equal folders on different hosts match.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable

from crawl_io.sources import Entry


def canonical_key(path: str) -> tuple[str, ...]:
    """Sort key giving depth-first order with children sorted by name ('a/b' before 'a b')."""
    return tuple(path.split("/")) if path else ()


def _record_text(path: str, is_dir: bool, size: int, mtime_us: int) -> str:
    return f"{path}\0{'d' if is_dir else 'f'}\0{size}\0{mtime_us}\n"


def _record(path: str, is_dir: bool, size: int, mtime_us: int) -> bytes:
    return _record_text(path, is_dir, size, mtime_us).encode()


class PartitionHasher:
    """Streaming hash of a partition's entries, fed in canonical order."""

    def __init__(self) -> None:
        self._md5 = hashlib.md5()
        self.n_entries = 0

    def update(self, path: str, is_dir: bool, size: int, mtime_us: int) -> None:
        self._md5.update(_record(path, is_dir, size, mtime_us))
        self.n_entries += 1

    def hexdigest(self) -> str:
        return self._md5.hexdigest()


def walk_hash(walk: Iterable[tuple[str, Entry]]) -> str:
    """The partition hash of a walk's (path, entry) pairs, already in canonical order: the
    same digest as PartitionHasher fed one entry at a time, with one md5 call (a fetch hashes
    every entry of the LAN each round)."""
    text = "".join([_record_text(p, e.is_dir, e.size, e.mtime_us) for p, e in walk])
    return hashlib.md5(text.encode()).hexdigest()


def partition_hash(entries: Iterable[tuple[str, bool, int, int]]) -> str:
    """Hash of (path, is_dir, size, mtime_us) rows in any order."""
    hasher = PartitionHasher()
    for path, is_dir, size, mtime_us in sorted(entries, key=lambda e: canonical_key(e[0])):
        hasher.update(path, is_dir, size, mtime_us)
    return hasher.hexdigest()


def parent_path(path: str) -> str:
    slash = path.rfind("/")
    return path[:slash] if slash >= 0 else ""


def folder_hashes(
    entries: Iterable[tuple[str, bool, int, int]], *, with_times: bool = True
) -> dict[str, str]:
    """Merkle hashes of every folder that appears as a parent among (path, is_dir, size,
    mtime_us) rows: H(folder) = md5(child folders' names and hashes, file names, sizes[,
    mtimes]) in name order. With with_times=False the hash depends on content only."""
    children: dict[str, list[tuple[str, bool, int, int]]] = defaultdict(list)
    folders: set[str] = set()
    for path, is_dir, size, mtime_us in entries:
        name = path[path.rfind("/") + 1 :]
        children[parent_path(path)].append((name, is_dir, size, mtime_us if with_times else 0))
        if is_dir:
            folders.add(path)
    folders.update(children)
    hashes: dict[str, str] = {}
    for folder in sorted(folders, key=lambda p: -len(canonical_key(p))):
        md5 = hashlib.md5()
        for name, is_dir, size, mtime_us in sorted(children.get(folder, ())):
            if is_dir:
                child = f"{folder}/{name}" if folder else name
                md5.update(f"d\0{name}\0{hashes[child]}\n".encode())
            else:
                md5.update(f"f\0{name}\0{size}\0{mtime_us}\n".encode())
        hashes[folder] = md5.hexdigest()
    return hashes

"""The hash definitions written plainly, row by row: references the jobs' columnar hashes
(jobs.subtree_hash) are checked against."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable

from sharecrawl.jobs.membership import parent_path
from sharecrawl.jobs.subtree_hash import canonical_key


def partition_hash(entries: Iterable[tuple[str, bool, int, int]]) -> str:
    """Hash of (path, is_dir, size, mtime_us) rows in any order."""
    rows = sorted(entries, key=lambda e: canonical_key(e[0]))
    text = "".join(f"{p}\0{'d' if d else 'f'}\0{s}\0{m}\n" for p, d, s, m in rows)
    return hashlib.md5(text.encode()).hexdigest()


def folder_hashes(
    entries: Iterable[tuple[str, bool, int, int]], *, with_times: bool = True
) -> dict[str, str]:
    """Merkle hashes of every folder that is a parent among (path, is_dir, size, mtime_us) rows:
    md5(child folders' names and hashes, file names, sizes[, mtimes]) in name order."""
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

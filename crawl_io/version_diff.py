"""Which parts of a table differ between two crawldb versions.

A round rewrites only the parts whose rows changed; the others are hard links to the
previous version's parts, with their manifest entries carried forward. So two versions'
parts of a table are the same part when they have the same path in the table's folder and
the same SHA-256 in both manifests (a version without a manifest: the same inode). Readers
that keep something derived from a version (the search index) read only what differs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from crawl_io.version_manifest import ManifestError, read_manifest


@dataclass(frozen=True)
class PartsDiff:
    """The parts of one table that differ between an old and a new version."""

    old: list[Path]  # parts of the old version not in the new one as they are
    new: list[Path]  # parts of the new version not in the old one as they were

    def __bool__(self) -> bool:
        return bool(self.old or self.new)


def table_parts(version_dir: Path, table: str) -> list[Path]:
    """The Parquet parts of a per-host table (files, media, folders) present in a version
    folder, at any depth of the table's folder, sorted."""
    folder = Path(version_dir) / table
    return sorted(folder.rglob("*.parquet")) if folder.is_dir() else []


def _identities(version_dir: Path, table: str) -> dict[str, object]:
    """Each part's path relative to the version -> what identifies its content."""
    try:
        manifest = read_manifest(version_dir)
    except ManifestError:
        manifest = None
    parts = table_parts(version_dir, table)
    rels = {p.relative_to(version_dir).as_posix(): p for p in parts}
    if manifest is not None and all(rel in manifest for rel in rels):
        return {rel: ("sha256", manifest[rel].sha256) for rel in rels}
    return {rel: ("inode", os.stat(path).st_ino) for rel, path in rels.items()}


def changed_parts(old_dir: Path, new_dir: Path, table: str) -> PartsDiff:
    """The parts of `table` that differ between version folders `old_dir` and `new_dir`:
    a part is the same when its path is and its content is (SHA-256 in both manifests, or
    the same inode when either version has none)."""
    old_dir, new_dir = Path(old_dir), Path(new_dir)
    old, new = _identities(old_dir, table), _identities(new_dir, table)
    if {kind for kind, _ in old.values()} != {kind for kind, _ in new.values()}:
        old = {rel: ("inode", os.stat(old_dir / rel).st_ino) for rel in old}
        new = {rel: ("inode", os.stat(new_dir / rel).st_ino) for rel in new}
    return PartsDiff(
        old=[old_dir / rel for rel in sorted(old) if new.get(rel) != old[rel]],
        new=[new_dir / rel for rel in sorted(new) if old.get(rel) != new[rel]],
    )

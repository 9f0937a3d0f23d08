"""The cost of scanning a partition (thesis §3.2.1) for the split, Update's estimate and Generate:
listing every folder (`partitions.est_scan_s`), plus every media file's tags for a new partition
(what the limits bound)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sharecrawl.jobs.subtree_hash import media_mask

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


def listing_seconds(n_folders: int | None, list_s_per_folder: float) -> float:
    """Listing a partition: its root folder and its `n_folders` folders."""
    return ((n_folders or 0) + 1) * list_s_per_folder


def scan_seconds(n_folders: int | None, n_media: int | None, cost: HostCost) -> float:
    """Listing a partition and reading the tags of its `n_media` media files."""
    return listing_seconds(n_folders, cost.list_s_per_folder) + (n_media or 0) * cost.tag_s_per_file


def scheduled_seconds(est_scan_s: float | None, default_s: float) -> float:
    return est_scan_s or default_s  # the limit for a partition never estimated


def listing_cost(
    rows: pa.Table, cost: HostCost, media: pa.Array | None = None
) -> tuple[float, float]:
    """(scan seconds, media path bytes) of a partition's listing rows (`media`: their mask)."""
    if media is None:
        media = pc.and_(pc.invert(rows["is_dir"]), media_mask(rows["name"]))
    n_folders = pc.sum(rows["is_dir"].cast(pa.int64())).as_py() or 0
    n_media = pc.sum(media.cast(pa.int64())).as_py() or 0
    mem = pc.sum(pc.binary_length(pc.filter(rows["path"], media))).as_py() or 0
    return scan_seconds(n_folders, n_media, cost), mem


def stored_cost(row: Mapping[str, Any], cost: HostCost) -> tuple[float, float]:
    """The same estimate from a partitions row (its mem_bytes when known)."""
    n_media, mem = row.get("n_media") or 0, row.get("mem_bytes")
    mem = n_media * DEFAULT_MEDIA_PATH_BYTES if mem is None else mem
    return scan_seconds(row.get("n_folders"), n_media, cost), mem

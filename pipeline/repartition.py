"""Re-partitioning during Update (thesis §3.2-3.3): apply the split job's plan to the
partitions, then reassign the affected hosts' file rows and recompute those partitions'
hashes, so the next scan of an untouched partition finds it unchanged."""

from __future__ import annotations

from datetime import datetime

import pyarrow as pa

from sharecrawl.crawl_io.schema import PARTITIONS
from sharecrawl.jobs.membership import PartitionKey, assign_partition_ids, partition_key
from sharecrawl.jobs.subtree_hash import EMPTY_MD5, PARTITION_COUNTS, summarize

NEW_FIELDS = ("partition_id", "host", "share", "root", "lo", "hi", "parent_id", "est_scan_s")
EMPTY = {"hash": EMPTY_MD5, **dict.fromkeys(PARTITION_COUNTS, 0)}


def apply(plan_: dict[str, list], partitions: list[dict], scanned_at: datetime) -> set[str]:
    """Apply a plan to the partition rows in place; return the hosts it touched."""
    by_id = {p["partition_id"]: p for p in partitions}
    dropped = set(plan_["delete"]) | {child for child, _ in plan_["merge"]}
    touched = {by_id[pid]["host"] for pid in dropped if pid in by_id}
    for new in plan_["create"]:
        by_id[new["partition_id"]] = {
            **dict.fromkeys(PARTITIONS.names),
            **{k: new[k] for k in NEW_FIELDS},
            # listed just now as part of the partition it was split from
            "first_seen": scanned_at,
            "last_scan": scanned_at,
            "n_scans": 1,
            "n_changes": 0,
            "history": [],
            "status": "ok",
        }
        touched.add(new["host"])
    for pid, parent in plan_["reparent"]:
        if pid in by_id:
            by_id[pid]["parent_id"] = parent
    partitions[:] = [p for pid, p in by_id.items() if pid not in dropped]
    return touched


def reassign(files: pa.Table, host_partitions: list[dict]) -> tuple[pa.Table, dict[str, dict]]:
    """A host's file rows with their partition ids under the host's partitions now, and
    every such partition's hash and sizes."""
    keys: list[PartitionKey] = [partition_key(p) for p in host_partitions]
    ids = assign_partition_ids(files, keys)
    files = files.set_column(files.schema.get_field_index("partition_id"), "partition_id", ids)
    summaries = summarize(files)
    return files, {
        p["partition_id"]: summaries.get(p["partition_id"], EMPTY) for p in host_partitions
    }

"""A host's folder rows brought up to date from the stored ones: only the changed paths'
ancestors are hashed anew (a Merkle hash, thesis §3.4.1), the result folder_summaries'."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from sharecrawl.crawl_io.schema import FOLDERS
from sharecrawl.jobs.subtree_hash import FolderSeed, folder_keys, folder_summaries

SUMMARY = ("hash", "content_hash", "n_files", "bytes")  # a folder row's, after its key


def changed_folders(changed: pa.Table) -> pa.Array:
    """The keys (folder_keys) of the `changed` rows and of every folder above them."""
    keys: set[str] = set()
    rows = changed.select(["host", "share", "path"]).to_pylist() if changed.num_rows else []
    for row in rows:
        parts = row["path"].split("/")
        head = f"{row['host']}\x00{row['share']}\x00"
        keys.update(head + "/".join(parts[:depth]) for depth in range(1, len(parts) + 1))
    return pa.array(sorted(keys), pa.large_string())


def updated_folder_summaries(
    table: pa.Table, known: pa.Table, changed: pa.Table
) -> pa.Table | None:
    """folder_summaries of one host's rows `table` (FILES), from its FOLDERS rows `known` before and
    every `changed` path's rows; None when `known` lacks an unchanged folder's row."""
    if not pc.any(table["is_dir"]).as_py():
        return FOLDERS.empty_table()
    table = table.combine_chunks()
    affected = changed_folders(changed)
    key = folder_keys(table)
    inside = pc.or_(
        pc.is_in(folder_keys(table, "parent"), value_set=affected),
        pc.is_in(key, value_set=affected),
    )
    rows = table.filter(inside)
    known_keys = folder_keys(known)
    is_dir = table["is_dir"].chunk(0)
    dirs = key.filter(is_dir)
    dirs_affected = pc.is_in(dirs, value_set=affected)
    stored_at = pc.index_in(dirs, value_set=known_keys)
    if pc.any(pc.and_(pc.invert(dirs_affected), pc.is_null(stored_at))).as_py():
        return None  # an unchanged folder with no stored row
    seed_keys = folder_keys(rows.filter(rows["is_dir"]))
    seed_keys = seed_keys.filter(pc.invert(pc.is_in(seed_keys, value_set=affected)))
    seeded = known.take(pc.index_in(seed_keys, value_set=known_keys))
    summaries = zip(*(seeded[c].to_pylist() for c in SUMMARY), strict=True)
    seed: FolderSeed = dict(zip(seed_keys.to_pylist(), summaries, strict=True))
    fresh = folder_summaries(rows, seed)
    fresh_at = pc.index_in(dirs, value_set=folder_keys(fresh))
    chosen_fresh, chosen_known = fresh.take(fresh_at), known.select(FOLDERS.names).take(stored_at)
    columns = {
        name: pc.if_else(dirs_affected, chosen_fresh[name], chosen_known[name]) for name in SUMMARY
    }
    dir_rows = table.filter(is_dir)
    return pa.table({name: dir_rows[name] for name in ("host", "share", "path")} | columns).cast(
        FOLDERS
    )

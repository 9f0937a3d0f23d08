"""Update, one host the round touched: its files, media and folders rows, rewritten only in the
groups of parts whose partitions changed (crawl_io.crawldb.host_parts, part_groups) and hard
links to the previous version's parts for the rest. Folder hashes above a change are hashed
anew from the unchanged subfolders' stored rows (jobs.folder_update) unless rows left by
damage or new rules, most rows changed, or the round is complete; then every row is hashed.
A damaged group's partitions not listed again lose their rows (and hashes: listed next round)."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sharecrawl.crawl_io.crawldb.host_parts import rel_path
from sharecrawl.crawl_io.crawldb.part_groups import plan_groups
from sharecrawl.crawl_io.crawldb.stored_hosts import StoredHosts
from sharecrawl.crawl_io.schema import FILES, FOLDERS, MEDIA
from sharecrawl.jobs.crawl_rules import Rules
from sharecrawl.jobs.folder_update import updated_folder_summaries
from sharecrawl.jobs.subtree_hash import canonical_key, folder_summaries
from sharecrawl.pipeline import repartition
from sharecrawl.pipeline.host_merge import denied_hashes, merged_files, merged_media
from sharecrawl.pipeline.publish import VersionBuild

BY_PATH = [("share", "ascending"), ("path", "ascending")]


@dataclass
class HostChange:
    """What the round brings to one host."""

    host: str
    listing: pa.Table  # this round's listing rows of the host (LISTING)
    fetched: pa.Table  # tags read this round (MEDIA)
    log: pa.Table  # the host's fetchlog rows
    drop: set[str]  # partitions whose stored rows go: listed again (changed, new) or removed
    partitions: list[dict]  # the host's partitions now; sizes and hashes set when reshaped
    reshaped: bool  # re-partitioned this round: every row's partition is assigned again
    rules: Rules
    rules_changed: bool  # new rules: excluded rows leave every group
    complete: bool = False  # a complete round: folder rows hashed over every row, none kept
    # what changed in the host's media rows (crawl_io.crawldb.media_changes), and the media parts
    # that covers: the stored parts read, the parts written
    media_changes: pa.Table | None = None
    media_parts: tuple[list[str], list[str]] = ([], [])


def _concat(tables: list[pa.Table], schema: pa.Schema) -> pa.Table:
    return pa.concat_tables(tables) if tables else schema.empty_table()


def _ids(pids: set[str] | frozenset[str] | list[str]) -> pa.Array:
    return pa.array(sorted(pids), pa.string())


def _in(table: pa.Table, pids: set[str] | frozenset[str] | list[str]) -> pa.Table:
    return table.filter(pc.is_in(table["partition_id"], _ids(pids)))


def rewrite_host(build: VersionBuild, stored: StoredHosts | None, change: HostChange) -> set[str]:
    """Write (or link) the host's groups into the version being built; return the
    partitions whose stored rows were lost to a damaged part and not listed again."""
    host = change.host
    groups = stored.groups(host) if stored is not None else []
    old_files = {g: stored.read_group("files", host, g) for g in groups} if stored else {}
    damaged = {g for g, t in old_files.items() if t is None}
    old_pids = {g: stored.group_partitions(host, g) or frozenset() for g in groups if stored}
    lost = _lost_to_damage(change, old_pids, damaged)

    hit = {g for g in groups if g not in damaged and old_pids[g] & change.drop}
    kept = [old_files[g] for g in groups if g not in damaged and g not in hit]
    stale = _concat([old_files[g] for g in sorted(hit)], FILES)
    merged = merged_files(stale, change.listing, change.log, change.drop)
    if not change.rules_changed:
        merged = change.rules.drop_excluded(merged)
    whole = _concat([*kept, merged], FILES)
    if change.reshaped:
        whole, sizes = repartition.reassign(whole, change.partitions)
        shut = denied_hashes(whole, change.log)
        for p in change.partitions:
            p.update(sizes[p["partition_id"]])
            p["hash"] = shut.get(p["partition_id"], p["hash"])  # as the walk sees it
    if change.rules_changed:
        whole = change.rules.drop_excluded(whole)

    counts = pc.value_counts(whole["partition_id"])
    rows = dict(
        zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True)
    )
    order = [p["partition_id"] for p in sorted(change.partitions, key=_canonical)]
    parent = {p["partition_id"]: p["parent_id"] for p in change.partitions}
    plan = plan_groups(old_pids, rows, order, parent)

    compare = change.reshaped or change.rules_changed
    dirty = set()
    for g, pids in plan.items():
        if g not in old_pids or g in damaged or g in hit or set(pids) != old_pids[g]:
            dirty.add(g)
        elif compare and not _same(_in(whole, pids), old_files[g]):
            dirty.add(g)
    # media of the dirty groups: the stored rows of the groups their partitions were in
    wanted = {pid for g in dirty for pid in plan[g]}
    sources = [g for g in groups if g not in damaged and old_pids[g] & wanted]
    old_media, read = [], []
    for g in sources:
        table = stored.read_group("media", host, g) if stored is not None else None
        if table is None:  # damaged: its partitions' rows go, to be listed again whole
            gone = old_pids[g] - change.drop
            lost |= gone
            whole = whole.filter(pc.invert(pc.is_in(whole["partition_id"], _ids(gone))))
        else:
            old_media.append(table)
            read.append(rel_path("media", host, g))
    dirty_files = _in(whole, wanted)
    media, change.media_changes = merged_media(
        _concat(old_media, MEDIA), change.fetched, dirty_files
    )
    # a damaged part's rows were not read, nor is a group not linked: neither is covered,
    # and the index compares that host's parts
    change.media_parts = (read, [rel_path("media", host, g) for g in dirty])
    old_folders = {g: _read(stored.path("folders", host, g)) for g in groups} if stored else {}
    folders = None
    # rows that left `whole` other than by a listing (damage, new rules) are not in `changed`
    if old_folders and not (damaged or lost or change.rules_changed or change.complete):
        known = [t for t in old_folders.values() if t is not None]
        if len(known) == len(old_folders):  # every stored folders part reads
            changed = _paths(_in(stale, change.drop), change.listing)
            if 4 * changed.num_rows < whole.num_rows:  # else hashing every folder costs less
                folders = updated_folder_summaries(whole, _concat(known, FOLDERS), changed)
    folders = folder_summaries(whole) if folders is None else folders
    # each folder row with the partition of its folder's files row
    dirs = whole.filter(whole["is_dir"]).select(["share", "path", "partition_id"])
    folders = folders.join(dirs, keys=["share", "path"], join_type="inner")
    for g, pids in plan.items():
        if g in dirty:
            build.write_group(
                host,
                g,
                {
                    "files": _in(dirty_files, pids).sort_by(BY_PATH),
                    "media": _in(media, pids).sort_by(BY_PATH).select(MEDIA.names),
                    "folders": _in(folders, pids).sort_by(BY_PATH).select(FOLDERS.names),
                },
                set(pids),
            )
            continue
        if not build.link_group(host, g, ("files", "media")):
            lost |= set(pids) - change.drop
            continue
        mine = _in(folders, pids).sort_by(BY_PATH).select(FOLDERS.names)
        same = _same(mine, old_folders.get(g))
        if not (same and build.link_group(host, g, ("folders",))):
            build.write_group(host, g, {"folders": mine}, set(pids))
    return lost


def _lost_to_damage(
    change: HostChange, old_pids: dict[int, frozenset[str]], damaged: set[int]
) -> set[str]:
    """The partitions of damaged groups not listed again this round: those their footers
    name, or, when none does, the host's partitions no other group holds."""
    lost: set[str] = set()
    held = {pid for g, pids in old_pids.items() if g not in damaged for pid in pids}
    for g in damaged:
        if old_pids[g]:
            lost |= old_pids[g]
        else:
            lost |= {p["partition_id"] for p in change.partitions} - held
    return lost - change.drop


def _canonical(p: dict) -> tuple:
    return (p["share"], canonical_key(p["root"] or ""), p["lo"] or "")


def _paths(*tables: pa.Table) -> pa.Table:
    """The (host, share, path) columns of rows of several tables, as one table."""
    schema = pa.schema([FILES.field(name) for name in ("host", "share", "path")])
    return pa.concat_tables([t.select(schema.names).cast(schema) for t in tables])


def _read(path: object) -> pa.Table | None:
    """A stored folders part as it is (None when it does not read: it is written anew)."""
    try:
        return pq.read_table(path, schema=FOLDERS, page_checksum_verification=True)
    except (OSError, pa.ArrowException):
        return None


def _same(rows: pa.Table, stored: pa.Table | None) -> bool:
    """Do two tables hold the same rows (in any order)?"""
    if stored is None or rows.num_rows != stored.num_rows:
        return False
    names = rows.schema.names
    return rows.sort_by(BY_PATH).equals(stored.select(names).cast(rows.schema).sort_by(BY_PATH))

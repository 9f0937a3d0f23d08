"""Update, the prefix_stats table, stored in parts per host and group as the files table is. A
prefix's row goes in the group of the folders part holding its folder (the nearest folder
still there; the share root: the share root partition's group, else the lowest group with a
folder of the share), so it costs no group of its own. A part whose rows and footer match the
previous one's is linked, else written; a group that counted a change last round is written
again with zeros. A host carried over with no change counted gets every part linked without a
look (most hosts, most rounds). A damaged part costs its host's statistics, computed again."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, partial

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir
from sharecrawl.crawl_io.crawldb.host_parts import (
    ROW_TABLES,
    VersionParts,
    footer_partitions,
    parse_part_file,
    part_file,
)
from sharecrawl.crawl_io.schema import PREFIX_STATS
from sharecrawl.jobs.membership import share_root
from sharecrawl.pipeline.publish import VersionBuild

STATS = "prefix_stats"
KEY = [("host", "ascending"), ("share", "ascending"), ("prefix", "ascending")]

log = logging.getLogger("sharecrawl")


@dataclass
class OldStats:
    """The previous version's statistics: the rows that read, its parts by (host, group),
    and what must be computed again."""

    table: pa.Table
    parts: dict[tuple[str, int], pa.Table] = field(default_factory=dict)
    damaged: set[str] = field(default_factory=set)  # hosts with a damaged part


def read_old_stats(crawl: CrawlDir, version: int) -> OldStats:
    """Version `version`'s statistics as Update starts from them."""
    if version == 0:
        return OldStats(PREFIX_STATS.empty_table())
    parts, problems = crawl.stats_parts(version)
    damaged = set()
    for path, what in problems.items():
        parsed = parse_part_file(path.name)
        assert parsed is not None  # stats_parts names parts only
        log.warning(
            "sharecrawl: %s: %s; the prefix statistics of %s are computed again",
            path,
            what,
            parsed[0],
        )
        damaged.add(parsed[0])
    parts = {key: t for key, t in parts.items() if key[0] not in damaged}
    table = pa.concat_tables([PREFIX_STATS.empty_table(), *parts.values()]).sort_by(KEY)
    return OldStats(table, parts, damaged)


def write_stats(
    build: VersionBuild,
    stats: pa.Table,
    old: OldStats,
    regrouped: set[str],
    carried: set[str] | frozenset[str] = frozenset(),
) -> None:
    """Write (or link) every host's prefix_stats parts, once its other parts are in place.
    `regrouped`: hosts whose groups the round may have planned again; `carried`: hosts whose
    rows are the previous version's (jobs.prefix_stats.carried_over)."""
    new = VersionParts(build.dir)
    stored: dict[str, list[tuple[int, pa.Table]]] = {}
    for (host, group), table in old.parts.items():
        stored.setdefault(host, []).append((group, table))
    quiet = _quiet_hosts(old.table)
    stats = stats.sort_by(KEY)
    runs = pc.run_end_encode(stats["host"].combine_chunks(), run_end_type=pa.int64())
    start = 0
    for host, end in zip(runs.values.to_pylist(), runs.run_ends.to_pylist(), strict=True):
        rows = stats.slice(start, end - start)
        start = end
        quiet_rows = quiet.get(host) if host in carried and host in stored else None
        if host not in regrouped and quiet_rows == rows.num_rows:
            # its rows are its stored ones, which counted no change: every part as it was
            for group, _ in stored[host]:
                build.link_part(STATS, host, group)
            continue
        footers = cache(partial(_footer, new, host))
        groups = None if host in regrouped else _old_groups(stored.get(host, []), rows)
        if groups is None:
            groups = _folder_groups(new, host, rows, footers)
        column = pa.array(groups, pa.int64())
        for group in sorted(set(groups)):
            mine = rows.filter(pc.equal(column, group))
            before = old.parts.get((host, group))
            footer = footers(group)
            if before is not None and _same(mine, before):
                prev = build.crawl.version_dir(build.prev) / STATS / part_file(host, group)
                if host not in regrouped or footer_partitions(prev) == footer:
                    build.link_part(STATS, host, group)
                    continue
            build.write_group(host, group, {STATS: mine}, footer)


def _quiet_hosts(table: pa.Table) -> dict[str, int]:
    """The hosts none of whose rows counted a change of their round: how many rows each
    has (carried over, the same rows come back)."""
    changes = pc.add(pc.add(table["n_new"], table["n_changed"]), table["n_deleted"])
    by_host = pa.table({"host": table["host"], "changes": changes}).group_by("host")
    counts = by_host.aggregate([("changes", "max"), ("changes", "count")])
    quiet = counts.filter(pc.equal(counts["changes_max"], 0))
    return dict(zip(quiet["host"].to_pylist(), quiet["changes_count"].to_pylist(), strict=True))


def _footer(parts: VersionParts, host: str, group: int) -> frozenset[str] | None:
    """The partitions a group of the host names in its parts' footers in the new version."""
    for table in ROW_TABLES:
        path = parts.path(table, host, group)
        if path.exists() and (found := footer_partitions(path)) is not None:
            return found
    return None


def _old_groups(parts: list[tuple[int, pa.Table]], rows: pa.Table) -> list[int] | None:
    """Each row's group in the host's parts of the previous version (`parts`: group,
    rows), None when a row is in none."""
    where: dict[tuple[str, str], int] = {}
    for group, table in parts:
        for key in zip(table["share"].to_pylist(), table["prefix"].to_pylist(), strict=True):
            where[key] = group
    found = [
        where.get(key)
        for key in zip(rows["share"].to_pylist(), rows["prefix"].to_pylist(), strict=True)
    ]
    return None if any(g is None for g in found) else found  # type: ignore[return-value]


def _folder_groups(
    parts: VersionParts, host: str, rows: pa.Table, footers: Callable[[int], frozenset[str] | None]
) -> list[int]:
    """Each row's group by the rule above, from the host's folders parts in the new
    version (only the folders at the rows' depths are kept)."""
    groups = parts.groups(host)
    depth = pc.max(rows["depth"]).as_py() or 0
    where: dict[tuple[str, str], int] = {}
    for group in groups:
        path = parts.path("folders", host, group)
        if not path.exists():
            continue
        folders = pq.read_table(path, columns=["share", "path"])
        folders = folders.filter(pc.less(pc.count_substring(folders["path"], "/"), depth))
        for key in zip(folders["share"].to_pylist(), folders["path"].to_pylist(), strict=True):
            where[key] = group
    roots: dict[str, int] = {}

    def root_group(share: str) -> int:
        if share not in roots:
            pid = share_root(host, share).id
            named = [g for g in groups if pid in (footers(g) or ())]
            held = sorted(g for (s, _), g in where.items() if s == share)
            roots[share] = (named or held or groups or [0])[0]
        return roots[share]

    found = []
    for share, prefix in zip(rows["share"].to_pylist(), rows["prefix"].to_pylist(), strict=True):
        while prefix and (share, prefix) not in where:
            prefix = prefix.rpartition("/")[0]  # a folder gone: the nearest one above it
        found.append(where[(share, prefix)] if prefix else root_group(share))
    return found


def _same(rows: pa.Table, stored: pa.Table) -> bool:
    """Are a group's rows now those of its stored part (both sorted by key)?"""
    if rows.num_rows != stored.num_rows:
        return False
    return rows.equals(stored.select(rows.schema.names).cast(rows.schema))

"""The hosts' rows stored in one published version, read group by group; a group with a part
missing, of the wrong size or unreadable is damaged: its rows read as none and its
partitions' stored hashes as null, so the next round lists them again."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sharecrawl.crawl_io.crawldb import host_parts
from sharecrawl.crawl_io.crawldb.version_manifest import (
    Manifest,
    checksum_problem,
    first_line,
    size_problem,
)
from sharecrawl.crawl_io.schema import TABLES

log = logging.getLogger("sharecrawl")
TAG_KEY = ("path", "size", "mtime", "tag_error")  # what finds a moved file's stored tags


class StoredHosts:
    """The per-host parts of one published (immutable) version, and what is learnt of them."""

    def __init__(self, version_dir: Path, manifest: Manifest) -> None:
        self.dir = version_dir
        self.manifest = manifest
        self.parts = host_parts.VersionParts(version_dir, list(manifest))
        self._damaged: set[tuple[str, int]] = set()  # (host, group) found damaged on read
        self._partitions: dict[tuple[str, int], frozenset[str] | None] = {}

    def groups(self, host: str) -> list[int]:
        return self.parts.groups(host)

    def path(self, table: str, host: str, group: int) -> Path:
        return self.parts.path(table, host, group)

    def group_partitions(self, host: str, group: int) -> frozenset[str] | None:
        """The partitions a group holds, as the first of its parts' footers that reads names."""
        key = (host, group)
        if key not in self._partitions:
            footers = (
                host_parts.footer_partitions(self.path(t, host, group))
                for t in host_parts.ROW_TABLES
            )
            self._partitions[key] = next((f for f in footers if f is not None), None)
        return self._partitions[key]

    def damaged_groups(self) -> set[tuple[str, int]]:
        """(host, group) of every group with a part missing, of the wrong size or unreadable."""
        found = set(self._damaged)
        root = os.fspath(self.dir)  # names, not Paths: a stat each of thousands of parts
        for rel, entry in self.manifest.items():
            table, _, name = rel.partition("/")
            if table in host_parts.ROW_TABLES and size_problem(f"{root}/{rel}", entry):
                if (parsed := host_parts.parse_part_file(name)) is not None:
                    found.add(parsed)
        return found

    def group_damaged(self, host: str, group: int) -> bool:
        if (host, group) in self._damaged:
            return True
        root = os.fspath(self.dir)
        for table in host_parts.ROW_TABLES:
            rel = host_parts.rel_path(table, host, group)
            entry = self.manifest.get(rel)
            if entry is not None and size_problem(f"{root}/{rel}", entry):
                self._damaged.add((host, group))
                return True
        return False

    def lost_partitions(self, partitions: pa.Table) -> set[str]:
        """The partitions (of the version's `partitions` rows) whose stored rows are in a
        damaged group: those its footers name, else those no other group of its host holds."""
        damaged = self.damaged_groups()
        lost: set[str] = set()
        for host in sorted({h for h, _ in damaged}):
            held: set[str] = set()
            unknown = False
            for group in sorted({g for h, g in damaged if h == host} | set(self.groups(host))):
                named = self.group_partitions(host, group)
                if (host, group) in damaged:
                    unknown |= named is None
                    lost |= named or set()
                elif named is not None:
                    held |= named
            if unknown:
                mine = partitions.filter(pc.equal(partitions["host"], host))["partition_id"]
                lost |= set(mine.to_pylist()) - held
        return lost

    def read_group(
        self, table: str, host: str, group: int, columns: list[str] | None = None
    ) -> pa.Table | None:
        """One part of a host's group (only `columns`, if given; read in full, its SHA-256 is
        checked too). None when the group is damaged."""
        if self.group_damaged(host, group):
            return None
        schema = (
            TABLES[table]
            if columns is None
            else pa.schema([TABLES[table].field(c) for c in columns])
        )
        path = self.path(table, host, group)
        entry = self.manifest.get(host_parts.rel_path(table, host, group))
        try:
            problem = None if entry is None or columns else checksum_problem(path, entry)
            if problem is None:
                if columns is None:
                    return host_parts.read_parquet(path, schema)
                return pq.read_table(
                    path, columns=columns, schema=schema, page_checksum_verification=True
                )
        except (pa.ArrowException, OSError) as e:
            problem = f"does not read ({first_line(e)})"
        log.warning("sharecrawl: %s: %s; its partitions are crawled again as new", path, problem)
        self._damaged.add((host, group))
        return None

    def read_host(self, table: str, host: str) -> pa.Table:
        found = [t for g in self.groups(host) if (t := self.read_group(table, host, g)) is not None]
        return pa.concat_tables(found) if found else TABLES[table].empty_table()


class StoredHost:
    """One host's stored rows in a version, each group read once and only where asked."""

    def __init__(self, stored: StoredHosts | None, host: str) -> None:
        self.stored, self.host = stored, host
        self._tables: dict[tuple[str, int], pa.Table | None] = {}
        self._tags: TagsByFile | None = None

    def group_rows(self, table: str, group: int) -> pa.Table | None:
        key = (table, group)
        if key not in self._tables:
            assert self.stored is not None
            self._tables[key] = self.stored.read_group(table, self.host, group)
        return self._tables[key]

    def rows(self, table: str, partition_ids: set[str]) -> pa.Table:
        """The stored rows of those partitions (but a damaged group's)."""
        found = []
        for group in self.stored.groups(self.host) if self.stored is not None else []:
            named = self.stored.group_partitions(self.host, group)
            if named is not None and not named & partition_ids:
                continue  # the footer says: none of them here
            rows = self.group_rows(table, group)
            if rows is not None:
                ids = pa.array(sorted(partition_ids), pa.string())
                found.append(rows.filter(pc.is_in(rows["partition_id"], ids)))
        return pa.concat_tables(found) if found else TABLES[table].empty_table()

    def tags_by_file(self) -> TagsByFile:
        if self._tags is None:
            self._tags = TagsByFile(self)
        return self._tags


class TagsByFile:
    """A host's stored tags by (name, size, mtime_us), so a file moved within the host keeps
    them: a part's whole rows are read only when one of its files is asked for."""

    def __init__(self, host: StoredHost) -> None:
        self.host = host
        self._where: dict[tuple[str, int, int], tuple[int, int]] = {}  # key -> (group, row)
        stored = host.stored
        for group in stored.groups(host.host) if stored is not None else []:
            keys = stored.read_group("media", host.host, group, list(TAG_KEY))
            if keys is None:
                continue
            mtime_us = keys["mtime"].cast(pa.int64())  # the key's µs, not a datetime
            columns = [(mtime_us if c == "mtime" else keys[c]).to_pylist() for c in TAG_KEY]
            for i, (path, size, mtime, error) in enumerate(zip(*columns, strict=True)):
                if error is None:  # rows with a tag error keep none
                    self._where[(path.rsplit("/", 1)[-1], size, mtime)] = (group, i)

    def get(self, key: tuple[str, int, int]) -> dict | None:
        where = self._where.get(key)
        if where is None:
            return None
        rows = self.host.group_rows("media", where[0])
        return None if rows is None else rows.slice(where[1], 1).to_pylist()[0]

"""The crawl directory (layout: docs/crawl-dir.md): versions of the crawldb behind an atomic
CURRENT pointer, their manifests, segments and the search index. Only FORMAT is read."""

from __future__ import annotations

import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from sharecrawl.crawl_io.crawldb import version_manifest as vm
from sharecrawl.crawl_io.crawldb.atomic import write_atomic, write_parquet
from sharecrawl.crawl_io.crawldb.host_parts import (
    PART_TABLES,
    parquet_from_bytes,
    parse_part_file,
    part_file,
    read_parquet,
    table_parts,
)
from sharecrawl.crawl_io.crawldb.layout import (
    FORMAT,
    FORMAT_NAME,
    SEGMENT_NAME,
    VERSION_NAME,
    CrawlDamaged,
    CrawlLayout,
)
from sharecrawl.crawl_io.crawldb.stored_hosts import StoredHosts
from sharecrawl.crawl_io.schema import TABLES

__all__ = [
    "FORMAT",
    "SEGMENT_NAME",
    "VERSION_NAME",
    "CrawlDamaged",
    "CrawlDir",
    "host_file",
    "read_parquet",
    "write_parquet",
]

PER_HOST_TABLES = PART_TABLES
STATE_TABLES = ("hosts", "partitions")  # a round cannot go on without them (history)
STATS_READERS = 4  # threads reading prefix_stats parts: Arrow and hashlib release the GIL


host_file = part_file  # a host's file name in a segment's folders (its group 0 in a version)


class CrawlDir(CrawlLayout):
    def __init__(self, root: str | os.PathLike) -> None:
        super().__init__(root)
        self._manifests: dict[int, vm.Manifest] = {}  # published versions are immutable
        self._hosts: dict[int, StoredHosts] = {}

    def make(self) -> None:
        self.crawldb.mkdir(parents=True, exist_ok=True)
        if not (self.crawldb / FORMAT_NAME).exists():
            write_atomic(self.crawldb / FORMAT_NAME, f"{FORMAT}\n", durable=True)

    def manifest(self, version: int) -> vm.Manifest:
        """A published version's manifest; CrawlDamaged when missing or garbled."""
        if version not in self._manifests:
            try:
                manifest = vm.read_manifest(self.version_dir(version))
            except vm.ManifestError as e:
                raise self.damaged(str(e)) from None
            if manifest is None:
                raise self.damaged(f"{self.version_dir(version) / vm.MANIFEST_NAME} is missing")
            self._manifests[version] = manifest
        return self._manifests[version]

    def publish(self, version: int) -> None:
        """Make `version` live: readers see the old version whole until the rename."""
        if problem := self.incomplete(version):
            raise self.damaged(f"v{version:06d} cannot be published, {problem}")
        write_atomic(self.crawldb / "CURRENT", f"v{version:06d}\n", durable=True)

    def table_path(self, version: int, name: str) -> Path:
        """The table's folder of parts, or its one file (hosts, partitions)."""
        vdir = self.version_dir(version)
        return vdir / name if name in PER_HOST_TABLES else vdir / f"{name}.parquet"

    def table_parts(self, version: int, name: str) -> list[Path]:
        return table_parts(self.version_dir(version), name) if version else []

    def read(self, version: int, name: str) -> pa.Table:
        """A whole table of a version. hosts, partitions and prefix_stats parts must match
        their manifest entries, else CrawlDamaged (never an empty table that would start
        history over). A partition whose group is damaged reads with a null stored hash."""
        if version == 0:
            return TABLES[name].empty_table()
        path = self.table_path(version, name)
        if name == "prefix_stats":
            parts, problems = self.stats_parts(version)
            if problems:
                where, what = next(iter(problems.items()))
                raise self.damaged(f"{where}: {what}")
            return pa.concat_tables([TABLES[name].empty_table(), *parts.values()])
        if name in PER_HOST_TABLES:
            try:
                return read_parquet(path, TABLES[name])
            except (pa.ArrowException, OSError) as e:
                raise self.damaged(f"{path}: a part does not read ({vm.first_line(e)})") from None
        table, problem = _checked_read(path, self.manifest(version).get(path.name), TABLES[name])
        if table is None:
            raise self.damaged(f"{path}: {problem}")
        if name == "partitions":
            if lost := self.hosts(version).lost_partitions(table):
                hit = pc.is_in(table["partition_id"], pa.array(sorted(lost), pa.string()))
                hashes = pc.if_else(hit, pa.scalar(None, pa.string()), table["hash"])
                table = table.set_column(table.schema.get_field_index("hash"), "hash", hashes)
        return table

    def stats_parts(self, version: int) -> tuple[dict[tuple[str, int], pa.Table], dict[Path, str]]:
        """The prefix_stats parts of a version by (host, group), each checked against its
        manifest entry, and what is wrong with the others. Read in threads: a big LAN has
        thousands, each costing more in calls than in bytes."""
        vdir = self.version_dir(version)
        manifest = self.manifest(version)
        keyed = [
            (key, rel)
            for rel in sorted(manifest)
            if rel.startswith("prefix_stats/") and (key := parse_part_file(rel.partition("/")[2]))
        ]
        parts: dict[tuple[str, int], pa.Table] = {}
        problems: dict[Path, str] = {}
        with ThreadPoolExecutor(max_workers=STATS_READERS) as pool:
            schema = TABLES["prefix_stats"]
            found = pool.map(lambda k: _checked_read(vdir / k[1], manifest[k[1]], schema), keyed)
            for (key, rel), (table, problem) in zip(keyed, found, strict=True):
                if table is not None:
                    parts[key] = table
                else:
                    problems[vdir / rel] = problem
        return parts, problems

    def hosts(self, version: int) -> StoredHosts:
        """The hosts' parts of a published version, with what was found damaged in them."""
        if version not in self._hosts:
            self._hosts[version] = StoredHosts(self.version_dir(version), self.manifest(version))
        return self._hosts[version]

    def read_host(self, version: int, name: str, host: str) -> pa.Table:
        if version == 0:
            return TABLES[name].empty_table()
        return self.hosts(version).read_host(name, host)

    def drop_unpublished(self) -> None:
        """Remove versions newer than CURRENT: leftovers of a round killed before publish."""
        live = self.current()
        for version in self.versions():
            if version > live:
                shutil.rmtree(self.version_dir(version))


def _checked_read(
    path: Path, entry: vm.PartEntry | None, schema: pa.Schema
) -> tuple[pa.Table | None, str]:
    """A part read once and checked against its manifest entry, or (None, what is wrong)."""
    if entry is None:
        return None, f"not in {vm.MANIFEST_NAME}"
    data, problem = vm.read_checked(path, entry)
    if data is None:
        return None, problem or "does not read"
    try:
        return parquet_from_bytes(data, schema), ""
    except (pa.ArrowException, OSError) as e:
        return None, f"does not read ({vm.first_line(e)})"

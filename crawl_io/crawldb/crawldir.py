"""The crawl directory (layout: docs/crawl-dir.md): versions of the crawldb behind an atomic
CURRENT pointer, their manifests, segments and the search index. Only FORMAT is read."""

from __future__ import annotations

import os
import re
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
from sharecrawl.crawl_io.crawldb.lock import LOCK_NAME
from sharecrawl.crawl_io.crawldb.stored_hosts import StoredHosts
from sharecrawl.crawl_io.crawldb.version_manifest import FORMAT
from sharecrawl.crawl_io.schema import TABLES
from sharecrawl.crawl_io.sources import ConfigError

__all__ = ["CrawlDamaged", "CrawlDir", "host_file", "read_parquet", "write_parquet"]

PER_HOST_TABLES = PART_TABLES
STATE_TABLES = ("hosts", "partitions")  # a round cannot go on without them (history)
STATS_READERS = 4  # threads reading prefix_stats parts: Arrow and hashlib release the GIL
VERSION_NAME = re.compile(r"v(\d{6,})")
SEGMENT_NAME = re.compile(r"r(\d{6,})")  # segments/r000012: round 12
FORMAT_NAME = "FORMAT"


class CrawlDamaged(Exception):
    """The crawldb cannot be used as it is: one line naming what, and saying to repair it."""

    def __init__(self, root: Path, what: str) -> None:
        super().__init__(f"{what}; run `sharecrawl check --crawl-dir {root} --repair`")
        self.what = what


host_file = part_file  # a host's file name in a segment's folders (its group 0 in a version)


class CrawlDir:
    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        self.crawldb = self.root / "crawldb"
        self.segments = self.root / "segments"
        self.index = self.root / "index" / "search.duckdb"
        self._manifests: dict[int, vm.Manifest] = {}  # published versions are immutable
        self._hosts: dict[int, StoredHosts] = {}

    def check(self, *, create: bool) -> None:
        """Raise ConfigError unless this is a crawl directory (or, with create, can be one)."""
        if self.crawldb.is_dir():
            self.check_format()
            return
        if self.root.exists() and not self.root.is_dir():
            raise ConfigError(f"crawl directory {str(self.root)!r} is a file")
        # a first crawl creates the folder and its LOCK before crawldb/
        if self.root.is_dir() and any(p.name != LOCK_NAME for p in self.root.iterdir()):
            raise ConfigError(
                f"{str(self.root)!r} is not a crawl directory (no crawldb/) and is not empty"
            )
        if not create:
            raise ConfigError(f"{str(self.root)!r} is not a crawl directory: crawl it first")

    def check_format(self) -> None:
        """Raise ConfigError unless the crawldb is of FORMAT (or holds nothing yet)."""
        try:
            found = (self.crawldb / FORMAT_NAME).read_text().strip()
        except FileNotFoundError:
            if not any(not p.name.startswith(".") for p in self.crawldb.iterdir()):
                return  # made but never published into (watch, a first crawl killed early)
            found = "0"
        except (OSError, UnicodeDecodeError) as e:
            found = f"unreadable ({e})"
        if found != str(FORMAT):
            shown = found if found.isdigit() or found.startswith("unreadable") else repr(found[:20])
            raise ConfigError(
                f"crawl directory {str(self.root)!r} has format {shown}, this sharecrawl reads "
                f"format {FORMAT}: crawl again into a new directory (the hosts are listed again)"
            )

    def make(self) -> None:
        self.crawldb.mkdir(parents=True, exist_ok=True)
        if not (self.crawldb / FORMAT_NAME).exists():
            write_atomic(self.crawldb / FORMAT_NAME, f"{FORMAT}\n", durable=True)

    def damaged(self, what: str) -> CrawlDamaged:
        return CrawlDamaged(self.root, what)

    def versions(self) -> list[int]:
        """Numbers of the version folders present (published or not), oldest first."""
        if not self.crawldb.is_dir():
            return []
        found = (VERSION_NAME.fullmatch(p.name) for p in self.crawldb.iterdir() if p.is_dir())
        return sorted(int(m[1]) for m in found if m)

    def current(self) -> int:
        """The live version, 0 before the first is published; CrawlDamaged when CURRENT is
        empty, garbled, names an incomplete version, or is missing after rounds were published."""
        path = self.crawldb / "CURRENT"
        try:
            text = path.read_text()
        except FileNotFoundError:
            # a first round killed between its rename and CURRENT leaves v000001 alone
            if any(v > 1 for v in self.versions()):
                raise self.damaged(f"{path} is missing but published versions exist") from None
            return 0
        except (OSError, UnicodeDecodeError) as e:
            raise self.damaged(f"{path} cannot be read ({e})") from None
        name = text.strip()
        if not name:
            raise self.damaged(f"{path} is empty")
        if (match := VERSION_NAME.fullmatch(name)) is None:
            raise self.damaged(f"{path} is garbled ({name[:40]!r})")
        version = int(match[1])
        if problem := self.incomplete(version):
            raise self.damaged(f"{path} names {name}, {problem}")
        return version

    def incomplete(self, version: int) -> str | None:
        """Why `version` is not a complete version, or None when it is."""
        vdir = self.version_dir(version)
        if not vdir.is_dir():
            return "which does not exist"
        if (vdir / vm.MANIFEST_NAME).exists():
            return None
        return f"whose {vm.MANIFEST_NAME} is missing (an unfinished or damaged version)"

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

    def version_dir(self, version: int) -> Path:
        return self.crawldb / f"v{version:06d}"

    def segment_dir(self, round_: int) -> Path:
        return self.segments / f"r{round_:06d}"

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

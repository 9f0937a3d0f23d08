"""The crawl directory: versioned crawldb with an atomic CURRENT pointer, segments, index.

crawl/
  crawldb/CURRENT        name of the live version, replaced by write + rename
  crawldb/v000012/       hosts.parquet, partitions.parquet, prefix_stats.parquet,
                         files/, media/, folders/: <host>.parquet  (immutable once published)
  segments/r000013/      inject.parquet, fetchlist.parquet, listing/, media/, fetchlog/
  index/search.duckdb
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq

from crawl_io.schema import TABLES
from crawl_io.sources import ConfigError

PER_HOST_TABLES = ("files", "media", "folders")


def host_file(host: str) -> str:
    """A host's part file name: the host key made safe for any file system."""
    return quote(host, safe="") + ".parquet"


def write_parquet(table: pa.Table, path: Path) -> None:
    """Write a Parquet file so that it appears whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)


def read_parquet(path: Path, schema: pa.Schema) -> pa.Table:
    """A table file or a folder of part files; an absent one reads as empty."""
    if path.is_dir():
        parts = sorted(path.glob("*.parquet"))
        if not parts:
            return schema.empty_table()
        return pa.concat_tables(pq.read_table(p, schema=schema) for p in parts)
    if path.exists():
        return pq.read_table(path, schema=schema)
    return schema.empty_table()


class CrawlDir:
    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        self.crawldb = self.root / "crawldb"
        self.segments = self.root / "segments"
        self.index = self.root / "index" / "search.duckdb"

    def check(self, *, create: bool) -> None:
        """Raise ConfigError unless this is a crawl directory (or, with create, can be one)."""
        if self.crawldb.is_dir():
            return
        if self.root.exists() and not self.root.is_dir():
            raise ConfigError(f"crawl directory {str(self.root)!r} is a file")
        if self.root.is_dir() and any(self.root.iterdir()):
            raise ConfigError(
                f"{str(self.root)!r} is not a crawl directory (no crawldb/) and is not empty"
            )
        if not create:
            raise ConfigError(f"{str(self.root)!r} is not a crawl directory: crawl it first")

    def current(self) -> int:
        """The live version number, 0 before the first round is published."""
        try:
            name = (self.crawldb / "CURRENT").read_text().strip()
        except FileNotFoundError:
            return 0
        return int(name.lstrip("v"))

    def version_dir(self, version: int) -> Path:
        return self.crawldb / f"v{version:06d}"

    def segment_dir(self, round_: int) -> Path:
        return self.segments / f"r{round_:06d}"

    def publish(self, version: int) -> None:
        """Make `version` live: readers see the old version whole until the rename."""
        tmp = self.crawldb / f".CURRENT.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(f"v{version:06d}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.crawldb / "CURRENT")

    def table_path(self, version: int, name: str) -> Path:
        vdir = self.version_dir(version)
        return vdir / name if name in PER_HOST_TABLES else vdir / f"{name}.parquet"

    def read(self, version: int, name: str) -> pa.Table:
        if version == 0:
            return TABLES[name].empty_table()
        return read_parquet(self.table_path(version, name), TABLES[name])

    def read_host(self, version: int, name: str, host: str) -> pa.Table:
        if version == 0:
            return TABLES[name].empty_table()
        return read_parquet(self.table_path(version, name) / host_file(host), TABLES[name])

    def drop_unpublished(self) -> None:
        """Remove versions newer than CURRENT: leftovers of a round killed before publish."""
        live = self.current()
        for vdir in self.crawldb.glob("v*"):
            if vdir.is_dir() and int(vdir.name[1:]) > live:
                shutil.rmtree(vdir)

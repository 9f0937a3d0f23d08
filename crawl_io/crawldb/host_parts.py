"""A host's parts of the files, media, folders and prefix_stats tables, one per group of
partitions (`<host>.parquet`, `<host>@<group>.parquet`), whose footer names the group's
partitions; which parts differ between two versions."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.parquet as pq

from sharecrawl.crawl_io.crawldb.version_manifest import read_manifest

ROW_TABLES = ("files", "media", "folders")  # a group's rows: a damaged part costs them
PART_TABLES = (*ROW_TABLES, "prefix_stats")
PARTITIONS_KEY = b"sharecrawl.partitions"
GROUP_MARK = "@"  # never in a host key: quote() escapes it


def part_file(host: str, group: int = 0) -> str:
    """A host's part of group `group`: the host key quoted for any file system, `@<group>`."""
    key = quote(host, safe="")
    return f"{key}.parquet" if group == 0 else f"{key}{GROUP_MARK}{group}.parquet"


def parse_part_file(name: str) -> tuple[str, int] | None:
    """part_file's inverse; None for another name."""
    if not name.endswith(".parquet") or name.startswith("."):
        return None
    key, mark, group = name.removesuffix(".parquet").partition(GROUP_MARK)
    if mark and not (group.isdigit() and int(group) > 0):
        return None
    return unquote(key), int(group) if mark else 0


def partitions_metadata(partition_ids: set[str] | frozenset[str]) -> dict[bytes, bytes]:
    return {PARTITIONS_KEY: json.dumps(sorted(partition_ids)).encode()}


def footer_partitions(path: Path) -> frozenset[str] | None:
    """The partitions a part's footer names; None when it does not read or names none."""
    try:
        metadata = pq.read_metadata(path).metadata or {}
        value = metadata.get(PARTITIONS_KEY)
        return None if value is None else frozenset(json.loads(value))
    except (OSError, ValueError, pa.ArrowException):
        return None


def read_parquet(path: Path, schema: pa.Schema) -> pa.Table:
    """A table file or a folder of parts (absent: empty), page CRCs verified."""
    if path.is_dir():
        parts = sorted(p for p in path.glob("*.parquet") if not p.name.startswith("."))
        if not parts:
            return schema.empty_table()
        return pa.concat_tables(_read_file(p, schema) for p in parts)
    if path.exists():
        return _read_file(path, schema)
    return schema.empty_table()


def _read_file(source: Path | pa.NativeFile, schema: pa.Schema) -> pa.Table:
    """A part's rows (a file, or its bytes) in `schema`. pyarrow's dataset reader, which
    conforms a part to another schema, costs several times more: only those go through it."""
    table = pq.ParquetFile(source, page_checksum_verification=True).read()
    if table.schema.equals(schema):
        return table.replace_schema_metadata(None)
    if isinstance(source, pa.NativeFile):
        source.seek(0)
    return pq.read_table(source, schema=schema, page_checksum_verification=True)


def parquet_from_bytes(data: bytes, schema: pa.Schema) -> pa.Table:
    return _read_file(pa.BufferReader(data), schema)


def table_parts(version_dir: Path, table: str) -> list[Path]:
    """Every Parquet part of a table in a version folder, sorted."""
    return [version_dir / rel for rel in table_part_names(version_dir, table)]


def table_part_names(version_dir: Path, table: str) -> list[str]:
    folder = version_dir / table
    if table not in PART_TABLES:
        name = f"{table}.parquet"
        return [name] if (version_dir / name).exists() else []
    try:
        names = sorted(os.listdir(folder))  # names, not Paths: several times cheaper to sort
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [f"{table}/{name}" for name in names if parse_part_file(name) is not None]


class VersionParts:
    """A version folder's per-host parts by table, host and group (from its manifest if any)."""

    def __init__(self, version_dir: Path, names: list[str] | None = None) -> None:
        self.dir = version_dir
        if names is None:
            manifest = read_manifest(version_dir) if version_dir.is_dir() else None
            if manifest is not None:
                names = list(manifest)
            else:
                names = [rel for t in PART_TABLES for rel in table_part_names(version_dir, t)]
        self._groups: dict[tuple[str, str], set[int]] = {}
        for rel in names:
            table, _, name = rel.partition("/")
            parsed = parse_part_file(name) if table in PART_TABLES else None
            if parsed is not None:
                self._groups.setdefault((table, parsed[0]), set()).add(parsed[1])

    def groups(self, host: str, tables: tuple[str, ...] = ROW_TABLES) -> list[int]:
        """The host's groups with a part in any of `tables`, sorted."""
        found: set[int] = set()
        for table in tables:
            found |= self._groups.get((table, host), set())
        return sorted(found)

    def path(self, table: str, host: str, group: int) -> Path:
        return self.dir / table / part_file(host, group)


def rel_path(table: str, host: str, group: int) -> str:
    return f"{table}/{part_file(host, group)}"


@dataclass(frozen=True)
class PartsChange:
    """The parts of a table that differ between two versions: `removed` (in the older one),
    `added` (in the newer one); others are the same bytes in both."""

    removed: list[Path]
    added: list[Path]

    def __bool__(self) -> bool:
        return bool(self.removed or self.added)


def changed_parts(old_dir: Path, new_dir: Path, table: str) -> PartsChange:
    """Which parts of `table` differ between two version folders: by the manifests'
    SHA-256 when both have one, else by inode (an untouched part is a hard link)."""
    # Names rather than Paths until a part is known to differ: a big LAN has thousands.
    old = table_part_names(old_dir, table)
    new = table_part_names(new_dir, table)
    old_manifest, new_manifest = read_manifest(old_dir), read_manifest(new_dir)
    old_root, new_root = os.fspath(old_dir), os.fspath(new_dir)

    def same(rel: str) -> bool:
        if old_manifest is not None and new_manifest is not None:
            a, b = old_manifest.get(rel), new_manifest.get(rel)
            if a is not None and b is not None:
                return a == b
        try:
            return os.stat(f"{old_root}/{rel}").st_ino == os.stat(f"{new_root}/{rel}").st_ino
        except OSError:
            return False

    both = {name for name in set(old) & set(new) if same(name)}
    return PartsChange(
        removed=[old_dir / name for name in old if name not in both],
        added=[new_dir / name for name in new if name not in both],
    )

"""Whether a Parquet part can serve as a part of a view's table (queries.views): footer and
columns, pages, the manifest's word for it; each answer a reason in one line, or None."""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from sharecrawl.crawl_io.crawldb.version_manifest import Manifest, ManifestError, read_manifest


def reason(error: BaseException) -> str:
    """The first sentence of an error's message, short enough for one line."""
    first = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return first.split(". ")[0].rstrip(".")[:120]


def damage(path: Path, schema: pa.Schema) -> str | None:
    """Why the part at `path` cannot serve in `schema`'s table, or None, from its footer."""
    try:
        names = set(pq.read_schema(path).names)
    except FileNotFoundError:
        return "missing"
    except (OSError, ValueError, pa.ArrowException) as e:
        return f"unreadable Parquet: {reason(e)}"
    return absent(names, schema)


def absent(names: set[str], schema: pa.Schema) -> str | None:
    """Why a part whose top-level columns are `names` is not one of `schema`'s, or None."""
    missing = [f.name for f in schema if f.name not in names]
    return f"no column {', '.join(missing[:3])}: not a part of this table" if missing else None


def page_damage(path: Path) -> str | None:
    """Why the pages of the Parquet part at `path` do not read, or None. Reads it all."""
    try:
        pq.read_table(path)
    except (OSError, ValueError, pa.ArrowException) as e:
        return f"unreadable Parquet: {reason(e)}"
    return None


def damages(
    con: duckdb.DuckDBPyConnection, parts: list[Path], schema: pa.Schema
) -> list[str | None]:
    """damage of each of `parts`: every footer read at once by DuckDB, else one by one."""
    if not parts:
        return []
    try:
        elements = con.execute(
            "SELECT file_name, name, coalesce(num_children, 0) FROM parquet_schema(?)",
            [[str(p) for p in parts]],
        ).fetchall()
    except duckdb.Error:
        return [damage(p, schema) for p in parts]
    columns = _top_level_columns(elements)
    return [absent(columns.get(str(part), set()), schema) for part in parts]


def _top_level_columns(elements: list[tuple[str, str, int]]) -> dict[str, set[str]]:
    """The top-level column names of each file, from its Parquet schema elements (depth first)."""
    columns: dict[str, set[str]] = {}
    pending: list[int] = []  # children still to come at each depth below the root
    for file, name, children in elements:
        if not pending:  # a file's root
            columns.setdefault(file, set())
            pending = [children]
            continue
        if len(pending) == 1:
            columns[file].add(name)
        pending[-1] -= 1
        if children:
            pending.append(children)
        while pending and pending[-1] == 0:
            pending.pop()
    return columns


def vouched_by_manifest(version_dir: Path) -> Callable[[Path], bool]:
    """Whether the manifest of `version_dir` (read when first asked; garbled: vouches for
    nothing) lists a part at its current size, so its footer need not be read first."""
    root = f"{version_dir}{os.sep}"  # strings, not Paths: a big LAN's tables have thousands
    manifests: list[Manifest] = []

    def vouched(part: Path) -> bool:
        path = str(part)
        if not path.startswith(root):  # not in the version: a fetchlog or hints part
            return False
        if not manifests:
            try:
                manifests.append(read_manifest(version_dir) or {})
            except ManifestError:
                manifests.append({})
        entry = manifests[0].get(path[len(root) :])
        if entry is None:
            return False
        try:
            return os.stat(path).st_size == entry.size
        except OSError:
            return False

    return vouched


def page_damages(parts: list[Path]) -> list[str | None]:
    """page_damage of each part, four at a time (Arrow releases the GIL)."""
    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(page_damage, parts))

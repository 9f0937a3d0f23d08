"""The search index of a crawl directory (index/search.duckdb): built in full from a crawldb
version (queries.index_build), or brought up to a later version by an update that costs
what changed (queries.index_update). Either way the new index is written under a hidden
temporary name beside the live one and swapped in by rename, so readers (queries.index_store)
see the old file or the new one, whole, by a name that only ever names that file
(queries.index_store.link_by_identity).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import duckdb

from crawl_io.atomic import clone_file, start_writeback, write_atomic
from queries.index_build import build, write_meta
from queries.index_store import (
    FORMAT,
    index_meta,
    index_version,
    link_by_identity,
    prune_identity_links,
)
from queries.index_update import UpdateCounts, apply_update

__all__ = [
    "FORMAT",
    "UpdateCounts",
    "build_index",
    "index_meta",
    "index_version",
    "publish",
    "update_index",
]


def publish(out_path: Path, write: Callable[[Path], None]) -> None:
    """Write an index file with `write` under a temporary name, give it its second name
    (queries.index_store), rename it over `out_path`, and remove the second names of the
    files it replaced. A writer killed between naming its file and renaming it leaves a
    second name that keeps the file's space: it goes first, before this write takes more."""

    def write_and_link(tmp_path: Path) -> None:
        write(tmp_path)
        link_by_identity(tmp_path, out_path)

    prune_identity_links(out_path)
    try:
        write_atomic(out_path, write_and_link)
    finally:  # a file that failed to land must not live on through its second name
        prune_identity_links(out_path)


def _write(
    out_path: Path,
    fill: Callable[[duckdb.DuckDBPyConnection], None],
    start_from: Path | None = None,
) -> None:
    """Write an index with `fill` under a temporary name (a copy of `start_from`, or a new
    file), then publish it at `out_path`."""

    def write(tmp_path: Path) -> None:
        wal = Path(f"{tmp_path}.wal")  # DuckDB's log of a failed write
        tmp_path.unlink(missing_ok=True)
        writeback = None
        try:
            # A file system that clones files gives the update a copy at no cost, which
            # then writes only the blocks it changes; elsewhere the whole index is copied.
            if start_from is not None and not clone_file(start_from, tmp_path):
                shutil.copyfile(start_from, tmp_path)
                writeback = start_writeback(tmp_path)
            with duckdb.connect(str(tmp_path)) as con:
                # An update is one transaction: DuckDB syncs its log to disk at each commit,
                # and a sync waits for every dirty page of the file (a copy of the whole
                # index). A full build is not: one transaction holds more in memory (1.9
                # GiB against 1.5 GiB at 2 M media) for no time saved on a new file.
                one_transaction = start_from is not None
                if one_transaction:
                    con.execute("BEGIN TRANSACTION")
                fill(con)
                if one_transaction:
                    con.execute("COMMIT")
                con.execute("CHECKPOINT")
        finally:
            wal.unlink(missing_ok=True)
            if writeback is not None:
                writeback.join()

    publish(out_path, write)


def build_index(version_dir: Path, out_path: Path) -> None:
    """Build the index of `version_dir` from scratch into `out_path`, replacing it."""
    version_dir = Path(version_dir)
    _write(Path(out_path), lambda con: build(con, version_dir))


def update_index(index_path: Path, old_dir: Path, new_dir: Path) -> UpdateCounts:
    """Bring the index at `index_path`, which holds version `old_dir`, up to `new_dir`,
    replacing it. The caller checks that it holds `old_dir` in this FORMAT."""
    index_path = Path(index_path)
    counts: list[UpdateCounts] = []

    def fill(con: duckdb.DuckDBPyConnection) -> None:
        counts.append(apply_update(con, Path(old_dir), Path(new_dir)))
        changed = counts[0].parts > 0 or counts[0].hosts_switched > 0
        write_meta(con, Path(new_dir).name, full=False, changed=changed)

    _write(index_path, fill, start_from=index_path)
    return counts[0]

"""An index update on a file system that clones files starts from a clone of the live index
(crawl_io.crawldb.atomic.clone_file), not a copy: it writes the blocks it changes rather than the
whole file again, the file it replaces stays whole for the readers that hold it, and the
result is what a full build makes. Where the file system cannot clone, nothing is made and
the update copies, as every other test of the update does."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from sharecrawl.crawl_io.crawldb.atomic import clone_file
from sharecrawl.queries.index import build_index, update_index
from tests.cloning_disk import shared_blocks
from tests.test_index_update import Lan, answers, queries, table_rows, write_version


def bytes_written() -> int:
    """What this process has sent to be written (all its threads: DuckDB's too)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    raise AssertionError("no write_bytes in /proc/self/io")


def test_where_the_file_system_cannot_clone_nothing_is_made(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.write_bytes(os.urandom(2**20))
    elsewhere = Path("/dev/shm")  # a tmpfs: another file system, and one that cannot clone
    if not elsewhere.is_dir():
        pytest.skip("no /dev/shm here")
    target = elsewhere / f"sharecrawl-clone-test-{os.getpid()}"
    try:
        assert clone_file(source, target) is False
        assert not target.exists()
    finally:
        target.unlink(missing_ok=True)
    assert clone_file(tmp_path / "missing", tmp_path / "copy") is False
    assert not (tmp_path / "copy").exists()


def test_a_clone_shares_its_blocks_and_writes_to_it_leave_the_source_alone(
    cloning_disk: Path,
) -> None:
    data = os.urandom(4 * 2**20)
    source, clone = cloning_disk / "source", cloning_disk / "clone"
    source.write_bytes(data)
    assert clone_file(source, clone)
    assert clone.read_bytes() == data and shared_blocks(clone)
    with open(clone, "r+b") as out:
        out.write(b"x" * 8192)
    assert source.read_bytes() == data


def test_an_update_on_a_cloning_disk_writes_what_it_changes_and_leaves_the_old_file_whole(
    cloning_disk: Path,
    tmp_path: Path,
) -> None:
    lan = Lan(random.Random(5))
    crawldb = tmp_path / "crawldb"
    first = write_version(crawldb, 1, lan, None, True)
    index = cloning_disk / "index" / "search.duckdb"
    build_index(first, index)
    lan.round()
    second = write_version(crawldb, 2, lan, first, True)
    with open(index, "rb") as held:  # a reader's file, as a swap leaves it
        old = held.read()
        os.sync()
        before = bytes_written()
        counts = update_index(index, first, second)
        os.sync()
        written = bytes_written() - before
        held.seek(0)
        assert held.read() == old
        assert shared_blocks(index)  # with the old file, which the reader keeps
    assert counts.paths > 0
    # A copy writes the whole file again (1.1x its size here), a clone what changed (0.4x).
    assert written < 0.75 * index.stat().st_size, (written, index.stat().st_size)
    full = tmp_path / "full.duckdb"
    build_index(second, full)
    assert table_rows(index) == table_rows(full)
    query_list = queries(lan)
    assert answers(index, query_list) == answers(full, query_list)

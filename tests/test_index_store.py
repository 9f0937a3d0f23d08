"""The process's one cache of open index files: readers see the old index file or the new
one when a round swaps it by rename, never a mix, and old files are closed once left."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from sharecrawl.crawl_io.crawldb.atomic import write_atomic
from sharecrawl.queries.index import build_index
from sharecrawl.queries.index_store import IndexUnreadable, open_index, pinned
from sharecrawl.queries.search import search
from tests.test_search import MEDIA_ROWS, media, write_version


@pytest.fixture(scope="module")
def two_indexes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("store")
    first, second = root / "first.duckdb", root / "second.duckdb"
    build_index(write_version(root / "a", MEDIA_ROWS, name="v000001"), first)
    more = [
        *MEDIA_ROWS,
        media("alpha", "Music/Madonna/Holiday.mp3", artist="Madonna", title="Holiday", year=1983),
    ]
    build_index(write_version(root / "b", more, name="v000002"), second)
    return first, second


def swap_in(source: Path, index: Path) -> None:
    """As a round does: a whole file written beside the live one, renamed over it."""
    write_atomic(index, lambda tmp: shutil.copyfile(source, tmp))


def deleted_files_held() -> int:
    """Descriptors of this process on files since replaced (removed from their folder)."""
    fd_dir = Path("/proc/self/fd")
    held = 0
    for fd in fd_dir.iterdir():
        try:
            held += os.readlink(fd).endswith(" (deleted)")
        except OSError:
            pass
    return held


def test_readers_see_one_whole_file_while_it_is_swapped(
    tmp_path: Path, two_indexes: tuple[Path, Path]
) -> None:
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("needs /proc to follow the descriptors of index files")
    first, second = two_indexes
    index = tmp_path / "index" / "search.duckdb"
    index.parent.mkdir()
    expected = {}
    for source in (first, second):
        swap_in(source, index)
        with pinned(index) as file:
            expected[file.version] = search(file, "madonna", limit=50)
    assert len(expected["v000002"]) == len(expected["v000001"]) + 1
    held_before = deleted_files_held()

    seen: list[tuple[str, list[dict]]] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def read() -> None:
        try:
            while not stop.is_set():
                with pinned(index) as file:
                    first_answer = search(file, "madonna", limit=50)
                    time.sleep(0.002)  # a swap may land here: the file must not change
                    second_answer = search(file, "madonna", limit=50)
                    assert first_answer == second_answer
                    seen.append((file.version, second_answer))
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    readers = [threading.Thread(target=read) for _ in range(3)]
    for reader in readers:
        reader.start()
    try:
        swaps, deadline = 0, time.monotonic() + 60
        while (swaps < 30 or len({v for v, _ in seen}) < 2) and time.monotonic() < deadline:
            swap_in((first, second)[swaps % 2], index)
            swaps += 1
            time.sleep(0.01)
    finally:
        stop.set()
        for reader in readers:
            reader.join()
    assert not errors, errors[0]
    assert {version for version, _ in seen} == {"v000001", "v000002"}
    for version, answer in seen:
        assert answer == expected[version]
    # every file replaced is closed once its readers left: one more open is the last one
    with pinned(index) as file:
        assert search(file, "holiday") or file.version == "v000001"
    assert deleted_files_held() <= held_before


def test_the_same_file_is_opened_once(tmp_path: Path, two_indexes: tuple[Path, Path]) -> None:
    index = tmp_path / "search.duckdb"
    swap_in(two_indexes[0], index)
    file, opened = open_index(index)
    again, opened_again = open_index(index)
    try:
        assert opened and not opened_again and again is file
        search(index, "madonna")  # a search by path shares the file and what it derived
        assert file.cached("search", lambda f: None) is not None
    finally:
        file.leave()
        again.leave()


def test_a_damaged_file_swapped_in_is_one_clear_error_then_recovers(
    tmp_path: Path, two_indexes: tuple[Path, Path]
) -> None:
    index = tmp_path / "search.duckdb"
    swap_in(two_indexes[0], index)
    assert search(index, "frozen")
    damaged = tmp_path / "damaged"
    damaged.write_bytes(b"not a database" * 1000)
    swap_in(damaged, index)
    with pytest.raises(IndexUnreadable, match=r"damaged .*the next round rebuilds it"):
        search(index, "frozen")
    swap_in(two_indexes[1], index)
    with pinned(index) as file:
        assert file.version == "v000002" and search(file, "holiday")

"""The index's arrays file (index/search.arrays, queries.search_file): a search by it answers as
the DuckDB index does; one that is stale, damaged or missing never answers (the index does);
an update replaces it so that a reader never sees a mixed pair; a search writes nothing."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import pytest

from sharecrawl.queries.index import build_index, update_index
from sharecrawl.queries.index_store import IndexUnreadable, identity_of, index_meta, pinned
from sharecrawl.queries.search import search
from sharecrawl.queries.search_arrays import mapped_arrays
from sharecrawl.queries.search_file import (
    arrays_meta,
    arrays_path,
    damaged_sections,
    read_tables,
)
from tests.cliproc import run_cli
from tests.test_search import HOSTS, MEDIA_ROWS, media, write_version
from tests.test_search_imports import indexed_crawl

QUERIES = [
    ("madonna", {}),
    ("madonna music", {}),
    ("мадонна", {}),
    ("madona", {}),  # one edit away
    ("frozen", {"all_hosts": True}),
    ("kind:video", {"limit": 100}),
    ("kind:audio", {"limit": 100, "all_hosts": True}),
    ("host:alpha", {"limit": 100}),
    ("format:flac", {"limit": 100, "all_hosts": True}),
    ("artist:madonna year:1990..2010", {}),
    ("series:lost season:6", {"latest": True}),
    ("s06e02", {}),
    ("lost", {"limit": 2}),
    ("tables", {}),
    ("zqxw qzvx", {}),
]
FROZEN = "Frozen"  # a title only the second version has


def answers(index: Path | object) -> list[list[dict]]:
    return [search(index, q, **kw) for q, kw in QUERIES]


def by_duckdb(index: Path, tmp: Path) -> list[list[dict]]:
    """The answers of the index file alone: a copy without its arrays file, opened as a
    long-lived process does (a first search in SQL, then every array loaded from it)."""
    alone = tmp / "alone" / "search.duckdb"
    alone.parent.mkdir(exist_ok=True)
    shutil.copyfile(index, alone)
    assert not arrays_path(alone).exists()
    with pinned(alone) as file:
        first = answers(file)
        assert answers(file) == first  # the second search loaded the arrays: the same
        return first


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("arrays")
    out = root / "index" / "search.duckdb"
    build_index(write_version(root, MEDIA_ROWS), out)
    return out


def test_the_arrays_file_answers_as_the_index_does(built: Path, tmp_path: Path) -> None:
    arrays = mapped_arrays(built)
    assert arrays is not None and arrays.display is not None  # the file was used
    mapped = answers(built)
    assert mapped == by_duckdb(built, tmp_path)
    assert [r["artist"] for r in mapped[0]].count("Madonna") == 3  # known answers
    assert mapped[1][0]["title"] == "Music" and mapped[1][0]["copies"] == 3
    assert mapped[-1] == []
    with pinned(built) as file:  # a long-lived process maps the same file, checked
        assert answers(file) == mapped
    tables = read_tables(arrays_path(built), identity_of(os.stat(built)), verify=True)
    assert tables is not None and damaged_sections(tables) == []


def fresh_index(root: Path) -> Path:
    """The fixture's index built anew under `root`, with its own arrays file."""
    index = root / "index" / "search.duckdb"
    build_index(write_version(root, MEDIA_ROWS), index)
    return index


def rewrite(path: Path, data: bytes) -> None:
    """New contents under a new inode: a process's mapping of the old file stays whole."""
    path.with_name("new").write_bytes(data)
    os.replace(path.with_name("new"), path)


def damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        data = data[: len(data) // 2]
    elif how == "empty":
        data = b""
    elif how == "header":
        data = data[:40] + bytes([data[40] ^ 0xFF]) + data[41:]  # inside the header's JSON
    elif how == "longer":
        data += b"\0" * 64
    rewrite(path, data)


@pytest.mark.parametrize("how", ["truncated", "empty", "header", "longer", "missing"])
def test_a_damaged_or_missing_arrays_file_never_answers(
    built: Path, tmp_path: Path, how: str
) -> None:
    index = fresh_index(tmp_path / "crawl")
    expected = by_duckdb(index, tmp_path)
    if how == "missing":
        arrays_path(index).unlink()
    else:
        damage(arrays_path(index), how)
    assert mapped_arrays(index) is None
    assert answers(index) == expected
    assert arrays_meta(index, identity_of(os.stat(index))) is None  # nor is its meta believed
    meta = index_meta(index)
    assert meta is not None and meta["version"] == "v000003"  # the index file's own


def test_a_damaged_array_is_found_by_its_crc(built: Path, tmp_path: Path) -> None:
    index = fresh_index(tmp_path / "crawl")
    expected = by_duckdb(index, tmp_path)
    path = arrays_path(index)
    tables = read_tables(path, identity_of(os.stat(index)))
    assert tables is not None
    impacts = tables.arrays["impacts"].tobytes()
    del tables
    data = path.read_bytes()
    at = data.find(impacts)
    assert at > 0 and data.find(impacts, at + 1) == -1
    rewrite(path, data[:at] + bytes([data[at] ^ 0x40]) + data[at + 1 :])  # one bit of one
    tables = read_tables(path, identity_of(os.stat(index)))
    assert tables is not None and damaged_sections(tables) == ["impacts"]
    assert read_tables(path, identity_of(os.stat(index)), verify=True) is None
    with pinned(index) as file:  # a long-lived process checks: the index answers
        assert answers(file) == expected


def test_a_stale_arrays_file_never_answers(built: Path, tmp_path: Path) -> None:
    """An arrays file of another index file (one before an update, or left by a round that
    stopped between the two renames) is not read: the index file at the path answers."""
    index = fresh_index(tmp_path / "crawl")
    newer = tmp_path / "newer" / "index" / "search.duckdb"
    holiday = media("alpha", "Music/Madonna/Holiday.mp3", artist="Madonna", title="Holiday")
    more = [*MEDIA_ROWS, holiday]
    build_index(write_version(tmp_path / "newer", more, name="v000004"), newer)
    expected = by_duckdb(index, tmp_path)
    shutil.copyfile(arrays_path(newer), arrays_path(index))  # the newer index's arrays
    assert mapped_arrays(index) is None
    assert answers(index) == expected
    assert arrays_meta(index, identity_of(os.stat(index))) is None  # nor is its meta believed
    meta = index_meta(index)
    assert meta is not None and meta["version"] == "v000003"  # the index file's own
    assert "Holiday" not in {r["title"] for r in search(index, "madonna", all_hosts=True)}


def test_an_index_of_another_format_is_never_answered_by_its_arrays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index (and arrays file) an older sharecrawl wrote, whose text rules were others: the
    search says so and what rebuilds it, not what the old stems find."""
    with monkeypatch.context() as old:
        old.setattr("sharecrawl.queries.index.FORMAT", "3")
        index = fresh_index(tmp_path / "crawl")
    assert read_tables(arrays_path(index), identity_of(os.stat(index))) is not None
    assert mapped_arrays(index) is None
    with pytest.raises(
        IndexUnreadable,
        match=r"of another sharecrawl \(format 3, this one's is 4\): the next round",
    ):
        search(index, "madonna")


def test_an_update_replaces_the_pair_and_readers_never_see_a_mix(tmp_path: Path) -> None:
    first = write_version(tmp_path, MEDIA_ROWS[:3], name="v000001")
    second = write_version(tmp_path, MEDIA_ROWS, name="v000002")
    index = tmp_path / "index" / "search.duckdb"
    build_index(first, index)
    old = search(index, "frozen", all_hosts=True)
    assert FROZEN not in {r["title"] for r in old}
    seen: list[list[dict]] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            seen.append(search(index, "frozen", all_hosts=True))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        update_index(index, first, second)
    finally:
        done.set()
        reader.join()
    new = search(index, "frozen", all_hosts=True)
    assert new[0]["title"] == FROZEN
    assert seen and all(answer in (old, new) for answer in seen)
    arrays = mapped_arrays(index)  # the arrays file names the new index file
    assert arrays is not None and arrays.display is not None
    assert sorted(p.name for p in index.parent.iterdir()) == ["search.arrays", "search.duckdb"]


def linked_version(root: Path, first: Path, name: str, hosts=HOSTS) -> Path:
    """A version whose media parts are `first`'s, hard links as Publish makes them."""
    version = write_version(root, [], hosts=hosts, name=name)
    for part in (first / "media").iterdir():
        (version / "media" / part.name).unlink(missing_ok=True)
        os.link(part, version / "media" / part.name)
    return version


def test_an_update_that_changed_nothing_keeps_the_arrays(tmp_path: Path) -> None:
    """A quiet round's update copies the arrays (CRCs checked) under the new index's name;
    a host's new URL alone is a change: the display rows name it."""
    first = write_version(tmp_path, MEDIA_ROWS, name="v000001")
    index = tmp_path / "index" / "search.duckdb"
    build_index(first, index)
    before = answers(index)
    old = read_tables(arrays_path(index), identity_of(os.stat(index)), verify=True)
    assert old is not None
    counts = update_index(index, first, linked_version(tmp_path, first, "v000002"))
    assert counts.same and counts.parts == counts.works == 0
    new = read_tables(arrays_path(index), identity_of(os.stat(index)), verify=True)
    assert new is not None and damaged_sections(new) == []
    assert new.header["crc"] == old.header["crc"] and len(new.header["crc"]) == 26
    assert answers(index) == before
    with pinned(index) as file:
        assert file.version == "v000002"
    # the index's meta travels in its arrays file: a round's checks open no DuckDB
    meta = arrays_meta(index, identity_of(os.stat(index)))
    assert meta is not None and (meta["version"], meta["full_version"]) == ("v000002", "v000001")
    assert index_meta(index) == meta

    moved = [(h, "smb://beta.lan" if h == "beta" else u, on) for h, u, on in HOSTS]
    third = linked_version(tmp_path, first, "v000003", hosts=moved)
    counts = update_index(index, tmp_path / "crawldb" / "v000002", third)
    assert not counts.same
    music = search(index, "madonna music")[0]
    assert music["best"]["url"] == "smb://beta.lan/share/incoming/song_01.flac"
    assert search(index, "madonna music") == by_duckdb(index, tmp_path)[1]


def tree(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
    }


@pytest.mark.parametrize("arrays", ["kept", "stale"])
def test_a_cold_search_writes_nothing(tmp_path: Path, arrays: str) -> None:
    crawl = indexed_crawl(tmp_path / "crawl")
    if arrays == "stale":  # the index file replaced by a copy: its arrays name the old one
        shutil.copyfile(crawl.index, tmp_path / "copy")
        os.replace(tmp_path / "copy", crawl.index)
    before = tree(crawl.root)
    done = run_cli("search", "--json", "--crawl-dir", str(crawl.root), "madonna music")
    assert done.returncode == 0, done.stderr[-2000:]
    first = json.loads(done.stdout)[0]
    assert (first["title"], first["copies"]) == ("Music", 3)
    assert tree(crawl.root) == before

"""No listing entry can fail its host: times beyond years 1-9999, sizes below zero or absurd,
names UTF-8 cannot hold are kept clamped or marked (crawl_io.checked), counted in
fetchlog.n_clamped, and hash the same every round, as Update's jobs hash the stored rows.

Generated entries drive the entry-to-row path directly (hundreds of examples); real rounds
run over file:// trees on tmpfs, which keeps any time os.utime gives (ext4 stops at 2446),
and over real Samba for the year 10000 a guest with write access can set."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sharecrawl.crawl_io.checked import (
    MAX_MTIME_US,
    MAX_SIZE,
    MIN_MTIME_US,
    CheckedSource,
    clamped,
    mtime_datetime,
    storable,
)
from sharecrawl.crawl_io.sources import Entry, NotFound, parse_host_url
from sharecrawl.jobs.membership import Ranges, share_root
from sharecrawl.jobs.subtree_hash import summarize, walk_hash
from sharecrawl.jobs.walk import listing_table, walk_partition
from tests.conftest import LAN
from tests.media import make_media
from tests.smbd import SmbServer

YEAR_10000_NS = 253402300800 * 10**9  # 10000-01-01, as the open issue sets it
YEAR_0_NS = -62135596800 * 10**9 - 10**9  # a second before 0001-01-01

NAMES = st.one_of(
    st.text(st.characters(exclude_categories=()), max_size=10),  # lone surrogates too
    st.sampled_from(["", ".", "..", "a/b", "x\0y", "\udcff.mp3", "\ud800", "song.mp3"]),
)
SIZES = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([-1, 0, MAX_SIZE, MAX_SIZE + 1, 2**63 - 1, 2**64]),
    st.sampled_from([float("nan"), float("inf"), None]),
)
MTIMES = st.one_of(
    st.integers(-(2**80), 2**80),
    st.sampled_from([MIN_MTIME_US - 1, MIN_MTIME_US, MAX_MTIME_US, MAX_MTIME_US + 1]),
    st.sampled_from([YEAR_10000_NS // 1000, -(2**63), 2**63 - 1, float("nan"), None]),
)
ENTRIES = st.lists(st.builds(Entry, NAMES, st.booleans(), SIZES, MTIMES), max_size=8)


@settings(max_examples=400, deadline=None)
@given(ENTRIES)
def test_every_entry_becomes_a_row_that_hashes_as_update_hashes_it(entries: list) -> None:
    out = sorted(map(clamped, entries))
    # clamped alike every round; a stored name's backslashes would be escaped again
    assert all(clamped(e) is e for e in out if "\\" not in e.name)
    assert storable([e for e in out if "\\" not in e.name])
    assert storable(entries) == all(clamped(e) is e for e in entries)
    for e in out:
        assert 0 <= e.size <= MAX_SIZE and MIN_MTIME_US <= e.mtime_us <= MAX_MTIME_US
        assert "/" not in e.name and "\0" not in e.name and e.name not in ("", ".", "..")
    walked = [(e.name, e) for e in out]
    table = listing_table(share_root("host", "share"), walked)  # Arrow holds every name
    assert table["mtime"].to_pylist() == [mtime_datetime(e.mtime_us) for e in out]
    if out:  # the fetcher's streamed hash is the one the jobs compute from the rows
        assert summarize(table)[share_root("host", "share").id]["hash"] == walk_hash(walked)


class MemorySource:
    """A host held in memory: listings as the host gives them, reads answer the path."""

    host = parse_host_url("file:///memory")

    def __init__(self, folders: dict[str, list[Entry]]) -> None:
        self.folders = folders

    def shares(self) -> list[str]:
        return ["share"]

    def listdir(self, share: str, path: str) -> list[Entry]:
        if path not in self.folders:
            raise NotFound(path)
        return sorted(self.folders[path])

    def read(self, share: str, path: str, offset: int, length: int) -> bytes:
        return path.encode("utf-8", "surrogatepass")

    def close(self) -> None:
        pass


@settings(max_examples=150, deadline=None)
@given(st.lists(st.builds(Entry, NAMES, st.just(False), SIZES, MTIMES), max_size=6))
def test_a_walk_through_a_checked_source_keeps_every_entry_readable(files: list) -> None:
    """A marked folder's children are listed and read under the names the host gave."""
    names = {clamped(e).name: e for e in files}  # one entry per marked name
    files = list(names.values())
    folder = Entry("\ud800 odd/dir", True, 0, 0)
    source = CheckedSource(MemorySource({"": [folder, *files], "\ud800 odd/dir": files}))
    key = share_root("memory", "share")
    walked = list(walk_partition(source, key, Ranges([key])))
    assert len(walked) == 1 + 2 * len(files)
    assert storable([e for _, e in walked if "\\" not in e.name])
    assert all(e.name.encode("utf-8") and "/" not in e.name for _, e in walked)
    marked = "\\ud800 odd\\x2fdir"
    paths = dict(walked)
    assert paths[marked].is_dir and ("share", marked) in source.changed
    for name, host_entry in names.items():
        for path, host_path in (
            (name, host_entry.name),
            (f"{marked}/{name}", f"{folder.name}/{host_entry.name}"),
        ):
            assert not paths[path].is_dir
            assert source.read("share", path, 0, 9) == host_path.encode("utf-8", "surrogatepass")
    n_clamped = sum(clamped(e) is not e for e in files)
    assert len(source.changed) == 1 + 2 * n_clamped


@pytest.fixture
def tmpfs() -> Iterator[Path]:
    """A folder on tmpfs (/dev/shm), which keeps the times at the edges: skip without one."""
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm tmpfs here")
    base = Path(tempfile.mkdtemp(prefix="sharecrawl-edges-", dir="/dev/shm"))
    probe = base / "probe"
    probe.touch()
    os.utime(probe, ns=(YEAR_10000_NS, YEAR_10000_NS))
    if probe.stat().st_mtime_ns != YEAR_10000_NS:
        shutil.rmtree(base)
        pytest.skip("/dev/shm does not keep a year 10000 time")
    probe.unlink()
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def sql(run_json, lan: LAN, query: str) -> list[dict]:
    return run_json(lan, "sql", query)


def test_edge_entries_on_a_file_host_leave_its_rounds_whole(lan: LAN, tmpfs: Path, run_json):
    host = tmpfs / "edge"
    future = make_media(host / "music" / "future.mp3", artist="Kino", title="Future")
    ancient = make_media(host / "music" / "ancient.mp3", artist="Kino", title="Ancient")
    os.utime(future, ns=(YEAR_10000_NS, YEAR_10000_NS))
    os.utime(ancient, ns=(YEAR_0_NS, YEAR_0_NS))
    old = host / "music" / "old.txt"
    old.write_text("1677")
    os.utime(old, ns=(-(2**63), -(2**63)))  # 1677: inside years 1-9999, kept as it is
    huge = host / "big" / "huge.iso"
    huge.parent.mkdir()
    with open(huge, "wb") as f:
        f.truncate(MAX_SIZE + 1)  # sparse
    odd_share = os.path.join(os.fsencode(host), b"sh\xffare")  # not UTF-8: marked \xff
    os.mkdir(odd_share)
    make_media(os.fsdecode(os.path.join(odd_share, b"caf\xe9.mp3")), title="Odd Share")
    lan.hosts_file.write_text(f"file://{host}\n")

    lan.crawl()
    lan.crawl()
    log = sql(run_json, lan, "SELECT round, share, status, n_clamped FROM fetchlog ORDER BY ALL")
    assert log == [
        {"round": 1, "share": "big", "status": "new", "n_clamped": 1},
        {"round": 1, "share": "music", "status": "new", "n_clamped": 2},
        {"round": 1, "share": "sh\\xffare", "status": "new", "n_clamped": 1},
        {"round": 2, "share": "big", "status": "unchanged", "n_clamped": 1},
        {"round": 2, "share": "music", "status": "unchanged", "n_clamped": 2},
        {"round": 2, "share": "sh\\xffare", "status": "unchanged", "n_clamped": 1},
    ]
    files = sql(run_json, lan, "SELECT share, path, size FROM files WHERE NOT is_dir ORDER BY ALL")
    assert files == [
        {"share": "big", "path": "huge.iso", "size": MAX_SIZE},
        {"share": "music", "path": "ancient.mp3", "size": ancient.stat().st_size},
        {"share": "music", "path": "future.mp3", "size": future.stat().st_size},
        {"share": "music", "path": "old.txt", "size": 4},
        {"share": "sh\\xffare", "path": "caf\\xe9.mp3", "size": files[-1]["size"]},
    ]
    times = sql(
        run_json,
        lan,
        "SELECT epoch_us(mtime) AS us FROM files WHERE share = 'music' "
        "AND NOT is_dir ORDER BY path",
    )
    assert [r["us"] for r in times] == [
        -62135596800000000,  # ancient.mp3: 0001-01-01
        253402300799999999,  # future.mp3: 9999-12-31 23:59:59.999999
        -(2**63) // 1000,  # old.txt: 1677, kept
    ]
    assert sql(run_json, lan, "SELECT status FROM hosts") == [{"status": "ok"}]
    titles = {r["title"] for r in run_json(lan, "search", "--all-hosts", "kino")}
    assert titles == {"Future", "Ancient"}
    odd = sql(run_json, lan, "SELECT share, title, tag_error FROM media WHERE share LIKE 'sh%'")
    assert odd == [{"share": "sh\\xffare", "title": "Odd Share", "tag_error": None}]
    assert datetime(9999, 12, 31, 23, 59, 59, 999999, UTC) == mtime_datetime(MAX_MTIME_US)


@pytest.mark.smb
def test_a_year_10000_file_over_smb_fails_nothing(
    lan: LAN, tmpfs: Path, smbd_factory: Callable[..., SmbServer], run_json
) -> None:
    root = tmpfs / "tree"
    song = make_media(root / "media" / "Kino" / "track.mp3", artist="Kino", title="Kukushka")
    other = make_media(root / "media" / "Kino" / "other.mp3", artist="Kino", title="Zvezda")
    (root / "private").mkdir(parents=True)
    server = smbd_factory(root_dir=root)
    os.utime(song, ns=(YEAR_10000_NS, YEAR_10000_NS))
    lan.hosts_file.write_text(f"{server.url}/media\n")
    lan.crawl()
    lan.crawl()
    log = sql(run_json, lan, "SELECT round, status, n_clamped FROM fetchlog ORDER BY ALL")
    assert log == [
        {"round": 1, "status": "new", "n_clamped": 1},
        {"round": 2, "status": "unchanged", "n_clamped": 1},
    ]
    assert sql(run_json, lan, "SELECT status, last_error FROM hosts") == [
        {"status": "ok", "last_error": None}
    ]
    titles = sorted(r["title"] for r in run_json(lan, "search", "kino"))
    assert titles == ["Kukushka", "Zvezda"] and other.exists()
    rows = sql(run_json, lan, "SELECT epoch_us(mtime) AS us FROM files WHERE path LIKE '%track%'")
    assert rows == [{"us": 253402300799999999}]

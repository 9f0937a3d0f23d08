"""A hinted scan (jobs.hinted_walk) on a real folder tree: after changes, listing only around
the paths a watch would have named, merged with the stored rows, gives exactly what a full
walk gives, for every partition of the share (range partitions included)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sharecrawl.crawl_io.connect import open_source
from sharecrawl.crawl_io.sources import parse_host_url
from sharecrawl.jobs.hint_counts import holders
from sharecrawl.jobs.hinted_walk import WholeScan, hinted_walk
from sharecrawl.jobs.membership import PartitionKey, Ranges, share_root
from sharecrawl.jobs.subtree_hash import walk_hash
from sharecrawl.jobs.walk import WalkStats, walk_partition

HOST = "pc1"


def tree(root: Path) -> Path:
    share = root / HOST / "music"
    for artist in ("Abba", "Kino", "Queen"):
        for album in ("One", "Two", "Three", "Four", "Five", "Six"):
            folder = share / artist / album
            folder.mkdir(parents=True)
            for track in range(3):
                (folder / f"{track:02d}.mp3").write_bytes(b"x" * (track + 1))
    (share / "top.txt").write_text("top")
    return share


def keys() -> list[PartitionKey]:
    """The share root, and a range partition claiming artists K.. of the root."""
    return [share_root(HOST, "music"), PartitionKey(HOST, "music", "", "K", None)]


def walk_all(source, parts: list[PartitionKey]) -> dict[PartitionKey, list]:
    ranges = Ranges(parts)
    return {key: list(walk_partition(source, key, ranges)) for key in parts}


def check(root: Path, before: dict, hinted: set[str]) -> dict[PartitionKey, int]:
    """Each partition's hinted scan equals its full walk; returns folders listed each."""
    source = open_source(parse_host_url(f"file://{root / HOST}"))
    parts = keys()
    ranges = Ranges(parts)
    full = walk_all(source, parts)
    listed = {}
    for key in parts:
        mine = {p for p in hinted if key in holders(ranges, parts[0], p)}
        stats = WalkStats()
        got = hinted_walk(source, key, ranges, before[key], walk_hash(before[key]), mine, stats)
        assert got == full[key], key
        listed[key] = stats.folders_listed
    return listed


def test_changes_of_every_kind_are_merged_as_a_full_walk_sees_them(tmp_path: Path) -> None:
    share = tree(tmp_path)
    source = open_source(parse_host_url(f"file://{tmp_path / HOST}"))
    before = walk_all(source, keys())
    (share / "Abba/One/new.mp3").write_bytes(b"new")  # a file added
    (share / "Kino/Two/01.mp3").write_bytes(b"rewritten, longer")  # a file rewritten
    shutil.rmtree(share / "Queen/One")  # a folder removed, with what was in it
    moved = tmp_path / "elsewhere" / "Live"  # a folder moved in: one notification, for it
    (moved / "disc 1").mkdir(parents=True)
    (moved / "disc 1" / "a.mp3").write_bytes(b"a")
    shutil.move(moved, share / "Kino" / "Live")
    (share / "Abba/Two/00.mp3").unlink()  # a file replaced by a folder of the same name
    (share / "Abba/Two/00.mp3").mkdir()
    (share / "Abba/Two/00.mp3/inner.txt").write_text("i")
    hinted = {"Abba/One/new.mp3", "Kino/Two/01.mp3", "Queen/One", "Kino/Live", "Abba/Two/00.mp3"}
    listed = check(tmp_path, before, hinted)
    # each partition lists a few folders, not its whole tree (12 albums, 2 artists, a root)
    stats = WalkStats()
    list(walk_partition(source, keys()[1], Ranges(keys()), stats))
    assert 0 < listed[keys()[1]] <= stats.folders_listed // 2


def test_what_cannot_be_merged_asks_for_a_full_walk(tmp_path: Path) -> None:
    share = tree(tmp_path)
    source = open_source(parse_host_url(f"file://{tmp_path / HOST}"))
    root = keys()[0]
    ranges = Ranges(keys())
    stored = list(walk_partition(source, root, ranges))
    with pytest.raises(WholeScan):  # stored rows that are not what the stored hash says
        hinted_walk(source, root, ranges, stored[1:], walk_hash(stored), {"top.txt"}, WalkStats())
    shutil.rmtree(share / "Abba")
    with pytest.raises(WholeScan):  # a hinted folder that is gone, its parent not hinted
        hinted_walk(
            source, root, ranges, stored, walk_hash(stored), {"Abba/One/00.mp3"}, WalkStats()
        )


OPS = st.lists(
    st.tuples(
        st.sampled_from(["add", "rewrite", "remove", "mkdir", "rmdir"]),
        st.sampled_from(["Abba", "Kino", "Queen", "Abba/One", "Kino/Two", "Queen/Two", ""]),
        st.sampled_from(["n1", "n2.mp3", "00.mp3"]),
    ),
    min_size=1,
    max_size=6,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS)
def test_random_changes_with_their_notifications(tmp_path_factory, ops) -> None:
    root = tmp_path_factory.mktemp("lan")
    share = tree(root)
    source = open_source(parse_host_url(f"file://{root / HOST}"))
    before = walk_all(source, keys())
    hinted: set[str] = set()
    for n, (op, folder, name) in enumerate(ops):
        where = share / folder
        if not where.is_dir():
            continue
        target = where / name
        rel = f"{folder}/{name}" if folder else name
        if op in ("add", "rewrite") and not target.is_dir():
            target.write_bytes(b"y" * (n + 2))
        elif op == "remove" and target.is_file():
            target.unlink()
        elif op == "mkdir" and not target.exists():
            (target / "inside").mkdir(parents=True)
            (target / "inside" / "f.mp3").write_bytes(b"f")
        elif op == "rmdir" and target.is_dir():
            shutil.rmtree(target)
        else:
            continue
        os.utime(where, (1_700_000_000 + n, 1_700_000_000 + n))  # folder times move on
        hinted.add(rel)
    check(root, before, hinted)

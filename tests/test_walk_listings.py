"""A host's fetch lists each folder once and only what is due: a range partition's root, also
a folder of its parent partition, is listed by the first walk that comes to it and kept for the
others (jobs.walk.SharedRoots); over SMB the read-ahead lists the folders the walk names
(SMBSource.expect), not every subfolder a listing shows."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from sharecrawl.crawl_io.checked import CheckedSource
from sharecrawl.crawl_io.filesource import FileSource
from sharecrawl.crawl_io.smb import SMBSource
from sharecrawl.crawl_io.sources import Credentials, Entry, parse_host_url
from sharecrawl.jobs.crawl_rules import Rules, filtered, parse_rules
from sharecrawl.jobs.membership import PartitionKey, Ranges, share_root
from sharecrawl.jobs.subtree_hash import walk_hash
from sharecrawl.jobs.walk import SharedRoots, WalkStats, walk_partition
from tests.smbd import SmbServer, make_base_dir, remove_tree


def make_share(share: Path) -> None:
    """'a' split into two ranges of its ten albums; 'b' in the share root partition."""
    for artist in ("a", "b"):
        for album in range(10):
            folder = share / artist / f"{album:02d}"
            folder.mkdir(parents=True)
            for track in range(3):
                (folder / f"{track} song.txt").write_text(f"{artist}{album}{track}")


def partitions(host: str) -> list[PartitionKey]:
    return [
        share_root(host, "media"),
        PartitionKey(host, "media", "a", None, "05"),
        PartitionKey(host, "media", "a", "05", None),
    ]


class Counting:
    """A source counting its listings."""

    def __init__(self, source: FileSource) -> None:
        self.source, self.host = source, source.host
        self.listed: Counter[str] = Counter()

    def listdir(self, share: str, path: str) -> list[Entry]:
        self.listed[path] += 1
        return self.source.listdir(share, path)


def walks(source: object, keys: list[PartitionKey], shared: SharedRoots | None) -> list:
    ranges = Ranges(keys)
    out = []
    for key in keys:
        stats = WalkStats()
        entries = list(walk_partition(source, key, ranges, stats, shared))  # type: ignore[arg-type]
        out.append((entries, stats))
    return out


@pytest.mark.parametrize("order", [[0, 1, 2], [2, 0, 1], [1, 2, 0]])
def test_each_folder_is_listed_once_and_the_walks_are_the_same(
    tmp_path: Path, order: list[int]
) -> None:
    make_share(tmp_path / "host" / "media")
    host = parse_host_url(f"file://{tmp_path / 'host'}")
    keys = [partitions(host.host)[i] for i in order]
    alone = walks(FileSource(host), keys, None)
    counting = Counting(FileSource(host))
    shared = SharedRoots({(k.share, k.root) for k in keys if not k.is_share_root})
    together = walks(counting, keys, shared)
    # the same entries, the same hashes and folder counts, partition by partition
    for (before, stats_before), (after, stats_after) in zip(alone, together, strict=True):
        assert after == before and walk_hash(after) == walk_hash(before)
        assert stats_after.folders_listed == stats_before.folders_listed
    assert set(counting.listed.values()) == {1}  # 'a' too, which all three walks read
    assert len(counting.listed) == 1 + 2 + 20  # the root, a, b and their albums
    # a walk that used another's listing of 'a' says when that was: its scan stands for it
    assert together[0][1].listed_at is None
    assert all(stats.listed_at is not None for _, stats in together[1:])


@pytest.mark.smb
def test_smb_read_ahead_lists_only_the_partitions_folders(
    smbd_factory: Callable[..., SmbServer],
) -> None:
    base = make_base_dir()  # where smbd's guest may read
    try:
        root = base / "tree"
        make_share(root / "media")
        (root / "private").mkdir()
        server = smbd_factory(root_dir=root)
        local = FileSource(parse_host_url(f"file://{root}"))
        with SMBSource(parse_host_url(server.url), Credentials(None), timeout_s=10) as remote:
            issued: list[str] = []
            issue = remote._issue
            remote._issue = lambda key: (issued.append(key[1]), issue(key))[1]  # type: ignore[method-assign]
            keys = partitions(remote.host.host)
            later = keys[2]  # the range of albums 05-09 of 'a'
            entries = list(walk_partition(remote, later, Ranges(keys)))
            assert entries == list(walk_partition(local, later, Ranges(keys)))
            # no album below 05, nothing of 'b': what the walk never asks for is never listed
            assert sorted(issued) == ["a", *(f"a/{i:02d}" for i in range(5, 10))]
            issued.clear()
            whole = list(walk_partition(remote, keys[0], Ranges(keys)))
            assert whole == list(walk_partition(local, keys[0], Ranges(keys)))
            assert sorted(issued) == ["", "a", "b", *(f"b/{i:02d}" for i in range(10))]
    finally:
        remove_tree(base)


class Ahead(Counting):
    """A counting source that lists ahead, recording what it is told."""

    def __init__(self, source: FileSource) -> None:
        super().__init__(source)
        self.told: list[str] = []

    def expect(self, share: str, paths: list[str]) -> None:
        self.told += paths


def test_a_source_that_lists_ahead_is_told_only_what_is_crawled(tmp_path: Path) -> None:
    """Through the checks and the crawl rules, the walk names the folders it lists next:
    neither those child partitions claim nor those the rules exclude."""
    make_share(tmp_path / "host" / "media")
    host = parse_host_url(f"file://{tmp_path / 'host'}")
    inner = Ahead(FileSource(host))
    rules = Rules(tuple(parse_rules("exclude path=b/03\n", "test.rules")))
    source = filtered(CheckedSource(inner), rules, host.host)
    keys = partitions(host.host)
    list(walk_partition(source, keys[0], Ranges(keys)))
    albums = [f"b/{i:02d}" for i in range(10) if i != 3]
    assert inner.told == ["", "a", "b", *albums]
    assert sorted(inner.listed) == sorted(inner.told)
    assert CheckedSource(FileSource(host)).expect is None  # nothing to tell: nothing is built

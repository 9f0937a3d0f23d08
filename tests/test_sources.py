"""The file:// source, host URLs and the canonical walk of partitions."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sharecrawl.crawl_io.filesource import FileSource
from sharecrawl.crawl_io.sources import (
    AccessDenied,
    ConfigError,
    Credentials,
    HostUnreachable,
    NotFound,
    credentials_for,
    parse_host_url,
    read_hosts_file,
)
from sharecrawl.jobs.membership import PartitionKey, Ranges, share_root
from sharecrawl.jobs.subtree_hash import canonical_key, walk_hash
from sharecrawl.jobs.walk import walk_partition
from tests.hash_reference import partition_hash


def make_tree(root: Path, paths: list[str]) -> None:
    for p in paths:
        full = root / p
        if p.endswith("/"):
            full.mkdir(parents=True, exist_ok=True)
        else:
            full.parent.mkdir(parents=True, exist_ok=True)
            full.write_bytes(p.encode() * 3)


@pytest.fixture
def host(tmp_path: Path) -> FileSource:
    make_tree(
        tmp_path / "h",
        [
            "s/a/b/x.mp3",
            "s/a b/y.mp3",
            "s/a/c.txt",
            "s/z.mp3",
            "s/m/n/o.flac",
            "s/empty/",
            "t/one.ogg",
        ],
    )
    return FileSource(parse_host_url(f"file://{tmp_path / 'h'}"))


def test_listing_is_sorted_with_sizes_and_mtimes(host: FileSource, tmp_path: Path) -> None:
    assert host.shares() == ["s", "t"]
    entries = host.listdir("s", "")
    assert [e.name for e in entries] == ["a", "a b", "empty", "m", "z.mp3"]
    z = entries[-1]
    st = os.stat(tmp_path / "h/s/z.mp3")
    assert (z.is_dir, z.size, z.mtime_us) == (False, st.st_size, st.st_mtime_ns // 1000)
    assert entries[0].is_dir and entries[0].size == 0


def test_partial_reads_and_errors(host: FileSource, tmp_path: Path) -> None:
    assert host.read("s", "z.mp3", 2, 4) == b"z.mp"  # the file holds b"s/z.mp3" thrice
    assert host.read("s", "z.mp3", 1000, 10) == b""
    with pytest.raises(NotFound):
        host.listdir("s", "nope")
    with pytest.raises(NotFound):
        host.read("s", "a", 0, 10)  # a folder is not readable as a file
    os.symlink("/etc/passwd", tmp_path / "h/s/link.mp3")
    assert "link.mp3" not in [e.name for e in host.listdir("s", "")]
    with pytest.raises(NotFound):
        host.read("s", "link.mp3", 0, 10)


def test_unreadable_folder_is_access_denied(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads every folder: permissions cannot deny it here")
    make_tree(tmp_path / "h", ["s/locked/x.mp3"])
    os.chmod(tmp_path / "h/s/locked", 0)
    try:
        with pytest.raises(AccessDenied):
            FileSource(parse_host_url(f"file://{tmp_path / 'h'}")).listdir("s", "locked")
    finally:
        os.chmod(tmp_path / "h/s/locked", 0o755)


def test_missing_host_is_unreachable(tmp_path: Path) -> None:
    with pytest.raises(HostUnreachable):
        FileSource(parse_host_url(f"file://{tmp_path / 'gone'}"))


def test_hostile_names_are_listed_and_readable(tmp_path: Path) -> None:
    share = tmp_path / "h" / "s"
    share.mkdir(parents=True)
    raw = os.fsencode(share) + b"/caf\xe9 \n\t'; DROP TABLE files;--.mp3"
    with open(raw, "wb") as f:
        f.write(b"ID3data")
    (share / ("x" * 255)).write_bytes(b"long")
    (share / "Мадонна — Музыка.mp3").write_bytes(b"cyr")
    source = FileSource(parse_host_url(f"file://{tmp_path / 'h'}"))
    names = [e.name for e in source.listdir("s", "")]
    assert len(names) == 3
    shown = next(n for n in names if n.startswith("caf"))
    assert shown == "caf\udce9 \n\t'; DROP TABLE files;--.mp3"  # the byte, as surrogateescape
    assert source.read("s", shown, 0, 3) == b"ID3"
    assert source.read("s", "Мадонна — Музыка.mp3", 0, 3) == b"cyr"


def test_walk_is_canonical_and_stops_at_child_partitions(host: FileSource) -> None:
    root = share_root("h", "s")
    ranges = Ranges([PartitionKey("h", "s", "", "m", None)])
    paths = [p for p, _ in walk_partition(host, root, ranges)]
    # 'm' is claimed by the range partition; the share root's own files stay in the root
    assert paths == ["a", "a/b", "a/b/x.mp3", "a/c.txt", "a b", "a b/y.mp3", "empty", "z.mp3"]
    assert paths == sorted(paths, key=canonical_key)
    child = [p for p, _ in walk_partition(host, PartitionKey("h", "s", "", "m", None), ranges)]
    assert child == ["m", "m/n", "m/n/o.flac"]
    whole = [p for p, _ in walk_partition(host, root, Ranges([]))]
    assert sorted(whole) == sorted(paths + child)


def test_every_entry_in_exactly_one_partition(host: FileSource) -> None:
    keys = [
        share_root("h", "s"),
        PartitionKey("h", "s", "", "b", "n"),
        PartitionKey("h", "s", "a", "a", "c"),
    ]
    ranges = Ranges(keys)
    seen: dict[str, PartitionKey] = {}
    for key in keys:
        for path, entry in walk_partition(host, key, ranges):
            assert path not in seen, f"{path} in two partitions"
            seen[path] = key
            assert ranges.owner(path, entry.is_dir, keys[0]) == key
    assert set(seen) == {p for p, _ in walk_partition(host, keys[0], Ranges([]))}


def test_hash_changes_with_any_entry_attribute(host: FileSource) -> None:
    rows = [
        (p, e.is_dir, e.size, e.mtime_us)
        for p, e in walk_partition(host, share_root("h", "s"), Ranges([]))
    ]
    base = partition_hash(rows)
    assert partition_hash(list(reversed(rows))) == base  # any input order hashes canonically
    path, is_dir, size, mtime = rows[3]
    for changed in [
        (path + "x", is_dir, size, mtime),
        (path, not is_dir, size, mtime),
        (path, is_dir, size + 1, mtime),
        (path, is_dir, size, mtime + 1),
    ]:
        assert partition_hash([*rows[:3], changed, *rows[4:]]) != base
    assert partition_hash(rows[:-1]) != base


def test_walk_hash_is_the_partition_hash(host: FileSource) -> None:
    """The fetcher hashes a walk in one call; the jobs hash stored rows: they must agree."""
    walk = list(walk_partition(host, share_root("h", "s"), Ranges([])))
    rows = [(p, e.is_dir, e.size, e.mtime_us) for p, e in walk]
    assert walk_hash(walk) == partition_hash(rows)
    assert walk_hash(walk[:-1]) != partition_hash(rows)
    assert walk_hash([]) == partition_hash([])


def test_host_urls() -> None:
    h = parse_host_url("smb://bob@nas.local:1445/music")
    assert (h.host, h.user, h.share, h.url) == (
        "nas.local:1445",
        "bob",
        "music",
        "smb://bob@nas.local:1445",
    )
    assert parse_host_url("smb://nas:445").host == "nas"
    assert parse_host_url("file:///srv/lan/alpha/").host == "alpha"
    for bad in ("http://x/y", "smb:///share", "smb://h/a/b", "file://other/x", "file:///"):
        with pytest.raises(ConfigError):
            parse_host_url(bad)


def test_hosts_file_errors_name_the_line(tmp_path: Path) -> None:
    f = tmp_path / "hosts.txt"
    f.write_text("# lab\nfile:///srv/a\n\nsmb://h:notaport/x\n")
    with pytest.raises(ConfigError, match=r"hosts.txt:4: malformed"):
        read_hosts_file(f)
    f.write_text("file:///srv/a\nfile:///other/a\n")
    with pytest.raises(ConfigError, match="two hosts are named 'a'"):
        read_hosts_file(f)


def test_credentials_never_show_the_password(tmp_path: Path) -> None:
    host = parse_host_url("smb://nas/music")
    creds = credentials_for(host, {"SHARECRAWL_SMB_USER": "bob", "SHARECRAWL_SMB_PASSWORD": "s3"})
    assert creds == Credentials("bob", "s3") and "s3" not in repr(creds)
    cred_file = tmp_path / "creds"
    cred_file.write_text("username = alice\npassword = pw\n")
    os.chmod(cred_file, 0o644)
    with pytest.raises(ConfigError, match="readable only by its owner"):
        credentials_for(host, {"SHARECRAWL_SMB_CREDENTIALS": str(cred_file)})
    os.chmod(cred_file, 0o600)
    assert credentials_for(host, {"SHARECRAWL_SMB_CREDENTIALS": str(cred_file)}) == Credentials(
        "alice", "pw"
    )
    assert credentials_for(host, {}) == Credentials(None, None)  # guest


def test_range_file_reads_head_and_tail_in_few_requests(tmp_path: Path) -> None:
    from sharecrawl.crawl_io.rangefile import BLOCK, TAIL, RangeFile

    share = tmp_path / "h" / "s"
    share.mkdir(parents=True)
    data = bytes(range(256)) * 4096  # 1 MiB
    (share / "f.bin").write_bytes(data)
    source = FileSource(parse_host_url(f"file://{tmp_path / 'h'}"))
    f = RangeFile(source, "s", "f.bin", len(data))
    assert f.read(10) == data[:10] and f.requests == 1 and f.bytes_read == BLOCK
    f.seek(-128, 2)
    assert f.read() == data[-128:] and f.requests == 2 and f.bytes_read == BLOCK + TAIL
    f.seek(-65536, 2)  # the last Ogg page search: one request through to the end
    assert f.read(65536) == data[-65536:] and f.requests == 3
    f.seek(100)
    assert f.read(50) == data[100:150] and f.requests == 3  # cached
    f.seek(500_000)
    assert f.read(BLOCK * 2) == data[500_000 : 500_000 + 2 * BLOCK]
    assert f.read() == data[500_000 + 2 * BLOCK :]
    assert f.bytes_read < len(data) + 2 * BLOCK

"""Hashes and splits pinned to known answers: a change of the hash definition forces every
LAN to be read again, so it must fail a test, not pass unnoticed.

One small share (fixed names, sizes and microsecond mtimes) is walked as the fetcher walks
it (jobs.walk, then walk_hash), from a folder and from a real smbd, and its listing is
hashed as the jobs hash it (summarize, folder_summaries); all reach the literals below. The
literals were checked by hand: the records are spelled out here and md5'd with hashlib.
The B*-subtree splits of a fixed tree under fixed costs and limits are worked out by hand in
the comments."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pyarrow as pa
import pytest

from sharecrawl.crawl_io.filesource import FileSource
from sharecrawl.crawl_io.smb import SMBSource
from sharecrawl.crawl_io.sources import Credentials, Source, parse_host_url
from sharecrawl.jobs.bstar_split import split_ranges
from sharecrawl.jobs.membership import PartitionKey, Ranges, share_root
from sharecrawl.jobs.scan_cost import HostCost, Limits
from sharecrawl.jobs.subtree_hash import (
    folder_summaries,
    listing_columns,
    summarize,
    walk_hash,
)
from sharecrawl.jobs.walk import listing_table, walk_partition
from tests.hash_reference import folder_hashes, partition_hash
from tests.smbd import SmbServer, chmod_tree
from tests.test_partition_split import tree_table

T = 1_700_000_000_123_456  # microseconds since the epoch
FILES = {  # path -> size, mtime
    "Album/01 Intro.mp3": (5, T + 1),
    "Album/02 Song.mp3": (7, T + 2),
    "Album b/cover.jpg": (3, T + 3),
    "notes.txt": (4, T + 4),
}
FOLDERS = {"Album": T + 100, "Album b": T + 200, "Empty": T + 300}

ROOT_ID = "38360b3564147b3c"  # partition_id('h', 'media', '', None, None)
PARTITION_HASH = "06bd526755c767d47049b518e2b75771"
EMPTY = "d41d8cd98f00b204e9800998ecf8427e"  # md5 of nothing
MERKLE = {  # folder -> (hash with mtimes, content hash)
    "": ("25dea422ef7406c1c2ca9f75991589e7", "1924b3910925d943cbd98ed97bdb4fab"),
    "Album": ("850a1fd20aece222bd50b9db4f8b4cbf", "6eb27ac74c57563b6a3914ad16399003"),
    "Album b": ("24748a9c5e414a89d68a01ac38902427", "0a48a9364984bcdf147261b8feb948c3"),
    "Empty": (EMPTY, EMPTY),
}


def make_share(folder: Path) -> None:
    for path in FOLDERS:
        (folder / path).mkdir(parents=True)
    for path, (size, mtime_us) in FILES.items():
        (folder / path).write_bytes(b"x" * size)
        os.utime(folder / path, ns=(mtime_us * 1000,) * 2)
    for path, mtime_us in FOLDERS.items():  # after their files: writing them moved it
        os.utime(folder / path, ns=(mtime_us * 1000,) * 2)


def fetched(source: Source) -> tuple[str, pa.Table]:
    """The partition hash and listing rows of share 'media', as a fetch makes them."""
    key = share_root("h", "media")
    entries = list(walk_partition(source, key, Ranges([])))
    return walk_hash(entries), listing_table(key, entries)


def record(*fields: object) -> str:
    return "\0".join(str(f) for f in fields) + "\n"


def md5(*records: str) -> str:
    return hashlib.md5("".join(records).encode()).hexdigest()


def test_hand_made_records_give_the_literals() -> None:
    """The documented encodings, written out: partition records (path, d/f, size, mtime) in
    canonical order ('Album/...' before 'Album b': '/' sorts below every character), and the
    Merkle records of a folder's children in name order (mtimes 0 in the content hash)."""
    assert PARTITION_HASH == md5(
        record("Album", "d", 0, T + 100),
        record("Album/01 Intro.mp3", "f", 5, T + 1),
        record("Album/02 Song.mp3", "f", 7, T + 2),
        record("Album b", "d", 0, T + 200),
        record("Album b/cover.jpg", "f", 3, T + 3),
        record("Empty", "d", 0, T + 300),
        record("notes.txt", "f", 4, T + 4),
    )
    assert hashlib.md5(b"h\0media\0\0\0").hexdigest()[:16] == ROOT_ID
    for i, times in ((0, 1), (1, 0)):
        album = md5(
            record("f", "01 Intro.mp3", 5, (T + 1) * times),
            record("f", "02 Song.mp3", 7, (T + 2) * times),
        )
        cover = md5(record("f", "cover.jpg", 3, (T + 3) * times))
        assert (album, cover) == (MERKLE["Album"][i], MERKLE["Album b"][i])
        root = md5(
            record("d", "Album", album),
            record("d", "Album b", cover),
            record("d", "Empty", EMPTY),
            record("f", "notes.txt", 4, (T + 4) * times),
        )
        assert root == MERKLE[""][i]


def check_listing(digest: str, listing: pa.Table) -> None:
    """The fetch's streamed hash and the jobs' columnar hashes of its listing: the literals."""
    assert digest == PARTITION_HASH
    columns = [listing[c].to_pylist() for c in ("path", "is_dir", "size")]
    columns.append(listing["mtime"].cast(pa.int64()).to_pylist())  # microseconds
    as_tuples = list(zip(*columns, strict=True))
    assert partition_hash(reversed(as_tuples)) == PARTITION_HASH  # any order in
    assert summarize(listing_columns(listing, "fetched")) == {
        ROOT_ID: {"hash": PARTITION_HASH, "n_folders": 3, "n_files": 4, "n_media": 2, "bytes": 19}
    }
    with_times, content = folder_hashes(as_tuples), folder_hashes(as_tuples, with_times=False)
    assert {k: (with_times[k], content[k]) for k in with_times} == MERKLE
    summaries = folder_summaries(listing_columns(listing, "fetched")).to_pylist()
    assert {
        r["path"]: (r["hash"], r["content_hash"], r["n_files"], r["bytes"]) for r in summaries
    } == {
        "Album": (*MERKLE["Album"], 2, 12),
        "Album b": (*MERKLE["Album b"], 1, 3),
        "Empty": (EMPTY, EMPTY, 0, 0),
    }


def test_a_folder_share_hashes_to_the_literals(tmp_path: Path) -> None:
    make_share(tmp_path / "h" / "media")
    check_listing(*fetched(FileSource(parse_host_url(f"file://{tmp_path / 'h'}"))))


@pytest.mark.smb
def test_an_smb_share_hashes_to_the_literals(smbd_factory) -> None:
    server: SmbServer = smbd_factory(tree=False)
    make_share(server.root_dir / "media")
    chmod_tree(server.root_dir)  # readable by the guest account; mtimes stay
    with SMBSource(parse_host_url(server.url), Credentials(None), timeout_s=10) as source:
        check_listing(*fetched(source))


# -- B*-subtree splits ---------------------------------------------------------------------
# Five folders a..e under the share root, four media files each ('a/01.mp3', 8 bytes of
# path each). With 0.1 s a listing and 1 s a tag read, a folder costs 4.1 s and 32 bytes.
SPLIT_TREE = {f"{folder}/{i:02d}.mp3": 1 for folder in "abcde" for i in range(1, 5)}
COST = HostCost(list_s_per_folder=0.1, tag_s_per_file=1.0)


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        # 10 s: a, b make 8.2 s; c would make 12.3 > 10 with 8.2 >= 0.75 * 10 already, so
        # [None, 'c') closes; c, d likewise [c, e); e (4.1 s) stays in the root. Each range
        # is 8.2 s of its folders plus 0.1 s for listing its root: 8.3 s, and 64 bytes.
        (
            Limits(10.0, 1 << 30),
            [
                (None, "c", "1fa4378ccd2c963d", 8.3, 64.0),
                ("c", "e", "b18680a50087d64b", 8.3, 64.0),
            ],
        ),
        # 100 bytes: a, b, c make 96; d would make 128 > 100 with 96 >= 75: [None, 'd')
        # closes at 12.3 + 0.1 s; d, e (64 bytes) stay in the root.
        (Limits(1000.0, 100), [(None, "d", "aac9a5cb1f941138", 12.4, 96.0)]),
    ],
)
def test_split_of_a_fixed_tree(limits: Limits, expected: list) -> None:
    made = split_ranges(
        tree_table(SPLIT_TREE), cost=COST, limits=limits, within=share_root("h", "s")
    )
    got = [(r.key.lo, r.key.hi, r.key.id, round(r.est_scan_s, 9), r.mem_bytes) for r in made]
    assert got == expected
    assert all(r.key == PartitionKey("h", "s", "", r.key.lo, r.key.hi) for r in made)
    lo, hi = expected[0][0], expected[0][1]
    text = f"h\0s\0\0{'' if lo is None else '=' + lo}\0={hi}"
    assert hashlib.md5(text.encode()).hexdigest()[:16] == expected[0][2]

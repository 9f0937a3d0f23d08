"""SMBSource against real Samba servers (tests/smbd.py): listings, reads, tags, failures, and
files opened for streaming (SMBFile)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import pytest

from sharecrawl.crawl_io.filesource import FileSource
from sharecrawl.crawl_io.liveness import check_host
from sharecrawl.crawl_io.rangefile import RangeFile
from sharecrawl.crawl_io.smb import SMBSource
from sharecrawl.crawl_io.sources import (
    AccessDenied,
    Credentials,
    HostUnreachable,
    NotFound,
    Source,
    SourceError,
    SourceTimeout,
    parse_host_url,
)
from tests import smbd
from tests.smbd import FORBIDDEN_NAMES, SmbServer, free_port, make_base_dir, make_tree

pytestmark = pytest.mark.smb


def guest(server: SmbServer, timeout_s: float = 10.0, **kw: object) -> SMBSource:
    return SMBSource(parse_host_url(server.url), Credentials(None), timeout_s=timeout_s, **kw)


def walk(source: Source, share: str, path: str = "") -> Iterator[tuple[str, bool, int, int]]:
    """Depth first, children by name, as the crawler walks."""
    for entry in source.listdir(share, path):
        child = f"{path}/{entry.name}" if path else entry.name
        yield child, entry.is_dir, entry.size, entry.mtime_us
        if entry.is_dir:
            yield from walk(source, share, child)


def local(server: SmbServer) -> FileSource:
    return FileSource(parse_host_url(f"file://{server.root_dir}"))


def test_listing_equals_local_walk(smb_server: SmbServer) -> None:
    with guest(smb_server) as remote:
        remote_rows = list(walk(remote, "media"))
    local_rows = list(walk(local(smb_server), "media"))
    assert remote_rows == local_rows  # same set, same canonical order
    names = {path.rsplit("/", 1)[-1] for path, *_ in remote_rows}
    assert set(FORBIDDEN_NAMES) <= names
    assert any(len(n.encode()) == 255 for n in names)
    assert max(path.count("/") for path, *_ in remote_rows) >= 40


def test_walk_that_skips_subtrees(smb_server: SmbServer) -> None:
    """Folders listed ahead that the walk never asks for leave the read-ahead window."""

    def pruned(source: Source, path: str = "") -> Iterator[tuple[str, bool, int, int]]:
        for entry in source.listdir("media", path):
            child = f"{path}/{entry.name}" if path else entry.name
            yield child, entry.is_dir, entry.size, entry.mtime_us
            if entry.is_dir and entry.name != "deep":
                yield from pruned(source, child)

    with guest(smb_server, window=2) as remote:
        rows = list(pruned(remote))
        assert ("media", "deep") not in remote._inflight
    assert rows == list(pruned(local(smb_server)))
    assert not any(path.startswith("deep/") for path, *_ in rows)


def test_listing_of_large_folders_needs_several_queries(smb_server: SmbServer) -> None:
    with guest(smb_server) as remote:
        remote.list_buffer = 4096  # ~60 entries per answer: 'many files' takes the long path
        rows = remote.listdir("media", "many files")
    assert rows == local(smb_server).listdir("media", "many files")
    assert len(rows) == 300


def test_user_share_and_wrong_password(smb_server: SmbServer) -> None:
    host = parse_host_url(smb_server.url)
    with SMBSource(host, Credentials("root", smb_server.password), timeout_s=10) as user:
        assert [e.name for e in user.listdir("private", "")] == ["secret.txt"]
        assert user.read("private", "secret.txt", 0, 100) == b"only for root"
    with pytest.raises(AccessDenied) as caught:
        SMBSource(host, Credentials("root", "not-the-password"), timeout_s=10)
    assert "not-the-password" not in str(caught.value)
    assert "logon failure" in str(caught.value)
    with guest(smb_server) as anonymous, pytest.raises(AccessDenied):
        anonymous.listdir("private", "")


def test_signed_user_session_walks_like_guest(smb_server: SmbServer) -> None:
    """User sessions sign every request and verify every answer, compounds included."""
    host = parse_host_url(smb_server.url)
    with SMBSource(host, Credentials("root", smb_server.password), timeout_s=10) as user:
        assert user._session is not None and user._session.signing_required
        rows = list(walk(user, "media"))
        name = FORBIDDEN_NAMES[1]
        assert (
            user.read("media", name, 0, 1 << 20)
            == (smb_server.root_dir / "media" / name).read_bytes()
        )
    assert rows == list(walk(local(smb_server), "media"))


def test_answer_with_a_bad_signature_retires_the_connection(smb_server: SmbServer) -> None:
    host = parse_host_url(smb_server.url)
    with SMBSource(host, Credentials("root", smb_server.password), timeout_s=10) as user:
        assert user._session is not None
        user._session.signing_key = bytes(16)  # answers no longer verify
        with pytest.raises(HostUnreachable):
            user.listdir("media", "")
        with pytest.raises(HostUnreachable):  # never reused
            user.listdir("media", "empty folder")


def test_wide_window_waits_for_credits(smb_server: SmbServer) -> None:
    """64 folders in flight at 18 credits each need more credits than the server grants at
    once: requests wait for answers to bring credits back."""
    with guest(smb_server, window=64) as remote:
        rows = list(walk(remote, "media"))
    assert rows == list(walk(local(smb_server), "media"))


def test_encrypted_share(smbd_factory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A share that demands encryption is listed and read through encrypted messages."""
    monkeypatch.setattr(
        smbd, "CONFIG", smbd.CONFIG.replace("[media]\n", "[media]\n  smb encrypt = required\n")
    )
    server = smbd_factory()
    host = parse_host_url(server.url)
    with SMBSource(host, Credentials("root", server.password), timeout_s=10) as user:
        rows = list(walk(user, "media"))
        assert user._trees["media"].encrypt_data
        assert user.read("private", "secret.txt", 0, 100) == b"only for root"
    assert rows == list(walk(local(server), "media"))


def test_missing_share_and_path(smb_server: SmbServer) -> None:
    with guest(smb_server) as remote:
        with pytest.raises(NotFound):
            remote.listdir("no-such-share", "")
        with pytest.raises(NotFound):
            remote.listdir("media", "no/such/folder")
        with pytest.raises(NotFound):
            remote.read("media", "no such file.mp3", 0, 10)
        assert remote.listdir("media", "empty folder") == []  # still usable


def test_share_enumeration(smb_server: SmbServer) -> None:
    with guest(smb_server) as remote:
        assert remote.shares() == ["media", "private"]
    one = parse_host_url(smb_server.url + "/media")
    with SMBSource(one, Credentials(None), timeout_s=10) as remote:
        assert remote.shares() == ["media"]


def test_partial_reads(smb_server: SmbServer) -> None:
    name = FORBIDDEN_NAMES[1]
    data = (smb_server.root_dir / "media" / name).read_bytes()
    with guest(smb_server) as remote:
        assert remote.read("media", name, 0, 1 << 20) == data
        assert remote.read("media", name, 5, 7) == data[5:12]
        assert remote.read("media", name, len(data) + 10, 5) == b""


def test_reads_larger_than_one_request(smb_server: SmbServer) -> None:
    name = FORBIDDEN_NAMES[-1]
    data = (smb_server.root_dir / "media" / name).read_bytes()
    assert len(data) > 200
    with guest(smb_server) as remote:
        remote._max_read = 64  # as a server with a small MaxReadSize would have it
        assert remote.read("media", name, 0, 1 << 20) == data
        assert remote.read("media", name, 10, 150) == data[10:160]


def test_tags_over_smb_equal_local_tags(smb_server: SmbServer) -> None:
    read_tags = pytest.importorskip("sharecrawl.crawl_io.tags").read_tags
    files = local(smb_server)
    music = [e for e in files.listdir("media", "Music") if not e.is_dir]
    assert music, "the tree has media files"
    with guest(smb_server) as remote:
        for entry in music:
            path = f"Music/{entry.name}"
            over_smb = RangeFile(remote, "media", path, entry.size)
            on_disk = RangeFile(files, "media", path, entry.size)
            assert read_tags(over_smb, entry.name) == read_tags(on_disk, entry.name)
            assert over_smb.bytes_read <= max(entry.size, 64 * 1024)


def test_connection_refused_is_unreachable() -> None:
    host = parse_host_url(f"smb://127.0.0.1:{free_port()}")
    with pytest.raises(HostUnreachable):
        SMBSource(host, Credentials(None), timeout_s=3)
    assert check_host(host) is not None


def test_liveness(smb_server: SmbServer, tmp_path: os.PathLike) -> None:
    assert check_host(parse_host_url(smb_server.url)) is None
    assert check_host(parse_host_url(f"file://{tmp_path}")) is None
    assert check_host(parse_host_url(f"file://{tmp_path}/gone")) is not None


def run_bounded(action, limit_s: float = 60.0) -> BaseException | None:
    """Run `action` in a thread; fail the test if it hangs past `limit_s` (generous)."""
    outcome: list[BaseException | None] = []

    def target() -> None:
        try:
            action()
            outcome.append(None)
        except BaseException as e:
            outcome.append(e)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(limit_s)
    assert outcome, f"the source hung for more than {limit_s} s"
    return outcome[0]


def test_hung_server_mid_walk_times_out(smbd_factory) -> None:
    server = smbd_factory()
    remote = guest(server, timeout_s=3)
    rows: list = []

    def crawl() -> None:
        for row in walk(remote, "media"):
            rows.append(row)
            if len(rows) == 20:
                server.pause()

    started = time.monotonic()
    error = run_bounded(crawl)
    assert isinstance(error, SourceTimeout), error
    assert time.monotonic() - started < 60
    with pytest.raises(SourceTimeout):  # a failed connection is never reused
        remote.listdir("media", "")
    remote.close()
    server.resume()
    with guest(server, timeout_s=10) as again:  # the next round connects afresh
        assert again.listdir("media", "empty folder") == []


def test_hung_server_at_connect_times_out(smbd_factory) -> None:
    server = smbd_factory(tree=False)
    server.pause()
    error = run_bounded(lambda: guest(server, timeout_s=2))
    assert isinstance(error, SourceTimeout), error


def test_hung_server_during_read_times_out(smbd_factory) -> None:
    server = smbd_factory()
    remote = guest(server, timeout_s=2)
    assert remote.listdir("media", "empty folder") == []
    server.pause()
    error = run_bounded(lambda: remote.read("media", "plain.txt", 0, 100))
    assert isinstance(error, SourceTimeout), error
    server.resume()
    with pytest.raises(SourceTimeout):
        remote.read("media", "plain.txt", 0, 100)
    remote.close()


def test_killed_server_mid_walk_is_a_source_error(smbd_factory) -> None:
    server = smbd_factory()
    remote = guest(server, timeout_s=3)
    rows: list = []

    def crawl() -> None:
        for row in walk(remote, "media"):
            rows.append(row)
            if len(rows) == 20:
                server.kill()

    error = run_bounded(crawl)
    assert isinstance(error, SourceError), error
    remote.close()


def test_crawler_only_reads(smbd_factory) -> None:
    """full_audit logs every VFS call of the session: none may write, delete, rename or
    change attributes, and every open asks for read access only."""
    server = smbd_factory()
    with guest(server) as remote:
        rows = list(walk(remote, "media"))
        for path, is_dir, size, _ in rows:
            if not is_dir and size:
                remote.read("media", path, 0, 4096)
        remote.shares()
    lines = [line for line in server.audit_lines() if "|media|" in line]
    assert any("|openat|" in line or "|create_file|" in line for line in lines), lines[:20]
    forbidden = (
        "|pwrite",
        "|write",
        "|unlinkat|",
        "|renameat|",
        "|mkdirat|",
        "|fchmod|",
        "|fchown|",
        "|lchown|",
        "|fntimes|",
        "|ftruncate|",
        "|fallocate|",
        "|fset_dos_attributes|",
        "|fsetxattr|",
        "|fremovexattr|",
        "|fset_nt_acl|",
        "|linkat|",
        "|symlinkat|",
    )
    bad = [line for line in lines if any(op in line for op in forbidden)]
    assert not bad, bad[:10]
    # openat: 'user|ip|share|openat|ok|r|path' -- 'r' is read-only, 'w' or 'rw' would write.
    opens = [line.split("|") for line in lines if "|openat|" in line]
    assert opens and all(fields[5] == "r" for fields in opens), opens[:5]
    # create_file: access mask, 'file'/'dir', disposition: no write access, only plain opens.
    creates = [line.split("|") for line in lines if "|create_file|" in line]
    assert creates and all(int(f[5], 16) & WRITE_ACCESS == 0 for f in creates), creates[:5]
    assert all(f[7] == "open" for f in creates), creates[:5]


# FILE_WRITE_DATA, APPEND_DATA, WRITE_EA, WRITE_ATTRIBUTES, DELETE, WRITE_DAC, WRITE_OWNER,
# MAXIMUM_ALLOWED, GENERIC_ALL, GENERIC_WRITE
WRITE_ACCESS = 0x2 | 0x4 | 0x10 | 0x100 | 0x10000 | 0x40000 | 0x80000 | 0x02000000 | 0x10000000
WRITE_ACCESS |= 0x40000000


def test_tree_generator_counts(tmp_path) -> None:
    counts = make_tree(tmp_path, media=False)
    on_disk = sum(1 for p in (tmp_path / "media").rglob("*") if p.is_file())
    assert counts["files"] == on_disk  # the counts say what the shared tree holds
    assert on_disk >= 300


# -- files opened for streaming (SMBFile) ----------------------------------------------------

BIG = 5_000_000


@pytest.fixture
def big_file(smbd_factory) -> tuple[SmbServer, bytes]:
    """A server whose media share holds big.bin: BIG random bytes, several READs' worth."""
    root = make_base_dir() / "tree"
    (root / "media").mkdir(parents=True)
    (root / "private").mkdir()
    data = os.urandom(BIG)
    (root / "media" / "big.bin").write_bytes(data)
    return smbd_factory(root_dir=root), data


def test_an_open_file_is_as_listed_and_reads_ranges_with_reads_ahead(big_file) -> None:
    server, data = big_file
    with guest(server) as remote:
        (entry,) = remote.listdir("media", "")
        on_disk = (server.root_dir / "media" / "big.bin").stat()
        file = remote.open_file("media", "big.bin", block=1 << 20, depth=3)
        assert (file.size, file.mtime_us) == (entry.size, entry.mtime_us)
        assert (file.size, file.mtime_us) == (BIG, on_disk.st_mtime_ns // 1000)
        # as a stream reads: a first chunk, then blocks, the rest announced as coming
        assert file.read(0, 256 * 1024, BIG) == data[: 256 * 1024]
        assert len(file._pending) == 2  # 3 in flight while it waited; the next two wait
        at, pieces = 256 * 1024, []
        while at < BIG:
            pieces.append(file.read(at, 1 << 20, BIG - at - (1 << 20)))
            at += len(pieces[-1])
        assert b"".join(pieces) == data[256 * 1024 :]
        assert file.read(4_500_000, 100, 400_000) == data[4_500_000:4_500_100]  # a seek
        assert file.read(10, 20) == data[10:30]  # back, past the reads ahead
        assert file.read(0, 100, BIG) == data[:100]  # reads ahead of 1 MiB from byte 100 on
        assert file.read(100, 1_500_000) == data[100:1_500_100]  # ending inside one of them
        assert file.read(BIG - 5, 100) == data[-5:]  # fewer at the end
        assert file.read(BIG + 10, 5) == b""
        file.close()
        file.close()  # once is enough
        assert remote.usable and remote.listdir("media", "") == [entry]


def test_opening_what_is_not_a_readable_file_keeps_the_connection(smb_server) -> None:
    with guest(smb_server) as remote:
        with pytest.raises(NotFound):
            remote.open_file("media", "no such file.mp3")
        with pytest.raises(NotFound):
            remote.open_file("media", "Music")  # a folder
        with pytest.raises(AccessDenied):
            remote.open_file("private", "secret.txt")
        name = FORBIDDEN_NAMES[1]  # a mapped character in the name
        file = remote.open_file("media", name)
        assert file.read(0, 1 << 20) == (smb_server.root_dir / "media" / name).read_bytes()
        file.close()
        assert remote.usable


def test_a_file_cut_short_after_it_was_opened_reads_short(big_file) -> None:
    server, data = big_file
    with guest(server) as remote:
        file = remote.open_file("media", "big.bin")
        os.truncate(server.root_dir / "media" / "big.bin", 1000)  # its owner, on the host
        assert file.read(0, 5000, BIG - 5000) == data[:1000]
        assert file.read(1000, 5000) == b""
        file.close()
        again = remote.open_file("media", "big.bin")
        assert again.size == 1000  # what Streams compares with the listing
        again.close()


def test_a_server_hung_mid_stream_hits_the_deadline(big_file) -> None:
    server, data = big_file
    remote = guest(server, timeout_s=2)
    file = remote.open_file("media", "big.bin", block=1 << 20, depth=3)
    assert file.read(0, 1 << 20, BIG) == data[: 1 << 20]
    server.pause()
    try:

        def stream_on() -> None:
            for at in range(1 << 20, BIG, 1 << 20):
                file.read(at, 1 << 20, BIG - at)

        error = run_bounded(stream_on)
        assert isinstance(error, SourceTimeout), error
        assert not remote.usable
        file.close()  # nothing left to close: no error, no wait
    finally:
        server.resume()
    with pytest.raises(SourceTimeout):  # the connection is never reused
        remote.open_file("media", "big.bin")
    remote.close()

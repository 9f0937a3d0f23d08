"""Copies whose names the crawl stored escaped (crawl_io.checked.safe_name) stream, download
and make covers from their own bytes, opened by the host's name (`name_on_host`), over file://
hosts and a real smbd; a time the crawl clamped (year 10000) is compared clamped, so such a
copy streams instead of a 409."""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from PIL import Image

from sharecrawl.crawl_io.checked import stored_path
from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir
from sharecrawl.crawl_io.notify import share_path
from sharecrawl.queries.search_results import copy_id, copy_link
from sharecrawl.queries.views import run_sql
from tests.conftest import LAN
from tests.media import make_media
from tests.smbd import SmbServer
from tests.test_stream import filename, request
from tests.test_web_lan import Server

LATIN = os.fsdecode(b"caf\xe9 one.mp3")  # a byte that is not UTF-8 (a Latin-1 name)
LITERAL = "caf\\xe9 one.mp3"  # a backslash in the name: what LATIN would be stored as, unescaped
BACKSLASH = "back\\slash.mp3"
BAD_DIR = os.fsdecode(b"Dir\xff")
YEAR_10000_NS = 253_402_732_800 * 10**9  # 10000-01-06, past what a listing may store
LAST_US = 253_402_300_799_999_999  # 9999-12-31 23:59:59.999999, what the crawl stores instead


def picture(colour: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (400, 300), colour).save(out, "JPEG")
    return out.getvalue()


def colour_of(jpeg: bytes) -> tuple[int, int, int]:
    with Image.open(io.BytesIO(jpeg)) as image:
        return image.convert("RGB").getpixel((120, 90))


def year_10000_dir() -> Path | None:
    """A folder whose file system holds a time in year 10000 (tmpfs does, ext4 stops at 2446),
    world-traversable for smbd's guest; None when there is none."""
    for parent in ("/dev/shm", None):
        if parent is not None and not os.path.isdir(parent):
            continue
        folder = Path(tempfile.mkdtemp(prefix="sharecrawl-names-", dir=parent))
        probe = folder / "probe"
        probe.write_bytes(b"")
        os.utime(probe, ns=(YEAR_10000_NS, YEAR_10000_NS))
        if probe.stat().st_mtime_ns == YEAR_10000_NS:
            probe.unlink()
            folder.chmod(0o755)
            return folder
        shutil.rmtree(folder)
    return None


@pytest.fixture
def far_dir() -> Iterator[Path]:
    folder = year_10000_dir()
    if folder is None:
        pytest.skip("no file system here holds a time in year 10000")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_stored_names_are_pinned() -> None:
    """The escapes these tests rely on, as literals: the two names store apart."""
    assert stored_path(f"Music/{LATIN}") == "Music/caf\\xe9 one.mp3"
    assert stored_path(f"Music/{LITERAL}") == "Music/caf\\\\xe9 one.mp3"
    assert stored_path(f"{BAD_DIR}/inner.mp3") == "Dir\\xff/inner.mp3"
    # a change notification names the stored path, so its hint finds the stored file
    assert share_path("Music\\back\uf026slash.mp3") == "Music/back\\\\slash.mp3"
    assert share_path("Music\\caf\udce9") == "Music/caf\\xe9"


@pytest.fixture(scope="module")
def names_lan(tmp_path_factory: pytest.TempPathFactory) -> LAN:
    lan = LAN(tmp_path_factory.mktemp("nameslan"))
    lan.media("lab", f"Music/{LATIN}", artist="Latin", title="One")
    lan.media("lab", f"Music/{LITERAL}", artist="Literal", title="Two")
    lan.media("lab", f"Music/{BACKSLASH}", artist="Slash", title="Three")
    lan.media("lab", f"Music/{BAD_DIR}/inner.mp3", artist="Inner", title="Four")
    (lan.host("lab") / "Music" / BAD_DIR / "cover.jpg").write_bytes(picture("red"))
    lan.write_hosts("lab")
    lan.crawl()
    return lan


@pytest.fixture(scope="module")
def names_server(names_lan: LAN) -> Iterator[Server]:
    served = Server(names_lan.crawl_dir)
    yield served
    served.stop()


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        (LATIN, "caf\ufffd one.mp3"),  # the byte has no UTF-8 meaning to download as
        (LITERAL, LITERAL),
        (BACKSLASH, BACKSLASH),
        (f"{BAD_DIR}/inner.mp3", "inner.mp3"),
    ],
)
def test_escaped_names_stream_their_own_bytes(names_lan, names_server, name, shown) -> None:
    data = (names_lan.host("lab") / "Music" / name).read_bytes()
    link = copy_link("lab", "Music", stored_path(name), True)
    status, headers, body = request(names_server, f"{link}?download=1")
    assert (status, body) == (200, data), (name, body[:200])
    assert filename(headers["content-disposition"]) == ("attachment", shown)
    status, _, body = request(names_server, link, {"range": "bytes=-10"})
    assert (status, body) == (206, data[-10:])


def test_the_two_cafe_names_are_two_files(names_lan, names_server) -> None:
    music = names_lan.host("lab") / "Music"
    bodies = [
        request(names_server, copy_link("lab", "Music", stored_path(n), True))[2]
        for n in (LATIN, LITERAL)
    ]
    assert bodies == [(music / LATIN).read_bytes(), (music / LITERAL).read_bytes()]
    assert bodies[0] != bodies[1]


def test_a_cover_beside_a_file_in_a_folder_named_with_a_bad_byte(names_server) -> None:
    stored = "Dir\\xff/inner.mp3"
    status, headers, body = request(names_server, f"/cover/{copy_id('lab', 'Music', stored)}")
    assert (status, headers["content-type"]) == (200, "image/jpeg"), headers
    assert all(abs(a - b) <= 8 for a, b in zip(colour_of(body), (255, 0, 0), strict=True))


def test_a_year_10000_file_streams_as_clamped(far_dir: Path) -> None:
    lan = LAN(far_dir)
    path = lan.media("lab", "Music/Future.mp3", artist="Future", title="Song")
    os.utime(path, ns=(YEAR_10000_NS, YEAR_10000_NS))
    lan.write_hosts("lab")
    lan.crawl()
    sql = "SELECT epoch_us(mtime) FROM files WHERE name = 'Future.mp3'"
    assert run_sql(CrawlDir(lan.crawl_dir), sql)[1] == [(LAST_US,)]
    served = Server(lan.crawl_dir)
    try:
        link = copy_link("lab", "Music", "Future.mp3", True)
        status, headers, body = request(served, link)
        assert (status, body) == (200, path.read_bytes())
        assert headers["last-modified"] == "Fri, 31 Dec 9999 23:59:59 GMT"
        assert headers["etag"] == f'"{path.stat().st_size:x}-{LAST_US:x}"'
        with path.open("ab") as f:  # still compared: another size is another file
            f.write(b"more")
        os.utime(path, ns=(YEAR_10000_NS, YEAR_10000_NS))
        assert request(served, link)[0] == 409
    finally:
        served.stop()


@pytest.mark.smb
def test_smb_names_and_a_year_10000_file_stream(
    lan: LAN, smbd_factory: Callable[..., SmbServer], far_dir: Path
) -> None:
    """What SMB can carry: a backslash in a name (Samba's vfs_catia maps it to U+F026, as
    Windows clients see it) and a time in year 10000 (FILETIME holds it). A byte that is not
    UTF-8 it cannot: smbd with its default `unix charset` (UTF-8) leaves such a folder's
    listing empty, so no test of it here."""
    root = far_dir / "tree"
    names = [BACKSLASH, LITERAL, "a:b.mp3", "Future.mp3"]
    for n, name in enumerate(names):
        make_media(root / "media" / name, artist=f"Smb {n}", title=f"Song {n}")
    future = root / "media" / "Future.mp3"
    os.utime(future, ns=(YEAR_10000_NS, YEAR_10000_NS))
    server = smbd_factory(root_dir=root)
    lan.hosts_file.write_text(f"{server.url}/media\n")
    lan.crawl()
    served = Server(lan.crawl_dir)
    try:
        for name in names:
            link = copy_link(f"127.0.0.1:{server.port}", "media", stored_path(name), True)
            status, headers, body = request(served, f"{link}?download=1")
            assert (status, body) == (200, (root / "media" / name).read_bytes()), (name, body)
            assert filename(headers["content-disposition"]) == ("attachment", name)
        sql = "SELECT epoch_us(mtime) FROM files WHERE name = 'Future.mp3'"
        assert run_sql(CrawlDir(lan.crawl_dir), sql)[1] == [(LAST_US,)]
    finally:
        served.stop()

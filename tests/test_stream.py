"""`GET /copy/{id}` of a real `sharecrawl serve`: copies streamed from file:// hosts and real
smbd shares, with their names, ranges, validators, and the copies it must not serve; covers
read from a share; the streams' pool of SMB connections (web.copy_source) on a real smbd."""

from __future__ import annotations

import dataclasses
import http.client
import io
import os
import re
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import unquote

import pytest
from mutagen.id3 import APIC, ID3
from PIL import Image

from sharecrawl.crawl_io.sources import parse_host_url
from sharecrawl.queries.search_results import copy_id, copy_link
from sharecrawl.web.copy_source import (
    MOVED,
    UNREACHABLE,
    Changed,
    Copy,
    NotStreamable,
    Streams,
    StreamSettings,
)
from sharecrawl.web.covers import read_all
from tests.cliproc import run_cli
from tests.conftest import LAN
from tests.media import make_media
from tests.smbd import SmbServer, make_base_dir
from tests.test_web_lan import Server

HOSTILE = [
    "<script>alert(1)<script>.mp3",
    'say "hi".mp3',
    "100% pure.mp3",
    "#1 hit.mp3",
    "what?.mp3",
    "Группа крови.mp3",
    "я" * 125 + "a.mp3",  # 255 bytes of UTF-8
]
BIG = 2_600_000  # more than two chunks of the stream
HELD = 24_000_000  # more than the server's read-ahead and socket buffers hold


def request(
    server: Server, path: str, headers: dict[str, str] | None = None, method: str = "GET"
) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=60)
    try:
        connection.request(method, path, headers=headers or {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def slow_reader(server: Server) -> http.client.HTTPConnection:
    """A connection with a small receive window: a response it leaves unread stays open on
    the server (the kernel would otherwise take megabytes of it)."""
    host, _, port = server.url.removeprefix("http://").rpartition(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)  # before connect: no autotune
    sock.settimeout(60)
    sock.connect((host, int(port)))
    connection = http.client.HTTPConnection(host, int(port))
    connection.sock = sock
    return connection


def filename(disposition: str) -> tuple[str, str]:
    """(disposition type, the file name) as RFC 6266 §4.3 reads them: filename* first; the
    ASCII fallback must be a plain quoted string."""
    kind, _, params = disposition.partition(";")
    fallback = re.search(r'filename="([ -~]*)"', params)
    encoded = re.search(r"filename\*=UTF-8''([!#$&+.^_`|~0-9A-Za-z%-]*)(?:;|$)", params)
    assert fallback and encoded and '"' not in fallback[1] and "\\" not in fallback[1]
    return kind.strip(), unquote(encoded[1], errors="strict")


def big_mp3(path: Path, lan: LAN | None = None, size: int = BIG, title: str = "Long") -> Path:
    make_media(path, artist=title, title=f"{title} Song")
    with path.open("ab") as f:
        f.write(os.urandom(size - path.stat().st_size))
    if lan is not None:
        lan.tick(path)
    return path


@pytest.fixture(scope="module")
def files_lan(tmp_path_factory: pytest.TempPathFactory) -> LAN:
    lan = LAN(tmp_path_factory.mktemp("streamlan"))
    for n, name in enumerate(HOSTILE):
        lan.media("lab", f"Music/Hostile/{name}", artist="Hostile", title=f"Song {n}")
    big_mp3(lan.host("lab") / "Music" / "Big.mp3", lan)
    big_mp3(lan.host("lab") / "Music" / "Held.mp3", lan, HELD, "Held")
    lan.media("lab", "Music/Changing.mp3", artist="Changing", title="Song")
    lan.media("lab", "Music/Linked/Inside.mp3", artist="Linked", title="Song")
    lan.media("gone", "Music/Away.mp3", artist="Away", title="Song")
    lan.write_hosts("lab", "gone")
    lan.crawl()
    lan.host("gone").rename(lan.root / "gone-away")  # offline in the next round
    lan.crawl()
    return lan


@pytest.fixture(scope="module")
def files_server(files_lan: LAN) -> Iterator[Server]:
    served = Server(files_lan.crawl_dir)
    yield served
    served.stop()


def test_hostile_names_stream_and_download_with_their_names(files_lan, files_server) -> None:
    for name in HOSTILE:
        link = copy_link("lab", "Music", f"Hostile/{name}", True)
        status, headers, body = request(files_server, f"{link}?download=1")
        assert status == 200, (name, body)
        assert body == (files_lan.host("lab") / "Music" / "Hostile" / name).read_bytes()
        assert filename(headers["content-disposition"]) == ("attachment", name)
        assert headers["content-disposition"].isascii()
        assert headers["content-type"] == "audio/mpeg"
        status, headers, _ = request(files_server, link)
        assert filename(headers["content-disposition"]) == ("inline", name)


def test_ranges_give_the_files_bytes(files_lan, files_server) -> None:
    data = (files_lan.host("lab") / "Music" / "Big.mp3").read_bytes()
    assert len(data) == BIG
    link = copy_link("lab", "Music", "Big.mp3", True)
    status, headers, body = request(files_server, link)
    assert (status, body, headers["accept-ranges"]) == (200, data, "bytes")
    seek = BIG * 9 // 10
    for asked, first, last in [
        ("bytes=0-99", 0, 99),
        (f"bytes={seek}-", seek, BIG - 1),
        ("bytes=-500", BIG - 500, BIG - 1),
        ("bytes=1000-1000", 1000, 1000),
        (f"bytes=10-{BIG * 2}", 10, BIG - 1),
        ("bytes=2000000-2100000", 2_000_000, 2_100_000),
    ]:
        status, headers, body = request(files_server, link, {"range": asked})
        assert status == 206, asked
        assert headers["content-range"] == f"bytes {first}-{last}/{BIG}"
        assert body == data[first : last + 1]
    for unsatisfiable in (f"bytes={BIG}-", "bytes=-0", f"bytes={BIG + 5}-{BIG + 9}"):
        status, headers, _ = request(files_server, link, {"range": unsatisfiable})
        assert (status, headers["content-range"]) == (416, f"bytes */{BIG}")
    for ignored in ("bytes=0-1,5-9", "items=0-1", "bytes=9-2", "bytes=x-"):
        status, _, body = request(files_server, link, {"range": ignored})
        assert (status, len(body)) == (200, BIG), ignored


def test_validators_come_from_the_listing(files_lan, files_server) -> None:
    link = copy_link("lab", "Music", "Big.mp3", True)
    status, headers, body = request(files_server, link, method="HEAD")
    assert (status, headers["content-length"], body) == (200, str(BIG), b"")
    etag, modified = headers["etag"], headers["last-modified"]
    mtime_us = int(os.path.getmtime(files_lan.host("lab") / "Music" / "Big.mp3")) * 10**6
    assert etag == f'"{BIG:x}-{mtime_us:x}"'
    assert request(files_server, link, {"if-none-match": etag})[0] == 304
    for validator in (etag, modified):
        ranged = request(files_server, link, {"range": "bytes=0-9", "if-range": validator})
        assert ranged[0] == 206
    stale = request(files_server, link, {"range": "bytes=0-9", "if-range": '"1-2"'})
    assert (stale[0], len(stale[2])) == (200, BIG)


def test_copies_not_in_the_index_or_offline_are_not_found(files_lan, files_server) -> None:
    offline = copy_link("gone", "Music", "Away.mp3", True)
    for path in (offline, "/copy/0123456789abcdef", "/copy/../../etc/passwd", "/copy/ZZ"):
        status, _, body = request(files_server, path)
        assert status == 404, path
        assert b"Music" not in body
    status, _, body = request(files_server, offline)
    assert body == b"No copy with this id is in the index now, or its host is offline.\n"


def test_a_changed_file_is_refused_with_a_sentence(files_lan, files_server) -> None:
    path = files_lan.host("lab") / "Music" / "Changing.mp3"
    link = copy_link("lab", "Music", "Changing.mp3", True)
    assert request(files_server, link)[0] == 200
    with path.open("ab") as f:
        f.write(b"more")
    status, _, body = request(files_server, link)
    assert status == 409
    assert body.startswith(b"The file changed since the crawl listed it")


def test_a_link_swapped_in_below_the_host_is_not_followed(files_lan, files_server) -> None:
    folder = files_lan.host("lab") / "Music" / "Linked"
    outside = files_lan.root / "outside"
    folder.rename(outside)  # the same file, same size and time, now outside the host
    folder.symlink_to(outside)
    link = copy_link("lab", "Music", "Linked/Inside.mp3", True)
    status, _, body = request(files_server, link)
    assert (status, body) == (409, b"The file is no longer where the index saw it.\n")


def test_search_gives_links_and_no_stream_takes_them_away(files_lan, files_server, run_json):
    best = run_json(files_lan, "search", "big", "long", "song")[0]["best"]
    assert best["link"] == copy_link("lab", "Music", "Big.mp3", True)
    api = files_server.api(q="big long song")[1]
    assert api["results"][0]["best"]["link"] == best["link"]
    card = api["view"]["sections"][0]["blocks"][0]["work"]
    assert card["copies"][0]["link"] == best["link"]
    away = run_json(files_lan, "search", "--all-hosts", "away", "song")[0]["best"]
    assert away["link"] is None  # offline
    off = Server(files_lan.crawl_dir, "--no-stream")
    try:
        status, _, body = request(off, best["link"])
        assert (status, body) == (
            404,
            b"Streaming is off on this server (it was started with --no-stream).\n",
        )
        api = off.api(q="big long song")[1]
        assert api["results"][0]["best"]["link"] is None
        assert api["view"]["sections"][0]["blocks"][0]["work"]["copies"][0]["link"] is None
    finally:
        off.stop()


def test_streams_past_the_cap_wait_for_a_slot(files_lan, monkeypatch, tmp_path) -> None:
    config = tmp_path / "caps.cfg"
    config.write_text("[sharecrawl]\nstream_per_host = 1\nstream_total = 1\n")
    monkeypatch.setenv("LUIGI_CONFIG_PATH", str(config))
    capped = Server(files_lan.crawl_dir)
    link = copy_link("lab", "Music", "Held.mp3", True)
    first = slow_reader(capped)
    try:
        first.request("GET", link)
        held = first.getresponse()  # its body unread: the stream stays open
        assert held.status == 200
        status, headers, body = request(capped, link)
        assert (status, headers["retry-after"]) == (503, "2")
        assert body.startswith(b"Too many files are being streamed now")
        assert len(held.read()) == HELD
        first.close()
        assert request(capped, link, {"range": "bytes=0-9"})[0] == 206  # the slot came back
    finally:
        first.close()
        capped.stop()


# -- SMB -------------------------------------------------------------------------------------


def picture(colour: str, fmt: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (400, 300), colour).save(out, fmt)
    return out.getvalue()


def crawl(lan: LAN, config: Path) -> None:
    """A round in a child process, as cron runs it: its workers see the password it has."""
    args = ["--crawl-dir", str(lan.crawl_dir), "--hosts-file", str(lan.hosts_file)]
    done = run_cli("crawl", *args, "--runner", "inline", config=config)
    assert done.returncode == 0, done.stderr


@pytest.fixture
def smb_lan(
    lan: LAN, smbd_factory: Callable[..., SmbServer], tmp_path: Path, monkeypatch
) -> tuple[LAN, SmbServer, SmbServer, Path]:
    config = tmp_path / "short.cfg"
    config.write_text("[sharecrawl]\nhost_timeout_s = 3\nliveness_timeout_s = 1\n")
    root = make_base_dir() / "tree"  # pytest's tmp_path is closed to smbd's guest user
    for n, name in enumerate(HOSTILE):
        make_media(root / "media" / "Hostile" / name, artist="Hostile", title=f"Song {n}")
    big_mp3(root / "media" / "Big.mp3")
    big_mp3(root / "media" / "Held.mp3", None, HELD, "Held")
    tagged = make_media(root / "media" / "Album" / "01.mp3", artist="Tagged", title="One")
    tags = ID3(tagged)
    tags.add(APIC(encoding=3, mime="image/png", type=3, desc="front", data=picture("blue", "PNG")))
    tags.save(tagged)
    make_media(root / "media" / "Beside" / "01.mp3", artist="Beside", title="Two")
    (root / "media" / "Beside" / "Folder.jpg").write_bytes(picture("red", "JPEG"))
    (root / "private").mkdir()
    guest = smbd_factory(root_dir=root)
    private_root = make_base_dir() / "tree"
    make_media(private_root / "private" / "Secret.mp3", artist="Secret", title="Song")
    (private_root / "media").mkdir()
    private = smbd_factory(root_dir=private_root)
    monkeypatch.setenv("SHARECRAWL_SMB_PASSWORD", private.password)  # for children
    user_url = private.url.replace("smb://", f"smb://{private.user}@")
    lan.hosts_file.write_text(f"{guest.url}/media\n{user_url}/private\n")
    crawl(lan, config)
    return lan, guest, private, config


@pytest.mark.smb
def test_smb_copies_stream_with_names_ranges_and_refusals(smb_lan) -> None:
    lan, guest, private, config = smb_lan
    host = f"127.0.0.1:{guest.port}"
    served = Server(lan.crawl_dir)
    try:
        for name in HOSTILE:
            link = copy_link(host, "media", f"Hostile/{name}", True)
            status, headers, body = request(served, f"{link}?download=1")
            assert status == 200, (name, body)
            assert body == (guest.root_dir / "media" / "Hostile" / name).read_bytes()
            assert filename(headers["content-disposition"]) == ("attachment", name)
        data = (guest.root_dir / "media" / "Big.mp3").read_bytes()
        link = copy_link(host, "media", "Big.mp3", True)
        assert request(served, link)[2] == data
        seek = BIG * 9 // 10
        for asked, first in ((f"bytes={seek}-", seek), ("bytes=-100", BIG - 100), ("bytes=5-", 5)):
            status, _, body = request(served, link, {"range": asked})
            assert (status, body) == (206, data[first:])
        secret = copy_link(f"127.0.0.1:{private.port}", "private", "Secret.mp3", True)
        status, _, body = request(served, secret)
        assert status == 404 and b"--stream-authenticated" in body
        with (guest.root_dir / "media" / "Big.mp3").open("ab") as f:
            f.write(b"x")
        assert request(served, link)[0] == 409
    finally:
        served.stop()
    trusted = Server(lan.crawl_dir, "--stream-authenticated")
    try:
        status, _, body = request(trusted, secret)
        assert (status, body) == (200, (private.root_dir / "private" / "Secret.mp3").read_bytes())
        private.kill()
        crawl(lan, config)  # the round marks it offline
        status, _, body = request(trusted, secret)
        assert status == 404 and b"offline" in body
    finally:
        trusted.stop()


@pytest.mark.smb
def test_a_host_hung_mid_stream_ends_it_and_frees_its_slot(smb_lan, monkeypatch, tmp_path):
    lan, guest, _, _ = smb_lan
    config = tmp_path / "hung.cfg"
    config.write_text("[sharecrawl]\nstream_per_host = 1\nstream_timeout_s = 2\n")
    monkeypatch.setenv("LUIGI_CONFIG_PATH", str(config))
    data = (guest.root_dir / "media" / "Held.mp3").read_bytes()
    served = Server(lan.crawl_dir)
    link = copy_link(f"127.0.0.1:{guest.port}", "media", "Held.mp3", True)
    held = slow_reader(served)
    try:
        held.request("GET", link)
        response = held.getresponse()
        assert (response.status, response.read(1 << 20)) == (200, data[: 1 << 20])
        guest.pause()  # smbd and its children stopped: the stream's next read gets no answer
        try:
            with pytest.raises(http.client.IncompleteRead) as cut:
                response.read()  # the server ends the response: the connection closes
        finally:
            guest.resume()
        assert (1 << 20) + len(cut.value.partial) < HELD
        status, _, body = request(served, link, {"range": "bytes=-10"})  # the slot is back
        assert (status, body) == (206, data[-10:])
        stopped = f"Streaming 127.0.0.1:{guest.port}/media/Held.mp3 stopped at byte "
        assert any(stopped in line for line in served.log), served.log
    finally:
        held.close()
        served.stop()


@pytest.mark.smb
def test_smb_covers_are_read_from_the_share(smb_lan) -> None:
    lan, guest, _, _ = smb_lan
    host = f"127.0.0.1:{guest.port}"
    served = Server(lan.crawl_dir)
    try:
        for path, colour in (("Album/01.mp3", (0, 0, 255)), ("Beside/01.mp3", (255, 0, 0))):
            status, headers, body = request(served, f"/cover/{copy_id(host, 'media', path)}")
            assert (status, headers["content-type"]) == (200, "image/jpeg"), (path, headers)
            with Image.open(io.BytesIO(body)) as image:
                assert image.size == (240, 180)
                pixel = image.convert("RGB").getpixel((120, 90))
            assert all(abs(a - b) <= 8 for a, b in zip(pixel, colour, strict=True)), pixel
    finally:
        served.stop()


@pytest.mark.smb
def test_smb_streams_share_a_pooled_connection_and_say_what_failed(smbd_factory) -> None:
    root = make_base_dir() / "tree"
    path = big_mp3(root / "media" / "Big.mp3")
    (root / "private").mkdir()
    server = smbd_factory(root_dir=root)
    listed = path.stat()
    copy = Copy(parse_host_url(server.url), "media", "Big.mp3", BIG, listed.st_mtime_ns // 1000)
    streams = Streams(StreamSettings(timeout_s=2))
    first = streams.open(copy)
    assert read_all(first, BIG) == path.read_bytes()
    first.close()
    second = streams.open(copy)
    assert second.source is first.source  # the host's connection, back from the pool
    second.close()
    with pytest.raises(Changed) as changed:
        streams.open(dataclasses.replace(copy, size=BIG + 1))
    assert str(changed.value).startswith("The file changed since the crawl listed it")
    with pytest.raises(Changed) as moved:
        streams.open(dataclasses.replace(copy, path="Gone.mp3"))
    assert str(moved.value) == MOVED
    third = streams.open(copy)
    assert third.source is first.source  # refusals leave the connection good
    server.pause()
    try:
        with pytest.raises(NotStreamable) as hung:
            third.read(BIG * 9 // 10, 1 << 20)
        assert str(hung.value) == UNREACHABLE
        third.close()
    finally:
        server.resume()
    fourth = streams.open(copy)
    assert fourth.source is not first.source  # past a deadline: a new connection
    assert fourth.read(5, 10) == path.read_bytes()[5:15]
    fourth.close()
    server.kill()
    with pytest.raises(NotStreamable) as gone:
        streams.open(copy)
    assert str(gone.value) == UNREACHABLE

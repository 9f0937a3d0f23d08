"""`GET /cover/{id}` of a real `sharecrawl serve`: covers from a picture beside the files or
from the tags, scaled, cached under the crawl dir; hostile pictures give the placeholder, which
says why in its X-Reason header."""

from __future__ import annotations

import io
import os
import struct
import zlib
from pathlib import Path

import pytest
from mutagen.id3 import APIC, ID3
from mutagen.mp4 import MP4, MP4Cover
from PIL import Image

from sharecrawl.queries.search_results import copy_id
from sharecrawl.web.copy_source import Streams, StreamSettings
from sharecrawl.web.covers import SIDE, Covers
from sharecrawl.web.live import LiveIndex
from tests.conftest import LAN
from tests.test_stream import request
from tests.test_web_lan import Server


def picture(colour: str, size: tuple[int, int], fmt: str = "JPEG") -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, fmt)
    return out.getvalue()


def png_claiming(width: int, height: int) -> bytes:
    """A 1x1 PNG whose header claims width x height pixels (a decompression bomb's face)."""
    data = picture("white", (1, 1), "PNG")
    ihdr = struct.pack(">II", width, height) + data[24:29]
    crc = struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    return data[:16] + ihdr + crc + data[33:]


def tag_mp3(lan: LAN, path: Path, data: bytes) -> None:
    tags = ID3(path)
    tags.add(APIC(encoding=3, mime="image/jpeg", type=3, desc="front", data=data))
    tags.save(path)
    lan.tick(path)


@pytest.fixture(scope="module")
def cover_lan(tmp_path_factory: pytest.TempPathFactory) -> LAN:
    lan = LAN(tmp_path_factory.mktemp("coverlan"))
    lan.media("lab", "Music/Beside/01.mp3", artist="Beside", title="One", album="Beside")
    folder = lan.host("lab") / "Music" / "Beside" / "Folder.JPG"
    folder.write_bytes(picture("red", (800, 600)))
    lan.tick(folder)
    tagged = lan.media("lab", "Music/Tagged/01.mp3", artist="Tagged", title="Two", album="Tags")
    tag_mp3(lan, tagged, picture("blue", (500, 500), "PNG"))
    film = lan.media("lab", "Films/Film (2001).mp4", "mp4")
    tags = MP4(film)
    tags["covr"] = [MP4Cover(picture("green", (300, 450)), MP4Cover.FORMAT_JPEG)]
    tags.save()
    lan.tick(film)
    bomb = lan.media("lab", "Music/Bomb/01.mp3", artist="Bomb", title="Three", album="Bomb")
    tag_mp3(lan, bomb, png_claiming(100_000, 100_000))
    junk = lan.media("lab", "Music/Junk/01.mp3", artist="Junk", title="Four", album="Junk")
    tag_mp3(lan, junk, os.urandom(5000))
    lan.media("lab", "Music/Bare/01.mp3", artist="Bare", title="Five", album="Bare")
    lan.write_hosts("lab")
    lan.crawl()
    return lan


@pytest.fixture(scope="module")
def served(cover_lan: LAN):
    server = Server(cover_lan.crawl_dir)
    yield server
    server.stop()


def cover_of(server: Server, q: str) -> str:
    cards = [b["work"] for b in server.api(q=q)[1]["view"]["sections"][0]["blocks"]]
    assert len(cards) == 1, cards
    return cards[0]["cover"]


@pytest.mark.parametrize(
    ("q", "colour", "size"),
    [
        ("album:beside", (254, 0, 0), (SIDE, 180)),  # Folder.JPG beside the track
        ("album:tags", (0, 0, 255), (SIDE, SIDE)),  # ID3 APIC
        ("film", (0, 128, 1), (160, SIDE)),  # MP4 covr
    ],
)
def test_covers_are_scaled_jpegs_cached_for_long(served, cover_lan, q, colour, size) -> None:
    link = cover_of(served, q)
    status, headers, body = request(served, link)
    assert status == 200 and headers["content-type"] == "image/jpeg"
    assert headers["cache-control"] == "public, max-age=604800"
    with Image.open(io.BytesIO(body)) as image:
        assert image.size == size
        pixel = image.convert("RGB").getpixel((size[0] // 2, size[1] // 2))
    assert all(abs(a - b) <= 8 for a, b in zip(pixel, colour, strict=True)), pixel
    cached = cover_lan.crawl_dir / "covers" / (headers["etag"].strip('"') + ".jpg")
    assert cached.read_bytes() == body
    again = request(served, link, {"if-none-match": headers["etag"]})
    assert again[0] == 304


@pytest.mark.parametrize("q", ["album:bomb", "album:junk", "album:bare"])
def test_no_usable_picture_gives_the_placeholder(served, q) -> None:
    status, headers, body = request(served, cover_of(served, q))
    assert status == 200 and headers["content-type"] == "image/svg+xml"
    assert body.startswith(b"<svg") and b'width="120"' in body
    assert headers["x-reason"] == "No picture is beside the file or in its tags."


def test_ids_not_in_the_index_give_the_placeholder(served) -> None:
    for link in (f"/cover/{copy_id('lab', 'Music', 'nothing.mp3')}", "/cover/%2e%2e", "/cover/x"):
        status, headers, _ = request(served, link)
        assert (status, headers["content-type"]) == (200, "image/svg+xml")
        assert headers["cache-control"] == "no-cache"
        gone = "No copy with this id is in the index now, or its host is offline."
        assert headers["x-reason"] == gone


def test_the_cache_keeps_its_cap_evicting_the_oldest(tmp_path: Path) -> None:
    covers = Covers(LiveIndex(tmp_path), Streams(StreamSettings()), 1)  # 1 MiB
    for n in range(5):
        path = covers.folder / f"{n}.jpg"
        covers._store(path, b"x" * 300_000)
        os.utime(path, ns=(n * 10**9, n * 10**9))
    assert sorted(p.name for p in covers.folder.iterdir()) == ["2.jpg", "3.jpg", "4.jpg"]

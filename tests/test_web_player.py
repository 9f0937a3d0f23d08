"""Playing, downloading and covers on the search page in a real headless Chromium, what it
says when the server fails, and the page at a phone's 360 px: copies streamed by `GET
/copy/{id}` from a file:// host and from a real smbd (the same files), the server in this
process behind a recorder of the Range headers it was sent (tests/test_web_smb_page.py runs
the installed script)."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from mutagen.easyid3 import EasyID3
from mutagen.id3 import APIC, ID3
from PIL import Image

from sharecrawl.demolan.templates import template_path
from sharecrawl.web.app import create_app
from sharecrawl.web.copy_source import Streams
from sharecrawl.web.covers import Covers
from tests.conftest import LAN
from tests.media import make_media
from tests.smbd import (
    chmod_tree,
    free_port,
    make_base_dir,
    remove_tree,
    smbd_skip_reason,
    start_smbd,
)
from tests.test_web_browser import By, browser, pytestmark, shots, wait_for

__all__ = ["browser", "pytestmark", "shots"]  # fixtures, and the skip without Chromium

BITRATES = (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160)  # MPEG-2 layer 3


def long_mp3(path: Path, seconds: int, **tags: str) -> Path:
    """A CBR mp3 of `seconds` made of the template's frames (its Xing frame left out, so the
    length is the file's size over the bitrate), tagged."""
    data = template_path("mp3").read_bytes()
    frames, at = [], 0
    while at + 4 <= len(data) and data[at] == 0xFF:
        h = int.from_bytes(data[at : at + 4], "big")
        length = 72 * BITRATES[(h >> 12) & 15] * 1000 // (22050, 24000, 16000)[(h >> 10) & 3]
        frames.append(data[at : at + length + ((h >> 9) & 1)])
        at += len(frames[-1])
    body = b"".join(frames[1:])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body * seconds)  # the template is a second long
    tagged = EasyID3()
    tagged.update(tags)
    tagged.save(path)
    return path


def fill(lan: LAN, root: Path, smb: bool) -> None:
    """An album of two long songs with its cover (a folder.jpg; over SMB, in the tags as an
    ID3 APIC frame), a film and two episodes of a series, under `root`."""
    picture = root / "Music/Long Album/folder.jpg"
    picture.parent.mkdir(parents=True)
    Image.new("RGB", (400, 400), "orange").save(picture)
    for n in (1, 2):
        song = root / f"Music/Long Album/0{n} Long Song {n}.mp3"
        long_mp3(song, 1200, artist="Droner", title=f"Long Song {n}", album="Long Album")
        if smb:
            tags = ID3(song)
            tags.add(APIC(mime="image/jpeg", type=3, data=picture.read_bytes()))
            tags.save()
        lan.tick(song)
    if smb:
        picture.unlink()
    else:
        lan.tick(picture)
    make_media(root / "Films" / FILMS[smb], "mp4")
    for season, episode in ((1, 1), (1, 2)):
        name = f"A.Very.Long.Series.Name.Without.Any.Break.S{season:02d}E{episode:02d}.mp4"
        make_media(root / f"Video/Series/{name}", "mp4")


# Names Windows forbids ('"', '?') do not cross SMB as themselves: the SMB film's is plain.
FILMS = {False: '<script>"%#?" Clip (2001).mp4', True: "Clip (2001).mp4"}


@pytest.fixture(scope="module", params=["file", "smb"])
def lan(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LAN]:
    lan = LAN(tmp_path_factory.mktemp("playerlan"))
    if request.param == "file":
        fill(lan, lan.host("lab"), smb=False)
        lan.write_hosts("lab")
        lan.crawl()
        yield lan
        return
    if reason := smbd_skip_reason():
        pytest.skip(reason)
    base = make_base_dir()  # pytest's tmp_path is closed to smbd's guest user
    fill(lan, base / "tree" / "media", smb=True)
    chmod_tree(base / "tree")
    smbd = start_smbd(base / "server", base / "tree")
    try:
        lan.hosts_file.write_text(f"{smbd.url}/media\n")
        lan.crawl()
        yield lan
    finally:
        smbd.stop()
        remove_tree(base)


class Recorded:
    def __init__(self, crawl_dir: Path) -> None:
        app = create_app(crawl_dir, loopback_only=True)
        self.ranges: list[tuple[str, str | None]] = []

        async def recorder(scope, receive, send) -> None:
            if scope["type"] == "http" and scope["path"].startswith("/copy/"):
                headers = dict(scope["headers"])
                self.ranges.append((scope["path"], (headers.get(b"range") or b"").decode()))
            await app(scope, receive, send)

        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        config = uvicorn.Config(recorder, host="127.0.0.1", port=port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        wait_for(lambda: self.server.started, 30)


@pytest.fixture(scope="module")
def served(lan: LAN) -> Iterator[Recorded]:
    server = Recorded(lan.crawl_dir)
    yield server
    server.server.should_exit = True
    server.thread.join(15)


def current_time(driver, css: str) -> float:
    return float(driver.execute_script(f"return document.querySelector('{css}').currentTime"))


def test_an_album_plays_seeks_by_range_and_goes_on_in_order(browser, served, shots) -> None:
    browser.get(served.url + "/?q=album:%22long%20album%22")
    cover = browser.find_element(By.CSS_SELECTOR, "#results img.cover")
    wait_for(lambda: browser.execute_script("return arguments[0].naturalWidth", cover) > 0)
    centre = browser.execute_script(  # the picture itself, not the placeholder
        "const i = arguments[0], c = document.createElement('canvas'); c.width = c.height = 1;"
        "const g = c.getContext('2d'); g.drawImage(i, i.naturalWidth / 2, i.naturalHeight / 2,"
        " 1, 1, 0, 0, 1, 1); return Array.from(g.getImageData(0, 0, 1, 1).data.slice(0, 3))",
        cover,
    )
    assert abs(centre[0] - 255) + abs(centre[1] - 165) + centre[2] < 30, centre  # orange
    plays = browser.find_elements(By.CSS_SELECTOR, "#results button.play")
    assert [p.get_attribute("aria-label") for p in plays] == [
        "Play Long Song 1",
        "Play Long Song 2",
    ]
    plays[0].click()
    wait_for(lambda: current_time(browser, "audio.player") > 0.5)
    duration = browser.execute_script("return document.querySelector('audio.player').duration")
    assert duration > 600
    before = len(served.ranges)
    browser.execute_script(
        "const a = document.querySelector('audio.player'); a.currentTime = a.duration * 0.9"
    )
    wait_for(lambda: current_time(browser, "audio.player") > duration * 0.9 + 0.5, 30)
    starts = [int(r.split("=")[1].split("-")[0]) for _, r in served.ranges[before:] if r]
    assert starts and max(starts) > 1_000_000, served.ranges  # a Range request near the end
    browser.save_screenshot(str(shots / "playing.png"))
    browser.execute_script(  # the first track ends: the second starts, one player at a time
        "const a = document.querySelector('audio.player'); a.currentTime = a.duration - 0.2"
    )
    wait_for(lambda: len(browser.find_elements(By.CSS_SELECTOR, "audio.player")) == 2, 30)
    wait_for(lambda: current_time(browser, "#results .work:nth-of-type(2) audio") > 0.5, 30)
    assert browser.execute_script("return document.querySelector('audio.player').paused")


def test_a_film_plays_in_a_video_element_and_downloads_by_name(browser, lan, served) -> None:
    browser.get(served.url + "/?q=clip")
    download = browser.find_element(By.CSS_SELECTOR, "#results a.download")
    smb = lan.hosts_file.read_text().startswith("smb:")
    assert download.get_attribute("download") == FILMS[smb]
    assert download.get_attribute("href").endswith("?download=1")
    browser.find_element(By.CSS_SELECTOR, "#results button.play").click()
    wait_for(lambda: current_time(browser, "video.player") > 0.5)
    assert browser.execute_script("return document.querySelector('video.player').videoWidth") == 64


def test_a_server_failure_says_so_in_words(browser, served, monkeypatch) -> None:
    """A bug or a library's surprise in this server (made to happen in its own process):
    the copy says so beside it, the cover is the placeholder saying so in its header."""

    def fail(*args: object) -> None:
        raise RuntimeError("made to fail by the test")

    monkeypatch.setattr(Streams, "open", fail)
    monkeypatch.setattr(Covers, "get", fail)
    browser.get(served.url + "/?q=clip")
    cover = browser.find_element(By.CSS_SELECTOR, "#results img.cover")
    wait_for(lambda: browser.execute_script("return arguments[0].complete", cover))
    assert browser.execute_script("return arguments[0].naturalWidth", cover) == 120
    with urllib.request.urlopen(cover.get_attribute("src"), timeout=30) as response:
        reason = response.headers["x-reason"]
    assert reason == "The server failed to make this cover; the error is in its log."
    browser.find_element(By.CSS_SELECTOR, "#results button.play").click()
    failed = "The server failed to read this copy; the error is in its log."
    why = wait_for(lambda: browser.find_element(By.CSS_SELECTOR, "#results .copy .why").text)
    assert why == f"Cannot play: {failed}"
    assert browser.find_elements(By.CSS_SELECTOR, "video.player") == []
    link = browser.find_element(By.CSS_SELECTOR, "#results button.play").get_attribute("data-src")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(served.url + link, timeout=30)
    assert refused.value.code == 500
    assert refused.value.read() == f"{failed}\n".encode()


@pytest.mark.parametrize("q", ["long", "series", ""])
def test_at_360_px_nothing_scrolls_sideways(browser, served, shots, q) -> None:
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": 360, "height": 740, "deviceScaleFactor": 1, "mobile": True},
    )
    try:
        browser.get(served.url + f"/?q={q}")
        time.sleep(0.3)
        assert browser.execute_script("return document.documentElement.scrollWidth") <= 360
        first = browser.find_element(By.CSS_SELECTOR, "#results .work, #results .album")
        assert (
            browser.execute_script("return arguments[0].getBoundingClientRect().top", first) < 740
        )
        facets = browser.find_element(By.ID, "facets")
        if q:
            assert not facets.is_displayed()  # folded behind the Filters button
            browser.find_element(By.ID, "facets-toggle").click()
            assert facets.is_displayed()
        browser.save_screenshot(str(shots / f"phone-{q or 'new'}.png"))
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})

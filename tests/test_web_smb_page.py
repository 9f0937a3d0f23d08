"""The search page over real smbd hosts (tests/smbd.py), served by the installed `sharecrawl
serve` script in its own session on a loopback port, in headless Chromium: a song plays,
seeks by Range, downloads whole under its own name and shows the cover read from its share;
a copy whose host is stopped or killed, whose file changed since the crawl, whose host is
busy or whose server streams nothing says why beside it, in words."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import pytest
from PIL import Image

from tests.conftest import LAN
from tests.smbd import (
    SmbServer,
    chmod_tree,
    make_base_dir,
    remove_tree,
    smbd_skip_reason,
    start_smbd,
)
from tests.test_stream import slow_reader
from tests.test_web_browser import By, WebDriver, shots, start_chromium, wait_for
from tests.test_web_browser import pytestmark as needs_chromium
from tests.test_web_lan import Server
from tests.test_web_player import current_time, long_mp3

if TYPE_CHECKING:
    from selenium.webdriver.remote.webelement import WebElement

__all__ = ["shots"]  # a fixture
pytestmark = [needs_chromium, pytest.mark.smb, pytest.mark.slow]

# Long Song 1's 24 MB at 32 kbps: more than the browser buffers (a seek to 90 % is a Range
# request) and than the server's read-ahead and socket buffers hold (a stream left unread)
SONG_SECONDS = {1: 6000, 2: 600}
STREAM_TIMEOUT_S = 3  # luigi.cfg stream_timeout_s for these servers: a stopped host fails fast


def serve(crawl_dir: Path, config: Path, *extra: str) -> Server:
    """`sharecrawl serve` (the console script, tests/test_web_lan.py) with the luigi.cfg
    settings of `config` over the defaults, once it answers searches."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("LUIGI_CONFIG_PATH", str(config))
        server = Server(crawl_dir, *extra)
    wait_for(lambda: server.api(q="song")[0] == 200, 60)
    return server


@dataclass
class SmbLan:
    lan: LAN
    good: SmbServer  # the long album with its folder.jpg, and a song changed after the crawl
    doomed: SmbServer  # a song whose host the tests stop, then kill
    changed: Path
    config: Path


def _share(base: Path) -> Path:
    return base / "tree" / "media"


@pytest.fixture(scope="module")
def smb_lan(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SmbLan]:
    if reason := smbd_skip_reason():
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("smbpage")
    lan = LAN(root)
    bases = [make_base_dir(), make_base_dir()]  # pytest's tmp_path is closed to smbd's guest
    servers: list[SmbServer] = []
    try:
        album = _share(bases[0]) / "Music" / "Long Album"
        album.mkdir(parents=True)
        Image.new("RGB", (400, 400), "orange").save(album / "folder.jpg")
        lan.tick(album / "folder.jpg")
        for n, seconds in SONG_SECONDS.items():
            tags = {"artist": "Droner", "title": f"Long Song {n}", "album": "Long Album"}
            lan.tick(long_mp3(album / f"0{n} Long Song {n}.mp3", seconds, **tags))
        changed = _share(bases[0]) / "Music" / "Moving" / "01 Moving Song.mp3"
        lan.tick(long_mp3(changed, 5, artist="Mover", title="Moving Song", album="Moving"))
        doomed = _share(bases[1]) / "Music" / "Doomed" / "01 Doomed Song.mp3"
        lan.tick(long_mp3(doomed, 5, artist="Goner", title="Doomed Song", album="Doomed"))
        for base in bases:
            chmod_tree(base / "tree")
            servers.append(start_smbd(base / "server", base / "tree"))
        lan.hosts_file.write_text("".join(f"{s.url}/media\n" for s in servers))
        lan.crawl()
        config = root / "luigi.cfg"
        config.write_text(f"[sharecrawl]\nstream_timeout_s = {STREAM_TIMEOUT_S}\n")
        yield SmbLan(lan, servers[0], servers[1], changed, config)
    finally:
        for server in servers:
            server.stop()
        for base in bases:
            remove_tree(base)


@pytest.fixture(scope="module")
def served(smb_lan: SmbLan) -> Iterator[Server]:
    server = serve(smb_lan.lan.crawl_dir, smb_lan.config)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    driver = start_chromium(tmp_path_factory.mktemp("chromium-profile"), network_log=True)
    yield driver
    driver.quit()


def range_starts(driver: WebDriver) -> list[int]:
    """Where the Range requests for copies that the browser sent since last asked start
    (DevTools' network events)."""
    starts = []
    for entry in driver.get_log("performance"):
        event = json.loads(entry["message"])["message"]
        if event["method"] != "Network.requestWillBeSent":
            continue
        request = event["params"]["request"]
        headers = {k.lower(): v for k, v in request["headers"].items()}
        if "/copy/" in request["url"] and headers.get("range", "").startswith("bytes="):
            starts.append(int(headers["range"].removeprefix("bytes=").split("-")[0] or 0))
    return starts


def reason(driver: WebDriver, title: str) -> str:
    """The words beside the first copy of the work titled `title`."""
    return driver.execute_script(
        "for (const w of document.querySelectorAll('#results .work')) {"
        "  if (w.querySelector('.title').textContent !== arguments[0]) continue;"
        "  const why = w.querySelector('.copy .why');"
        "  return why && !why.hidden ? why.textContent : '';"
        "} return null;",
        title,
    )


def work(driver: WebDriver, title: str) -> WebElement:
    """The card of the work titled `title` on the page."""
    for card in driver.find_elements(By.CSS_SELECTOR, "#results .work"):
        if card.find_element(By.CLASS_NAME, "title").text == title:
            return card
    raise AssertionError(f"no work titled {title!r}")


def press(driver: WebDriver, served: Server, title: str, what: str) -> None:
    """Search the work titled `title` and press `what` (a CSS selector) of its first copy."""
    driver.get(served.url + "/?q=" + quote(f'title:"{title}"'))
    work(driver, title).find_element(By.CSS_SELECTOR, f".copy {what}").click()


def test_a_song_plays_seeks_by_range_and_shows_its_cover(browser, served, shots) -> None:
    browser.get(served.url + "/?q=album:%22long%20album%22")
    cover = browser.find_element(By.CSS_SELECTOR, "#results img.cover")
    wait_for(lambda: browser.execute_script("return arguments[0].complete", cover), 30)
    if browser.execute_script("return arguments[0].naturalWidth", cover) == 120:  # placeholder
        headers = served.get(cover.get_attribute("src").removeprefix(served.url))[1]
        pytest.fail(f"no cover: {headers.get('x-reason')}; {''.join(served.log)[-3000:]}")
    centre = browser.execute_script(  # folder.jpg read from the share, not the placeholder
        "const i = arguments[0], c = document.createElement('canvas'); c.width = c.height = 1;"
        "const g = c.getContext('2d'); g.drawImage(i, i.naturalWidth / 2, i.naturalHeight / 2,"
        " 1, 1, 0, 0, 1, 1); return Array.from(g.getImageData(0, 0, 1, 1).data.slice(0, 3))",
        cover,
    )
    assert abs(centre[0] - 255) + abs(centre[1] - 165) + centre[2] < 30, centre  # orange
    range_starts(browser)  # forget what came before
    work(browser, "Long Song 1").find_element(By.CSS_SELECTOR, "button.play").click()
    wait_for(lambda: current_time(browser, "audio.player") > 0.5, 30)
    duration = browser.execute_script("return document.querySelector('audio.player').duration")
    assert SONG_SECONDS[1] < duration < SONG_SECONDS[1] * 1.2  # a template second: 1.07 s
    browser.execute_script(
        "const a = document.querySelector('audio.player'); a.currentTime = a.duration * 0.9"
    )
    wait_for(lambda: current_time(browser, "audio.player") > duration * 0.9 + 0.5, 30)
    starts = range_starts(browser)
    assert starts and max(starts) > 20_000_000, starts  # a Range request near the end
    assert reason(browser, "Long Song 1") == ""
    browser.save_screenshot(str(shots / "smb-playing.png"))


def test_a_song_downloads_whole_under_its_name(browser, served, smb_lan, tmp_path) -> None:
    browser.execute_cdp_cmd(
        "Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(tmp_path)}
    )
    press(browser, served, "Long Song 2", "a.download")
    saved = tmp_path / "02 Long Song 2.mp3"

    def done() -> bool:
        return saved.exists() and not list(tmp_path.glob("*.crdownload"))

    wait_for(lambda: reason(browser, "Long Song 2") or done(), 60)
    assert reason(browser, "Long Song 2") == ""
    wait_for(done, 60)
    original = smb_lan.good.root_dir / "media/Music/Long Album/02 Long Song 2.mp3"
    assert saved.read_bytes() == original.read_bytes()


CHANGED = (
    "The file changed since the crawl listed it (its size or time differs); "
    "search again after the next round."
)
UNREACHABLE = "The copy's host cannot be reached now."


def test_a_file_changed_since_the_crawl_says_so(browser, served, smb_lan, shots) -> None:
    with smb_lan.changed.open("ab") as f:
        f.write(b"\0" * 100)  # the listing's size no longer holds
    press(browser, served, "Moving Song", "button.play")
    wait_for(lambda: reason(browser, "Moving Song"), 30)
    assert reason(browser, "Moving Song") == f"Cannot play: {CHANGED}"
    assert browser.find_elements(By.CSS_SELECTOR, "#results button.play")  # try again later
    assert browser.find_elements(By.CSS_SELECTOR, "audio.player") == []
    browser.save_screenshot(str(shots / "smb-changed.png"))
    browser.find_element(By.CSS_SELECTOR, "#results a.download").click()
    wait_for(lambda: reason(browser, "Moving Song").startswith("Cannot download"), 30)
    assert reason(browser, "Moving Song") == f"Cannot download: {CHANGED}"


def test_a_stopped_host_says_it_cannot_be_reached(browser, served, smb_lan, shots) -> None:
    smb_lan.doomed.pause()
    try:
        press(browser, served, "Doomed Song", "button.play")
        wait_for(lambda: reason(browser, "Doomed Song"), 8 * STREAM_TIMEOUT_S)
        assert reason(browser, "Doomed Song") == f"Cannot play: {UNREACHABLE}"
        cover = browser.find_element(By.CSS_SELECTOR, "#results img.cover")
        wait_for(lambda: browser.execute_script("return arguments[0].complete", cover), 30)
        assert browser.execute_script("return arguments[0].naturalWidth", cover) == 120
        browser.save_screenshot(str(shots / "smb-stopped.png"))
        status, headers, _ = served.get(cover.get_attribute("src").split(served.url)[1])
        assert (status, headers["content-type"]) == (200, "image/svg+xml")
        assert headers["x-reason"] == UNREACHABLE
    finally:
        smb_lan.doomed.resume()


def test_a_killed_host_says_it_cannot_be_reached(browser, served, smb_lan) -> None:
    smb_lan.doomed.kill()
    press(browser, served, "Doomed Song", "a.download")
    wait_for(lambda: reason(browser, "Doomed Song"), 8 * STREAM_TIMEOUT_S)
    assert reason(browser, "Doomed Song") == f"Cannot download: {UNREACHABLE}"


def test_a_busy_host_says_to_try_again(browser, smb_lan, tmp_path) -> None:
    config = tmp_path / "busy.cfg"
    config.write_text(f"{smb_lan.config.read_text()}stream_per_host = 1\n")
    busy = serve(smb_lan.lan.crawl_dir, config)
    try:
        blocks = busy.api(q='title:"Long Song 1"')[1]["view"]["sections"][0]["blocks"]
        link = next(b["work"] for b in blocks if b["work"]["title"] == "Long Song 1")["copies"][0][
            "link"
        ]
        held = slow_reader(busy)
        held.request("GET", link)  # the host's one slot, held while its body is unread
        response = held.getresponse()
        assert response.status == 200
        press(browser, busy, "Long Song 2", "button.play")
        wait_for(lambda: reason(browser, "Long Song 2"), 30)
        assert reason(browser, "Long Song 2") == (
            "Cannot play: Too many files are being streamed now; try again in a moment."
        )
        held.close()
    finally:
        busy.stop()


def test_a_server_without_streams_says_so_instead_of_buttons(browser, smb_lan) -> None:
    quiet = serve(smb_lan.lan.crawl_dir, smb_lan.config, "--no-stream")
    try:
        for how in ("server", "script"):  # the page as rendered, then as the script builds it
            browser.get(quiet.url + "/?q=long%20song%202")
            if how == "script":
                browser.find_element(By.ID, "q").send_keys(" ")
                wait_for(lambda: browser.execute_script("return document.body.dataset.loaded"))
            assert browser.find_elements(By.CSS_SELECTOR, "#results .actions") == []
            assert reason(browser, "Long Song 2") == (
                "Streaming is off on this server (it was started with --no-stream)."
            )
    finally:
        quiet.stop()

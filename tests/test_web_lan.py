"""Support for the search page's tests (no tests here): a crawled LAN of real tagged media
(file:// hosts, one taken offline, hostile names, Cyrillic, a series, enough works to page)
and `sharecrawl serve` as a real subprocess on a free loopback port."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.cliproc import cli_argv
from tests.conftest import LAN

REPO = Path(__file__).resolve().parents[1]
HOSTILE_NAME = "<img src=x onerror=alert(1)>.mp3"
HOSTILE_TITLE = '"><script>alert(2)</script>'
PADDING = 24  # works of one artist: three pages of ten


def build_lan(root: Path) -> LAN:
    """Crawl the LAN twice: all hosts up, then lab-3 gone (offline, its rows kept)."""
    lan = LAN(root)
    lan.media(
        "lab-1",
        "Music/Madonna/Ray of Light/Frozen.flac",
        "flac",
        artist="Madonna",
        title="Frozen",
        album="Ray of Light",
        year=1998,
    )
    lan.media(
        "lab-1",
        "Music/Madonna/Music/Music.mp3",
        artist="Madonna",
        title="Music",
        album="Music",
        year=2000,
    )
    lan.media(
        "lab-1",
        "Музыка/Кино/Группа крови.mp3",
        artist="Кино",
        title="Группа крови",
        album="Группа крови",
        year=1988,
    )
    lan.media(
        "lab-1",
        f"Music/Hostile/{HOSTILE_NAME}",
        artist="Evil Tagger",
        title=HOSTILE_TITLE,
        album="<b>bold</b> & co",
    )
    for season, episode in ((1, 1), (1, 2), (2, 1)):
        name = f"Lost.S{season:02d}E{episode:02d}.720p.mp4"
        lan.media("lab-1", f"Video/Lost/Season {season}/{name}", "mp4")
    lan.media(
        "lab-2",
        "Music/Madonna/Frozen.mp3",
        artist="Madonna",
        title="Frozen",
        album="Ray of Light",
        year=1998,
    )
    for n in range(1, PADDING + 1):
        lan.media(
            "lab-2",
            f"Music/Padding Band/Padding Song {n:02d}.mp3",
            artist="Padding Band",
            title=f"Padding Song {n:02d}",
            album="Filler",
            year=2010,
        )
    lan.media(
        "lab-3",
        "Music/Secret Band/Hidden Track.mp3",
        artist="Secret Band",
        title="Hidden Track",
        year=2011,
    )
    lan.media("lab-3", "Backup/Frozen.mp3", artist="Madonna", title="Frozen", year=1998)
    lan.write_hosts("lab-1", "lab-2", "lab-3")
    lan.crawl()
    shutil.move(lan.host("lab-3"), root / "lab-3-away")
    lan.crawl()
    return lan


def _lower(headers) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}


class Server:
    """`sharecrawl serve` in its own session on a free 127.0.0.1 port; stop() ends it."""

    def __init__(self, crawl_dir: Path, *extra: str) -> None:
        command = cli_argv(
            "serve",
            "--crawl-dir",
            str(crawl_dir),
            "--port",
            "0",
            *extra,
        )
        self.process = subprocess.Popen(
            command,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.log: list[str] = []
        self.url = ""
        ready = threading.Event()

        def drain() -> None:
            assert self.process.stderr is not None
            for line in self.process.stderr:
                self.log.append(line)
                if " on http://" in line and not self.url:
                    self.url = line.split(" on ", 1)[1].split()[0].rstrip("/")
                    ready.set()
            ready.set()

        threading.Thread(target=drain, daemon=True).start()
        if not ready.wait(60) or not self.url:
            self.stop()
            raise RuntimeError("serve did not start: " + "".join(self.log))

    def get(self, path: str, host: str | None = None) -> tuple[int, dict[str, str], str]:
        url = self.url + path
        if host:
            url = url.replace("127.0.0.1", host, 1)
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                return response.status, _lower(response.headers), response.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, _lower(e.headers), e.read().decode()

    def api(self, **params: object) -> tuple[int, dict]:
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        status, _, body = self.get(f"/api/search?{query}")
        return status, json.loads(body)

    def stop(self) -> int | None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(5)
        return self.process.returncode


@pytest.fixture(scope="module")
def web_lan(tmp_path_factory: pytest.TempPathFactory) -> LAN:
    return build_lan(tmp_path_factory.mktemp("weblan"))


@pytest.fixture(scope="module")
def server(web_lan: LAN):
    served = Server(web_lan.crawl_dir)
    started = time.monotonic()
    while served.api(q="madonna")[0] != 200 and time.monotonic() - started < 30:
        time.sleep(0.2)
    yield served
    served.stop()

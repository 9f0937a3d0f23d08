"""A wheel of the checkout, installed (not editable) into a fresh virtualenv with its
dependencies from the package index, does what the README shows, from a folder with no
checkout and no LUIGI_CONFIG_PATH: crawl a real smbd, status, search, sql, check, simulate,
and serve the page, which streams a copy's byte range and an album's cover. What the editable
install of `make test` hides (a file left out of the package data, a module found only
because the checkout is the working directory, a dependency's script shadowing a library
beside the console script) fails here."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from PIL import Image

from tests.cliproc import REPO
from tests.media import make_media
from tests.smbd import SmbServer, make_base_dir

pytestmark = pytest.mark.slow

# what is not the source: the checkout's own environment, builds and outputs
NOT_SOURCE = {".git", ".venv", "build", "dist", "demo-lan", "crawl"}
NOT_SOURCE_ANYWHERE = shutil.ignore_patterns(
    "__pycache__", "*.egg-info", ".pytest_cache", ".ruff_cache", ".hypothesis"
)
# what pip says when the package index cannot be reached (or lacks a dependency)
NO_INDEX = re.compile(
    r"No matching distribution|Could not find a version|NewConnectionError|Failed to "
    r"establish|Temporary failure in name resolution|Network is unreachable|ConnectTimeout|"
    r"Read timed out|ProxyError|No route to host"
)


def _not_source(folder: str, names: list[str]) -> set[str]:
    top = NOT_SOURCE if Path(folder) == REPO else set()
    return top | set(NOT_SOURCE_ANYWHERE(folder, names))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel `python -m pip wheel --no-deps -w dist .` makes of a copy of the checkout
    (as it is now: uncommitted work too), built with this environment's setuptools."""
    root = tmp_path_factory.mktemp("wheel")
    source, dist = root / "source", root / "dist"
    shutil.copytree(REPO, source, ignore=_not_source)
    pip = [sys.executable, "-m", "pip"]  # the README's command, this setuptools, quietly
    done = subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    [built] = dist.glob("sharecrawl-*.whl")
    return built


def test_the_wheel_holds_the_package_alone_with_its_defaults(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
    version = wheel.name.split("-")[1]
    assert {name.split("/")[0] for name in names} == {
        "sharecrawl",
        f"sharecrawl-{version}.dist-info",
    }
    assert "sharecrawl/luigi.cfg" in names  # the defaults, package data
    assert "sharecrawl/__main__.py" in names and "sharecrawl/web/static/app.js" in names
    assert not [n for n in names if n.startswith(("sharecrawl/tests/", "sharecrawl/bench/"))]


def _outside_env(venv: Path) -> dict[str, str]:
    """The environment of a shell with `venv` activated: nothing of this test's run."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("LUIGI_CONFIG_PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")
        and not k.startswith("PYTEST")
    }
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    return env


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the wheel and its dependencies (pip's cache makes a rerun
    fast); the test skips when the package index cannot be reached."""
    venv = tmp_path_factory.mktemp("installed") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
        capture_output=True,
        text=True,
        timeout=1800,
        env=_outside_env(venv),
    )
    if done.returncode != 0 and NO_INDEX.search(done.stderr + done.stdout):
        pytest.skip(f"the package index cannot be reached: {done.stderr.strip()[-300:]}")
    assert done.returncode == 0, done.stderr
    return venv


def picture(colour: str, kind: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (400, 400), colour).save(out, kind)
    return out.getvalue()


@dataclass
class Outside:
    """The installed `sharecrawl` in a folder of its own (`work`), whose hosts file names a
    real smbd's share holding an album, its cover beside it."""

    venv: Path
    work: Path
    album: Path
    server: SmbServer

    def argv(self, *args: str) -> list[str]:
        return [str(self.venv / "bin" / "sharecrawl"), *args]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*args),
            capture_output=True,
            text=True,
            cwd=self.work,
            env=_outside_env(self.venv),
            timeout=600,
            stdin=subprocess.DEVNULL,
        )


@pytest.fixture
def outside(installed: Path, smbd_factory: Callable[..., SmbServer], tmp_path: Path) -> Outside:
    root = make_base_dir() / "tree"  # pytest's tmp_path is closed to smbd's guest user
    album = root / "media" / "Madonna" / "Ray of Light"
    make_media(album / "01 song.mp3", artist="Madonna", title="Music", album="Ray of Light")
    (album / "folder.jpg").write_bytes(picture("red", "JPEG"))
    server = smbd_factory(root_dir=root)
    work = tmp_path / "outside"
    work.mkdir()
    (work / "hosts.txt").write_text(f"{server.url}/media\n")
    return Outside(installed, work, album, server)


@contextlib.contextmanager
def serving(outside: Outside) -> Iterator[str]:
    """`sharecrawl serve --crawl-dir crawl` on a free loopback port: its URL."""
    server = subprocess.Popen(
        outside.argv("serve", "--crawl-dir", "crawl", "--port", "0"),
        cwd=outside.work,
        env=_outside_env(outside.venv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert server.stderr is not None
        line = server.stderr.readline()  # "sharecrawl: serving crawl on http://...:N/ (...)"
        found = re.search(r" on (http://127\.0\.0\.1:\d+)/", line)
        assert found, line + (server.stderr.read() if server.poll() is not None else "")
        yield found.group(1)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(5)


def fetch(url: str, headers: dict[str, str] | None = None) -> tuple[int, str, bytes]:
    """(status, content type, body) of a GET."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.headers["content-type"], response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["content-type"], e.read()


@pytest.mark.smb
def test_the_installed_wheel_does_what_the_readme_shows(outside: Outside) -> None:
    found = subprocess.run(
        [
            str(outside.venv / "bin" / "python"),
            "-c",
            "import sharecrawl; print(sharecrawl.__file__)",
        ],
        capture_output=True,
        text=True,
        cwd=outside.work,
        env=_outside_env(outside.venv),
        check=True,
    )
    assert Path(found.stdout.strip()).is_relative_to(outside.venv)  # not the checkout
    crawled = outside.run(
        "crawl", "--hosts-file", "hosts.txt", "--crawl-dir", "crawl", "--rounds", "1"
    )
    assert crawled.returncode == 0, crawled.stderr
    assert crawled.stdout.startswith("round 1: 1 of 1 partition scanned (1 new)"), crawled.stdout
    status = json.loads(outside.run("status", "--crawl-dir", "crawl", "--json").stdout)
    assert (status["tags_read"], status["errors"]) == (1, 0)
    words = outside.run("search", "--crawl-dir", "crawl", "madonna", "music")
    assert words.returncode == 0 and "Music" in words.stdout, words.stderr
    fields = outside.run(
        "search", "--crawl-dir", "crawl", "--all-hosts", "--json", "artist:madonna"
    )
    [work] = json.loads(fields.stdout)
    assert work["title"] == "Music"
    assert (
        work["best"]["url"] == f"{outside.server.url}/media/Madonna/Ray%20of%20Light/01%20song.mp3"
    )
    hosts = outside.run("sql", "--crawl-dir", "crawl", "SELECT host, online, last_error FROM hosts")
    assert hosts.stdout == f"host\tonline\tlast_error\n127.0.0.1:{outside.server.port}\tTrue\t\n"
    assert outside.run("check", "--crawl-dir", "crawl").returncode == 0
    small = ["--hosts", "20", "--days", "0.5", "--warmup-days", "0.25", "--workers", "1"]
    simulated = outside.run("simulate", *small, "--policies", "roundrobin")
    assert simulated.returncode == 0 and "roundrobin" in simulated.stdout, simulated.stderr

    with serving(outside) as url:
        status_code, kind, _ = fetch(f"{url}/")
        assert (status_code, kind.split(";")[0]) == (200, "text/html")
        status_code, _, body = fetch(f"{url}/api/search?{urllib.parse.urlencode({'q': 'madonna'})}")
        card = json.loads(body)["view"]["sections"][0]["blocks"][0]["work"]
        data = (outside.album / "01 song.mp3").read_bytes()
        ranged = fetch(url + card["copies"][0]["link"], {"Range": "bytes=100-1099"})
        assert ranged[:2] == (206, "audio/mpeg"), ranged
        assert ranged[2] == data[100:1100]
        status_code, kind, cover = fetch(url + card["cover"])
        assert status_code == 200 and kind in ("image/jpeg", "image/png"), (status_code, kind)
        with Image.open(io.BytesIO(cover)) as image:  # the red of folder.jpg, scaled
            middle = image.convert("RGB").getpixel((image.width // 2, image.height // 2))
        assert middle[0] > 240 and max(middle[1:]) < 16, middle

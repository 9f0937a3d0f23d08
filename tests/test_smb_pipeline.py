"""Rounds over real Samba servers: a refused, hung or killed host costs at most
host_timeout_s, is marked offline with the reason, loses nothing indexed before, and is
tried again the next round."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.cliproc import run_cli
from tests.conftest import LAN
from tests.media import make_media
from tests.smbd import SmbServer, make_base_dir

pytestmark = pytest.mark.smb


@pytest.fixture
def short_timeouts(luigi_cfg: Callable[[str], None]) -> None:
    luigi_cfg("[sharecrawl]\nhost_timeout_s = 3\nliveness_timeout_s = 1\n")


@pytest.fixture
def smb_lan(lan: LAN, smbd_factory: Callable[..., SmbServer], short_timeouts: None) -> tuple:
    root = make_base_dir() / "tree"  # pytest's tmp_path is closed to smbd's guest user
    make_media(root / "media" / "Madonna" / "song_01.mp3", "flac", artist="Madonna", title="Music")
    make_media(root / "media" / "misc" / "track02.ogg", "ogg", artist="Kino", title="Kukushka")
    (root / "private").mkdir()
    server = smbd_factory(root_dir=root)
    lan.media("alpha", "music/song_01.mp3", artist="Madonna", title="Music")
    lan.hosts_file.write_text(f"file://{lan.host('alpha')}\n{server.url}/media\n")
    return lan, server


def host_row(lan: LAN, run_json, host: str) -> dict:
    rows = run_json(lan, "sql", f"SELECT * FROM hosts WHERE host = '{host}'")
    assert len(rows) == 1
    return rows[0]


def smb_host(server: SmbServer) -> str:
    return f"127.0.0.1:{server.port}"


def test_smb_host_is_crawled_and_searchable(smb_lan, run_json) -> None:
    lan, server = smb_lan
    lan.crawl()
    status = run_json(lan, "status")
    assert status["tags_read"] == 3 and status["errors"] == 0
    music = run_json(lan, "search", "madonna", "music")[0]
    assert music["copies"] == 2 and music["hosts"] == 2
    assert music["best"]["format"] == "flac"
    assert music["best"]["url"].startswith(f"smb://127.0.0.1:{server.port}/media/")
    row = host_row(lan, run_json, smb_host(server))
    assert row["online"] and row["list_s_per_folder"] > 0 and row["tag_s_per_file"] > 0


@pytest.mark.parametrize("failure", ["hung", "killed"])
def test_failed_host_goes_offline_and_loses_nothing(smb_lan, run_json, failure: str) -> None:
    lan, server = smb_lan
    lan.crawl()
    before = run_json(lan, "sql", "SELECT path, size FROM files ORDER BY host, path")
    make_media(server.root_dir / "media" / "new.mp3", artist="Zemfira", title="Ariva")
    if failure == "hung":
        server.pause()  # TCP still accepts (the kernel does), SMB never answers
    else:
        server.kill()
    try:
        lan.crawl()
        row = host_row(lan, run_json, smb_host(server))
        assert not row["online"] and row["last_error"]
        assert run_json(lan, "sql", "SELECT path, size FROM files ORDER BY host, path") == before
        assert run_json(lan, "search", "kukushka") == []
        hidden = run_json(lan, "search", "kukushka", "--all-hosts")
        assert hidden and hidden[0]["online_copies"] == 0
        assert run_json(lan, "search", "madonna")[0]["online_copies"] == 1
    finally:
        if failure == "hung":
            server.resume()
    if failure == "hung":
        lan.crawl()  # the next round tries again and finds the host well
        assert host_row(lan, run_json, smb_host(server))["online"]
        assert [r["title"] for r in run_json(lan, "search", "ariva")] == ["Ariva"]


def test_refused_and_wrong_password_are_reported(smb_lan, run_json, tmp_path) -> None:
    lan, server = smb_lan
    lan.hosts_file.write_text(
        f"file://{lan.host('alpha')}\nsmb://127.0.0.1:1/media\n{server.url}/private\n"
    )
    # a child process, as cron runs it: the fetch workers see the credentials it is given
    cfg = tmp_path / "short.cfg"
    cfg.write_text("[sharecrawl]\nhost_timeout_s = 3\nliveness_timeout_s = 1\n")
    env = {"SHARECRAWL_SMB_USER": server.user, "SHARECRAWL_SMB_PASSWORD": "not-" + server.password}
    done = run_cli(
        "crawl",
        "--crawl-dir",
        str(lan.crawl_dir),
        "--hosts-file",
        str(lan.hosts_file),
        "--runner",
        "inline",
        env=env,
        config=cfg,
    )
    assert done.returncode == 0, done.stderr
    refused = host_row(lan, run_json, "127.0.0.1:1")
    assert not refused["online"] and refused["last_error"] and refused["status"] == "refused"
    denied = host_row(lan, run_json, smb_host(server))  # it answers: it stays online, loudly
    assert denied["online"] and denied["last_error"] and denied["status"] == "auth_failed"
    secret = server.password.encode()
    assert not [p for p in lan.crawl_dir.rglob("*") if p.is_file() and secret in p.read_bytes()]
    assert run_json(lan, "search", "madonna")  # the file host was crawled all the same

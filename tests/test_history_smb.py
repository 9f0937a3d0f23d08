"""The `changes` history over a real Samba server: a song added, one deleted, one retagged and
one moved between rounds; the server stopped (SIGSTOP) for a round deletes nothing, and back
again its change shows."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from itertools import count
from pathlib import Path

import pytest

from tests.conftest import LAN
from tests.media import make_media
from tests.smbd import SmbServer, make_base_dir

pytestmark = pytest.mark.smb

SHORT = "[sharecrawl]\nhost_timeout_s = 3\nliveness_timeout_s = 1\n"
CLOCK = count(1_600_000_000, 100)  # distinct mtimes: no change hides behind an equal time


def song(media: Path, relpath: str, fmt: str = "mp3", **tags: object) -> int:
    path = make_media(media / relpath, fmt, **tags)
    t = next(CLOCK)
    os.utime(path, (t, t))
    return path.stat().st_size


def test_changes_over_smb(
    lan: LAN, smbd_factory: Callable[..., SmbServer], luigi_cfg, run_json
) -> None:
    luigi_cfg(SHORT)
    root = make_base_dir() / "tree"
    media = root / "media"
    (root / "private").mkdir(parents=True)
    a = song(media, "Kino/a.mp3", artist="Kino", title="Kukushka")
    b = song(media, "Kino/b.mp3", artist="Kino", title="Gruppa krovi")
    c = song(media, "Aria/c.ogg", "ogg", artist="Aria", title="Angel")
    server = smbd_factory(root_dir=root)
    host = f"127.0.0.1:{server.port}"
    lan.hosts_file.write_text(f"{server.url}/media\n")
    lan.crawl()

    d = song(media, "Kino/d.mp3", artist="Kino", title="Zvezda")
    (media / "Kino/b.mp3").unlink()
    a2 = song(media, "Kino/a.mp3", artist="Kino", title="Kukushka (live)")
    (media / "Moved").mkdir()
    shutil.move(media / "Aria/c.ogg", media / "Moved/c.ogg")
    lan.crawl()

    e = song(media, "Kino/e.mp3", artist="Kino", title="Pachka sigaret")
    server.pause()  # switched off: the kernel accepts, SMB never answers
    try:
        assert lan.cli("crawl") == 1  # no host answered: a person should look
    finally:
        server.resume()
    lan.crawl()

    query = "SELECT round, change, host, share, path, path_before, size_before, size_after, "
    query += "fields FROM changes ORDER BY round, path"
    rows = [tuple(r.values()) for r in run_json(lan, "sql", query)]
    title = [{"field": "title", "before": "Kukushka", "after": "Kukushka (live)"}]
    assert rows == [
        (1, "added", host, "media", "Aria/c.ogg", None, None, c, None),
        (1, "added", host, "media", "Kino/a.mp3", None, None, a, None),
        (1, "added", host, "media", "Kino/b.mp3", None, None, b, None),
        (2, "retagged", host, "media", "Kino/a.mp3", None, a, a2, title),
        (2, "deleted", host, "media", "Kino/b.mp3", None, b, None, None),
        (2, "added", host, "media", "Kino/d.mp3", None, None, d, None),
        (2, "moved", host, "media", "Moved/c.ogg", "Aria/c.ogg", c, c, None),
        # round 3: the server was stopped; nothing deleted. Round 4: back, its new song
        (4, "added", host, "media", "Kino/e.mp3", None, None, e, None),
    ]
    online = run_json(lan, "sql", "SELECT round, hosts_online FROM versions ORDER BY round")
    assert [(r["round"], r["hosts_online"]) for r in online] == [(1, 1), (2, 1), (3, 0), (4, 1)]

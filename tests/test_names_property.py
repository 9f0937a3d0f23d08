"""Distinct byte names stay distinct files end to end (docs/DESIGN.md, Sources, the name
escapes): for any names of bytes but '/' and NUL, a real round over a file:// host lists each as
its own `files` and `media` row and `copies` copy, of its own size, and `/copy` streams each
one's own bytes. tests/test_names_escape.py holds the escape itself to the same property."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sharecrawl.crawl_io.checked import path_on_host
from sharecrawl.crawl_io.filesource import host_bytes
from sharecrawl.queries.search_results import copy_link
from tests.cliproc import run_cli
from tests.conftest import LAN
from tests.media import make_media
from tests.test_stream_http import App

# Bytes but '/' and NUL, drawn often from what the escapes are made of, so that a name and the
# name its escape spells (b"caf\xe9" and b"caf\\xe9") meet in one listing.
PIECES = [b"\\", b"x", b"e9", b"\xe9", b"u", b"d800", b"\xc3", b"\xa9", b".", b"\\\\", b"ff"]
STEMS = st.one_of(
    st.binary(min_size=1, max_size=16),
    st.lists(st.sampled_from(PIECES), min_size=1, max_size=6).map(b"".join),
).map(lambda b: b.replace(b"/", b"").replace(b"\0", b"") or b"\\")
NAMES = st.lists(STEMS.map(lambda stem: stem + b".mp3"), min_size=2, max_size=12, unique=True)


def crawled(root: Path, names: list[bytes]) -> tuple[LAN, dict[bytes, bytes]]:
    """A file:// host `lab` whose share `m` holds a song under each name, each of other bytes
    (the song and a tail of its own length), crawled once; the bytes by name."""
    lan = LAN(root)
    share = os.fsencode(lan.host("lab") / "m")
    song = make_media(root / "song.mp3", artist="Byte", title="Names").read_bytes()
    written = {}
    for n, name in enumerate(names):
        written[name] = song + bytes([n]) * (n + 1) * 7
        with open(os.path.join(share, name), "wb") as f:
            f.write(written[name])
    lan.write_hosts("lab")
    lan.crawl()
    return lan, written


def tables(lan: LAN) -> dict[str, list[tuple[str, int]]]:
    """(path, size) rows of files, media and copies, through one `sharecrawl sql --json`."""
    statement = (
        "SELECT 'files' AS t, path, size FROM files WHERE NOT is_dir "
        "UNION ALL SELECT 'media', path, size FROM media "
        "UNION ALL SELECT 'copies', path, size FROM copies"
    )
    done = run_cli("sql", "--crawl-dir", str(lan.crawl_dir), "--json", statement)
    assert done.returncode == 0, done.stderr
    found: dict[str, list[tuple[str, int]]] = {"files": [], "media": [], "copies": []}
    for row in json.loads(done.stdout):
        found[row["t"]].append((row["path"], row["size"]))
    return found


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(NAMES)
@example([b"caf\xe9 one.mp3", b"caf\\xe9 one.mp3", b"\\.mp3", b"\\\\.mp3", b"\xed\xa0\x80.mp3"])
def test_distinct_byte_names_are_distinct_rows_and_copies(names: list[bytes]) -> None:
    with tempfile.TemporaryDirectory(prefix="sharecrawl-names-") as tmp:
        root = Path(tmp)
        (root / "hosts" / "lab" / "m").mkdir(parents=True)
        lan, written = crawled(root, names)
        found = tables(lan)
        app = App(lan.crawl_dir)
        try:
            for rows in found.values():
                assert len(rows) == len(names) == len({path for path, _ in rows}), rows
                by_name = {host_bytes(path_on_host(path)): size for path, size in rows}
                assert by_name == {name: len(data) for name, data in written.items()}
            for path, _ in found["files"]:
                status, _, body = app.call(copy_link("lab", "m", path, True), [])
                assert (status, body) == (200, written[host_bytes(path_on_host(path))]), path
        finally:
            app.close()

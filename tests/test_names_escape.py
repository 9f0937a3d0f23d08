"""A stored path names exactly one file on its share (docs/DESIGN.md, Sources, the name
escapes): distinct host names stay distinct through `safe_name`, `name_on_host` gives each
back, and a real round over a file:// host with a non-UTF-8 name beside the name its escape
spells keeps two files, two media rows, two copies."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sharecrawl.crawl_io import filesource
from sharecrawl.crawl_io.checked import (
    CheckedSource,
    name_on_host,
    path_on_host,
    safe_name,
    stored_path,
)
from sharecrawl.crawl_io.filesource import FileSource, host_bytes, shown_name
from sharecrawl.crawl_io.sources import parse_host_url
from tests.conftest import LAN
from tests.media import make_media

# any bytes but '/' and NUL, as a POSIX file name may hold them; '\\' and '.' often
BYTE_NAMES = st.binary(max_size=12).map(lambda b: b.replace(b"/", b"").replace(b"\0", b""))
BYTE_NAMES = st.one_of(
    BYTE_NAMES,
    st.lists(st.sampled_from([b"\\", b".", b"x", b"e9", b"\xe9", b"u", b"\xc3"]), max_size=6).map(
        b"".join
    ),
)
# what an SMB server may send: any text, lone surrogates, '/' and NUL included
SMB_NAMES = st.text(st.characters(exclude_categories=()), max_size=10)


@settings(max_examples=600, deadline=None)
@given(st.lists(BYTE_NAMES, min_size=2, max_size=6, unique=True))
def test_byte_names_stay_distinct_and_come_back(names: list[bytes]) -> None:
    stored = [safe_name(shown_name(raw)) for raw in names]
    assert len(set(stored)) == len(names)
    for raw, name in zip(names, stored, strict=True):
        name.encode("utf-8")  # Parquet text holds it
        assert "/" not in name and "\0" not in name and name not in ("", ".", "..")
        assert host_bytes(name_on_host(name)) == raw


@settings(max_examples=600, deadline=None)
@given(st.lists(SMB_NAMES, min_size=2, max_size=6, unique=True))
def test_any_text_name_stays_distinct_and_comes_back(names: list[str]) -> None:
    stored = [safe_name(n) for n in names]
    assert len(set(stored)) == len(names)
    for name, shown in zip(names, stored, strict=True):
        shown.encode("utf-8")
        assert "/" not in shown and "\0" not in shown and name_on_host(shown) == name


def test_the_escapes_spelled_out() -> None:
    cases = {
        "caf\udce9 one.mp3": "caf\\xe9 one.mp3",  # the byte 0xE9 of a Latin-1 name
        "caf\\xe9 one.mp3": "caf\\\\xe9 one.mp3",  # a name that spells that escape
        "a/b": "a\\x2fb",
        "x\0y": "x\\x00y",
        "\ud800": "\\ud800",  # an unpaired UTF-16 unit from an SMB server
        "": "\\",
        ".": "\\.",
        "..": "\\..",
        "\\": "\\\\",
        "Мадонна.mp3": "Мадонна.mp3",
    }
    assert {name: safe_name(name) for name in cases} == cases
    assert stored_path("caf\udce9/x\\y") == "caf\\xe9/x\\\\y"
    assert path_on_host("caf\\xe9/x\\\\y") == "caf\udce9/x\\y"


def test_a_name_and_the_name_its_escape_spells_are_two_files(lan: LAN, run_json) -> None:
    music = lan.host("latin") / "music"
    latin = os.path.join(os.fsencode(music), b"caf\xe9 one.mp3")
    make_media(os.fsdecode(latin), artist="Edith", title="Latin One")
    spelled = make_media(music / "caf\\xe9 one.mp3", "flac", artist="Edith", title="Spelled")
    lan.write_hosts("latin")
    lan.crawl()
    files = run_json(lan, "sql", "SELECT path, size FROM files WHERE NOT is_dir ORDER BY path")
    assert files == [
        {"path": "caf\\\\xe9 one.mp3", "size": spelled.stat().st_size},
        {"path": "caf\\xe9 one.mp3", "size": os.stat(latin).st_size},
    ]
    media = run_json(lan, "sql", "SELECT path, title, format FROM media ORDER BY path")
    assert media == [
        {"path": "caf\\\\xe9 one.mp3", "title": "Spelled", "format": "flac"},
        {"path": "caf\\xe9 one.mp3", "title": "Latin One", "format": "mp3"},
    ]
    copies = run_json(lan, "sql", "SELECT path, size FROM copies ORDER BY path")
    assert [c["path"] for c in copies] == ["caf\\\\xe9 one.mp3", "caf\\xe9 one.mp3"]
    assert copies[0]["size"] != copies[1]["size"]
    for row in files:  # each stored path opens its own file
        on_disk = os.path.join(os.fsencode(music), host_bytes(path_on_host(row["path"])))
        assert os.stat(on_disk).st_size == row["size"]
    lan.crawl()  # the next round finds both unchanged
    log = run_json(lan, "sql", "SELECT round, status, n_clamped FROM fetchlog ORDER BY ALL")
    assert log == [
        {"round": 1, "status": "new", "n_clamped": 2},
        {"round": 2, "status": "unchanged", "n_clamped": 2},
    ]


@pytest.mark.parametrize("decoded_by", ["python", "shown_name"])
def test_a_share_named_in_bytes_reads_back(
    tmp_path: Path, decoded_by: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Names decode alike by Python's own UTF-8 file names and, under a locale of another
    encoding, by shown_name."""
    monkeypatch.setattr(filesource, "_FS_NAMES_SHOWN", decoded_by == "python")
    host = os.path.join(os.fsencode(tmp_path), b"h")
    os.makedirs(os.path.join(host, b"sh\xffare", b"dir\\x"))
    with open(os.path.join(host, b"sh\xffare", b"dir\\x", b"\xfe.txt"), "wb") as f:
        f.write(b"payload")
    source = CheckedSource(FileSource(parse_host_url(f"file://{os.fsdecode(host)}")))
    assert source.shares() == ["sh\\xffare"]
    assert [e.name for e in source.listdir("sh\\xffare", "")] == ["dir\\\\x"]
    assert [e.name for e in source.listdir("sh\\xffare", "dir\\\\x")] == ["\\xfe.txt"]
    assert source.read("sh\\xffare", "dir\\\\x/\\xfe.txt", 0, 7) == b"payload"

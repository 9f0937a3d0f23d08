"""Tag reading: templates round-trip, broken files never raise, video names, partial reads
over a source. Reach on tinytag's corpus is in test_tag_corpus, format details in
test_tag_formats."""

from __future__ import annotations

import io
import math
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sharecrawl.crawl_io.filesource import FileSource
from sharecrawl.crawl_io.rangefile import RangeFile
from sharecrawl.crawl_io.schema import MEDIA
from sharecrawl.crawl_io.sources import HostUnreachable, parse_host_url
from sharecrawl.crawl_io.tags import TAG_COLUMNS, parse_int, parse_year, read_tags
from sharecrawl.demolan.templates import TEMPLATES, template_path, write_tagged
from tests.media import make_media

TAGS = {
    "artist": "Мумий Тролль",
    "title": "Утекай",
    "album": "Морская",
    "albumartist": "Various Artists",
    "track": 3,
    "disc": 2,
    "year": 1997,
    "genre": "Rock",
}
FORMATS = {
    "mp3": "mp3",
    "mp3-320": "mp3",
    "flac": "flac",
    "ogg": "ogg",
    "opus": "opus",
    "m4a": "m4a",
    "wma": "wma",
    "wav": "wav",
    "aiff": "aiff",
    "mp4": "mp4",
}
# The tag columns as the crawldb stores them: from the schema, not from the reader.
_START, _END = MEDIA.names.index("kind"), MEDIA.names.index("tag_source")
TAG_SCHEMA = pa.schema([MEDIA.field(name) for name in MEDIA.names[_START : _END + 1]])


def assert_media_row(row: dict[str, Any]) -> None:
    """A row the crawldb can store: the schema's tag columns in its order, each value of
    its column's type and range, and stream values that are physically possible."""
    assert list(row) == TAG_SCHEMA.names
    pa.Table.from_pylist([row], schema=TAG_SCHEMA)  # raises on a wrong type or an overflow
    duration = row["duration_s"]
    assert duration is None or (math.isfinite(duration) and duration >= 0), duration
    for field in ("bitrate_kbps", "samplerate", "channels"):
        assert row[field] is None or row[field] > 0, (field, row[field])
    assert row["tag_error"] is None or 0 < len(row["tag_error"]) < 120, row["tag_error"]


def extension_of(template: str) -> str:
    return template_path(template).suffix


def read_local(path: Path, name: str | None = None) -> dict:
    with path.open("rb") as f:
        return read_tags(f, name or path.name)


def test_columns_are_the_media_schema_columns() -> None:
    assert list(TAG_COLUMNS) == TAG_SCHEMA.names


def test_templates_are_small_and_untagged() -> None:
    total = sum(template_path(t).stat().st_size for t in TEMPLATES)
    assert total < 200_000
    for template in TEMPLATES:
        row = read_local(template_path(template))
        assert row["tag_error"] is None, template
        assert all(row[f] is None for f in ("artist", "album", "year", "track")), template
        assert row["title"] == ("clip" if template == "mp4" else None)  # a video's name


@pytest.mark.parametrize("template", TEMPLATES)
def test_every_template_reads_back_the_tags_written(tmp_path: Path, template: str) -> None:
    path = make_media(tmp_path / f"x{extension_of(template)}", template, **TAGS)
    row = read_local(path)
    assert_media_row(row)
    assert row["tag_error"] is None
    assert {k: row[k] for k in TAGS} == TAGS
    assert row["format"] == FORMATS[template]
    assert row["kind"] == ("video" if template == "mp4" else "audio")
    assert 0.3 < row["duration_s"] < 1.2
    assert row["samplerate"] in (8000, 22050, 44100, 48000)
    assert row["channels"] in (1, 2)
    assert row["bitrate_kbps"] > 0


def test_quality_differs_between_mp3_templates(tmp_path: Path) -> None:
    low = read_local(make_media(tmp_path / "a.mp3", "mp3", title="x"))
    high = read_local(make_media(tmp_path / "b.mp3", "mp3-320", title="x"))
    assert low["bitrate_kbps"] == 32 and high["bitrate_kbps"] == 320


@pytest.mark.parametrize("template", ["mp3", "flac", "ogg", "wma", "wav"])
def test_numbers_are_parsed_from_text_tags(tmp_path: Path, template: str) -> None:
    path = tmp_path / f"x{extension_of(template)}"
    write_tagged(template, path, {"track": "3/12", "disc": "1/2", "year": "2004-05-01"})
    row = read_local(path)
    assert (row["track"], row["disc"], row["year"]) == (3, 1, 2004)


@pytest.mark.parametrize(
    ("text", "number"), [("3/12", 3), (" 07", 7), ("x", None), ("", None), (5, 5), ("9" * 20, None)]
)
def test_parse_int(text: object, number: int | None) -> None:
    assert parse_int(text) == number


@pytest.mark.parametrize(
    ("text", "year"),
    [("2004-05-01", 2004), ("2008.05.25", 2008), ("05/01/1999", 1999), ("0", None), ("", None)],
)
def test_parse_year(text: str, year: int | None) -> None:
    assert parse_year(text) == year


def test_wav_riff_info_tags_are_read(tmp_path: Path) -> None:
    """Windows and many rippers tag wav files with a LIST/INFO chunk rather than ID3."""
    items = b""
    for item_id, text in [(b"IART", "Кино"), (b"INAM", "Война"), (b"ICRD", "1988"), (b"ITRK", "3")]:
        data = text.encode() + b"\0"
        items += item_id + len(data).to_bytes(4, "little") + data + b"\0" * (len(data) & 1)
    chunk = b"LIST" + (len(items) + 4).to_bytes(4, "little") + b"INFO" + items
    wav = bytearray(template_path("wav").read_bytes() + chunk)
    wav[4:8] = (len(wav) - 8).to_bytes(4, "little")
    row = read_tags(io.BytesIO(bytes(wav)), "track03.wav")
    assert (row["artist"], row["title"], row["year"], row["track"]) == ("Кино", "Война", 1988, 3)
    assert row["tag_error"] is None and row["duration_s"] == 0.5


def test_write_tagged_rejects_unknown_template_and_tags(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no template"):
        write_tagged("mkv", tmp_path / "x.mkv", {})
    with pytest.raises(ValueError, match="cannot write"):
        write_tagged("mp3", tmp_path / "x.mp3", {"composer": "x"})


# ------------------------------------------------------------------ broken files


@pytest.mark.parametrize("template", TEMPLATES)
@pytest.mark.parametrize("keep", [0, 3, 40])
def test_cut_files_give_a_tag_error_not_an_exception(
    tmp_path: Path, template: str, keep: int
) -> None:
    whole = make_media(tmp_path / f"whole{extension_of(template)}", template, **TAGS)
    cut = tmp_path / f"cut{extension_of(template)}"
    cut.write_bytes(whole.read_bytes()[:keep])
    row = read_local(cut)
    assert_media_row(row)
    assert row["tag_error"], row
    assert row["format"] == FORMATS[template]
    if keep == 0:
        assert row["tag_error"] == "empty file"


@pytest.mark.parametrize("template", TEMPLATES)
def test_cut_files_keep_only_true_values(tmp_path: Path, template: str) -> None:
    """A file cut anywhere gives a storable row whose tags are the whole file's or empty,
    never a value cut short, and a length no longer than the whole file's."""
    whole = make_media(tmp_path / f"whole{extension_of(template)}", template, **TAGS)
    data = whole.read_bytes()
    full = read_local(whole)
    kept = dict.fromkeys(TAGS, 0)
    for keep in range(0, len(data), max(1, len(data) // 60)):
        row = read_tags(io.BytesIO(data[:keep]), whole.name)
        assert_media_row(row)
        for field, value in TAGS.items():
            from_name = "whole" if (template, field) == ("mp4", "title") else None  # guessit's
            assert row[field] in (None, value, from_name), (keep, field, row[field])
            kept[field] += row[field] == value
        assert (row["duration_s"] or 0) <= full["duration_s"] * 1.01, (keep, row["duration_s"])
    if template not in ("wav", "aiff"):  # their ID3 chunk is written last: a cut loses it
        assert all(kept.values()), kept  # cut after the tags, they stay


def test_truncated_mp3_keeps_the_tags_before_the_cut(tmp_path: Path) -> None:
    """An interrupted download: the ID3 tag is cut off inside its padding."""
    whole = make_media(tmp_path / "whole.mp3", "mp3", artist="Madonna", title="Music")
    data = whole.read_bytes()
    row = read_tags(io.BytesIO(data[:200]), "song_01.mp3")
    assert row["tag_error"] == "truncated mp3 file"
    assert (row["artist"], row["title"]) == ("Madonna", "Music")


@pytest.mark.parametrize("template", TEMPLATES)
def test_garbage_is_not_recognised(template: str) -> None:
    name = f"junk{extension_of(template)}"
    garbage = bytes(range(256)) * 40
    row = read_tags(io.BytesIO(garbage), name)
    assert row["tag_error"], row
    assert row["format"] == FORMATS[template]
    assert FORMATS[template] in row["tag_error"] or "media" in row["tag_error"]


def test_unknown_extension_and_misnamed_files(tmp_path: Path) -> None:
    junk = read_tags(io.BytesIO(b"hello world" * 10), "notes.txt")
    assert junk["tag_error"] == "not a recognised media file"
    assert junk["kind"] is None and junk["format"] is None
    # A FLAC file named .mp3 is still read, as what it is.
    flac = make_media(tmp_path / "x.flac", "flac", artist="A", title="T")
    row = read_tags(io.BytesIO(flac.read_bytes()), "song.mp3")
    assert (row["format"], row["artist"], row["title"]) == ("flac", "A", "T")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    template=st.sampled_from(sorted(TEMPLATES)),
    flips=st.lists(st.tuples(st.integers(0, 20_000), st.integers(1, 255)), max_size=12),
)
def test_damaged_files_never_raise(template: str, flips: list[tuple[int, int]]) -> None:
    data = bytearray(template_path(template).read_bytes())
    for position, xor in flips:
        data[position % len(data)] ^= xor
    row = read_tags(io.BytesIO(bytes(data)), f"x{extension_of(template)}")
    assert_media_row(row)


class FailingFile(io.RawIOBase):
    """Reads fail after `ok` bytes, as a host that drops mid-read."""

    def __init__(self, data: bytes, ok: int, error: Exception) -> None:
        self.inner, self.ok, self.error = io.BytesIO(data), ok, error

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.inner.seek(offset, whence)

    def tell(self) -> int:
        return self.inner.tell()

    def read(self, size: int = -1) -> bytes:
        if self.inner.tell() + (size if size >= 0 else 10**9) > self.ok:
            raise self.error
        return self.inner.read(size)


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (HostUnreachable("pc1: connection reset"), "read failed: pc1: connection reset"),
        (OSError(5, "Input/output error"), "read failed"),
        (RuntimeError("boom"), "boom"),
    ],
)
def test_read_errors_become_tag_errors(tmp_path: Path, error: Exception, message: str) -> None:
    data = make_media(tmp_path / "x.mp3", "mp3", **TAGS).read_bytes()
    row = read_tags(FailingFile(data, 20, error), "x.mp3")
    assert message in row["tag_error"]


# ------------------------------------------------------------------ video names


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Lost.S06E01.720p.mp4", {"series": "Lost", "season": 6, "episode": 1}),
        ("The.Matrix.1999.1080p.mp4", {"title": "The Matrix", "year": 1999, "series": None}),
        (
            "Friends.S01E01.The.One.Where.Monica.Gets.a.Roommate.m4v",
            {"series": "Friends", "season": 1, "episode": 1},
        ),
        ("Lost/Season 6/01.mp4", {"series": "Lost", "season": 6, "episode": 1}),
    ],
)
def test_video_names_are_parsed(tmp_path: Path, name: str, expected: dict) -> None:
    clip = make_media(tmp_path / "clip.mp4", "mp4")
    row = read_local(clip, name)
    assert row["kind"] == "video" and row["tag_error"] is None
    assert {k: row[k] for k in expected} == expected


def test_video_tags_win_over_the_name(tmp_path: Path) -> None:
    clip = make_media(tmp_path / "clip.mp4", "mp4", title="Pilot", year=2004)
    row = read_local(clip, "Lost.S01E01.2005.mp4")
    assert (row["title"], row["year"], row["series"], row["episode"]) == ("Pilot", 2004, "Lost", 1)


def test_broken_video_still_gets_its_name_parsed() -> None:
    row = read_tags(io.BytesIO(b"\0" * 100), "Lost.S06E02.720p.mp4")
    assert row["tag_error"]
    assert (row["series"], row["season"], row["episode"]) == ("Lost", 6, 2)


def test_videos_without_a_tag_reader_are_not_errors() -> None:
    row = read_tags(io.BytesIO(b"\x1aE\xdf\xa3" + b"\0" * 100), "Lost.S06E03.mkv")
    assert row["tag_error"] is None and row["format"] == "mkv"
    assert (row["series"], row["episode"]) == ("Lost", 3)


# ------------------------------------------------------------------ through a source


def file_source(folder: Path) -> FileSource:
    return FileSource(parse_host_url(folder.as_uri()))


@pytest.mark.parametrize("template", TEMPLATES)
def test_rangefile_over_filesource_reads_the_same_tags(tmp_path: Path, template: str) -> None:
    path = make_media(tmp_path / "host" / "music" / f"x{extension_of(template)}", template, **TAGS)
    with file_source(tmp_path / "host") as source:
        f = RangeFile(source, "music", path.name, path.stat().st_size)
        assert read_tags(f, path.name) == read_local(path)
        assert f.requests >= 1


def pad_big(path: Path, template: str, megabytes: int = 4) -> None:
    """Make a file of a few MB the way real ones are big: long audio data."""
    data = path.read_bytes()
    if template == "mp3":
        frames = data[data.index(b"\xff\xf3", 10) :]  # the MPEG frames after the tag
        data += frames * (megabytes * 2**20 // len(frames))
    elif template in ("m4a", "mp4"):
        size = megabytes * 2**20
        data += size.to_bytes(4, "big") + b"free" + bytes(size - 8)  # a big atom after moov
    else:  # flac: frames after the metadata; the length is in STREAMINFO
        data += bytes(megabytes * 2**20)
    path.write_bytes(data)


@pytest.mark.parametrize("template", ["mp3", "m4a", "mp4", "flac"])
def test_big_files_are_not_read_whole(tmp_path: Path, template: str) -> None:
    path = make_media(tmp_path / "host" / "music" / f"x{extension_of(template)}", template, **TAGS)
    pad_big(path, template)
    size = path.stat().st_size
    with file_source(tmp_path / "host") as source:
        f = RangeFile(source, "music", path.name, size)
        row = read_tags(f, path.name)
    assert {k: row[k] for k in TAGS} == TAGS and row["tag_error"] is None
    assert f.bytes_read <= 4 * 64 * 1024 < size / 8, (f.bytes_read, size)


def test_a_file_gone_during_the_read_is_a_read_error(tmp_path: Path) -> None:
    path = make_media(tmp_path / "host" / "music" / "x.mp3", "mp3", **TAGS)
    with file_source(tmp_path / "host") as source:
        f = RangeFile(source, "music", path.name, path.stat().st_size)
        os.remove(path)
        row = read_tags(f, path.name)
    assert row["tag_error"].startswith("read failed:") and "not found" in row["tag_error"]

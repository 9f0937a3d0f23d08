"""Which tag key of each format fills which column, and the filling: the first key with a usable
value wins, and a column already set keeps its value (readers fill the most authoritative tag
first, the others fill gaps)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from mutagen.apev2 import APEv2
from mutagen.id3 import ID3
from mutagen.mp4 import MP4Tags

from sharecrawl.crawl_io.tags.record import fill


def key_table(table: str) -> dict[str, tuple[str, ...]]:
    """'column=key,key; ...' as {column: (key, ...)}, the keys in the order they are tried."""
    pairs = (item.strip().split("=") for item in table.split(";"))
    return {column: tuple(keys.split(",")) for column, keys in pairs}


ASF_KEYS = key_table(
    "artist=Author; title=Title; album=WM/AlbumTitle; albumartist=WM/AlbumArtist; "
    "track=WM/TrackNumber; disc=WM/PartOfSet; year=WM/Year,WM/OriginalReleaseYear; genre=WM/Genre"
)
MP4_KEYS = key_table(
    "artist=\xa9ART; title=\xa9nam; album=\xa9alb; albumartist=aART; track=trkn; disc=disk; "
    "year=\xa9day; genre=\xa9gen; series=tvsh; season=tvsn; episode=tves"
)
ID3_KEYS = key_table(
    "artist=TPE1; title=TIT2; album=TALB; albumartist=TPE2; track=TRCK; disc=TPOS; "
    "year=TDRC,TORY,TDOR; genre=TCON"
)
# Vorbis comments (Ogg, FLAC) name fields freely; speexenc writes its artist as `author`.
VORBIS_KEYS = key_table(
    "artist=artist,author; title=title; album=album; albumartist=albumartist,album artist,"
    "album_artist; track=tracknumber,track; disc=discnumber,disc; year=date,year,originaldate; "
    "genre=genre"
)
APE_KEYS = key_table(
    "artist=Artist; title=Title; album=Album; albumartist=Album Artist,AlbumArtist; track=Track; "
    "disc=Disc; year=Year; genre=Genre"
)

Getter = Callable[[str], Iterable[Any]]


def fill_fields(row: dict[str, Any], keys: dict[str, tuple[str, ...]], get: Getter) -> None:
    """Fill each empty column from the first of its keys with a usable value."""
    for field, names in keys.items():
        if row.get(field) is not None:
            continue
        for key in names:
            if any(fill(row, field, v) for v in get(key) if v not in (None, "")):
                break


def fill_from_tags(row: dict[str, Any], tags: Any) -> None:
    """Fill empty columns from a mutagen tag object of any format."""
    if isinstance(tags, ID3):
        fill_fields(row, ID3_KEYS, lambda key: _id3_values(tags, key))
    elif isinstance(tags, MP4Tags):
        fill_fields(row, MP4_KEYS, lambda key: _mp4_values(tags, key))
    elif isinstance(tags, APEv2):
        fill_fields(row, APE_KEYS, lambda key: [] if key not in tags else [str(tags[key])])
    elif hasattr(tags, "as_dict") or hasattr(tags, "vendor"):  # Vorbis comments
        fill_fields(row, VORBIS_KEYS, lambda key: list(tags.get(key) or []))


def fill_from_pairs(
    row: dict[str, Any], keys: dict[str, tuple[str, ...]], pairs: Iterable[tuple[str, Any]]
) -> None:
    """Fill empty columns from (key, value) pairs, a key's values in their order."""
    by_key: dict[str, list[Any]] = {}
    for key, value in pairs:
        by_key.setdefault(key, []).append(value)
    fill_fields(row, keys, lambda key: by_key.get(key, []))


def fill_from_vorbis_pairs(row: dict[str, Any], pairs: list[tuple[str, str]]) -> None:
    """Fill from Vorbis comment (key, value) pairs; keys compare case-insensitively."""
    fill_from_pairs(row, VORBIS_KEYS, ((key.lower(), value) for key, value in pairs))


def _id3_values(tags: ID3, key: str) -> list[Any]:
    frame = tags.get(key)
    if frame is None:
        return []
    if key == "TCON":
        return list(frame.genres)  # resolves ID3v1 numeric genres: '(13)' -> 'Pop'
    return [str(v) for v in frame.text]


def _mp4_values(tags: MP4Tags, key: str) -> list[Any]:
    values = tags.get(key) or []
    if key in ("trkn", "disk"):
        return [v[0] if isinstance(v, tuple) else v for v in values]
    return list(values)

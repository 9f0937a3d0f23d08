"""The record every tag reader fills: the `media` columns of one file, and how a raw tag
value becomes a column value."""

from __future__ import annotations

import math
import re
from typing import Any

from sharecrawl.crawl_io.mediatypes import extension, media_kind

# The media-describing columns of crawl_io.schema.MEDIA, in its order.
TAG_COLUMNS = tuple(
    "kind format artist title album albumartist track disc year genre duration_s bitrate_kbps "
    "samplerate channels series season episode tag_error tag_source".split()
)
TEXT_FIELDS = ("artist", "title", "album", "albumartist", "genre", "series")
INT32_MAX = 2**31 - 1

# Format names by extension, for files no reader recognised.
EXTENSION_FORMATS = {"oga": "ogg", "aif": "aiff", "aifc": "aiff", "m4b": "m4a", "alac": "m4a"}


def empty_row(name: str) -> dict[str, Any]:
    """A row with only what the name tells: kind and format by extension."""
    row: dict[str, Any] = dict.fromkeys(TAG_COLUMNS)
    row["kind"] = media_kind(name)
    ext = extension(name.rsplit("/", 1)[-1])
    row["format"] = EXTENSION_FORMATS.get(ext, ext) if row["kind"] else None
    return row


def fill(row: dict[str, Any], field: str, value: Any) -> bool:
    """Set `field` from a raw tag value unless it is set already; True when it was set."""
    if row[field] is not None or value is None:
        return False
    converted = convert(field, value)
    if converted is None:
        return False
    row[field] = converted
    return True


def convert(field: str, value: Any) -> Any:
    if field in TEXT_FIELDS:
        text = str(value).replace("\x00", " ").strip()
        return text or None
    if field == "year":
        return parse_year(value)
    return parse_int(value)


def parse_int(value: Any) -> int | None:
    """Leading number: '3/12' -> 3, ' 07' -> 7; None when there is none or it is absurd."""
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        match = re.match(r"\s*(\d+)", str(value))
        if match is None:
            return None
        number = int(match.group(1))
    return number if 0 <= number <= INT32_MAX else None


def parse_year(value: Any) -> int | None:
    """The first four-digit year in a date: '2004-05-01' -> 2004, '2008.05.25' -> 2008."""
    match = re.search(r"(?<!\d)(\d{4})(?!\d)", str(value))
    if match is None:
        return None
    year = int(match.group(1))
    return year if year > 0 else None


def finite(value: Any) -> float | None:
    """A finite, non-negative number, else None."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number >= 0 else None


def count(value: Any) -> int | None:
    """A positive whole number from stream info, else None."""
    return (parse_int(value) or None) if value is not None else None


def set_stream(
    row: dict[str, Any],
    *,
    duration: Any = None,
    samplerate: Any = None,
    channels: Any = None,
    bitrate_bps: Any = None,
) -> None:
    """Fill the stream columns not set yet: duration in seconds, bitrate in bits/s."""
    if row["duration_s"] is None:
        row["duration_s"] = finite(duration)
    if row["samplerate"] is None:
        row["samplerate"] = count(samplerate)
    if row["channels"] is None:
        row["channels"] = count(channels)
    bitrate = finite(bitrate_bps)
    if row["bitrate_kbps"] is None and bitrate:
        row["bitrate_kbps"] = count(round(bitrate / 1000))


def first(value: Any) -> Any:
    return value[0] if isinstance(value, list) and value else value

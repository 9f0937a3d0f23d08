"""What an untagged audio file's name says: `Artist - Title`, `NN. Artist - Title` or `Artist -
Album - NN - Title`. Other names say nothing: a wrong artist would group the file with another
song, a missing one only leaves it to its name words."""

from __future__ import annotations

import re
from typing import Any

from sharecrawl.crawl_io.tags.record import fill

_TRACK = re.compile(r"(\d{1,3})(?:\s*[.)]\s*|\s+-\s+|\s+|_)(?=\S)")  # '01. ', '01 - ', '01 '
_DASH = re.compile(r"\s+[-\u2013\u2014]\s+")  # ' - ', en and em dashes too


def fill_from_audio_name(row: dict[str, Any], name: str) -> bool:
    """Artist, title (album, track) from the name where the tags gave neither; True if it did."""
    if row["artist"] is not None or row["title"] is not None:
        return False
    stem = name.rsplit("/", 1)[-1].rpartition(".")[0].strip()
    track = _TRACK.match(stem)
    parts = [p.strip() for p in _DASH.split(stem[track.end() :] if track else stem)]
    if len(parts) == 4 and parts[2].isdigit():
        artist, album, number, title = parts
    elif len(parts) == 2:
        (artist, title), album, number = parts, None, track.group(1) if track else None
    else:
        return False
    if not artist or not title:
        return False
    fill(row, "album", album)
    fill(row, "track", number)
    return fill(row, "artist", artist) & fill(row, "title", title)

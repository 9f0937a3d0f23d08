"""Which file names are media, and of which kind: the one definition every stage uses."""

from __future__ import annotations

import re

AUDIO_EXTENSIONS = frozenset(
    "mp3 mp2 mp1 flac ogg oga opus m4a m4b aac wma aiff aif aifc wav wv ape mpc spx alac".split()
)
VIDEO_EXTENSIONS = frozenset(
    "mp4 m4v mkv avi wmv mov mpg mpeg ts m2ts webm flv 3gp vob ogv divx".split()
)
_EXTENSIONS = "|".join(map(re.escape, sorted(AUDIO_EXTENSIONS | VIDEO_EXTENSIONS)))
# media_kind(name) is not None as one RE2-compatible regex, for Arrow and DuckDB (match it
# case-insensitively): a character, the last dot, a media extension.
MEDIA_NAME = rf"(?s).\.(?:{_EXTENSIONS})$"


def extension(name: str) -> str:
    dot = name.rfind(".")
    return name[dot + 1 :].lower() if dot > 0 else ""


def media_kind(name: str) -> str | None:
    """'audio', 'video' or None for a file name."""
    ext = extension(name)
    if ext in AUDIO_EXTENSIONS:
        return "audio"
    if ext in VIDEO_EXTENSIONS:
        return "video"
    return None

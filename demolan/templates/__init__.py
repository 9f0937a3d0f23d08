"""The media templates in this folder, and tagged copies of them by mutagen (`write_tagged`):
how the demo LAN and the tests make real media files without an encoder."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mutagen import FileType
from mutagen.aiff import AIFF
from mutagen.asf import ASF
from mutagen.flac import FLAC
from mutagen.id3 import Frames
from mutagen.mp3 import MP3
from mutagen.mp4 import MP4
from mutagen.oggopus import OggOpus
from mutagen.oggvorbis import OggVorbis
from mutagen.wave import WAVE

from sharecrawl.crawl_io.tags.fields import ASF_KEYS, ID3_KEYS, MP4_KEYS

TEMPLATES_DIR = Path(__file__).parent
TEMPLATES = {
    "mp3": "tone.mp3",  # 32 kbps mono
    "mp3-320": "tone-320k.mp3",  # 320 kbps stereo: a better copy of the same song
    "flac": "tone.flac",
    "ogg": "tone.ogg",
    "opus": "tone.opus",
    "m4a": "tone.m4a",
    "wma": "tone.wma",
    "wav": "tone.wav",
    "aiff": "tone.aiff",
    "mp4": "clip.mp4",  # H.264 + AAC video
}
WRITABLE_TAGS = ("artist", "title", "album", "albumartist", "track", "disc", "year", "genre")
VORBIS_NAMES = {"track": "tracknumber", "disc": "discnumber", "year": "date"}


def template_path(template_format: str) -> Path:
    try:
        return TEMPLATES_DIR / TEMPLATES[template_format]
    except KeyError:
        raise ValueError(
            f"no template for {template_format!r}; known: {', '.join(TEMPLATES)}"
        ) from None


def write_tagged(template_format: str, dest: Path, tags: dict[str, Any]) -> None:
    """Copy the template of `template_format` to `dest` and write `tags` (artist, title,
    album, albumartist, track, disc, year, genre; mp4 also series, season, episode)."""
    unknown = set(tags) - set(WRITABLE_TAGS) - {"series", "season", "episode"}
    if unknown:
        raise ValueError(f"cannot write tags {sorted(unknown)}")
    source = template_path(template_format)
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, dest)
    container, item = WRITERS[source.suffix]
    audio = container(dest)
    if audio.tags is None:
        audio.add_tags()
    for field, value in tags.items():
        if value is not None and value != "" and (key_value := item(field, value)):
            audio[key_value[0]] = key_value[1]
    audio.save()


def _id3_item(field: str, value: Any) -> tuple[str, Any] | None:
    if field not in ID3_KEYS:
        return None
    key = ID3_KEYS[field][0]
    return key, Frames[key](encoding=3, text=[str(value)])


def _vorbis_item(field: str, value: Any) -> tuple[str, Any] | None:
    if field not in WRITABLE_TAGS:
        return None
    return VORBIS_NAMES.get(field, field), [str(value)]


def _mp4_item(field: str, value: Any) -> tuple[str, Any]:
    key = MP4_KEYS[field][0]
    if field in ("track", "disc"):
        return key, [(int(value), 0)]
    return key, [int(value) if field in ("season", "episode") else str(value)]


def _asf_item(field: str, value: Any) -> tuple[str, Any] | None:
    return (ASF_KEYS[field][0], [str(value)]) if field in ASF_KEYS else None


Item = Callable[[str, Any], tuple[str, Any] | None]
# Each template's mutagen class by suffix, and how it stores a column: (key, value) or None.
WRITERS: dict[str, tuple[type[FileType], Item]] = {
    ".mp3": (MP3, _id3_item),
    ".wav": (WAVE, _id3_item),
    ".aiff": (AIFF, _id3_item),
    ".flac": (FLAC, _vorbis_item),
    ".ogg": (OggVorbis, _vorbis_item),
    ".opus": (OggOpus, _vorbis_item),
    ".m4a": (MP4, _mp4_item),
    ".mp4": (MP4, _mp4_item),
    ".wma": (ASF, _asf_item),
}

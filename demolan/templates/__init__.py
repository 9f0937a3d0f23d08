"""The media templates in this folder, and tagged copies of them by mutagen (`write_tagged`):
how the demo LAN and the tests make real media files without an encoder."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mutagen.aiff import AIFF
from mutagen.asf import ASF
from mutagen.flac import FLAC
from mutagen.id3 import ID3, Frames
from mutagen.mp4 import MP4
from mutagen.oggopus import OggOpus
from mutagen.oggvorbis import OggVorbis
from mutagen.wave import WAVE

from crawl_io.tags.fields import ASF_KEYS, ID3_KEYS, MP4_KEYS

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
    values = {k: v for k, v in tags.items() if v is not None and v != ""}
    suffix = source.suffix
    if suffix == ".mp3":
        _write_id3(dest, values, None)
    elif suffix in (".aiff", ".wav"):
        _write_id3(dest, values, AIFF if suffix == ".aiff" else WAVE)
    elif suffix in (".flac", ".ogg", ".opus"):
        _write_vorbis(dest, values, {".flac": FLAC, ".ogg": OggVorbis, ".opus": OggOpus}[suffix])
    elif suffix in (".m4a", ".mp4"):
        _write_mp4(dest, values)
    elif suffix == ".wma":
        _write_asf(dest, values)


def _write_id3(dest: Path, values: dict[str, Any], container: Callable[..., Any] | None) -> None:
    if container is None:
        tags = ID3()
    else:
        audio = container(dest)
        if audio.tags is None:
            audio.add_tags()
        tags = audio.tags
    for field, value in values.items():
        if field in ID3_KEYS:
            tags.add(Frames[ID3_KEYS[field][0]](encoding=3, text=[str(value)]))
    if container is None:
        tags.save(dest)
    else:
        audio.save()


def _write_vorbis(dest: Path, values: dict[str, Any], container: Callable[..., Any]) -> None:
    audio = container(dest)
    if audio.tags is None:
        audio.add_tags()
    names = {"track": "tracknumber", "disc": "discnumber", "year": "date"}
    for field, value in values.items():
        if field in WRITABLE_TAGS:
            audio[names.get(field, field)] = [str(value)]
    audio.save()


def _write_mp4(dest: Path, values: dict[str, Any]) -> None:
    audio = MP4(dest)
    if audio.tags is None:
        audio.add_tags()
    for field, value in values.items():
        key = MP4_KEYS[field][0]
        if field in ("track", "disc"):
            audio[key] = [(int(value), 0)]
        elif field in ("season", "episode"):
            audio[key] = [int(value)]
        else:
            audio[key] = [str(value)]
    audio.save()


def _write_asf(dest: Path, values: dict[str, Any]) -> None:
    audio = ASF(dest)
    for field, value in values.items():
        if field in ASF_KEYS:
            audio[ASF_KEYS[field][0]] = [str(value)]
    audio.save()

"""Helpers for tests that need real tagged media files (made from demolan/templates)."""

from __future__ import annotations

from pathlib import Path

from sharecrawl.demolan.templates import TEMPLATES, template_path, write_tagged

__all__ = ["TEMPLATES", "make_media", "template_path", "write_tagged"]


def make_media(path: str | Path, fmt: str = "mp3", **tags: object) -> Path:
    """Write a real `fmt` file (a key of TEMPLATES: 'mp3', 'flac', 'ogg', 'opus', 'm4a',
    'wma', 'wav', 'aiff', 'mp4', 'mp3-320') at `path` with the given tags (artist, title,
    album, albumartist, track, disc, year, genre), creating folders; returns the path.

    make_media(tmp_path / "share/song_01.mp3", artist="Madonna", title="Music")
    """
    path = Path(path)
    write_tagged(fmt, path, tags)
    return path

"""The demo LAN as local folders of tagged media (`build_lan`) and its changes between rounds
(`change_lan`). Every file and folder gets a distinct mtime, so no change hides behind an
equal timestamp and one seed builds the same LAN byte for byte."""

from __future__ import annotations

import itertools
import os
import random
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import mutagen

from sharecrawl.crawl_io.tags import read_tags
from sharecrawl.demolan.catalog import (
    CURATED_BY_ARTIST,
    FICTIONAL_PER_HOST,
    GENERIC_PER_HOST,
    HOST_PLAN,
    HOSTS,
    MADONNA_MUSIC_COPIES,
    MADONNA_MUSIC_TAGS,
    OTHER_FILES,
    VIDEOS,
    album_path,
    album_tags,
    fictional_albums,
)
from sharecrawl.demolan.cover_art import POSTER_SIZE, cover_jpeg, embed_cover
from sharecrawl.demolan.templates import write_tagged

OFFLINE_AT_STEP_3 = "katya-laptop"  # its folder moves to root/offline/ before round 3
BUILD_TIME = 1_700_000_000  # 2023-11-14 UTC: the built files' mtimes count up from here
STEP_TIME = {2: BUILD_TIME + 10_000_000, 3: BUILD_TIME + 20_000_000}


def _clock(start: int) -> Iterator[int]:
    """Distinct, increasing mtimes for everything written."""
    return itertools.count(start + 61, 61)


@dataclass(frozen=True)
class _Writer:
    hosts_dir: Path
    clock: Iterator[int]

    def media(self, host: str, share: str, path: str, fmt: str, tags: dict) -> Path:
        dest = self.hosts_dir / host / share / path
        write_tagged(fmt, dest, tags)
        _stamp(dest, self.clock)
        return dest

    def other(self, host: str, share: str, path: str, data: bytes) -> Path:
        dest = self.hosts_dir / host / share / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
        _stamp(dest, self.clock)
        return dest


def _stamp(path: Path, clock: Iterator[int]) -> None:
    t = next(clock)
    os.utime(path, (t, t))


def build_lan(root: Path, seed: int = 0) -> Path:
    """Write the demo LAN under `root` and return the path of its hosts file."""
    root = Path(root)
    hosts_dir = root / "hosts"
    for stale in (hosts_dir, root / "offline"):
        shutil.rmtree(stale, ignore_errors=True)
    rng = random.Random(seed)
    writer = _Writer(hosts_dir, _clock(BUILD_TIME))
    fictional = fictional_albums(rng, FICTIONAL_PER_HOST * len(HOSTS))
    every_song: list[dict] = []
    for index, host in enumerate(HOSTS):
        share, style, formats, curated = HOST_PLAN[host]
        albums = [CURATED_BY_ARTIST[a] for a in curated]
        albums += fictional[index * FICTIONAL_PER_HOST : (index + 1) * FICTIONAL_PER_HOST]
        for album in albums:
            fmt = rng.choice(formats)
            ext = _extension(fmt)
            for number in range(1, len(album.tracks) + 1):
                tags = album_tags(album, number)
                writer.media(host, share, album_path(style, album, number, ext), fmt, tags)
                every_song.append(tags)
            picture = "cover.jpg" if rng.random() < 0.5 else "folder.jpg"  # both are common
            folder = str(Path(album_path(style, album, 1, ext)).parent)
            writer.other(host, share, f"{folder}/{picture}", cover_jpeg(album.title))
    # Generic names whose song only the tags tell, some of them tags-poor (no album).
    for host in HOSTS:
        share, _, formats, _ = HOST_PLAN[host]
        for k in range(2, GENERIC_PER_HOST + 2):
            tags = dict(rng.choice(every_song))
            if rng.random() < 0.3:
                tags = {"artist": tags["artist"], "title": tags["title"]}
            fmt = rng.choice(formats)
            name = f"song_{k:02d}" if k % 2 else f"track{k:02d}"
            writer.media(host, "incoming", f"{name}.{_extension(fmt)}", fmt, tags)
    for host, share, path, fmt in MADONNA_MUSIC_COPIES:
        writer.media(host, share, path, fmt, MADONNA_MUSIC_TAGS)
    for host, share, path in VIDEOS:
        writer.media(host, share, path, "mp4", {})
        if path.startswith("Films/"):  # a film's poster in its tags, as MP4 taggers put it
            title = re.split(r"\.(?:19|20)\d\d\.", Path(path).name)[0].replace(".", " ")
            film = hosts_dir / host / share / path
            embed_cover(film, cover_jpeg(title, POSTER_SIZE))
            _stamp(film, writer.clock)
    for host, share, path, data in OTHER_FILES:
        writer.other(host, share, path, data)
    # The same album folder on two hosts, byte for byte (identical subtrees).
    nevermind = hosts_dir / "vasya-pc" / "music" / "Nirvana"
    shutil.copytree(nevermind, hosts_dir / "lab-nas" / "media" / "Nirvana")  # copy2 keeps mtimes
    _stamp_folders(hosts_dir, BUILD_TIME - 86_400)
    hosts_file = root / "hosts.txt"
    lines = ["# the demo LAN: one folder per host, its subfolders are its shares"]
    lines += [(hosts_dir / host).resolve().as_uri() for host in HOSTS]
    hosts_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return hosts_file


def _extension(fmt: str) -> str:
    return fmt.split("-")[0]  # 'mp3-320' is an mp3


def _stamp_folders(top: Path, start: int) -> None:
    """Give every folder a fixed mtime (deterministic; older than any file in it)."""
    folders = sorted(p for p in top.rglob("*") if p.is_dir())
    for i, folder in enumerate([top, *folders]):
        os.utime(folder, (start + i, start + i))


def change_lan(root: Path, step: int) -> list[str]:
    """Apply the changes made before round `step` (2 or 3; others change nothing) and say
    what changed. Step 2 adds files, retags one, deletes one; step 3 takes a host offline and
    adds a file elsewhere."""
    root = Path(root)
    hosts_dir = root / "hosts"
    if step not in STEP_TIME:
        return []
    clock = _clock(STEP_TIME[step])
    writer = _Writer(hosts_dir, clock)
    changes: list[str] = []

    def added(host: str, share: str, path: str, fmt: str, tags: dict) -> None:
        dest = writer.media(host, share, path, fmt, tags)
        if tags.get("album"):  # the new albums on the page's first screen have covers
            embed_cover(dest, cover_jpeg(tags["album"]))
            _stamp(dest, clock)
        _stamp(dest.parent, clock)
        what = f" ({tags['artist']} – {tags['title']})" if tags else ""
        changes.append(f"added {host}/{share}/{path}{what}")

    if step == 2:
        song = {"artist": "Земфира", "title": "Хочешь?", "album": "Прости меня моя любовь"}
        added("vasya-pc", "incoming", "song_90.mp3", "mp3", song | {"year": 2000, "genre": "Rock"})
        added("dorm5-srv", "video", "Lost/Season 6/Lost.S06E03.720p.mp4", "mp4", {})
        song = {"artist": "Massive Attack", "title": "Angel", "album": "Mezzanine", "track": 1}
        song |= {"year": 1998, "genre": "Trip Hop"}
        added("lab-nas", "media", "Massive Attack/1998 - Mezzanine/01.ogg", "ogg", song)
        changes.append(_retag(writer, clock))
        gone = hosts_dir / "vasya-pc" / "music" / "Кино" / "Группа крови" / "03 - Война.mp3"
        if gone.exists():
            gone.unlink()
            _stamp(gone.parent, clock)
            changes.append("deleted vasya-pc/music/Кино/Группа крови/03 - Война.mp3")
    elif step == 3:
        host_dir = hosts_dir / OFFLINE_AT_STEP_3
        if host_dir.exists():
            offline = root / "offline" / OFFLINE_AT_STEP_3
            offline.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(offline, ignore_errors=True)
            host_dir.rename(offline)
            changes.append(f"host {OFFLINE_AT_STEP_3} went offline")
        song = {"artist": "Madonna", "title": "Frozen", "album": "Ray of Light", "year": 1998}
        added("dorm5-srv", "music", "misc/song_02.mp3", "mp3-320", song | {"genre": "Pop"})
    return changes


RETAG_PATH = ("dorm5-srv", "music", "Мумий Тролль - Морская (1997)/track06")
RETAG_TITLE = "Владивосток 2000 (live)"


def _retag(writer: _Writer, clock: Iterator[int]) -> str:
    """Give one song a different title in place, keeping its audio and other tags."""
    host, share, stem = RETAG_PATH
    folder = writer.hosts_dir / host / share / Path(stem).parent
    target = next(folder.glob(Path(stem).name + ".*"))  # flac or mp3, as the seed chose
    with target.open("rb") as f:
        old_title = read_tags(f, target.name)["title"]
    audio = mutagen.File(target, easy=True)  # FLAC or EasyMP3: both take a 'title' key
    audio["title"] = [RETAG_TITLE]
    audio.save()
    _stamp(target, clock)
    relative = target.relative_to(writer.hosts_dir / host / share)
    return f"retagged {host}/{share}/{relative}: title {old_title!r} -> {RETAG_TITLE!r}"

"""What the demo LAN holds: its hosts and how each names its files, the albums (real ones the
demo searches for, fictional ones that fill the LAN), the videos and the other files."""

from __future__ import annotations

import random
from dataclasses import dataclass

HOSTS = ("vasya-pc", "dorm5-srv", "lab-nas", "katya-laptop")


@dataclass(frozen=True)
class Album:
    artist: str
    title: str
    year: int
    genre: str
    tracks: tuple[str, ...]
    various: tuple[str, ...] = ()  # per-track artists of a compilation


# artist | album | year | genre | tracks (; between), each "artist: title" on a compilation.
# A few tracks each; RETAG_PATH in demolan.lan needs the Мумий Тролль track06.
_CURATED = """
Madonna | Music | 2000 | Pop | Music; Impressive Instant; Runaway Lover
Мумий Тролль | Морская | 1997 | Rock | Новая луна апреля; Делай меня точно; Утекай; Забавы;
    Скорость; Владивосток 2000
Кино | Группа крови | 1988 | Rock | Группа крови; Закрой за мной дверь, я ухожу; Война
Земфира | Земфира | 1999 | Rock | Снег; Ромашки; Аривидерчи
Daft Punk | Discovery | 2001 | Electronic | One More Time; Aerodynamic; Digital Love
Radiohead | OK Computer | 1997 | Alternative | Airbag; Paranoid Android; Karma Police
Nirvana | Nevermind | 1991 | Grunge | Smells Like Teen Spirit; In Bloom; Lithium
Miles Davis | Kind of Blue | 1959 | Jazz | So What; Freddie Freeloader; Blue in Green
Various Artists | Дискотека 90-х | 1999 | Dance | Haddaway: What Is Love;
    Руки Вверх!: Крошка моя; Иванушки International: Тучи
"""


def _album(line: str) -> Album:
    artist, title, year, genre, tracks = (f.strip() for f in line.split("|"))
    songs = [t.strip().rpartition(": ") for t in tracks.split(";")]
    various = tuple(a for a, _, _ in songs) if artist == "Various Artists" else ()
    return Album(artist, title, int(year), genre, tuple(t for _, _, t in songs), various)


CURATED = tuple(_album(line) for line in _CURATED.replace("\n    ", " ").strip().splitlines())
CURATED_BY_ARTIST = {album.artist: album for album in CURATED}

# Fictional bands and songs fill the LAN up to a few hundred files.
WORDS_A = (
    "Velvet Silver Northern Hollow Electric Paper Quiet Crimson Wild Glass Midnight Golden "
    "Broken Lonely Neon Amber Frozen Distant"
).split()
WORDS_B = (
    "Harbor Lanterns Foxes Engines Rivers Orchard Pilots Comets Wolves Gardens Signals "
    "Tides Ravens Highways Mirrors Satellites Meadows Echoes"
).split()
GENRES = ("Rock", "Indie", "Pop", "Electronic", "Folk", "Metal", "Jazz", "Ambient")
RUSSIAN_WORDS = "Ветер Город Ночь Дорога Море Звезда Осень Река Огни Небо".split()

VIDEOS = (
    ("dorm5-srv", "video", "Lost/Season 6/Lost.S06E01.720p.mp4"),
    ("dorm5-srv", "video", "Lost/Season 6/Lost.S06E02.720p.mp4"),
    ("dorm5-srv", "video", "Films/The.Matrix.1999.1080p.mp4"),
    ("dorm5-srv", "video", "Films/Brat.1997.DVDRip.mp4"),
    ("katya-laptop", "video", "Friends.S01E01.The.One.Where.Monica.Gets.a.Roommate.mp4"),
    ("lab-nas", "media", "Lectures/Lost.S06E01.720p.mp4"),
)
OTHER_FILES = (
    ("vasya-pc", "docs", "readme.txt", b"Music for the dorm. Ask Vasya before deleting.\n"),
    ("vasya-pc", "docs", "Курсовая.doc", b"\xd0\xcf\x11\xe0 not really a document\n"),
    ("lab-nas", "media", "playlist.m3u", b"#EXTM3U\nNirvana/Nevermind/01.ogg\n"),
    ("dorm5-srv", "music", "desktop.ini", b"[.ShellClassInfo]\r\n"),
)


def album_tags(album: Album, number: int) -> dict:
    artist = album.various[number - 1] if album.various else album.artist
    return {
        "artist": artist,
        "title": album.tracks[number - 1],
        "album": album.title,
        "albumartist": album.artist,
        "track": number,
        "disc": 1,
        "year": album.year,
        "genre": album.genre,
    }


# The copies of one song the demo searches for ("madonna music"), as (host, share, path,
# template): different hosts, formats and qualities, and names that do not mention it.
MADONNA_MUSIC_COPIES = (
    ("vasya-pc", "incoming", "song_01.mp3", "mp3"),
    ("dorm5-srv", "music", "misc/song_01.mp3", "mp3-320"),
    ("katya-laptop", "music", "unsorted/song_01.flac", "flac"),
)
MADONNA_MUSIC_TAGS = album_tags(CURATED_BY_ARTIST["Madonna"], 1)


def fictional_albums(rng: random.Random, count: int) -> list[Album]:
    albums = []
    bands = rng.sample([f"{a} {b}" for a in WORDS_A for b in WORDS_B], count)
    for i, band in enumerate(bands):
        if i % 5 == 4:  # some Russian-named bands too
            band = f"{rng.choice(RUSSIAN_WORDS)} {rng.choice(RUSSIAN_WORDS).lower()}"
        n_tracks = rng.randint(8, 12)
        titles = tuple(
            f"{rng.choice(WORDS_A)} {rng.choice(WORDS_B)}"
            + (" (Live)" if rng.random() < 0.1 else "")
            for _ in range(n_tracks)
        )
        album_title = f"{rng.choice(WORDS_A)} {rng.choice(WORDS_B)}"
        albums.append(Album(band, album_title, rng.randint(1975, 2023), rng.choice(GENRES), titles))
    return albums


def _safe(name: str) -> str:
    return "".join("_" if c in '/\\:*?"<>|' else c for c in name).strip(". ")


# How each host names its albums: a realistic mix of descriptive and generic names.
ALBUM_PATHS = {
    "artist/album/NN - title": "{artist}/{album}/{number:02d} - {song}.{ext}",
    "artist - album (year)/trackNN": "{artist} - {album} ({year})/track{number:02d}.{ext}",
    "artist/year - album/NN": "{artist}/{year} - {album}/{number:02d}.{ext}",
    "artist/album/NN title": "{artist}/{album}/{number:02d} {song}.{ext}",
}


def album_path(style: str, album: Album, number: int, ext: str) -> str:
    return ALBUM_PATHS[style].format(
        artist=_safe(album.artist),
        album=_safe(album.title),
        song=_safe(album.tracks[number - 1]),
        year=album.year,
        number=number,
        ext=ext,
    )


# host | share | naming style | template formats to draw from | curated artists placed there
_HOST_PLAN = """
vasya-pc | music | artist/album/NN - title | mp3 | Nirvana, Кино, Madonna
dorm5-srv | music | artist - album (year)/trackNN | flac mp3-320 |
    Мумий Тролль, Daft Punk, Various Artists
lab-nas | media | artist/year - album/NN | ogg opus mp3 | Radiohead, Miles Davis, Мумий Тролль
katya-laptop | music | artist/album/NN title | m4a wma aiff wav | Земфира, Madonna
"""
HOST_PLAN = {
    host: (share, style, tuple(formats.split()), tuple(a.strip() for a in artists.split(",")))
    for host, share, style, formats, artists in (
        (f.strip() for f in line.split("|"))
        for line in _HOST_PLAN.replace("|\n    ", "| ").strip().splitlines()
    )
}
FICTIONAL_PER_HOST = 5
GENERIC_PER_HOST = 8  # song_NN / trackNN files in each host's incoming share

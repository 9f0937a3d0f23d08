"""An untagged song whose file name reads `Artist - Title` (or `NN. Artist - Title`, or
`Artist - Album - NN - Title`) is known by that artist and title, marked as from its name,
found by field and grouped with tagged copies of the same song."""

from __future__ import annotations

import pytest

from sharecrawl.crawl_io.tags import read_tags
from tests.conftest import LAN
from tests.media import make_media


@pytest.mark.parametrize(
    ("name", "artist", "title", "album", "track"),
    [
        ("Daft Punk - One More Time.mp3", "Daft Punk", "One More Time", None, None),
        ("03. Radiohead - Karma Police.mp3", "Radiohead", "Karma Police", None, 3),
        ("01 - Madonna - Frozen.mp3", "Madonna", "Frozen", None, 1),
        ("Pink Floyd - The Wall - 05 - Hey You.mp3", "Pink Floyd", "Hey You", "The Wall", 5),
        ("Земфира – Хочешь.mp3", "Земфира", "Хочешь", None, None),
        ("track01.mp3", None, None, None, None),
        ("A - B - C.mp3", None, None, None, None),  # which one is the artist? no guess
    ],
)
def test_an_untagged_name_gives_artist_and_title(tmp_path, name, artist, title, album, track):
    path = make_media(tmp_path / name)  # real mp3 frames, no tags
    with path.open("rb") as f:
        row = read_tags(f, name)
    assert (row["artist"], row["title"], row["album"], row["track"]) == (
        artist,
        title,
        album,
        track,
    )
    assert row["tag_source"] == ("name" if artist else None)


def test_tags_win_over_the_name(tmp_path) -> None:
    name = "Daft Punk - One More Time.mp3"
    path = make_media(tmp_path / name, artist="Stardust", title="Music Sounds Better")
    with path.open("rb") as f:
        row = read_tags(f, name)
    assert (row["artist"], row["title"], row["tag_source"]) == (
        "Stardust",
        "Music Sounds Better",
        "tags",
    )


def test_a_named_song_is_found_by_field_and_grouped_with_its_tagged_copy(
    lan: LAN, run_json
) -> None:
    lan.media("alpha", "Music/Daft Punk - One More Time.mp3")
    lan.media("alpha", "Music/radiohead - karma police.ogg", "ogg")
    lan.media("beta", "Tagged/track07.ogg", "ogg", artist="Radiohead", title="Karma Police")
    lan.write_hosts("alpha", "beta")
    lan.crawl()
    [daft] = run_json(lan, "search", "artist:daft punk")
    assert (daft["artist"], daft["title"]) == ("Daft Punk", "One More Time")
    [karma] = run_json(lan, "search", "karma police")
    assert (karma["copies"], karma["hosts"]) == (2, 2)  # one work: tagged and named copies
    rows = run_json(lan, "sql", "SELECT share, path, tag_source FROM media ORDER BY path")
    assert [tuple(row.values()) for row in rows] == [
        ("Music", "Daft Punk - One More Time.mp3", "name"),
        ("Music", "radiohead - karma police.ogg", "name"),
        ("Tagged", "track07.ogg", "tags"),
    ]

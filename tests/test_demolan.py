"""The demo LAN: the promised hosts, shares and tagged files, deterministic, and its changes."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from sharecrawl.crawl_io.connect import open_source
from sharecrawl.crawl_io.mediatypes import media_kind
from sharecrawl.crawl_io.rangefile import RangeFile
from sharecrawl.crawl_io.sources import HostUnreachable, read_hosts_file
from sharecrawl.crawl_io.tags import read_tags
from sharecrawl.demolan.catalog import HOSTS, MADONNA_MUSIC_COPIES
from sharecrawl.demolan.lan import OFFLINE_AT_STEP_3, RETAG_TITLE, build_lan, change_lan


@pytest.fixture(scope="module")
def lan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("lan")
    build_lan(root, seed=0)
    return root


def files_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder by relative path: (size, mtime in ns)."""
    return {
        str(p.relative_to(folder)): (p.stat().st_size if p.is_file() else 0, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
    }


def tags_via_source(root: Path, host: str, share: str, path: str) -> dict:
    """Read tags as the crawler does: RangeFile over the host's file:// source."""
    url = next(h for h in read_hosts_file(root / "hosts.txt") if h.host == host)
    source = open_source(url)
    try:
        size = (root / "hosts" / host / share / path).stat().st_size
        return read_tags(RangeFile(source, share, path, size), path)
    finally:
        source.close()


def test_hosts_file_names_every_host_folder(lan: Path) -> None:
    hosts = read_hosts_file(lan / "hosts.txt")
    assert [h.host for h in hosts] == list(HOSTS)
    for h in hosts:
        assert h.scheme == "file" and Path(h.hostname) == (lan / "hosts" / h.host).resolve()
        source = open_source(h)
        try:
            shares = source.shares()
        finally:
            source.close()
        assert "incoming" in shares and len(shares) >= 2, (h.host, shares)


def test_hundreds_of_tagged_media_files_and_some_others(lan: Path) -> None:
    files = files_under(lan / "hosts")
    kinds = Counter(media_kind(p.name) for p in files)
    assert 250 <= kinds["audio"] <= 300
    assert kinds["video"] >= 4
    assert kinds[None] >= 2  # readme.txt, cover.jpg, ...
    formats = Counter(p.suffix for p in files if media_kind(p.name) == "audio")
    assert set(formats) >= {".mp3", ".flac", ".ogg", ".opus", ".m4a", ".wma", ".wav", ".aiff"}
    untagged = [
        p for p in files if media_kind(p.name) == "audio" and read_tags_local(p)["tag_error"]
    ]
    assert not untagged


def read_tags_local(path: Path) -> dict:
    with path.open("rb") as f:
        return read_tags(f, path.name)


def test_generic_names_are_named_only_by_their_tags(lan: Path) -> None:
    generic = [
        p
        for p in files_under(lan / "hosts")
        if media_kind(p.name) == "audio" and p.stem.startswith(("song_", "track"))
    ]
    assert len(generic) >= 20
    for path in generic:
        row = read_tags_local(path)
        assert row["artist"] and row["title"], path
        assert row["title"].lower() not in path.name.lower(), path


def test_madonna_music_copies_on_three_hosts_read_back(lan: Path) -> None:
    seen = []
    for host, share, path, _ in MADONNA_MUSIC_COPIES:
        row = tags_via_source(lan, host, share, path)
        assert (row["artist"], row["title"], row["tag_error"]) == ("Madonna", "Music", None)
        seen.append((host, row["format"], row["bitrate_kbps"]))
    assert len({host for host, _, _ in seen}) == 3
    assert len({(fmt, rate) for _, fmt, rate in seen}) == 3  # different formats or qualities


def test_cyrillic_artists_and_videos(lan: Path) -> None:
    artists = {read_tags_local(p)["artist"] for p in (lan / "hosts").rglob("*.mp3")}
    assert {"Кино", "Madonna"} <= artists
    troll = next((lan / "hosts" / "dorm5-srv" / "music").glob("Мумий Тролль*/track01.*"))
    assert read_tags_local(troll)["artist"] == "Мумий Тролль"
    lost = tags_via_source(lan, "dorm5-srv", "video", "Lost/Season 6/Lost.S06E02.720p.mp4")
    assert (lost["series"], lost["season"], lost["episode"]) == ("Lost", 6, 2)
    matrix = tags_via_source(lan, "dorm5-srv", "video", "Films/The.Matrix.1999.1080p.mp4")
    assert (matrix["title"], matrix["year"]) == ("The Matrix", 1999)


def test_an_album_is_copied_whole_to_another_host(lan: Path) -> None:
    one = snapshot(lan / "hosts" / "vasya-pc" / "music" / "Nirvana")
    other = snapshot(lan / "hosts" / "lab-nas" / "media" / "Nirvana")
    files = {k: v for k, v in one.items() if v[0]}
    assert files and files == {k: v for k, v in other.items() if v[0]}


def test_mtimes_are_distinct_and_the_build_is_deterministic(lan: Path, tmp_path: Path) -> None:
    first = snapshot(lan / "hosts")
    file_mtimes = [
        mtime
        for path, (_, mtime) in first.items()
        if (lan / "hosts" / path).is_file() and "/lab-nas/media/Nirvana/" not in f"/{path}"
    ]
    assert len(file_mtimes) == len(set(file_mtimes))
    build_lan(tmp_path / "again", seed=0)
    assert snapshot(tmp_path / "again" / "hosts") == first
    for a, b in zip(
        files_under(lan / "hosts"), files_under(tmp_path / "again" / "hosts"), strict=True
    ):
        assert a.read_bytes() == b.read_bytes()
    build_lan(tmp_path / "other", seed=1)
    assert snapshot(tmp_path / "other" / "hosts") != first


def test_change_steps_do_what_they_say(tmp_path: Path) -> None:
    root = tmp_path / "lan"
    build_lan(root, seed=3)
    hosts = root / "hosts"
    assert change_lan(root, 1) == []
    before = snapshot(hosts)

    changes = change_lan(root, 2)
    after = snapshot(hosts)
    added = set(after) - set(before)
    deleted = set(before) - set(after)
    modified = {p for p in set(after) & set(before) if after[p] != before[p]}
    assert sum(c.startswith("added") for c in changes) == 3
    assert any(c.startswith("retagged") for c in changes)
    assert any(c.startswith("deleted") for c in changes)
    added_files = {p for p in added if (hosts / p).is_file()}
    assert len(added_files) == 3
    assert all(f"{p}" in " ".join(changes) for p in added_files)
    assert deleted == {"vasya-pc/music/Кино/Группа крови/03 - Война.mp3"}
    retagged = [p for p in modified if (hosts / p).is_file()]
    assert len(retagged) == 1
    assert read_tags_local(hosts / retagged[0])["title"] == RETAG_TITLE
    assert after[retagged[0]][1] > max(mtime for _, mtime in before.values())
    # every folder that gained or lost a file shows a new mtime
    for path in added_files | deleted:
        parent = str(Path(path).parent)
        assert parent in added or after[parent] != before[parent], parent
    mtimes = [mtime for p, (_, mtime) in after.items() if p in added_files or p in retagged]
    assert len(mtimes) == len(set(mtimes))

    changes = change_lan(root, 3)
    assert f"host {OFFLINE_AT_STEP_3} went offline" in changes
    assert not (hosts / OFFLINE_AT_STEP_3).exists()
    assert (root / "offline" / OFFLINE_AT_STEP_3 / "music").is_dir()
    url = next(h for h in read_hosts_file(root / "hosts.txt") if h.host == OFFLINE_AT_STEP_3)
    with pytest.raises(HostUnreachable):
        open_source(url)
    new = hosts / "dorm5-srv" / "music" / "misc" / "song_02.mp3"
    assert read_tags_local(new)["artist"] == "Madonna"
    assert any("song_02.mp3" in c for c in changes)


def test_build_replaces_a_previous_lan(tmp_path: Path) -> None:
    build_lan(tmp_path, seed=0)
    change_lan(tmp_path, 2)
    change_lan(tmp_path, 3)
    build_lan(tmp_path, seed=0)
    assert (tmp_path / "hosts" / OFFLINE_AT_STEP_3).is_dir()
    assert not (tmp_path / "offline").exists()
    assert not os.path.exists(tmp_path / "hosts" / "vasya-pc" / "incoming" / "song_90.mp3")

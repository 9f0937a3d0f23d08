"""The rounds' scrub: each round verifies the SHA-256 of a slice of the parts it links forward
(`scrub_mb_per_round`, going on where the last round stopped) and mends a damaged one as
`check --repair` does: restored from another version's separate copy, else dropped, its
partitions listed again when its host is next online. Real rounds over file:// hosts and a
real smbd host, real parts damaged on disk."""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir
from sharecrawl.crawl_io.crawldb.host_parts import ROW_TABLES, part_file
from sharecrawl.crawl_io.crawldb.scrub import (
    MIB,
    RECORD_NAME,
    ScrubRecord,
    read_record,
    scrub_line,
    scrub_slice,
)
from sharecrawl.crawl_io.crawldb.version_manifest import PartEntry, read_manifest
from sharecrawl.crawl_io.schema import MEDIA
from sharecrawl.queries.round_metrics import SCRUB_COUNTS
from tests.conftest import LAN
from tests.media import make_media
from tests.smbd import SmbServer, make_base_dir
from tests.test_integrity import FILE_COLUMNS, flip_byte_in_a_page, rows, run
from tests.test_metrics import samples
from tests.test_pipeline import build
from tests.test_repair import fetched, flip_a_page_byte, offline, online

# a media row as a crawl finds it; when it was first seen and tagged is the crawl's history,
# which a dropped part loses with its rows
MEDIA_COLUMNS = [n for n in MEDIA.names if n not in ("tagged_at", "first_seen", "last_changed")]


def entries(**sizes: int) -> dict[str, PartEntry]:
    return {name: PartEntry(size, bytes(32)) for name, size in sizes.items()}


def test_a_slice_goes_on_in_name_order_from_the_last_part_and_wraps_round() -> None:
    parts = entries(a=10, b=20, c=30, d=5)
    assert scrub_slice(parts, None, 35) == ["a", "b"]
    assert scrub_slice(parts, "b", 35) == ["c", "d"]
    assert scrub_slice(parts, "d", 35) == ["a", "b"]  # round again
    assert scrub_slice(parts, "a", 1) == ["b"]  # one part bigger than the budget: alone
    assert scrub_slice(parts, "c", 1000) == ["d", "a", "b", "c"]  # each at most once
    assert scrub_slice(parts, "bb", 20) == ["c"]  # a part gone since: the next name on
    assert scrub_slice(parts, None, 0) == []  # scrub off
    assert scrub_slice({}, "a", 35) == []


def test_the_rounds_line_says_what_was_mended_and_nothing_when_all_was_well() -> None:
    assert scrub_line(7, ScrubRecord(parts_verified=40, bytes_verified=1 << 26)) is None
    mended = [
        {"part": "media/nyx.parquet", "restored_from": "v000003", "dropped": False},
        {"part": "files/nyx%40home@2.parquet", "restored_from": None, "dropped": True},
        {"part": "folders/zed.parquet", "restored_from": None, "dropped": True},
        {"part": "prefix_stats/zed.parquet", "restored_from": None, "dropped": True},
    ]
    record = ScrubRecord(damaged=4, restored=1, dropped=3, mended=mended)
    assert scrub_line(7, record) == (
        "sharecrawl: round 7: scrub: 4 damaged parts mended (1 restored from v000003, "
        "2 dropped: their partitions are listed again when nyx@home and zed are next online, "
        "1 dropped: host zed's statistics are computed again by the next round)"
    )


def smb_lan(lan: LAN, smbd_factory: Callable[..., SmbServer]) -> SmbServer:
    """alpha and beta (file://, tests.test_pipeline.build) and a Samba server's media share."""
    build(lan)
    root = make_base_dir() / "tree"
    make_media(root / "media/Kino/track01.ogg", "ogg", artist="Kino", title="Kukushka")
    make_media(root / "media/Kino/track02.mp3", artist="Kino", title="Gruppa krovi")
    (root / "media/Kino/cover.txt").write_text("not media")
    (root / "private").mkdir(parents=True)
    server = smbd_factory(root_dir=root)
    lan.hosts_file.write_text(
        f"file://{lan.host('alpha')}\nfile://{lan.host('beta')}\n{server.url}/media\n"
    )
    return server


def carried_parts(crawl: CrawlDir, version: int) -> dict[str, PartEntry]:
    """The files, media and folders parts of a version: what an unchanged round links."""
    manifest = read_manifest(crawl.version_dir(version)) or {}
    return {r: e for r, e in manifest.items() if r.partition("/")[0] in ROW_TABLES}


def by_host(found: list[dict]) -> dict[str, int]:
    return dict(sorted(Counter(r["host"] for r in found).items()))


@pytest.mark.smb
def test_two_damaged_parts_are_mended_within_three_rounds_and_the_crawl_is_whole_again(
    lan: LAN, smbd_factory: Callable[..., SmbServer], luigi_cfg, run_json, capsys
) -> None:
    server = smb_lan(lan, smbd_factory)
    smb = f"127.0.0.1:{server.port}"
    lan.crawl(rounds=2)
    crawl = CrawlDir(lan.crawl_dir)
    files = rows(crawl, 2, "files", FILE_COLUMNS)
    media = rows(crawl, 2, "media", MEDIA_COLUMNS)
    # the crawl that was never damaged (a folder's row included)
    assert by_host(files) == {smb: 4, "alpha": 4, "beta": 4}
    assert by_host(media) == {smb: 2, "alpha": 3, "beta": 2}
    assert [r["path"] for r in files if r["host"] == smb] == [
        "Kino",
        "Kino/cover.txt",
        "Kino/track01.ogg",
        "Kino/track02.mp3",
    ]
    v1, v2 = crawl.version_dir(1), crawl.version_dir(2)
    online_rel, offline_rel = f"media/{part_file(smb)}", "files/alpha.parquet"
    # round 1's copy of the online host's part made a file of its own (a backup restored
    # into place): the scrub can restore from it; the offline host's part has no such copy
    copy = v1 / "media" / ".copy"
    shutil.copyfile(v1 / online_rel, copy)
    os.replace(copy, v1 / online_rel)
    for rel in (online_rel, offline_rel):
        flip_byte_in_a_page(v2 / rel)
    code, out, _ = run(lan, capsys, "check")
    assert code == 1 and len(out.splitlines()) == 2

    carried = carried_parts(crawl, 2)
    assert len(carried) == 9  # three hosts' files, media and folders parts
    # a third of the parts' bytes, and room for the biggest: three rounds cover them all
    sizes = [e.size for e in carried.values()]
    budget = sum(sizes) // 3 + max(sizes)
    luigi_cfg(f"[sharecrawl]\nscrub_mb_per_round = {budget / MIB!r}\n")
    offline(lan, "alpha")
    records, lines = [], []
    for round_ in (3, 4, 5):
        code, _, err = run(lan, capsys, "crawl")
        assert code == 0, err
        record = read_record(crawl.segment_dir(round_))
        assert record is not None and record.budget_bytes == budget
        assert 0 < record.parts_verified < len(carried)  # a slice, not every part
        assert record.bytes_verified <= budget
        records.append(record)
        counted = samples((lan.crawl_dir / "metrics.prom").read_text())
        assert counted[("sharecrawl_scrub", (("count", "damaged"),))] == record.damaged
        lines += [line for line in err.splitlines() if ": scrub: " in line]
        found = sum(r.damaged for r in records)
        code, out, _ = run(lan, capsys, "check")
        assert (code == 0) == (found == 2), out  # passes after the round that mended the last
    assert len({r.last for r in records}) == 3  # each round went on where the last stopped
    mends = [m for r in records for m in r.mended]
    assert sorted((m["part"], m["restored_from"], m["dropped"]) for m in mends) == [
        (offline_rel, None, True),
        (online_rel, "v000001", False),
    ]
    rounds_of = {m["part"]: n for n, r in zip((3, 4, 5), records, strict=True) for m in r.mended}
    restored = "1 restored from v000001"
    dropped = "1 dropped: its partitions are listed again when alpha is next online"
    if (n := rounds_of[online_rel]) == rounds_of[offline_rel]:
        expected = [f"sharecrawl: round {n}: scrub: 2 damaged parts mended ({restored}, {dropped})"]
    else:
        expected = [
            f"sharecrawl: round {rounds_of[offline_rel]}: scrub: 1 damaged part mended ({dropped})",
            f"sharecrawl: round {rounds_of[online_rel]}: scrub: 1 damaged part mended ({restored})",
        ]
    assert sorted(lines) == sorted(expected)
    # mended in the version it was found in, as `check --repair` mends: restored by a link to
    # the separate copy, dropped into damaged/ (never deleted)
    found_in = crawl.version_dir(rounds_of[online_rel] - 1)
    assert (found_in / online_rel).stat().st_ino == (v1 / online_rel).stat().st_ino
    assert list((lan.crawl_dir / "damaged").rglob("alpha.parquet"))
    assert not list(crawl.version_dir(5).glob("*/alpha.parquet"))  # nothing of alpha linked
    alpha = [p for p in crawl.read(5, "partitions").to_pylist() if p["host"] == "alpha"]
    assert alpha and all(p["hash"] is None for p in alpha)  # to be listed again as new
    status = run_json(lan, "status")["scrub"]
    assert status["parts_verified"] == records[-1].parts_verified
    assert set(status) >= {"parts_verified", "bytes_verified", "damaged", "restored", "dropped"}

    online(lan, "alpha")
    lan.crawl()
    assert fetched(crawl, 6) == {"alpha": "new", "beta": "unchanged", smb: "unchanged"}
    assert rows(crawl, 6, "files", FILE_COLUMNS) == files
    assert rows(crawl, 6, "media", MEDIA_COLUMNS) == media
    assert run(lan, capsys, "check")[0] == 0


def test_a_round_with_the_scrub_off_verifies_nothing(lan: LAN, luigi_cfg, run_json, capsys) -> None:
    build(lan)
    lan.crawl(rounds=2)
    crawl = CrawlDir(lan.crawl_dir)
    part = crawl.version_dir(2) / "media" / "beta.parquet"
    flip_byte_in_a_page(part)
    luigi_cfg("[sharecrawl]\nscrub_mb_per_round = 0\n")
    code, _, err = run(lan, capsys, "crawl")
    assert code == 0 and ": scrub: " not in err
    record = read_record(crawl.segment_dir(3))
    assert record is not None
    assert (record.parts_verified, record.bytes_verified, record.damaged) == (0, 0, 0)
    scrub = run_json(lan, "status")["scrub"]
    assert (scrub["parts_verified"], scrub["bytes_verified"], scrub["damaged"]) == (0, 0, 0)
    # carried forward unseen, as before there was a scrub: `check` names it
    code, out, _ = run(lan, capsys, "check")
    assert code == 1
    assert out.splitlines() == [
        f"{crawl.version_dir(3) / 'media/beta.parquet'}: checksum mismatch (its bytes changed "
        "since it was written)"
    ]


def test_an_unchanged_round_verifies_and_records_its_slice(lan: LAN, run_json) -> None:
    build(lan)
    lan.crawl(rounds=2)
    crawl = CrawlDir(lan.crawl_dir)
    carried = carried_parts(crawl, 1)
    record = json.loads((crawl.segment_dir(2) / RECORD_NAME).read_text())
    # the default budget holds every part of this small crawl: all verified, none damaged
    assert record["parts_verified"] == len(carried) == 6
    assert record["bytes_verified"] == sum(e.size for e in carried.values())
    assert (record["damaged"], record["restored"], record["dropped"]) == (0, 0, 0)
    assert record["last"] == "media/beta.parquet"
    assert record["budget_bytes"] == 64 * MIB
    first = read_record(crawl.segment_dir(1))
    assert first is not None and first.parts_verified == 0  # round 1 linked nothing
    assert run_json(lan, "status")["scrub"]["parts_verified"] == 6


def test_a_scrub_record_that_does_not_parse_starts_the_rotation_over(tmp_path: Path) -> None:
    (tmp_path / RECORD_NAME).write_text("{garbled")
    assert read_record(tmp_path) is None
    assert read_record(tmp_path / "absent") is None


def test_a_part_a_round_cannot_read_is_mended_and_the_round_goes_on(
    lan: LAN, luigi_cfg, capsys
) -> None:
    build(lan)
    lan.crawl(rounds=2)
    crawl = CrawlDir(lan.crawl_dir)
    files = rows(crawl, 2, "files", FILE_COLUMNS)
    flip_byte_in_a_page(crawl.version_dir(2) / "files/beta.parquet")
    # no scrub, and a round whose statistics read every host's parts: beta's fails to read
    luigi_cfg("[sharecrawl]\nscrub_mb_per_round = 0\nstats_every = 1\n")
    code, _, err = run(lan, capsys, "crawl")
    assert code == 0, err
    assert "Traceback" not in err
    assert [line for line in err.splitlines() if ": scrub: " in line] == [
        "sharecrawl: round 3: scrub: 1 damaged part mended (1 dropped: its partitions are "
        "listed again when beta is next online)"
    ]
    record = read_record(crawl.segment_dir(3))
    assert record is not None
    assert (record.damaged, record.restored, record.dropped) == (1, 0, 1)
    assert [m["part"] for m in record.mended] == ["files/beta.parquet"]
    counted = samples((lan.crawl_dir / "metrics.prom").read_text())  # monitoring sees it
    assert {c: counted[("sharecrawl_scrub", (("count", c),))] for c in SCRUB_COUNTS[2:]} == {
        "damaged": 1,
        "restored": 0,
        "dropped": 1,
    }
    assert run(lan, capsys, "check")[0] == 0
    lan.crawl()
    assert fetched(crawl, 4) == {"alpha": "unchanged", "beta": "new"}
    assert rows(crawl, 4, "files", FILE_COLUMNS) == files
    assert by_host(files) == {"alpha": 4, "beta": 4}
    assert run(lan, capsys, "check")[0] == 0


def test_a_media_part_the_index_cannot_read_is_mended_and_the_index_built(
    lan: LAN, luigi_cfg, run_json, capsys
) -> None:
    build(lan)
    lan.crawl(rounds=2)
    crawl = CrawlDir(lan.crawl_dir)
    media = rows(crawl, 2, "media", MEDIA_COLUMNS)
    flip_a_page_byte(crawl.version_dir(2) / "media/beta.parquet")
    # no scrub, and an index built in full every round: beta's media part fails to read
    luigi_cfg("[sharecrawl]\nscrub_mb_per_round = 0\n[Index]\nfull_every = 1\n")
    code, _, err = run(lan, capsys, "crawl")
    assert code == 0, err
    assert [line for line in err.splitlines() if ": scrub: " in line] == [
        "sharecrawl: round 3: scrub: 1 damaged part mended (1 dropped: its partitions are "
        "listed again when beta is next online)"
    ]
    assert run(lan, capsys, "check")[0] == 0
    assert sorted(r["title"] for r in run_json(lan, "search", "queen")) == ["Headlong", "Innuendo"]
    lan.crawl()
    assert fetched(crawl, 4) == {"alpha": "unchanged", "beta": "new"}
    assert rows(crawl, 4, "media", MEDIA_COLUMNS) == media
    assert by_host(media) == {"alpha": 3, "beta": 2}
    assert run_json(lan, "search", "army", "of", "me")[0]["hosts"] == 1  # beta's, indexed again


def test_a_negative_scrub_budget_is_bad_input(lan: LAN, luigi_cfg, capsys) -> None:
    lan.media("alpha", "music/song.mp3", artist="Madonna", title="Music")
    lan.write_hosts("alpha")
    luigi_cfg("[sharecrawl]\nscrub_mb_per_round = -1\n")
    code, _, err = run(lan, capsys, "crawl")
    assert code == 2
    assert err.splitlines() == [
        "sharecrawl: error: [sharecrawl] scrub_mb_per_round (luigi.cfg or LUIGI_CONFIG_PATH) "
        "must be at least 0, not -1"
    ]
    assert not lan.crawl_dir.exists()

"""The record of a version's media changes (crawl_io.crawldb.media_changes): Update writes what a
round changed in the media rows, the index updates from it without reading those parts, and
falls back to comparing parts wherever the record does not cover them, giving the same
index as a full build either way."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from sharecrawl.crawl_io.crawldb.host_parts import changed_parts
from sharecrawl.crawl_io.crawldb.media_changes import (
    ACCOUNTS_KEY,
    FILE_NAME,
    INDEXED_COLUMNS,
    SCHEMA,
)
from sharecrawl.queries.index import build_index, update_index
from tests.conftest import LAN
from tests.test_index_update import table_rows


def two_rounds(lan: LAN) -> tuple[Path, Path]:
    """Two real rounds over three hosts; between them one host's file is retagged, a file
    added, a folder moved and a folder deleted, and another host gains a file."""
    for i in range(3):
        lan.media("alpha", f"music/Album {i}/track{i}.mp3", artist="Kino", title=f"song {i}")
        lan.media("alpha", f"old/Box {i}/take{i}.ogg", "ogg", artist="Aria", title=f"take {i}")
        lan.media("gamma", f"films/Set {i}/clip{i}.mp3", artist="Nautilus", title=f"clip {i}")
    lan.media("beta", "share/x/song_01.ogg", "ogg", artist="Kino", title="Kukushka")
    lan.write_hosts("alpha", "beta", "gamma")
    lan.crawl()
    lan.media("alpha", "music/Album 0/track0.mp3", artist="Kino", title="remastered")
    lan.media("alpha", "music/Album 1/bonus.mp3", artist="Kino", title="bonus")
    shutil.move(lan.host("alpha") / "old/Box 1", lan.host("alpha") / "music/Moved")
    shutil.rmtree(lan.host("alpha") / "old/Box 2")
    lan.media("beta", "share/y/new.mp3", artist="Aria", title="Bespechny angel")
    lan.crawl()
    crawldb = lan.crawl_dir / "crawldb"
    return crawldb / "v000001", crawldb / "v000002"


def media_by_path(version: Path) -> dict[tuple, tuple]:
    table = pq.read_table(version / "media", columns=list(INDEXED_COLUMNS))
    return {(r[0], r[1], r[2]): r for r in zip(*table.to_pydict().values(), strict=True)}


def updated(tmp_path: Path, old: Path, new: Path) -> tuple[Path, object]:
    """The index of `old` brought to `new`, and the update's counts."""
    index = tmp_path / "updated.duckdb"
    index.unlink(missing_ok=True)
    build_index(old, index)
    return index, update_index(index, old, new)


def full(tmp_path: Path, version: Path) -> Path:
    index = tmp_path / "full.duckdb"
    if not index.exists():
        build_index(version, index)
    return index


def rewrite_record(version: Path, rows: pa.Table, record: dict) -> None:
    """Replace a version's record (a test standing in for a damaged or odd one)."""
    meta = {ACCOUNTS_KEY: json.dumps(record).encode()}
    pq.write_table(rows.replace_schema_metadata(meta), version / FILE_NAME)


def test_update_records_exactly_what_changed_and_the_index_reads_only_that(
    lan: LAN, tmp_path: Path
) -> None:
    v1, v2 = two_rounds(lan)
    assert not (v1 / FILE_NAME).exists()  # the first version has nothing to compare with
    before, after = media_by_path(v1), media_by_path(v2)
    changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    assert len(changed) == 6  # retagged, added, moved (away and in), deleted; beta: added
    record = pq.read_table(v2 / FILE_NAME)
    assert record.schema.remove_metadata().equals(SCHEMA)
    rows = record.to_pylist()
    gone = {(r["host"], r["share"], r["path"]) for r in rows if not r["came"]}
    came = {(r["host"], r["share"], r["path"]): r for r in rows if r["came"]}
    assert gone == changed
    assert {p: tuple(r[c] for c in INDEXED_COLUMNS) for p, r in came.items()} == {
        p: after[p] for p in changed if p in after
    }
    accounts = json.loads(pq.read_metadata(v2 / FILE_NAME).metadata[ACCOUNTS_KEY])
    assert accounts["base"] == "v000001"
    assert set(accounts["hosts"]) == {"alpha", "beta"}  # gamma did not change: linked

    diff = changed_parts(v1, v2, "media")
    index, counts = updated(tmp_path, v1, v2)
    assert counts.parts == len(diff.removed) + len(diff.added) > 0
    assert counts.parts_read == 0 and counts.paths == len(changed)
    assert table_rows(index) == table_rows(full(tmp_path, v2))


def test_without_a_record_it_can_use_the_parts_are_compared_alike(lan: LAN, tmp_path: Path) -> None:
    v1, v2 = two_rounds(lan)
    diff = changed_parts(v1, v2, "media")
    parts = len(diff.removed) + len(diff.added)
    expected = table_rows(full(tmp_path, v2))
    rows = pq.read_table(v2 / FILE_NAME)
    accounts = json.loads(pq.read_metadata(v2 / FILE_NAME).metadata[ACCOUNTS_KEY])
    original = (v2 / FILE_NAME).read_bytes()

    def update_reads(parts_read: int) -> None:
        index, counts = updated(tmp_path, v1, v2)
        assert counts.parts == parts and counts.parts_read == parts_read
        assert table_rows(index) == expected

    (v2 / FILE_NAME).write_bytes(original[: len(original) // 2])  # damaged
    update_reads(parts)
    (v2 / FILE_NAME).unlink()  # moved aside by check --repair
    update_reads(parts)
    rewrite_record(v2, rows, accounts | {"base": "v000000"})  # made from another version
    update_reads(parts)
    rewrite_record(v2, rows, {"base": "v000001", "hosts": ["alpha"]})  # a footer gone wrong
    update_reads(parts)
    # a part of beta's not accounted for (as when one of its groups did not link): beta's
    # parts are compared, alpha's taken from the record
    beta = {p for p in diff.removed + diff.added if p.name.startswith("beta")}
    assert beta
    short = json.loads(json.dumps(accounts))
    short["hosts"]["beta"]["new"] = []
    rewrite_record(v2, rows, short)
    update_reads(len(beta))
    # a path recorded that did not change (tags read again to the same values) changes nothing
    unchanged = pq.read_table(v2 / "media" / "gamma.parquet", columns=list(INDEXED_COLUMNS))
    again = unchanged.slice(0, 1).append_column("came", pa.array([True]))
    path = again.select(["host", "share", "path"]).to_pylist()[0]
    gone = pa.Table.from_pylist([{**dict.fromkeys(SCHEMA.names), **path, "came": False}], SCHEMA)
    more = json.loads(json.dumps(accounts))
    more["hosts"]["gamma"] = {"old": [], "new": []}
    rewrite_record(v2, pa.concat_tables([rows, gone, again.cast(SCHEMA)]), more)
    index, counts = updated(tmp_path, v1, v2)
    recorded = sum(not came for came in rows["came"].to_pylist())
    assert counts.parts_read == 0 and counts.paths == recorded + 1
    assert table_rows(index) == expected

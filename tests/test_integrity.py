"""Integrity of the crawl directory: version manifests, `sharecrawl check [--repair]`, damaged
parts never linked forward but listed again, damaged state refused instead of history
started over. Real crawls of file:// hosts, real Parquet files damaged on disk."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir
from sharecrawl.crawl_io.crawldb.version_manifest import (
    MANIFEST_NAME,
    file_sha256,
    read_manifest,
    version_parts,
)
from sharecrawl.crawl_io.schema import MEDIA
from tests.cliproc import cli_argv
from tests.conftest import LAN
from tests.test_pipeline import build

FILE_COLUMNS = ["host", "share", "path", "name", "is_dir", "size", "mtime", "partition_id"]
MEDIA_COLUMNS = [n for n in MEDIA.names if n not in ("tagged_at", "first_seen", "last_changed")]


def rows(crawl: CrawlDir, version: int, table: str, columns: list[str]) -> list[dict]:
    found = crawl.read(version, table).select(columns).to_pylist()
    return sorted(found, key=lambda r: (r["host"], r["share"], r["path"]))


def scans(crawl: CrawlDir, version: int) -> dict[str, tuple[int, int]]:
    """partition_id -> (n_scans, events in its history)"""
    table = crawl.read(version, "partitions").to_pylist()
    return {p["partition_id"]: (p["n_scans"], len(p["history"] or [])) for p in table}


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under root with its size and mtime, the lock file left out."""
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.name != "LOCK"
    }


def run(lan: LAN, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = lan.cli(*args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def two_rounds(lan: LAN) -> CrawlDir:
    build(lan)
    lan.crawl()
    lan.crawl()
    return CrawlDir(lan.crawl_dir)


def flip_byte_in_a_page(path: Path) -> None:
    """Bit rot: flip the last byte of the `path` column's chunk (inside its last data
    page, past the page header), keeping the file's size."""
    meta = pq.read_metadata(path).row_group(0)
    column = next(
        meta.column(i) for i in range(meta.num_columns) if meta.column(i).path_in_schema == "path"
    )
    start = column.dictionary_page_offset or column.data_page_offset
    offset = start + column.total_compressed_size - 1
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_every_part_is_in_the_manifest_and_linked_parts_carry_their_entries(
    lan: LAN, capsys
) -> None:
    crawl = two_rounds(lan)
    v1, v2 = crawl.version_dir(1), crawl.version_dir(2)
    manifest = read_manifest(v2)
    assert manifest is not None and sorted(manifest) == version_parts(v2)
    for rel, entry in manifest.items():
        assert (entry.size, entry.sha256) == ((v2 / rel).stat().st_size, file_sha256(v2 / rel))
        assert pq.ParquetFile(v2 / rel).metadata.num_rows >= 0
    # nothing changed in round 2: every host's parts are round 1's, with round 1's entries,
    # but for its statistics, whose counts of new files go back to zero
    old = read_manifest(v1)
    assert old is not None
    for rel in (r for r in manifest if "/" in r):
        linked = (v2 / rel).stat().st_ino == (v1 / rel).stat().st_ino
        assert linked == (not rel.startswith("prefix_stats/")), rel
        assert (manifest[rel] == old[rel]) == linked
    assert (crawl.crawldb / "FORMAT").read_text() == "1\n"
    code, out, _ = run(lan, capsys, "check")
    assert code == 0
    assert out.splitlines() == [f"v000002: {len(manifest)} parts intact"]


def as_previous_release(vdir: Path) -> dict:
    """Rewrite a version's manifest as the previous release wrote it (each entry an object,
    the SHA-256 in hex); its record."""
    record = json.loads((vdir / MANIFEST_NAME).read_text())
    fields = record.pop("entry")
    record["parts"] = {
        rel: {k: v for k, v in zip(fields, values, strict=False) if v is not None}
        | {"sha256": base64.b64decode(values[1]).hex()}
        for rel, values in record["parts"].items()
    }
    text = json.dumps(record, sort_keys=True, separators=(",", ":")).replace('},"', '},\n"')
    (vdir / MANIFEST_NAME).write_text(text)
    return record


def test_a_manifest_of_the_previous_release_is_checked_and_the_next_round_writes_the_new_form(
    lan: LAN, capsys
) -> None:
    crawl = two_rounds(lan)
    v2 = crawl.version_dir(2)
    hexed = as_previous_release(v2)["parts"]
    assert len(hexed["hosts.parquet"]["sha256"]) == 64
    entries = read_manifest(v2)
    assert entries is not None and sorted(entries) == sorted(hexed)
    assert entries["hosts.parquet"].sha256 == file_sha256(v2 / "hosts.parquet")
    code, out, _ = run(lan, capsys, "check")
    assert (code, out.splitlines()) == (0, [f"v000002: {len(entries)} parts intact"])

    lan.crawl()  # reads version 2 (hex), writes version 3 in the new form
    v3 = crawl.version_dir(3)
    record = json.loads((v3 / MANIFEST_NAME).read_text())
    assert record["entry"] == ["size", "sha256", "rows", "folders", "bytes"]
    files = record["parts"]["files/alpha.parquet"]
    assert len(files) == 5 and len(files[1]) == 44  # 32 bytes in base64
    digest = hashlib.sha256((v3 / "files" / "alpha.parquet").read_bytes()).digest()
    assert base64.b64decode(files[1]) == digest
    assert len(record["parts"]["hosts.parquet"]) == 2  # no counts: size and SHA-256
    new = read_manifest(v3)
    assert new is not None
    for rel in (r for r in new if r.startswith(("files/", "media/", "folders/"))):
        if (v3 / rel).stat().st_ino == (v2 / rel).stat().st_ino:  # linked: its entry carried
            assert new[rel] == entries[rel], rel
    code, out, _ = run(lan, capsys, "check")
    assert (code, out.splitlines()) == (0, [f"v000003: {len(new)} parts intact"])

    # bit rot in a part of the previous release's version is a mismatch of its hex SHA-256
    part = v2 / "files" / "beta.parquet"
    flip_byte_in_a_page(part)
    (crawl.crawldb / "CURRENT").write_text("v000002\n")
    code, out, _ = run(lan, capsys, "check")
    assert code == 1 and out.splitlines() == [
        f"{part}: checksum mismatch (its bytes changed since it was written)"
    ]


def test_a_truncated_part_is_named_by_check_and_its_host_fetched_again(lan: LAN, capsys) -> None:
    crawl = two_rounds(lan)
    files, media, history = (
        rows(crawl, 2, "files", FILE_COLUMNS),
        rows(crawl, 2, "media", MEDIA_COLUMNS),
        scans(crawl, 2),
    )
    part = crawl.version_dir(2) / "files" / "alpha.parquet"
    os.truncate(part, part.stat().st_size // 2)

    code, out, _ = run(lan, capsys, "check")
    assert code == 1
    assert len(out.splitlines()) == 1 and out.startswith(f"{part}: size ")

    lan.crawl()
    assert run(lan, capsys, "check")[0] == 0
    assert rows(crawl, 3, "files", FILE_COLUMNS) == files  # the rows of the undamaged crawl
    assert rows(crawl, 3, "media", MEDIA_COLUMNS) == media
    # history kept: every partition scanned once more, none started over
    assert scans(crawl, 3) == {pid: (n + 1, events + 1) for pid, (n, events) in history.items()}
    log = pq.read_table(crawl.segment_dir(3) / "fetchlog.parquet").to_pylist()
    status = {r["host"]: r["status"] for r in log}
    assert status == {"alpha": "new", "beta": "unchanged"}  # alpha listed again as new
    assert sum(r["n_tags_read"] for r in log) == 3  # alpha's tags read again
    for table in ("files", "media", "folders"):  # beta linked, alpha written anew
        new, old = crawl.version_dir(3) / table, crawl.version_dir(2) / table
        assert (new / "beta.parquet").stat().st_ino == (old / "beta.parquet").stat().st_ino
        assert (new / "alpha.parquet").stat().st_ino != (old / "alpha.parquet").stat().st_ino


def test_bit_rot_is_a_checksum_mismatch_caught_by_page_crcs_and_repaired(lan: LAN, capsys) -> None:
    crawl = two_rounds(lan)
    files = rows(crawl, 2, "files", FILE_COLUMNS)
    part = crawl.version_dir(2) / "files" / "beta.parquet"
    size = part.stat().st_size
    flip_byte_in_a_page(part)
    assert part.stat().st_size == size
    with pytest.raises(OSError, match="CRC"):  # the page checksum catches it on read
        pq.read_table(part, page_checksum_verification=True)

    code, out, _ = run(lan, capsys, "check")
    assert code == 1
    assert out.splitlines() == [
        f"{part}: checksum mismatch (its bytes changed since it was written)"
    ]

    code, out, _ = run(lan, capsys, "check", "--repair")
    assert code == 0
    assert f"{part}: dropped from {MANIFEST_NAME} (checksum mismatch" in out
    assert crawl.current() == 2  # a damaged host part does not cost the version
    aside = list((lan.crawl_dir / "damaged").rglob("beta.parquet"))
    assert len(aside) == 1 and aside[0].stat().st_size == size  # moved, not deleted
    assert run(lan, capsys, "check")[1].endswith("; 1 dropped by check --repair\n")

    lan.crawl()
    assert run(lan, capsys, "check")[0] == 0
    assert rows(crawl, 3, "files", FILE_COLUMNS) == files


@pytest.mark.parametrize(
    "current", ["", "v0000\x00garbage\n", "v000009\n", "manifest-deleted"], ids=repr
)
def test_a_broken_current_stops_every_command_in_one_line_until_repaired(
    lan: LAN, capsys, current: str
) -> None:
    crawl = two_rounds(lan)
    if current == "manifest-deleted":  # CURRENT names a version that is not complete
        (crawl.version_dir(2) / MANIFEST_NAME).unlink()
    else:
        (crawl.crawldb / "CURRENT").write_text(current)
    before = tree(lan.crawl_dir)
    for command in (["crawl"], ["search", "madonna"], ["sql", "SELECT 1"], ["status"], ["check"]):
        code, _, err = run(lan, capsys, *command)
        assert code == 1, command
        assert len(err.splitlines()) == 1 and "CURRENT" in err, (command, err)
        assert f"sharecrawl check --crawl-dir {lan.crawl_dir} --repair" in err
    assert tree(lan.crawl_dir) == before  # the refused crawl wrote nothing

    code, out, _ = run(lan, capsys, "check", "--repair")
    assert code == 0
    newest = 1 if current == "manifest-deleted" else 2
    assert crawl.current() == newest
    assert f"now names v00000{newest}" in out
    assert run(lan, capsys, "check")[0] == 0
    assert run(lan, capsys, "search", "madonna")[0] == 0
    lan.crawl()
    assert crawl.current() == newest + 1
    assert all(n == newest + 1 for n, _ in scans(crawl, newest + 1).values())


def test_a_broken_current_gives_one_line_and_no_traceback_from_the_command(lan: LAN) -> None:
    crawl = two_rounds(lan)
    (crawl.crawldb / "CURRENT").write_text("")
    for command in ("status", "crawl"):
        proc = subprocess.run(
            cli_argv(
                command,
                "--crawl-dir",
                str(lan.crawl_dir),
                *(["--hosts-file", str(lan.hosts_file)] if command == "crawl" else []),
            ),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 1
        assert proc.stderr.splitlines() == [
            f"sharecrawl: error: {crawl.crawldb / 'CURRENT'} is empty; "
            f"run `sharecrawl check --crawl-dir {lan.crawl_dir} --repair`"
        ]


def test_a_deleted_partitions_table_stops_the_round_and_repair_keeps_history(
    lan: LAN, capsys
) -> None:
    crawl = two_rounds(lan)
    history = scans(crawl, 1)
    (crawl.version_dir(2) / "partitions.parquet").unlink()
    before = tree(lan.crawl_dir)
    code, _, err = run(lan, capsys, "crawl")
    assert code == 1
    assert len(err.splitlines()) == 1 and "partitions.parquet: missing" in err
    assert "--repair" in err
    assert tree(lan.crawl_dir) == before
    code, out, _ = run(lan, capsys, "check")
    assert code == 1 and "partitions.parquet: missing" in out

    code, out, _ = run(lan, capsys, "check", "--repair")
    assert code == 0 and crawl.current() == 1
    moved = lan.crawl_dir / "damaged"
    assert [p.name for p in moved.glob("*/crawldb/*")] == ["v000002"]
    assert [p.name for p in moved.glob("*/segments/*")] == ["r000002"]
    lan.crawl()  # round 2 again, from version 1's history
    assert crawl.current() == 2
    assert scans(crawl, 2) == {pid: (n + 1, e + 1) for pid, (n, e) in history.items()}


def test_a_damaged_part_of_an_offline_host_is_not_linked_forward(lan: LAN, capsys) -> None:
    crawl = two_rounds(lan)
    files = rows(crawl, 2, "files", FILE_COLUMNS)
    history = scans(crawl, 2)
    (crawl.version_dir(2) / "media" / "alpha.parquet").unlink()
    lan.host("alpha").rename(lan.root / "alpha-away")  # the host is off this round
    lan.crawl()
    v3 = crawl.version_dir(3)
    assert not list(v3.glob("*/alpha.parquet"))  # nothing of alpha linked forward
    assert run(lan, capsys, "check")[0] == 0  # v3 is whole: it holds what it can vouch for
    alpha = [p for p in crawl.read(3, "partitions").to_pylist() if p["host"] == "alpha"]
    assert alpha and all(p["hash"] is None for p in alpha)  # to be listed again as new
    assert all(history[p["partition_id"]][0] == p["n_scans"] for p in alpha)  # history kept

    (lan.root / "alpha-away").rename(lan.host("alpha"))
    lan.crawl()
    assert rows(crawl, 4, "files", FILE_COLUMNS) == files
    assert run(lan, capsys, "check")[0] == 0


def test_a_version_without_its_manifest_is_not_complete(lan: LAN, capsys) -> None:
    crawl = two_rounds(lan)
    (crawl.version_dir(2) / MANIFEST_NAME).unlink()
    code, _, err = run(lan, capsys, "status")
    assert code == 1 and "MANIFEST.json is missing" in err


def test_check_names_a_garbled_search_index_and_repair_rebuilds_it(lan: LAN, capsys) -> None:
    crawl = two_rounds(lan)
    crawl.index.write_bytes(b"\x00garbled" * 512)
    code, out, _ = run(lan, capsys, "check")
    assert code == 1
    assert out.splitlines()[0].startswith(f"{crawl.index}: does not open as a search index")
    code, out, _ = run(lan, capsys, "check", "--repair")
    assert code == 0 and f"{crawl.index}: rebuilt from v000002" in out
    assert run(lan, capsys, "check")[0] == 0
    assert run(lan, capsys, "search", "madonna")[0] == 0


def test_bit_rot_in_a_changed_hosts_part_is_caught_when_read_and_the_host_listed_whole(
    lan: LAN, capsys
) -> None:
    crawl = two_rounds(lan)
    paths = {(r["host"], r["path"]) for r in rows(crawl, 2, "files", FILE_COLUMNS)}
    flip_byte_in_a_page(crawl.version_dir(2) / "files" / "alpha.parquet")
    lan.media("alpha", "music/new/track09.mp3", artist="Kino", title="Kukushka")
    lan.tick(lan.host("alpha") / "music")
    lan.crawl()  # alpha changed: its old rows are read, and fail their checksum
    assert run(lan, capsys, "check")[0] == 0
    found = {(r["host"], r["path"]) for r in rows(crawl, 3, "files", FILE_COLUMNS)}
    assert found == paths | {("alpha", "new"), ("alpha", "new/track09.mp3")}
    log = pq.read_table(crawl.segment_dir(3) / "fetchlog.parquet").to_pylist()
    assert sum(r["n_tags_read"] for r in log) == 4  # alpha's three tags read again, and the new
    assert {r["title"] for r in rows(crawl, 3, "media", MEDIA_COLUMNS)} >= {"Kukushka", "Music"}

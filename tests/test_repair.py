"""`check --repair` leaves `check` passing: a damaged part of the live version is restored
from a separate copy with the manifest's checksum, or dropped from the manifest (its host's
partitions listed again when it is next online); the following rounds pass `check` with the
host offline or back. Real crawls of file:// hosts, real parts damaged on disk."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir
from sharecrawl.crawl_io.crawldb.version_manifest import MANIFEST_NAME, dropped_parts, read_manifest
from tests.conftest import LAN
from tests.test_integrity import FILE_COLUMNS, rows, run, scans, two_rounds


def flip_a_page_byte(path: Path) -> None:
    """Bit rot: flip the last byte of the first column's chunk, keeping the file's size."""
    column = pq.read_metadata(path).row_group(0).column(0)
    offset = (column.dictionary_page_offset or column.data_page_offset) - 1
    offset += column.total_compressed_size
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def damage(path: Path, how: str) -> None:
    if how == "flip":
        flip_a_page_byte(path)
    else:
        os.truncate(path, path.stat().st_size // 2)


def offline(lan: LAN, host: str) -> None:
    lan.host(host).rename(lan.root / f"{host}-away")


def online(lan: LAN, host: str) -> None:
    (lan.root / f"{host}-away").rename(lan.host(host))


def fetched(crawl: CrawlDir, round_: int) -> dict[str, str]:
    log = pq.read_table(crawl.segment_dir(round_) / "fetchlog.parquet").to_pylist()
    return {r["host"]: r["status"] for r in log}


@pytest.mark.parametrize(
    ("table", "how"),
    [("files", "flip"), ("media", "truncate"), ("folders", "flip"), ("prefix_stats", "truncate")],
)
def test_a_part_dropped_by_repair_leaves_check_passing_over_offline_rounds(
    lan: LAN, capsys, table: str, how: str
) -> None:
    crawl = two_rounds(lan)
    files = rows(crawl, 2, "files", FILE_COLUMNS)
    history = scans(crawl, 2)
    v2 = crawl.version_dir(2)
    part = v2 / table / "beta.parquet"
    damage(part, how)  # a hard link: every version holding it is damaged alike
    assert run(lan, capsys, "check")[0] == 1

    code, out, _ = run(lan, capsys, "check", "--repair")
    assert code == 0
    effect = (
        "host beta's statistics are computed again by the next round"
        if table == "prefix_stats"
        else "host beta's partitions are listed again when it is next online"
    )
    assert f"{part}: dropped from {MANIFEST_NAME}" in out and out.rstrip().endswith(effect)
    assert not part.exists() and list((lan.crawl_dir / "damaged").rglob("beta.parquet"))
    assert crawl.current() == 2
    code, out, _ = run(lan, capsys, "check")
    assert code == 0, out
    manifest = read_manifest(v2)
    assert manifest is not None and f"{table}/beta.parquet" in manifest  # reads as missing
    assert f"{table}/beta.parquet" not in json.loads((v2 / MANIFEST_NAME).read_text())["parts"]
    assert dropped_parts(v2) == [f"{table}/beta.parquet"]
    code, out, _ = run(lan, capsys, "status")
    assert code == 0
    assert f"  1 part dropped by check --repair: {effect}" in out.splitlines()
    if table != "prefix_stats":  # its group's partitions read with no stored hash
        beta = [p for p in crawl.read(2, "partitions").to_pylist() if p["host"] == "beta"]
        assert beta and all(p["hash"] is None for p in beta)

    offline(lan, "beta")
    for version in (3, 4):
        lan.crawl()
        code, out, _ = run(lan, capsys, "check")
        assert code == 0, out
        assert dropped_parts(crawl.version_dir(version)) == []
        if table != "prefix_stats":  # its statistics are computed again; rows wait
            assert not list(crawl.version_dir(version).glob(f"{table}/beta*.parquet"))
        assert run(lan, capsys, "status")[1].count("dropped by check --repair") == 0
    online(lan, "beta")
    lan.crawl()
    assert run(lan, capsys, "check")[0] == 0
    assert rows(crawl, 5, "files", FILE_COLUMNS) == files
    assert fetched(crawl, 5) == {
        "alpha": "unchanged",
        "beta": "unchanged" if table == "prefix_stats" else "new",
    }
    # history kept: alpha scanned in rounds 3, 4 and 5, beta (offline) in round 5 only
    host_of = {p["partition_id"]: p["host"] for p in crawl.read(5, "partitions").to_pylist()}
    assert {pid: n for pid, (n, _) in scans(crawl, 5).items()} == {
        pid: n + (3 if host_of[pid] == "alpha" else 1) for pid, (n, _) in history.items()
    }


def test_a_damaged_part_is_restored_from_a_separate_older_copy(lan: LAN, capsys) -> None:
    crawl = two_rounds(lan)
    files = rows(crawl, 2, "files", FILE_COLUMNS)
    v1, v2 = crawl.version_dir(1), crawl.version_dir(2)
    rel = "files/alpha.parquet"
    # round 1's copy made a file of its own (as a backup restored into place would be)
    copy = v1 / "files" / ".copy"
    shutil.copyfile(v1 / rel, copy)
    os.replace(copy, v1 / rel)
    assert (v1 / rel).stat().st_ino != (v2 / rel).stat().st_ino
    damage(v2 / rel, "truncate")
    (v2 / "media" / "beta.parquet").unlink()  # v1's link to it survives: restored too

    code, out, _ = run(lan, capsys, "check", "--repair")
    assert code == 0
    assert f"{v2 / rel}: restored from v000001" in out
    assert f"{v2 / 'media/beta.parquet'}: restored from v000001" in out
    assert "dropped" not in out
    assert (v2 / rel).stat().st_ino == (v1 / rel).stat().st_ino
    code, out, _ = run(lan, capsys, "check")
    assert code == 0, out
    assert rows(crawl, 2, "files", FILE_COLUMNS) == files
    assert "dropped" not in run(lan, capsys, "status")[1]
    lan.crawl()  # nothing lost: nothing listed again
    assert fetched(crawl, 3) == {"alpha": "unchanged", "beta": "unchanged"}
    assert run(lan, capsys, "check")[0] == 0


def test_repair_of_a_whole_crawl_dir_changes_nothing(lan: LAN, capsys) -> None:
    crawl = two_rounds(lan)
    before = (crawl.version_dir(2) / MANIFEST_NAME).read_bytes()
    code, out, _ = run(lan, capsys, "check", "--repair")
    assert code == 0
    assert out.splitlines() == ["v000002: CURRENT already names the newest usable version"]
    assert (crawl.version_dir(2) / MANIFEST_NAME).read_bytes() == before
    assert not (lan.crawl_dir / "damaged").exists()

"""A folder the crawler may not read, below a share's root, over real Samba: its rows stay
in the crawldb (a folder we may not read is not a deleted one), the denial is counted in
fetchlog and status and named in the crawl's output, and the partition holding it neither
flips between changed and unchanged nor loses rows when it is re-partitioned.

root reads every folder on file://, so the denial comes from smbd: the guest account
(nobody) may not list a folder of mode 0700 owned by root."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from sharecrawl.crawl_io.smb import SMBSource
from sharecrawl.crawl_io.sources import AccessDenied, Credentials, parse_host_url
from sharecrawl.pipeline.host_merge import denied_hashes, merged_files
from tests.conftest import LAN
from tests.media import make_media
from tests.smbd import SmbServer, make_base_dir

FILES_SQL = "SELECT share, path, size, first_seen FROM files ORDER BY share, path"


def sql(lan: LAN, run_json, query: str) -> list[dict]:
    return run_json(lan, "sql", query)


def lock(folder: Path, server: SmbServer) -> None:
    """Close `folder` to the guest account, or skip when smbd still lets it in."""
    os.chown(folder, 0, 0)
    os.chmod(folder, 0o700)
    with SMBSource(parse_host_url(server.url), Credentials(None), timeout_s=10) as guest:
        try:
            guest.listdir("media", str(folder.relative_to(server.root_dir / "media")))
        except AccessDenied:
            return
    folder.chmod(0o755)
    pytest.skip("smbd lets its guest account list a folder of mode 0700 owned by root here")


def under(rows: list[dict], prefix: str) -> list[dict]:
    return [r for r in rows if r["path"].startswith(prefix)]


@pytest.mark.smb
def test_denied_folder_keeps_its_rows_and_is_reported(
    lan: LAN, smbd_factory: Callable[..., SmbServer], run_json, capsys
) -> None:
    root = make_base_dir() / "tree"
    make_media(root / "media" / "open" / "song.mp3", artist="Kino", title="Gruppa krovi")
    make_media(root / "media" / "locked" / "inner" / "deep.mp3", artist="Zemfira", title="Ariva")
    (root / "media" / "locked" / "notes.txt").write_text("notes")
    (root / "private").mkdir(parents=True)
    server = smbd_factory(root_dir=root)
    lan.hosts_file.write_text(f"{server.url}/media\n")
    lan.crawl()
    before = sql(lan, run_json, FILES_SQL)
    assert [r["path"] for r in under(before, "locked/")] == [
        "locked/inner",
        "locked/inner/deep.mp3",
        "locked/notes.txt",
    ]

    lock(root / "media" / "locked", server)
    capsys.readouterr()
    lan.crawl()
    out = capsys.readouterr().out
    assert "access denied to 1 folder" in out and f"127.0.0.1:{server.port}/media/locked" in out
    assert sql(lan, run_json, FILES_SQL) == before  # nothing dropped, first_seen kept
    assert [r["title"] for r in run_json(lan, "search", "ariva")] == ["Ariva"]
    log = sql(lan, run_json, "SELECT status, n_denied, denied FROM fetchlog WHERE round = 2")
    assert log == [{"status": "changed", "n_denied": 1, "denied": ["locked"]}]
    status = run_json(lan, "status")
    assert status["denied_folders"] == 1 and status["partitions"]["with_denied_folders"] == 1
    assert status["denied_list"] == [
        {"host": f"127.0.0.1:{server.port}", "share": "media", "path": "locked"}
    ]
    assert status["hosts_not_crawled"] == [] and not status["config_failure"]
    capsys.readouterr()
    assert lan.cli("status") == 0
    assert "media/locked" in capsys.readouterr().out

    lan.crawl()  # still shut: the partition does not flip back to changed
    log = sql(lan, run_json, "SELECT status, n_denied FROM fetchlog WHERE round = 3")
    assert log == [{"status": "unchanged", "n_denied": 1}]
    assert sql(lan, run_json, FILES_SQL) == before

    (root / "media" / "locked").chmod(0o755)  # open again: read afresh, rows follow the share
    (root / "media" / "locked" / "notes.txt").unlink()
    make_media(root / "media" / "locked" / "new.mp3", artist="Kino", title="Zvezda")
    os.chmod(root / "media" / "locked" / "new.mp3", 0o644)
    lan.crawl()
    log = sql(lan, run_json, "SELECT status, n_denied FROM fetchlog WHERE round = 4")
    assert log == [{"status": "changed", "n_denied": 0}]
    paths = [r["path"] for r in under(sql(lan, run_json, FILES_SQL), "locked/")]
    assert paths == ["locked/inner", "locked/inner/deep.mp3", "locked/new.mp3"]


@pytest.mark.smb
def test_denied_folder_survives_re_partitioning(
    lan: LAN, smbd_factory: Callable[..., SmbServer], run_json, luigi_cfg
) -> None:
    """Small limits give music/locked a range partition of its own; shut, the range holds
    one folder and no media, so it is merged into its parent: its rows move with it, and
    the merged partition's hash is the one the next walk finds (no change next round)."""
    # media paths of about 90 bytes per folder: a range partition each
    luigi_cfg("[sharecrawl]\npartition_max_seconds = 1000000\npartition_max_bytes = 85\n")
    root = make_base_dir() / "tree"
    for folder in ("alpha", "locked"):
        for i in range(3):
            make_media(
                root / "media" / "music" / folder / f"song number {i:02d}.mp3",
                artist=f"{folder} band",
                title=f"{folder} song {i}",
            )
    (root / "private").mkdir(parents=True)
    server = smbd_factory(root_dir=root)
    lan.hosts_file.write_text(f"{server.url}/media\n")
    lan.crawl(rounds=2)
    ranges = "SELECT root, lo, hi FROM partitions WHERE lo IS NOT NULL OR hi IS NOT NULL"
    assert {"root": "music", "lo": "locked", "hi": None} in sql(lan, run_json, ranges)
    before = sql(lan, run_json, FILES_SQL)
    assert len(under(before, "music/locked/")) == 3

    lock(root / "media" / "music" / "locked", server)
    lan.crawl()
    assert {"root": "music", "lo": "locked", "hi": None} not in sql(lan, run_json, ranges)
    assert sql(lan, run_json, FILES_SQL) == before
    orphans = "SELECT count(*) AS n FROM files ANTI JOIN partitions USING (partition_id)"
    assert sql(lan, run_json, orphans) == [{"n": 0}]
    for round_ in (4, 5):
        lan.crawl()
        assert sql(lan, run_json, FILES_SQL) == before, f"round {round_} lost rows"
        log = sql(lan, run_json, f"SELECT status, n_denied FROM fetchlog WHERE round = {round_}")
        assert {r["status"] for r in log} == {"unchanged"}, log
        assert sum(r["n_denied"] for r in log) == 1
    titles = {r["title"] for r in run_json(lan, "search", "locked", "song")}
    assert titles == {"locked song 0", "locked song 1", "locked song 2"}


def _table(rows: list[dict], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist(rows, schema)


def test_merged_files_keeps_rows_below_denied_folders_only() -> None:
    """Unit: the rows of a rescanned partition below a denied folder stay; other rows of it
    not listed again go (deleted); a removed partition's rows go even below a denied path."""
    from datetime import UTC, datetime

    from sharecrawl.crawl_io.schema import FETCHLOG, FILES, LISTING

    t0, t1 = datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 2, 1, tzinfo=UTC)

    def row(path: str, pid: str, is_dir: bool = False) -> dict:
        return {
            "host": "h",
            "share": "s",
            "path": path,
            "name": path.rsplit("/", 1)[-1],
            "is_dir": is_dir,
            "size": 0 if is_dir else 5,
            "mtime": t0,
            "partition_id": pid,
            "first_seen": t0,
            "last_seen": t0,
        }

    old = _table(
        [
            row("a", "p1", True),
            row("a/x.mp3", "p1"),
            row("a/sub", "p1", True),
            row("a/sub/y.mp3", "p1"),
            row("ab.mp3", "p1"),
            row("gone.mp3", "p1"),
            row("b", "p2", True),
            row("b/z.mp3", "p2"),
        ],
        FILES,
    )
    listing = _table(
        [
            {k: v for k, v in row(p, "p1", d).items() if k in LISTING.names}
            for p, d in (("a", True), ("ab.mp3", False))
        ],
        LISTING,
    )
    log = _table(
        [
            {
                "partition_id": "p1",
                "host": "h",
                "share": "s",
                "started": t1,
                "status": "changed",
                "n_denied": 1,
                "denied": ["a"],
            },
            {
                "partition_id": "p2",
                "host": "h",
                "share": "s",
                "started": t1,
                "status": "gone",
                "n_denied": 1,
                "denied": ["b"],
            },
        ],
        FETCHLOG,
    )
    merged = merged_files(old, listing, log, {"p1", "p2"})
    assert merged["path"].to_pylist() == ["a", "a/sub", "a/sub/y.mp3", "a/x.mp3", "ab.mp3"]
    assert set(merged["first_seen"].to_pylist()) == {t0}

    # re-partitioning recomputes hashes from rows: without the kept ones, as the walk sees
    hashes = denied_hashes(merged, log)
    from tests.hash_reference import partition_hash

    visible = [
        ("a", True, 0, int(t0.timestamp() * 1e6)),
        ("ab.mp3", False, 5, int(t0.timestamp() * 1e6)),
    ]
    assert hashes == {"p1": partition_hash(visible)}

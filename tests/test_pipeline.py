"""End to end: rounds over a LAN of file:// hosts, through the CLI, checked in the tables,
the status report and search."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cliproc import console_script
from tests.conftest import LAN


def build(lan: LAN) -> None:
    lan.media("alpha", "music/song_01.mp3", artist="Madonna", title="Music", album="Music")
    lan.media("alpha", "music/Rock/track02.flac", "flac", artist="Queen", title="Innuendo")
    lan.media("alpha", "music/Rock/track03.ogg", "ogg", artist="Queen", title="Headlong")
    lan.media("beta", "share/song_01.mp3", "mp3-320", artist="Madonna", title="Music")
    lan.media("beta", "share/misc/track04.m4a", "m4a", artist="Björk", title="Army of Me")
    (lan.host("beta") / "share/misc/readme.txt").write_text("not media")
    lan.write_hosts("alpha", "beta")


def sql(lan: LAN, run_json, query: str) -> list[dict]:
    return run_json(lan, "sql", query)


def titles(results: list[dict]) -> list[str]:
    return [r["title"] for r in results]


def test_two_rounds_reflect_added_retagged_and_deleted_files(lan: LAN, run_json) -> None:
    build(lan)
    lan.crawl()
    status = run_json(lan, "status")
    assert status["round"] == 1
    assert status["tags_read"] == 5
    assert status["partitions"]["new"] == 2  # one root partition per share
    files = sql(lan, run_json, "SELECT host, share, path FROM files WHERE NOT is_dir")
    assert len(files) == 6
    results = run_json(lan, "search", "madonna", "music")
    assert results and results[0]["title"] == "Music"
    assert results[0]["copies"] == 2

    lan.media("beta", "share/misc/track05.mp3", artist="Zemfira", title="Ariva")  # added
    retagged = lan.media(
        "alpha", "music/Rock/track03.ogg", "ogg", artist="Queen", title="The Show Must Go On"
    )
    os.remove(lan.host("alpha") / "music/Rock/track02.flac")  # deleted
    lan.tick(retagged.parent)
    lan.crawl()
    status = run_json(lan, "status")
    assert status["round"] == 2
    assert status["tags_read"] == 2  # the added file and the retagged one, nothing else
    assert status["partitions"]["changed"] == 2
    assert titles(run_json(lan, "search", "zemfira")) == ["Ariva"]
    assert titles(run_json(lan, "search", "show", "must")) == ["The Show Must Go On"]
    assert run_json(lan, "search", "headlong") == []
    assert run_json(lan, "search", "innuendo") == []
    media = sql(lan, run_json, "SELECT path, title FROM media ORDER BY path")
    assert {m["title"] for m in media} == {"Music", "Army of Me", "Ariva", "The Show Must Go On"}
    first_seen = sql(
        lan,
        run_json,
        "SELECT first_seen < last_seen AS kept FROM files WHERE path = 'song_01.mp3'"
        " AND host = 'alpha'",
    )
    assert first_seen == [] or all(r["kept"] for r in first_seen)


def test_unchanged_round_reads_nothing(lan: LAN, run_json) -> None:
    build(lan)
    lan.crawl()
    lan.crawl()
    status = run_json(lan, "status")
    assert status["tags_read"] == 0
    assert status["partitions"]["unchanged"] == status["partitions"]["scanned"] == 2
    listing = lan.crawl_dir / "segments" / "r000002" / "listing"
    import pyarrow.parquet as pq

    assert sum(pq.read_metadata(p).num_rows for p in listing.glob("*.parquet")) == 0


def test_offline_host_keeps_its_rows_and_is_hidden_from_search(lan: LAN, run_json) -> None:
    build(lan)
    lan.crawl()
    shutil.move(lan.host("beta"), lan.root / "away")
    lan.crawl()
    hosts = {h["host"]: h for h in sql(lan, run_json, "SELECT * FROM hosts")}
    assert not hosts["beta"]["online"] and hosts["beta"]["last_error"]
    assert hosts["alpha"]["online"]
    n = sql(lan, run_json, "SELECT count(*) AS n FROM files WHERE host = 'beta'")[0]["n"]
    assert n == 4  # nothing indexed before is lost
    assert run_json(lan, "search", "army") == []
    shown = run_json(lan, "search", "army", "--all-hosts")
    assert titles(shown) == ["Army of Me"] and shown[0]["online_copies"] == 0
    music = run_json(lan, "search", "madonna", "music")[0]
    assert music["online_copies"] == 1 and music["best"]["host"] == "alpha"
    shutil.move(lan.root / "away", lan.host("beta"))
    lan.crawl()
    assert titles(run_json(lan, "search", "army")) == ["Army of Me"]


def test_hosts_file_is_read_every_round(lan: LAN, run_json) -> None:
    build(lan)
    lan.write_hosts("alpha")
    lan.crawl()
    assert {h["host"] for h in sql(lan, run_json, "SELECT host FROM hosts")} == {"alpha"}
    lan.write_hosts("alpha", "beta")
    lan.crawl()
    assert titles(run_json(lan, "search", "army")) == ["Army of Me"]
    lan.write_hosts("beta")
    lan.crawl()
    assert sql(lan, run_json, "SELECT count(*) AS n FROM files WHERE host = 'alpha'")[0]["n"] == 0


def test_local_runner_gives_the_same_tables(lan: LAN, run_json, tmp_path) -> None:
    build(lan)
    lan.crawl(runner="local")
    local = sql(
        lan, run_json, "SELECT partition_id, hash, n_files, n_media FROM partitions ORDER BY 1"
    )
    other = LAN(tmp_path / "again")
    other.hosts_dir = lan.hosts_dir
    other.hosts_file = lan.hosts_file
    other.crawl_dir = tmp_path / "again-crawl"
    other.crawl(runner="inline")
    assert (
        sql(
            other,
            run_json,
            "SELECT partition_id, hash, n_files, n_media FROM partitions ORDER BY 1",
        )
        == local
    )
    assert all(p["hash"] for p in local) and sum(p["n_media"] for p in local) == 5


@pytest.mark.parametrize(
    ("hosts_text", "message"),
    [
        (None, "does not exist"),
        ("# nothing here\n\n", "names no host"),
        ("ftp://host/share\n", "scheme must be smb:// or file://"),
        ("smb://user:secret@host/share\n", "carries a password"),
    ],
)
def test_bad_hosts_file_exits_2_and_writes_nothing(
    lan: LAN, capsys, hosts_text: str | None, message: str
) -> None:
    if hosts_text is not None:
        lan.hosts_file.write_text(hosts_text)
    assert lan.cli("crawl") == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert "secret" not in err
    assert not lan.crawl_dir.exists()


def test_unknown_policy_and_foreign_crawl_dir_exit_2(lan: LAN, capsys) -> None:
    build(lan)
    assert lan.cli("crawl", "--policy", "fastest") == 2
    assert "unknown policy" in capsys.readouterr().err
    assert not lan.crawl_dir.exists()
    lan.crawl_dir.mkdir()
    (lan.crawl_dir / "thesis.txt").write_text("mine")
    assert lan.cli("crawl") == 2
    assert "not a crawl directory" in capsys.readouterr().err
    assert sorted(os.listdir(lan.crawl_dir)) == ["thesis.txt"]
    assert lan.cli("status") == 2


def test_sql_is_read_only(lan: LAN, run_json, capsys) -> None:
    build(lan)
    lan.crawl()
    before = sorted(p.name for p in (lan.crawl_dir / "crawldb").rglob("*"))
    target = lan.crawl_dir / "crawldb" / "CURRENT"
    assert lan.cli("sql", f"COPY (SELECT 1) TO '{target}'") == 2  # refused: exit 2
    assert "only SELECT" in capsys.readouterr().err
    assert lan.cli("sql", "SELECT 1; DROP VIEW files") == 2
    assert sorted(p.name for p in (lan.crawl_dir / "crawldb").rglob("*")) == before
    assert sql(lan, run_json, "SELECT count(*) AS n FROM media")[0]["n"] == 5


def test_damaged_crawldb_fails_the_round_with_exit_1(lan: LAN, capsys) -> None:
    build(lan)
    lan.crawl()
    (lan.crawl_dir / "crawldb" / "v000001" / "partitions.parquet").write_bytes(b"not parquet")
    capsys.readouterr()
    assert lan.cli("crawl") == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "partitions.parquet" in err and "--repair" in err
    assert not (lan.crawl_dir / "segments" / "r000002").exists()  # refused before writing
    assert (lan.crawl_dir / "crawldb" / "CURRENT").read_text().strip() == "v000001"


def test_duplicate_folders_view_finds_an_album_on_two_hosts(lan: LAN, run_json) -> None:
    for host in ("alpha", "beta"):
        for t in range(3):
            path = lan.media(host, f"music/Kino/Album/track{t}.mp3", artist="Kino", title=f"S{t}")
            path.write_bytes(
                lan.host("alpha").joinpath(f"music/Kino/Album/track{t}.mp3").read_bytes()
            )
    lan.write_hosts("alpha", "beta")
    lan.crawl()
    rows = run_json(
        lan, "sql", "SELECT n_hosts, n_files, hosts FROM duplicate_folders ORDER BY n_files DESC"
    )
    assert rows and rows[0]["n_hosts"] == 2 and rows[0]["hosts"] == ["alpha", "beta"]
    assert rows[0]["n_files"] == 3


def test_fetch_progress_is_plain_log_lines_without_a_terminal(lan: LAN, capsys) -> None:
    build(lan)
    capsys.readouterr()
    lan.crawl()  # its stderr a pipe, not a terminal
    lines = capsys.readouterr().err.splitlines()
    assert any(line.startswith("alpha: 1 partition (1 new)") for line in lines), lines
    assert any(line.startswith("beta: ") and "tags read" in line for line in lines), lines


def test_fetch_workers_do_not_rerun_the_main_script(lan: LAN, tmp_path: Path, run_json) -> None:
    """multiprocessing would run the parent's main script in every fetch worker; a script
    that imports the whole pipeline would then cost each worker its imports."""
    lan.media("pc-1", "music/a.mp3", artist="A")
    lan.media("pc-2", "music/b.mp3", artist="B")
    lan.write_hosts("pc-1", "pc-2")
    runs = tmp_path / "main-runs"
    # the console script, and a line that notes each run of it (as __main__ or __mp_main__)
    script = tmp_path / "sharecrawl"
    shebang, rest = Path(console_script()).read_text().split("\n", 1)
    noting = f"with open({str(runs)!r}, 'a') as f: f.write(__name__ + '\\n')\n"
    script.write_text(f"{shebang}\n{noting}{rest}")
    args = [
        "crawl",
        "--crawl-dir",
        str(lan.crawl_dir),
        "--hosts-file",
        str(lan.hosts_file),
        "--runner",
        "inline",
    ]
    done = subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert runs.read_text().split() == ["__main__"]  # not once more per worker
    assert run_json(lan, "sql", "SELECT count(*) AS n FROM media") == [{"n": 2}]


def test_fetch_progress_totals_and_overall_line(caplog) -> None:
    """Running totals over hosts; a finished host counts all its due partitions."""
    import logging

    from sharecrawl.pipeline.progress import FetchProgress, HostProgress

    caplog.set_level(logging.INFO, logger="sharecrawl.fetch")
    progress = FetchProgress({"a": HostProgress(due=3), "b": HostProgress(due=2)}, every_s=0)
    progress.event("a", "partition", entries=10, tags=2)
    progress.event("b", "partition", entries=5, tags=0)
    progress.event("a", "partition", entries=1, tags=1)
    assert progress.totals() == (3, 5, 16, 3)
    progress.event("a", "done", summary="a: done")  # its third partition was lost
    assert progress.totals() == (4, 5, 16, 3)
    overall = [r.getMessage() for r in caplog.records if r.getMessage().startswith("fetch:")]
    assert overall[-1].startswith("fetch: 4/5 partitions, 16 entries")

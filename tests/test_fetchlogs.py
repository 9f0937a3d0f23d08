"""The fetchlog of every round (crawl_io.crawldb.fetchlogs): the `fetchlog` view reads each round
once, from its segment or, once keep_rounds removed the segment, from the part kept in
segments/fetchlogs/; `check` reads kept parts in full and `check --repair` moves a damaged
one aside."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from sharecrawl.crawl_io.crawldb.atomic import write_parquet
from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir
from sharecrawl.crawl_io.crawldb.fetchlogs import damaged_fetchlogs, fetchlog_parts, kept_fetchlog
from sharecrawl.crawl_io.schema import FETCHLOG
from sharecrawl.queries.views import run_sql
from tests.conftest import LAN

ROWS_A_ROUND = 3
BY_ROUND = "SELECT round, count(*) FROM fetchlog GROUP BY round ORDER BY round"


def fetchlog_of(round_: int) -> pa.Table:
    rows = {f.name: pa.nulls(ROWS_A_ROUND, f.type) for f in FETCHLOG}
    rows["round"] = pa.array([round_] * ROWS_A_ROUND, FETCHLOG.field("round").type)
    rows["host"] = pa.array([f"pc-{i}" for i in range(ROWS_A_ROUND)], pa.string())
    return pa.table(rows, schema=FETCHLOG)


def crawl_of(root: Path, live: int, kept_up_to: int) -> CrawlDir:
    """Rounds 1 to `live` finished, each with its fetchlog: kept (its segment removed) up
    to round `kept_up_to`, in its segment after it. Only the fetchlog view is read."""
    crawl = CrawlDir(root)
    for round_ in range(1, live + 1):
        if round_ <= kept_up_to:
            part = kept_fetchlog(crawl, round_)
        else:
            part = crawl.segment_dir(round_) / "fetchlog.parquet"
        part.parent.mkdir(parents=True, exist_ok=True)
        write_parquet(fetchlog_of(round_), part)
    (crawl.version_dir(live)).mkdir(parents=True)
    (crawl.version_dir(live) / "MANIFEST.json").write_text('{"format": 1, "parts": {}}')
    (crawl.crawldb / "CURRENT").write_text(f"v{live:06d}\n")
    return crawl


def garble_pages(path: Path) -> None:
    """Flip bytes of a page; the footer stays whole."""
    data = bytearray(path.read_bytes())
    for i in range(len(data) // 3, len(data) // 3 + 32):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def test_the_view_reads_kept_parts_and_segments_each_round_once(tmp_path: Path) -> None:
    crawl = crawl_of(tmp_path, live=6, kept_up_to=3)
    assert dict(run_sql(crawl, BY_ROUND, pytest.fail)[1]) == {r: 3 for r in range(1, 7)}
    parts = fetchlog_parts(crawl.segments, 4)  # the rounds up to version 4
    assert [p.name for p in parts[:3]] == ["r000001.parquet", "r000002.parquet", "r000003.parquet"]
    assert [p.parent.name for p in parts[3:]] == ["r000004"]


def test_a_damaged_kept_part_is_named_and_left_out(tmp_path: Path) -> None:
    crawl = crawl_of(tmp_path, live=4, kept_up_to=2)
    garble_pages(kept_fetchlog(crawl, 2))
    ((path, what),) = damaged_fetchlogs(crawl.segments)
    assert path == kept_fetchlog(crawl, 2) and what.startswith("does not read as Parquet"), what
    warned: list[str] = []
    assert dict(run_sql(crawl, BY_ROUND, warned.append)[1]) == {1: 3, 3: 3, 4: 3}
    assert len(warned) == 1 and "fetchlogs/r000002.parquet" in warned[0]


def test_check_reads_kept_parts_and_repair_moves_a_damaged_one_aside(
    lan: LAN,
    luigi_cfg: Callable[[str], None],
    run_json: Callable[..., object],
    capsys: pytest.CaptureFixture[str],
) -> None:
    luigi_cfg("[sharecrawl]\nkeep_rounds = 2\n")
    lan.media("alpha", "music/song.mp3", artist="Madonna", title="Music")
    lan.write_hosts("alpha")
    lan.crawl(rounds=3)
    crawl = CrawlDir(lan.crawl_dir)
    kept = kept_fetchlog(crawl, 1)
    garble_pages(kept)
    capsys.readouterr()
    assert lan.cli("check") == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith(f"{kept}: does not read as Parquet"), out
    assert lan.cli("check", "--repair") == 0
    assert "moved damaged segments/fetchlogs/r000001.parquet" in capsys.readouterr().out
    assert not kept.exists() and crawl.current() == 3
    assert lan.cli("check") == 0
    rounds = run_json(lan, "sql", "SELECT round, count(*) AS n FROM fetchlog GROUP BY ALL")
    assert sorted((r["round"], r["n"]) for r in rounds) == [(2, 1), (3, 1)]

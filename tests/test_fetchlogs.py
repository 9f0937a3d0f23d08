"""The fetchlog of every round in spans (crawl_io.fetchlogs): once a block of rounds is
retired, its parts are written as one span, which the `fetchlog` view reads in their place,
each round once; a segment's own fetchlog stays, a kept one goes a round after its span; a
part that does not read keeps its block as it is; `check --repair` moves aside a span that
holds rounds it takes back."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from crawl_io import fetchlogs
from crawl_io.atomic import write_parquet
from crawl_io.crawldir import CrawlDir
from crawl_io.fetchlogs import (
    compact_fetchlogs,
    damaged_fetchlogs,
    fetchlog_parts,
    kept_fetchlog,
)
from crawl_io.schema import FETCHLOG
from queries.views import run_sql
from tests.conftest import LAN
from tests.small_disk import free_all, leave_free

ROWS_A_ROUND = 3


def fetchlog_of(round_: int) -> pa.Table:
    rows = {f.name: pa.nulls(ROWS_A_ROUND, f.type) for f in FETCHLOG}
    rows["round"] = pa.array([round_] * ROWS_A_ROUND, FETCHLOG.field("round").type)
    rows["host"] = pa.array([f"pc-{i}" for i in range(ROWS_A_ROUND)], pa.string())
    return pa.table(rows, schema=FETCHLOG)


def crawl_of(root: Path, live: int, kept_up_to: int = 0) -> CrawlDir:
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


def rows_by_round(crawl: CrawlDir) -> dict[int, int]:
    sql = "SELECT round, count(*) FROM fetchlog GROUP BY round ORDER BY round"
    return dict(run_sql(crawl, sql, pytest.fail)[1])


def kept_names(crawl: CrawlDir) -> list[str]:
    return sorted(p.name for p in (crawl.segments / "fetchlogs").iterdir())


def test_retired_blocks_become_spans_read_in_place_of_their_rounds(tmp_path: Path) -> None:
    crawl = crawl_of(tmp_path, live=10)
    every_round = {r: ROWS_A_ROUND for r in range(1, 11)}
    assert rows_by_round(crawl) == every_round
    made = compact_fetchlogs(crawl, keep=0, span=4)
    assert [p.name for p in made] == ["r000001-r000004.parquet", "r000005-r000008.parquet"]
    assert rows_by_round(crawl) == every_round  # each round once, not once more by its span
    parts = fetchlog_parts(crawl.segments, 10)
    assert [p.name for p in parts[:2]] == [p.name for p in made]
    assert [p.parent.name for p in parts[2:]] == ["r000009", "r000010"]
    # the segments are the rounds' record: their fetchlogs stay
    assert all((crawl.segment_dir(r) / "fetchlog.parquet").exists() for r in range(1, 11))
    assert compact_fetchlogs(crawl, keep=0, span=4) == []  # nothing more is retired


def test_kept_parts_go_a_round_after_their_span(tmp_path: Path) -> None:
    """With keep_rounds 3 a block is retired once its last round is 3 rounds behind the
    live one; the kept parts its span holds are deleted by the next compaction, not the
    one that wrote it (a reader may have listed them just before)."""
    crawl = crawl_of(tmp_path, live=10, kept_up_to=6)
    every_round = {r: ROWS_A_ROUND for r in range(1, 11)}
    assert [p.name for p in compact_fetchlogs(crawl, keep=3, span=4)] == [
        "r000001-r000004.parquet"  # rounds 5 to 8: 8 is not yet before the last 3
    ]
    assert kept_names(crawl) == sorted(
        [f"r{r:06d}.parquet" for r in range(1, 7)] + ["r000001-r000004.parquet"]
    )
    assert rows_by_round(crawl) == every_round
    assert compact_fetchlogs(crawl, keep=3, span=4) == []
    assert kept_names(crawl) == ["r000001-r000004.parquet", "r000005.parquet", "r000006.parquet"]
    assert rows_by_round(crawl) == every_round


def garble_pages(path: Path) -> None:
    """Flip bytes of a page; the footer stays whole."""
    data = bytearray(path.read_bytes())
    for i in range(len(data) // 3, len(data) // 3 + 32):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def test_kept_parts_stay_while_their_span_does_not_read(tmp_path: Path) -> None:
    crawl = crawl_of(tmp_path, live=10, kept_up_to=6)
    (span,) = compact_fetchlogs(crawl, keep=3, span=4)
    garble_pages(span)
    ((path, what),) = damaged_fetchlogs(crawl.segments)
    assert path == span and what.startswith("does not read as Parquet"), what
    assert compact_fetchlogs(crawl, keep=3, span=4) == []
    assert kept_names(crawl) == sorted(
        [f"r{r:06d}.parquet" for r in range(1, 7)] + ["r000001-r000004.parquet"]
    )


def test_a_part_that_does_not_read_keeps_its_block(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    crawl = crawl_of(tmp_path, live=8)
    damaged = crawl.segment_dir(6) / "fetchlog.parquet"
    damaged.write_bytes(damaged.read_bytes()[:100])
    with caplog.at_level(logging.WARNING, logger="sharecrawl"):
        made = compact_fetchlogs(crawl, keep=0, span=4)
    assert [p.name for p in made] == ["r000001-r000004.parquet"]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "r000006/fetchlog.parquet does not read" in lines[0]
    warned: list[str] = []
    sql = "SELECT round, count(*) FROM fetchlog GROUP BY round ORDER BY round"
    assert dict(run_sql(crawl, sql, warned.append)[1]) == {
        r: ROWS_A_ROUND for r in range(1, 9) if r != 6
    }
    assert len(warned) == 1 and "r000006/fetchlog.parquet" in warned[0]


def test_a_span_on_a_full_disk_is_one_warning_and_written_next_time(
    small_disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    crawl = crawl_of(small_disk / "crawl", live=4)
    leave_free(small_disk, 0)
    with caplog.at_level(logging.WARNING, logger="sharecrawl"):
        assert compact_fetchlogs(crawl, keep=0, span=4) == []
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "No space left on device" in lines[0], lines
    assert "the next round tries again" in lines[0]
    assert kept_names(crawl) == []  # nothing half-written, no temporary file left
    free_all(small_disk)
    assert rows_by_round(crawl) == {r: ROWS_A_ROUND for r in range(1, 5)}
    assert [p.name for p in compact_fetchlogs(crawl, keep=0, span=4)] == ["r000001-r000004.parquet"]
    assert kept_names(crawl) == ["r000001-r000004.parquet"]


def test_spans_never_overlap_in_the_view(tmp_path: Path) -> None:
    """A span overlapping an earlier one (none is written so: spans of another size from
    another release are left alone) is not read, lest its rounds count twice."""
    crawl = crawl_of(tmp_path, live=8)
    compact_fetchlogs(crawl, keep=0, span=2)
    assert compact_fetchlogs(crawl, keep=0, span=4) == []  # every block is partly in spans
    overlapping = crawl.segments / "fetchlogs" / "r000002-r000005.parquet"
    overlapping.write_bytes((crawl.segments / "fetchlogs" / "r000001-r000002.parquet").read_bytes())
    assert rows_by_round(crawl) == {r: ROWS_A_ROUND for r in range(1, 9)}


def three_rounds(lan: LAN, monkeypatch: pytest.MonkeyPatch) -> CrawlDir:
    """A real crawl of three rounds, with spans of two rounds."""
    monkeypatch.setattr(fetchlogs, "SPAN_ROUNDS", 2)
    lan.media("alpha", "music/song.mp3", artist="Madonna", title="Music")
    lan.write_hosts("alpha")
    lan.crawl(rounds=3)
    return CrawlDir(lan.crawl_dir)


def test_a_crawl_writes_spans_and_repair_takes_back_those_past_its_version(
    lan: LAN, monkeypatch: pytest.MonkeyPatch, run_json: Callable[..., object]
) -> None:
    crawl = three_rounds(lan, monkeypatch)
    assert kept_names(crawl) == ["r000001-r000002.parquet"]
    assert lan.cli("check") == 0
    rounds = run_json(lan, "sql", "SELECT round, count(*) AS n FROM fetchlog GROUP BY ALL")
    assert sorted(r["round"] for r in rounds) == [1, 2, 3]
    assert all(r["n"] == 1 for r in rounds)  # one partition a round, each round once

    (crawl.version_dir(3) / "MANIFEST.json").unlink()
    (crawl.version_dir(2) / "MANIFEST.json").unlink()
    assert lan.cli("check", "--repair") == 0
    assert crawl.current() == 1
    assert not (crawl.segments / "fetchlogs" / "r000001-r000002.parquet").exists()
    rounds = run_json(lan, "sql", "SELECT DISTINCT round FROM fetchlog ORDER BY round")
    assert [r["round"] for r in rounds] == [1]
    lan.crawl(rounds=2)  # rounds 2 and 3 again, found anew
    assert kept_names(crawl) == ["r000001-r000002.parquet"]
    rounds = run_json(lan, "sql", "SELECT round, count(*) AS n FROM fetchlog GROUP BY ALL")
    assert sorted((r["round"], r["n"]) for r in rounds) == [(1, 1), (2, 1), (3, 1)]


def test_check_reads_spans_and_repair_moves_a_damaged_one_aside(
    lan: LAN,
    monkeypatch: pytest.MonkeyPatch,
    run_json: Callable[..., object],
    capsys: pytest.CaptureFixture[str],
) -> None:
    crawl = three_rounds(lan, monkeypatch)
    span = crawl.segments / "fetchlogs" / "r000001-r000002.parquet"
    garble_pages(span)

    capsys.readouterr()
    assert lan.cli("check") == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith(f"{span}: does not read as Parquet"), out
    assert lan.cli("check", "--repair") == 0
    assert "moved damaged segments/fetchlogs/r000001-r000002.parquet" in capsys.readouterr().out
    assert not span.exists() and crawl.current() == 3
    assert lan.cli("check") == 0
    rounds = run_json(lan, "sql", "SELECT round, count(*) AS n FROM fetchlog GROUP BY ALL")
    assert sorted((r["round"], r["n"]) for r in rounds) == [(1, 1), (2, 1), (3, 1)]
    lan.crawl()  # round 4 writes the span of rounds 1 and 2 again, and that of 3 and 4
    assert kept_names(crawl) == ["r000001-r000002.parquet", "r000003-r000004.parquet"]

"""Scan histories as arrays agree with the per-partition Python forms they replace."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pytest

from sharecrawl.crawl_io.schema import PARTITIONS
from sharecrawl.pipeline.scheduling.history import Histories
from sharecrawl.pipeline.scheduling.rates import estimate_rate

NOW = 1_700_000_000.0
DAY = 86400.0


def table(histories: list[list[tuple[float, bool]] | None]) -> pa.Table:
    rows = [
        {
            "partition_id": f"p{i}",
            "host": "h",
            "share": "s",
            "root": "",
            "history": None
            if h is None
            else [
                {"t": datetime.fromtimestamp(t, UTC), "changed": c, "complete": False} for t, c in h
            ],
        }
        for i, h in enumerate(histories)
    ]
    return pa.Table.from_pylist(rows, PARTITIONS)


def random_histories(n: int, seed: int = 7) -> list[list[tuple[float, bool]]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        k = int(rng.integers(0, 40))
        times = np.sort(NOW - rng.uniform(0, 40 * DAY, k)).round(3)
        out.append([(float(t), bool(rng.random() < 0.3)) for t in times])
    return out


def test_round_trip_through_the_column() -> None:
    given = [[(NOW - 7200, False), (NOW - 3600, True)], [], None, [(NOW, True)]]
    hist = Histories.of(table(given))
    assert hist.events() == [given[0], [], [], given[3]]
    assert hist.column().to_pylist() == table([g or [] for g in given])["history"].to_pylist()


def test_updated_windows_appends_and_reorders() -> None:
    hist = Histories.of(table([[(NOW - 40 * DAY, True), (NOW - DAY, False)], [(NOW - 5, True)]]))
    since = round((NOW - 30 * DAY) * 1e6)
    new = {"p1": (round(NOW * 1e6), False), "p9": (round(NOW * 1e6), True)}
    out = hist.updated(["p1", "p9", "p0", "p5"], new, since_us=since)
    assert out.ids == ["p1", "p9", "p0", "p5"]
    assert out.events() == [
        [(NOW - 5, True), (NOW, False)],
        [(NOW, True)],
        [(NOW - DAY, False)],
        [],
    ]
    assert hist.updated([]).events() == []


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_rates_equal_the_per_partition_estimate(seed: int) -> None:
    given = random_histories(60, seed)
    rates = Histories.of(table(given)).rates_per_s(NOW)
    # Update keeps only the window's scans, so an interval reaching back before it is gone.
    expected = [estimate_rate([e for e in h if e[0] >= NOW - 30 * DAY], NOW) for h in given]
    np.testing.assert_allclose(rates, expected, rtol=1e-6)


def test_complete_events_count_as_notified_changes_over_watched_time() -> None:
    """Scans made because a change was notified end each interval at a change: as scan
    outcomes they read as 'always changed' and the rate comes out far too high; as complete
    signals (the watch saw every change) the estimate is changes / watched time."""
    rng = np.random.default_rng(3)
    gaps = rng.exponential(3600.0, 200)  # one change an hour, each scanned right after it
    times = NOW - np.cumsum(gaps[::-1])[::-1]
    events = [(float(t), True) for t in times]
    hist = Histories.of(table([events, events]))
    t_us = hist.t_us.copy()
    hist = Histories(
        hist.ids, hist.offsets, t_us, hist.changed, np.r_[np.ones(200, bool), np.zeros(200, bool)]
    )
    complete, incomplete = hist.rates_per_s(NOW)
    truth = 199 / float(times[-1] - times[0])
    assert complete == pytest.approx(truth, rel=0.02)
    assert incomplete > 3 * truth  # what scan outcomes alone make of it
    # complete survives the column, and a new event may say it
    column = hist.updated(["p0"], {"p0": (round(NOW * 1e6), False, True)}).column()
    again = Histories.of(pa.table({"partition_id": ["p0"], "history": column}))
    assert again.complete.all() and again.events()[0][-1] == (NOW, False)


def test_histories_written_before_complete_existed_read_as_incomplete() -> None:
    old_event = pa.struct([("t", pa.timestamp("us", tz="UTC")), ("changed", pa.bool_())])
    column = pa.array(
        [[{"t": datetime.fromtimestamp(NOW, UTC), "changed": True}]], pa.list_(old_event)
    )
    legacy = pa.table({"partition_id": ["p0"], "history": column})
    hist = Histories.of(legacy)
    assert hist.complete.tolist() == [False] and hist.events() == [[(NOW, True)]]

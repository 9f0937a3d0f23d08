"""Time can jump: a round whose clock moved (±1 hour, ±100 years) since the last one still
scans within its budget, with finite rates and no error, whatever the policy. A time stored in
the future (a last scan, a hint) is taken as now, and a partition last scanned in the future is
due again, so that its next scan stores a time of the clock now in use."""

from __future__ import annotations

import logging
import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pytest

from sharecrawl.crawl_io.crawldb.hints import HINTS, WATCHES, HintsSnapshot
from sharecrawl.crawl_io.crawldb.hints_writer import HintsWriter
from sharecrawl.crawl_io.schema import PARTITIONS
from sharecrawl.pipeline import generate
from sharecrawl.pipeline.scheduling.choice import Budget, Candidates, PartitionState
from sharecrawl.pipeline.scheduling.history import Histories
from sharecrawl.pipeline.scheduling.policies import POLICY_NAMES, get_policy
from sharecrawl.pipeline.scheduling.signals import apply_signals
from tests.conftest import LAN
from tests.test_hinted_rounds import build, fetchlog, watch
from tests.test_policies import check_budget

T0 = 1_700_000_000.0  # the clock of the rounds so far
HOUR = 3600.0
CENTURY = 100 * 365.25 * 86400.0
JUMPS = [HOUR, -HOUR, CENTURY, -CENTURY]


def scanned_parts(n: int = 12) -> list[PartitionState]:
    """Partitions on four hosts, scanned hourly by the rounds so far (the last at T0), most
    scans finding a change (so that each policy has some due an hour later); half of them
    without a stored rate (estimated from the history)."""
    parts = []
    for i in range(n):
        history = [(T0 - HOUR * k, (i + k) % 4 != 0) for k in range(5, -1, -1)]
        rate = None if i % 2 else 0.2 + 0.1 * i
        parts.append(PartitionState(f"p{i}", f"h{i % 4}", 4.0 + i, T0, history, rate))
    return parts


@pytest.mark.parametrize("jump", JUMPS)
@pytest.mark.parametrize("name", POLICY_NAMES)
def test_every_policy_scans_after_a_jump(name: str, jump: float) -> None:
    policy = get_policy(name)
    budget = Budget(crawlers=2, round_seconds=60.0)
    parts = scanned_parts()
    assert policy.choose(parts, T0 + 60.0, budget) is not None  # memos of the clock before
    now = T0 + jump
    cands = Candidates.of(parts, now)
    assert np.all(np.isfinite(cands.rate_per_s)) and np.all(cands.rate_per_s > 0)
    assert np.all(cands.age_s >= 0)
    chosen = policy.choose(parts, now, budget)
    assert chosen, f"{name}: 0 of {len(parts)} partitions after a jump of {jump:+.0f} s"
    check_budget(parts, chosen, budget)
    # The rounds go on: what was scanned is stored with the new clock; an hour later every
    # partition has been scanned (the budget holds them all in two rounds).
    seen = set(chosen)
    for p in parts:
        if p.partition_id in seen:
            p.last_scan = now
            p.history.append((now, False))
    later = policy.choose(parts, now + HOUR, budget)
    check_budget(parts, later, budget)
    assert seen | set(later) == {p.partition_id for p in parts}


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_a_last_scan_in_the_future_is_now_and_due(name: str) -> None:
    """Scanned at T0 under a clock a century fast: with the clock right, every partition is due
    (none waits a century), ranked as if scanned now, rates as before."""
    now = T0 - CENTURY
    parts = scanned_parts(4)
    cands = Candidates.of(parts, now)
    assert cands.age_s.tolist() == [0.0, 0.0, 0.0, 0.0]
    assert all(math.isfinite(r) for r in cands.rate_per_s)
    # a roomy budget: all four, whatever the policy's score
    chosen = get_policy(name).choose(parts, now, Budget(crawlers=4, round_seconds=600.0))
    assert sorted(chosen) == ["p0", "p1", "p2", "p3"]


def test_a_watched_silent_partition_scanned_in_the_future_is_not_skipped() -> None:
    """A trusted, unbroken watch and no hint: skipped until the safety interval after its
    last scan, unless that scan is in the future (then the interval would never pass)."""
    from sharecrawl.jobs.hint_counts import PartitionSignal

    parts = scanned_parts(2)
    parts[1].last_scan = T0 - 2 * HOUR  # scanned before the clock moved back: silent
    rows = {p.partition_id: {"hash": "h", "status": "ok"} for p in parts}
    quiet = PartitionSignal(frozenset(), False, True, None)
    signals = {p.partition_id: quiet for p in parts}
    seen = apply_signals(parts, rows, signals, {"h0": True, "h1": True}, T0 - HOUR, 86400.0)
    assert [s.partition_id for s in seen.states] == ["p0"]
    assert seen.silent == 1


# -- real rounds over file:// hosts, the round's time moved (pipeline.generate.round_now, in
# this process's rounds) ----------------------------------------------------------------------


def ahead_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "in the future" in r.getMessage()]


def scanned(lan: LAN) -> list[tuple[str, str, str]]:
    return sorted((r["host"], r["share"], r["reason"]) for r in fetchlog(lan))


@pytest.mark.parametrize("jump", [-HOUR, -CENTURY, CENTURY])
def test_a_round_after_the_clock_jumped_scans_and_says_so(
    lan: LAN, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, jump: float
) -> None:
    build(lan)
    lan.crawl()
    watch(lan)  # alpha's shares trusted and watched: silent, skipped for a day
    real = generate.round_now()
    monkeypatch.setattr(generate, "round_now", lambda: real + jump)
    caplog.set_level(logging.INFO, "sharecrawl")
    lan.crawl_here()  # in this process, whose clock moved
    if jump < 0:
        assert ahead_lines(caplog) == [
            "sharecrawl: round 2: 3 partitions last scanned in the future (the clock moved "
            "back?): treated as now"
        ]
    else:
        assert ahead_lines(caplog) == []
    # not "0 of 3": all three, a century fast or slow, even alpha's silent ones
    assert scanned(lan) == [
        ("alpha", "films", "scheduled"),
        ("alpha", "music", "scheduled"),
        ("beta", "share", "scheduled"),
    ]
    monkeypatch.undo()  # the clock right again: the stored times are of the clock in use
    caplog.clear()
    watch(lan)
    lan.crawl_here()
    assert ahead_lines(caplog) == []
    assert scanned(lan) == [("beta", "share", "scheduled")]  # alpha's silence trusted again


def test_a_hint_from_the_future_is_taken_as_now(
    lan: LAN, capsys: pytest.CaptureFixture[str]
) -> None:
    build(lan)
    lan.crawl()
    watch(lan)
    writer = HintsWriter(lan.crawl_dir)
    try:
        writer.append(
            [
                {
                    "host": "alpha",
                    "share": "music",
                    "path": "Album 03/track.mp3",
                    "overflow": False,
                    "action": "modified",
                    "seen_at": datetime.now(UTC) + timedelta(hours=1),
                }
            ]
        )
    finally:
        writer.close()
    capsys.readouterr()
    lan.crawl()
    ahead = [line for line in capsys.readouterr().err.splitlines() if "in the future" in line]
    assert ahead == [
        "sharecrawl: round 2: 1 hint seen in the future (the clock moved back?): treated as now"
    ]
    assert scanned(lan) == [("alpha", "music", "hint"), ("beta", "share", "scheduled")]


@pytest.mark.parametrize("jump", JUMPS)
def test_stored_rows_from_another_clock_give_states_and_finite_rates(jump: float) -> None:
    """A partitions table written under a clock `jump` away (its last scan, first seen and
    history there): the policies' states, the rate estimate of every partition and the line
    that says what is in the future."""
    at = datetime.fromtimestamp(T0, UTC)
    rows = [
        {
            "partition_id": f"p{i}",
            "host": "h",
            "share": "s",
            "root": "",
            "hash": "x",
            "last_scan": at,
            "first_seen": at - timedelta(hours=6),
            "rate_per_h": None,
            "history": [
                {"t": at - timedelta(hours=k), "changed": k % 2 == i, "complete": False}
                for k in range(6, -1, -1)
            ],
        }
        for i in range(2)
    ]
    table = pa.Table.from_pylist(rows, PARTITIONS)
    now = T0 - jump  # the clock now in use, `jump` away from the stored times
    states = generate.partition_states(
        table, table.drop_columns(["history"]).to_pylist(), {"h": True}, 5.0
    )
    assert [s.last_scan for s in states] == [T0, T0]
    rates = Histories.of(table).rates_per_s(now)
    assert np.all(np.isfinite(rates)) and np.all(rates > 0)
    cands = Candidates.of(states, now)
    assert np.all(np.isfinite(cands.rate_per_s))
    snapshot = HintsSnapshot(
        HINTS.empty_table(), WATCHES.empty_table(), datetime.fromtimestamp(now, UTC)
    )
    line = generate.ahead_of(now, states, snapshot)
    if jump > 0:
        assert (
            line
            == "2 partitions last scanned in the future (the clock moved back?): treated as now"
        )
    else:
        assert line is None


def test_a_file_first_seen_in_the_future_is_first_seen_at_the_scan() -> None:
    """A stored row first seen a century ahead (the clock ran ahead, then was set right) is
    first seen at the scan that lists it again; a new row at that scan, an old one keeps its
    time."""
    from sharecrawl.crawl_io.schema import FETCHLOG, FILES, LISTING
    from sharecrawl.pipeline.host_merge import merged_files

    scan = datetime(2026, 11, 27, 12, tzinfo=UTC)
    stored = {"ahead.mp3": scan + timedelta(days=36525), "old.mp3": scan - timedelta(days=3)}

    def rows(names: list[str], extra: dict) -> list[dict]:
        row = {"host": "h", "share": "s", "is_dir": False, "size": 1, "partition_id": "p"}
        return [
            {**row, "path": n, "name": n, "mtime": scan, **{k: v(n) for k, v in extra.items()}}
            for n in names
        ]

    old = pa.Table.from_pylist(
        rows(list(stored), {"first_seen": stored.get, "last_seen": lambda n: scan}), FILES
    )
    listing = pa.Table.from_pylist(rows([*stored, "new.mp3"], {}), LISTING)
    log = pa.Table.from_pylist(
        [{"partition_id": "p", "host": "h", "share": "s", "started": scan, "status": "changed"}],
        FETCHLOG,
    )
    merged = merged_files(old, listing, log, {"p"}).to_pylist()
    first_seen = {r["path"]: r["first_seen"].astimezone(UTC) for r in merged}
    assert first_seen == {"ahead.mp3": scan, "new.mp3": scan, "old.mp3": stored["old.mp3"]}

"""The change-rate estimator recovers known Poisson rates from changed/unchanged scan outcomes."""

from __future__ import annotations

import numpy as np
import pytest

from sharecrawl.pipeline.scheduling.rates import (
    DEFAULT_PRIOR_RATE_PER_S,
    estimate_rate,
    estimate_rates,
    intervals,
)

HOUR = 3600.0
DAY = 86400.0
WINDOW = 30 * DAY


def scan_history(
    rate_per_s: float, scan_times: np.ndarray, rng: np.random.Generator
) -> list[tuple[float, bool]]:
    """Outcomes of scans at the given times of a partition changing as a Poisson process."""
    changes = np.sort(rng.uniform(0, scan_times[-1], rng.poisson(rate_per_s * scan_times[-1])))
    counts = np.searchsorted(changes, scan_times, side="right")
    changed = np.diff(counts, prepend=0) > 0
    changed[0] = False  # the first scan has nothing to compare with
    return list(zip(scan_times.tolist(), changed.tolist(), strict=True))


def regular(every_s: float) -> np.ndarray:
    return np.arange(0.0, WINDOW, every_s)


def irregular(mean_every_s: float, rng: np.random.Generator) -> np.ndarray:
    gaps = rng.exponential(mean_every_s, int(WINDOW / mean_every_s))
    return np.cumsum(gaps)


@pytest.mark.parametrize("rate_per_h", [0.02, 0.2, 1.0])
def test_regular_scans_recover_rate(rate_per_h: float) -> None:
    rng = np.random.default_rng(1)
    estimates = [
        estimate_rate(scan_history(rate_per_h / HOUR, regular(HOUR), rng), WINDOW) * HOUR
        for _ in range(20)
    ]
    assert np.mean(estimates) == pytest.approx(rate_per_h, rel=0.1)


@pytest.mark.parametrize("rate_per_h", [0.05, 0.5, 2.0])
def test_irregular_scans_recover_rate(rate_per_h: float) -> None:
    rng = np.random.default_rng(2)
    estimates = [
        estimate_rate(scan_history(rate_per_h / HOUR, irregular(HOUR, rng), rng), WINDOW) * HOUR
        for _ in range(20)
    ]
    assert np.mean(estimates) == pytest.approx(rate_per_h, rel=0.1)


def naive_rate(history: list[tuple[float, bool]], now: float) -> float:
    """Detected changes divided by observed time."""
    dt, changed = intervals(history, now)
    return float(changed.sum() / dt.sum()) if dt.size else 0.0


def test_changes_outpacing_scans_naive_biased_low_mle_not() -> None:
    """Three changes an hour, scans every hour (regular) or every hour on average (irregular):
    most scans find a change, so changes per scanned hour saturate near one."""
    rng = np.random.default_rng(3)
    rate = 3.0 / HOUR
    for times in (regular(HOUR), irregular(HOUR, rng)):
        history = scan_history(rate, times, rng)
        naive = naive_rate(history, WINDOW)
        mle = estimate_rate(history, WINDOW)
        assert naive < 0.5 * rate  # biased low by more than half
        assert mle == pytest.approx(rate, rel=0.15)


def test_new_partition_gets_the_prior() -> None:
    assert estimate_rate([], 0.0) == pytest.approx(DEFAULT_PRIOR_RATE_PER_S)
    assert estimate_rate([(100.0, False)], 200.0) == pytest.approx(DEFAULT_PRIOR_RATE_PER_S)
    assert estimate_rate([], 0.0, prior_rate_per_s=1e-4) == pytest.approx(1e-4)


def test_all_changed_or_none_stays_finite() -> None:
    always = [(i * HOUR, True) for i in range(50)]
    never = [(i * HOUR, False) for i in range(24 * 30)]
    high = estimate_rate(always, 50 * HOUR)
    low = estimate_rate(never, 30 * DAY)
    assert np.isfinite(high) and high > 2.0 / HOUR  # at least a couple of changes an hour
    assert 0 < low < DEFAULT_PRIOR_RATE_PER_S  # a month unchanged lowers the prior


def test_window_forgets_old_scans() -> None:
    """Busy two months ago, quiet for the last month: the 30-day window sees only the quiet."""
    old = [(i * HOUR, True) for i in range(24 * 30)]
    recent = [(40 * DAY + i * HOUR, False) for i in range(24 * 30)]
    now = 70 * DAY
    assert estimate_rate(old + recent, now) < DEFAULT_PRIOR_RATE_PER_S
    assert estimate_rate(old + recent, now, window_s=100 * DAY) > 0.1 / HOUR


def test_intervals_skip_first_scan_and_window() -> None:
    history = [(0.0, True), (10.0, True), (30.0, False), (60.0, True)]
    dt, changed = intervals(history, now=60.0, window_s=40.0)
    assert dt.tolist() == [20.0, 30.0]
    assert changed.tolist() == [False, True]


def test_batch_matches_single() -> None:
    rng = np.random.default_rng(4)
    histories = [scan_history(r / HOUR, irregular(2 * HOUR, rng), rng) for r in (0.1, 1, 4)]
    single = [estimate_rate(h, WINDOW) for h in histories]
    dts, groups, unchanged = [], [], []
    for g, h in enumerate(histories):
        dt, changed = intervals(h, WINDOW)
        dts.append(dt[changed])
        groups.append(np.full(int(changed.sum()), g))
        unchanged.append(dt[~changed].sum())
    batch = estimate_rates(
        changed_dt=np.concatenate(dts),
        changed_weight=np.ones(sum(len(d) for d in dts)),
        changed_group=np.concatenate(groups),
        unchanged_s=np.array(unchanged),
    )
    assert batch == pytest.approx(single, rel=1e-6)


def test_complete_signals_give_count_over_time() -> None:
    """Notified changes are complete observations: with a weak prior the estimate is k / T."""
    rate = estimate_rate([], 0.0, notified_changes=500, watched_s=100 * HOUR, prior_weight=1e-9)
    assert rate * HOUR == pytest.approx(5.0, rel=1e-6)
    # Nothing notified over a long watch: far below the prior, still positive.
    quiet = estimate_rate([], 0.0, notified_changes=0, watched_s=30 * DAY)
    assert 0 < quiet < DEFAULT_PRIOR_RATE_PER_S


def test_complete_signals_beat_scan_outcomes_when_changes_outpace_scans() -> None:
    """Ten changes an hour, scans every hour: nearly every scan finds a change, so scan
    outcomes say little about how many; the notifications of the same time say it all."""
    rng = np.random.default_rng(6)
    rate = 10.0 / HOUR
    errors_scans, errors_notified = [], []
    for _ in range(20):
        times = regular(HOUR)[: 24 * 7]
        history = scan_history(rate, times, rng)
        span = times[-1] - times[0]
        k = rng.poisson(rate * span)
        errors_scans.append(abs(estimate_rate(history, times[-1]) / rate - 1))
        errors_notified.append(
            abs(estimate_rate([], 0.0, notified_changes=k, watched_s=span) / rate - 1)
        )
    assert np.mean(errors_notified) < 0.05
    assert np.mean(errors_notified) < np.mean(errors_scans) / 3


def test_complete_and_incomplete_signals_add_up() -> None:
    """A partition watched half the time and polled the other half: both halves inform one
    estimate, closer to the truth than either alone on average."""
    rng = np.random.default_rng(8)
    rate = 0.5 / HOUR
    both, polled = [], []
    for _ in range(30):
        times = irregular(2 * HOUR, rng)
        times = times[times < 15 * DAY]
        history = scan_history(rate, times, rng)
        k = rng.poisson(rate * 15 * DAY)
        polled.append(estimate_rate(history, 30 * DAY))
        both.append(estimate_rate(history, 30 * DAY, notified_changes=k, watched_s=15 * DAY))
    assert np.mean(both) == pytest.approx(rate, rel=0.05)
    assert np.std(both) < np.std(polled)
    batch = estimate_rates(
        changed_dt=np.empty(0),
        changed_weight=np.empty(0),
        changed_group=np.empty(0, dtype=np.intp),
        unchanged_s=np.array([0.0, 10 * DAY]),
        notified_changes=np.array([12.0, 0.0]),
        watched_s=np.array([DAY, 0.0]),
        prior_weight=1e-9,
    )
    assert batch[0] * DAY == pytest.approx(12.0, rel=1e-6)

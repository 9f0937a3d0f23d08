"""The optimum at the true rates: the expected freshness of Cho & Garcia-Molina's optimal
periodic refresh under the crawlers' budget, given the rates the trace realised (the `optimal`
policy's solver), which no policy that only knows estimated rates should beat. As the replay
measures: changes and staleness only while the host is on (over all the time, the bound fell
below round robin on small LANs); LUCK_SD standard deviations of where changes fall between
scans allowed; tag reads off the budget first; at most one scan per shortest round. Ignored, in
the policies' disfavour: the per-host limit, idle crawlers, scan durations, failed scans."""

from __future__ import annotations

import numpy as np

from sharecrawl.pipeline.scheduling.optimal import freshness_of, optimal_frequencies
from sharecrawl.simulator.lan import Lan

LUCK_SD = 3.0


def freshness_bound(lan: Lan) -> tuple[float, float]:
    """Time-averaged freshness (all partitions, changing ones) of the optimal refresh."""
    p = lan.params
    period = lan.end - lan.measure_from
    online_s = lan.online_seconds(lan.measure_from, lan.end)[lan.host_of]
    share = online_s / period
    measured = lan.change_time >= lan.measure_from
    n = lan.host_of.size
    changes = np.bincount(lan.change_part[measured], minlength=n)
    rate = changes / np.maximum(online_s, 1.0)
    media = np.diff(lan.cum_media)[measured]
    tag_load = p.tag_s_per_file * float(media.sum()) / period
    freq, _ = optimal_frequencies(
        rate,
        share * lan.list_cost,
        budget_rate=max(p.crawlers - tag_load, 1e-9),
        max_freq=1.0 / min(p.min_round_s, p.round_seconds),
        weight=share,
    )
    stale_s = online_s * (1.0 - freshness_of(rate, freq))
    # The variance of the stale time over the partition's refresh intervals, less the part
    # that comes from the number of changes (it is the trace's, not luck): about N T^2 / 12
    # for N changes far apart, each stale a uniform share of the interval T.
    with np.errstate(divide="ignore", invalid="ignore"):
        from_count = np.where(rate > 0, stale_s**2 / (rate * online_s), 0.0)
    stale_var = np.maximum(online_s * freq * _stale_var_per_interval(rate, freq) - from_count, 0.0)
    changing = lan.rate > 0
    return _upper(stale_s, stale_var, period), _upper(
        stale_s[changing], stale_var[changing], period
    )


def _upper(stale_s: np.ndarray, stale_var: np.ndarray, period: float) -> float:
    """1 - the mean stale share, less LUCK_SD standard deviations of it (at most 1)."""
    if stale_s.size == 0:
        return 1.0
    deficit = (stale_s.sum() - LUCK_SD * np.sqrt(stale_var.sum())) / (period * stale_s.size)
    return float(1.0 - max(deficit, 0.0))


def _stale_var_per_interval(rate: np.ndarray, freq: np.ndarray) -> np.ndarray:
    """Variance of the stale time in one refresh interval T = 1/freq when changes come at
    `rate`: stale for T - u after a first change at u, so with a = rate T,
    E[X] = (a + e^-a - 1) / rate and E[X^2] = (a^2 - 2a + 2 (1 - e^-a)) / rate^2."""
    with np.errstate(divide="ignore", invalid="ignore"):
        period = np.where(freq > 0, 1.0 / freq, 0.0)
        a = rate * period
        small = a < 1e-3  # series, where the closed forms cancel
        a_safe = np.where(small, 1.0, a)
        lam = np.where(rate > 0, rate, 1.0)
        m1 = np.where(small, period * (a / 2 - a**2 / 6), (a_safe + np.expm1(-a_safe)) / lam)
        m2 = np.where(
            small,
            period**2 * (a / 3 - a**2 / 12),
            (a_safe**2 - 2 * a_safe - 2 * np.expm1(-a_safe)) / lam**2,
        )
    var = np.maximum(m2 - m1**2, 0.0)
    return np.where((freq > 0) & (rate > 0), var, 0.0)

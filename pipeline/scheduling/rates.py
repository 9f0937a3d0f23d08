"""Change rates from scans at irregular intervals (thesis §3.5), which tell only whether a
partition changed (so counting changes saturates at one a scan): maximum likelihood for a Poisson
process (Cho & Garcia-Molina, "Estimating frequency of change", 2003),
    log L(l) = sum_changed log(1 - exp(-l dt_i)) - l * sum_unchanged dt_j,
solved by Newton's method in u = log(l) with a log-normal prior. Notified changes are complete
signals (Kolobov et al., NeurIPS 2019): k changes over watched time T add k log(l) - l T."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

DAY_S = 86400.0
DEFAULT_WINDOW_S = 30 * DAY_S
# About 1 % of partitions change on a given day (thesis, §4.2).
DEFAULT_PRIOR_RATE_PER_S = 0.01 / DAY_S
# 1 / variance of log(lambda): a wide prior (sd of 3 in log space, a factor of 20 either way)
# that a handful of scans overrides.
DEFAULT_PRIOR_WEIGHT = 1.0 / 9.0

_MIN_RATE_PER_S = 1e-12  # about one change in 30 000 years
_MAX_RATE_PER_S = 10.0
_NEWTON_STEPS = 60


def intervals(
    history: Sequence[tuple[float, bool]], now: float, window_s: float = DEFAULT_WINDOW_S
) -> tuple[np.ndarray, np.ndarray]:
    """(dt, changed) of the scans inside the window that have a previous scan to compare with."""
    times = np.array([t for t, _ in history], dtype=float)
    changed = np.array([c for _, c in history], dtype=bool)
    order = np.argsort(times, kind="stable")  # history is oldest first; be safe anyway
    times, changed = times[order], changed[order]
    dt = np.diff(times)
    changed = changed[1:]
    keep = (times[1:] >= now - window_s) & (times[1:] <= now) & (dt > 0)
    return dt[keep], changed[keep]


def estimate_rate(
    history: Sequence[tuple[float, bool]],
    now: float,
    *,
    window_s: float = DEFAULT_WINDOW_S,
    prior_rate_per_s: float = DEFAULT_PRIOR_RATE_PER_S,
    prior_weight: float = DEFAULT_PRIOR_WEIGHT,
    notified_changes: int = 0,
    watched_s: float = 0.0,
) -> float:
    """Changes per second of one partition from its (scan time, changed) history over the last
    `window_s` and, when watched, `notified_changes` in `watched_s` seconds (the scans then cover
    only the time outside the watch); the prior when nothing is usable."""
    dt, changed = intervals(history, now, window_s)
    rates = estimate_rates(
        changed_dt=dt[changed],
        changed_weight=np.ones(int(changed.sum())),
        changed_group=np.zeros(int(changed.sum()), dtype=np.intp),
        unchanged_s=np.array([dt[~changed].sum()]),
        prior_rate_per_s=prior_rate_per_s,
        prior_weight=prior_weight,
        notified_changes=np.array([float(notified_changes)]),
        watched_s=np.array([float(watched_s)]),
    )
    return float(rates[0])


def estimate_rates(
    changed_dt: np.ndarray,
    changed_weight: np.ndarray,
    changed_group: np.ndarray,
    unchanged_s: np.ndarray,
    *,
    prior_rate_per_s: float | np.ndarray = DEFAULT_PRIOR_RATE_PER_S,
    prior_weight: float = DEFAULT_PRIOR_WEIGHT,
    notified_changes: np.ndarray | None = None,
    watched_s: np.ndarray | None = None,
) -> np.ndarray:
    """MAP rates (changes per second) of many partitions. Scans that found a change: changed_dt[k]
    with weight changed_weight[k], of partition changed_group[k]; unchanged_s[g]: total interval
    of g's unchanged scans; notified_changes[g] during watched_s[g] seconds of watch."""
    n = len(unchanged_s)
    unchanged_s = np.asarray(unchanged_s, dtype=float)
    notified = np.zeros(n) if notified_changes is None else np.asarray(notified_changes, float)
    watched = np.zeros(n) if watched_s is None else np.asarray(watched_s, dtype=float)
    mu = np.log(np.broadcast_to(np.asarray(prior_rate_per_s, dtype=float), (n,)))
    lo, hi = math.log(_MIN_RATE_PER_S), math.log(_MAX_RATE_PER_S)

    # Start from the naive rate (or the prior): close for slow partitions, and the likelihood
    # is concave in u so Newton's method with bounded steps converges from anywhere.
    n_changed = notified + np.bincount(changed_group, weights=changed_weight, minlength=n)
    exposure = (
        unchanged_s
        + watched
        + np.bincount(changed_group, weights=changed_weight * changed_dt, minlength=n)
    )
    start = np.where(n_changed > 0, n_changed / np.maximum(exposure, 1e-300), np.exp(mu))
    u = np.clip(np.log(np.maximum(start, _MIN_RATE_PER_S)), lo, hi)
    for _ in range(_NEWTON_STEPS):
        rate = np.exp(u)
        x = np.minimum(rate[changed_group] * changed_dt, 700.0)
        q = x / np.expm1(np.maximum(x, 1e-300))  # d/du log(1 - exp(-x)) = x / (e^x - 1)
        q = np.where(x > 1e-300, q, 1.0)
        grad = (
            np.bincount(changed_group, weights=changed_weight * q, minlength=n)
            + notified
            - rate * (unchanged_s + watched)
            - prior_weight * (u - mu)
        )
        curv = (
            np.bincount(changed_group, weights=changed_weight * q * (1.0 - x - q), minlength=n)
            - rate * (unchanged_s + watched)
            - prior_weight
        )
        curv = np.minimum(curv, -1e-12)
        step = np.clip(-grad / curv, -3.0, 3.0)
        u = np.clip(u + step, lo, hi)
        if np.all(np.abs(step) < 1e-9):
            break
    return np.exp(u)

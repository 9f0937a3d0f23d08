"""Change-rate estimation from the outcomes of scans at irregular intervals (thesis §3.5).

A scan only tells whether a partition changed since the previous scan, not how many times.
Counting detected changes per unit of time (`naive_rate`) therefore saturates at one change
per scan interval and is biased low as soon as changes outpace scans. The estimator here is
the maximum-likelihood one for a Poisson process observed at irregular intervals (Cho &
Garcia-Molina, "Estimating frequency of change", 2003): a scan after an interval dt finds a
change with probability 1 - exp(-lambda dt), so

    log L(lambda) = sum_changed log(1 - exp(-lambda dt_i)) - lambda * sum_unchanged dt_j.

It is maximised over u = log(lambda), where it is concave, by Newton's method. A log-normal
prior centred on `prior_rate_per_s` (weight = 1 / variance of log lambda) keeps the estimate
finite when every scan found a change or none did, and gives new partitions a sensible rate.

Those are incomplete signals. A host whose shares are watched (SMB change notifications) gives
complete ones: each notification is a change at a known time, so over a watched time T with k
notified changes the log-likelihood gains k log(lambda) - lambda T, whose maximum alone is
k / T (Kolobov et al., "Staying up to date with online content changes using reinforcement
learning for scheduling", NeurIPS 2019: complete and incomplete change observations).
Both kinds add up in the same concave objective, so a partition whose watch broke now and
then learns from the notifications while it was watched and from scan outcomes otherwise; a
time span must be counted in one kind only.

`estimate_rate` takes one partition's history; `estimate_rates` solves many partitions at once
from the same sufficient statistics (weighted intervals of changed scans and the total time
of unchanged ones), which is what the simulator uses.
"""

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
    if times.size < 2:
        return np.empty(0), np.empty(0, dtype=bool)
    order = np.argsort(times, kind="stable")  # history is oldest first; be safe anyway
    times, changed = times[order], changed[order]
    dt = np.diff(times)
    changed = changed[1:]
    keep = (times[1:] >= now - window_s) & (times[1:] <= now) & (dt > 0)
    return dt[keep], changed[keep]


def naive_rate(
    history: Sequence[tuple[float, bool]], now: float, window_s: float = DEFAULT_WINDOW_S
) -> float:
    """Detected changes divided by observed time: biased low when changes outpace scans."""
    dt, changed = intervals(history, now, window_s)
    return float(changed.sum() / dt.sum()) if dt.size else 0.0


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
    """Changes per second of one partition from its (scan time, found a change) history and,
    for a watched share, the changes notified during `watched_s` seconds of unbroken watch
    (the scans of `history` must then cover only the time outside the watch).

    Uses the scans of the last `window_s` seconds; with nothing usable the prior is returned.
    """
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
    """Maximum a posteriori rates (changes per second) of many partitions at once.

    Incomplete signals: changed_dt[k], changed_weight[k]: interval and multiplicity of scans
    that found a change, belonging to partition changed_group[k]; unchanged_s[g]: total
    interval of partition g's scans that found nothing (its length is the number of
    partitions). Complete signals: notified_changes[g] changes notified during watched_s[g]
    seconds of unbroken watch.
    """
    n = len(unchanged_s)
    unchanged_s = np.asarray(unchanged_s, dtype=float)
    notified = np.zeros(n) if notified_changes is None else np.asarray(notified_changes, float)
    watched = np.zeros(n) if watched_s is None else np.asarray(watched_s, dtype=float)
    changed_dt = np.asarray(changed_dt, dtype=float)
    changed_weight = np.asarray(changed_weight, dtype=float)
    changed_group = np.asarray(changed_group, dtype=np.intp)
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

"""Scheduling policies: which partitions to scan this round (DESIGN.md, Scheduling; thesis §3.5).

Every policy scores the partitions at time `now` and hands the order to one packer, so all of
them obey the same rules: partitions with untagged media first, then dirty ones (a change
notification arrived), then never-scanned ones, then by the policy's score; offline hosts are
skipped; the round's total cost fits `crawlers * round_seconds` and no host is busier than
`round_seconds` (a partition costlier than that may still go alone to its host, so that
nothing starves). Policies are pure selection logic over `PartitionState`; the only state they
keep is a memo of values derived from the history (the adaptive intervals).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter
from typing import Protocol

import numpy as np

from pipeline.rates import DEFAULT_PRIOR_RATE_PER_S, estimate_rate


@dataclass
class PartitionState:
    partition_id: str
    host: str
    cost_s: float  # expected scan cost: listing time + expected tag reads
    last_scan: float | None  # epoch seconds, None = never scanned
    history: list[tuple[float, bool]]  # (scan time epoch s, found a change), oldest first
    rate_per_h: float | None  # stored estimate, may be None
    dirty: bool = False  # a change notification arrived: due now
    untagged: int = 0  # media files known but not yet tagged: due first
    online: bool = True  # host reachable at the last liveness check


@dataclass
class Budget:
    crawlers: int  # hosts scanned at once
    round_seconds: float  # length of a round; one host never busier than this


class Policy(Protocol):
    name: str

    def choose(self, parts: Sequence[PartitionState], now: float, budget: Budget) -> list[str]:
        """partition_ids to scan this round, in order; total cost fits crawlers*round_seconds,
        no host's total cost exceeds round_seconds (a single partition costlier than
        round_seconds may still be chosen alone for its host so that nothing starves),
        offline hosts' partitions are not chosen; untagged and dirty ones come first."""
        ...


# Priority classes, lowest first.
_UNTAGGED, _DIRTY, _NEW, _SCORED = 0, 1, 2, 3


def _column(parts: list[PartitionState], name: str) -> np.ndarray:
    """One numeric attribute of every partition as floats (None becomes nan)."""
    values = map(attrgetter(name), parts)
    try:
        return np.fromiter(values, dtype=float, count=len(parts))
    except TypeError:  # a None somewhere: the slower path converts it to nan
        return np.array([getattr(p, name) for p in parts], dtype=float)


@dataclass
class Candidates:
    """The online partitions as arrays, for vectorised scoring."""

    parts: list[PartitionState]
    cost: np.ndarray
    age_s: np.ndarray  # now - last_scan; inf when never scanned
    rate_per_s: np.ndarray
    priority: np.ndarray
    host: np.ndarray  # a 64-bit hash per host name: equal names, equal values

    @classmethod
    def of(cls, parts: Sequence[PartitionState], now: float) -> Candidates:
        online = [p for p in parts if p.online]
        if not online:
            empty = np.empty(0)
            return cls([], empty, empty, empty, empty.astype(int), empty.astype(np.int64))
        n = len(online)
        last_a = _column(online, "last_scan")  # None becomes nan
        age = np.where(np.isnan(last_a), math.inf, np.maximum(now - last_a, 0.0))
        rates = _column(online, "rate_per_h") / 3600.0
        for i in np.flatnonzero(~np.isfinite(rates)).tolist():
            p = online[i]
            rates[i] = estimate_rate(p.history, now) if p.history else DEFAULT_PRIOR_RATE_PER_S
        has_untagged = _column(online, "untagged") > 0
        is_dirty = np.fromiter(map(attrgetter("dirty"), online), dtype=bool, count=n)
        hosts = np.fromiter(map(hash, map(attrgetter("host"), online)), dtype=np.int64, count=n)
        priority = np.where(
            has_untagged,
            _UNTAGGED,
            np.where(is_dirty, _DIRTY, np.where(np.isinf(age), _NEW, _SCORED)),
        )
        return cls(
            parts=online,
            cost=np.maximum(_column(online, "cost_s"), 0.0),
            age_s=age,
            rate_per_s=np.maximum(rates, 0.0),
            priority=priority,
            host=hosts,
        )


def pack(
    cands: Candidates, score: np.ndarray, budget: Budget, due: np.ndarray | None = None
) -> list[str]:
    """Fill the round in priority then score order (higher score first); with `due`, the
    scored partitions that are not due are left out (untagged, dirty and new never are).

    Vectorised greedy: a partition is taken when everything its host was offered before it
    plus itself fits `round_seconds` (or it is the host's first and costs more than that:
    alone, so that it is scanned eventually), and the round's running total of taken costs
    fits `crawlers * round_seconds`.
    """
    n = len(cands.parts)
    if n == 0 or budget.crawlers <= 0 or budget.round_seconds <= 0:
        return []
    score = np.where(np.isfinite(score), score, np.where(score > 0, np.finfo(float).max, 0.0))
    # Ties (say P(changed) = 1 for many) go to the longest unscanned, then the cheapest.
    age = np.where(np.isfinite(cands.age_s), cands.age_s, np.finfo(float).max)
    order = np.lexsort((cands.cost, -age, -score, cands.priority))
    if due is not None:
        order = order[(due | (cands.priority != _SCORED))[order]]
        n = order.size
        if n == 0:
            return []
    cost = cands.cost[order]
    host = cands.host[order]
    # Running cost per host in this order: cumulative sum within host groups.
    by_host = np.argsort(host, kind="stable")
    c_sorted = cost[by_host]
    cum = np.cumsum(c_sorted)
    h_sorted = host[by_host]
    group_start = np.r_[0, np.flatnonzero(np.diff(h_sorted)) + 1]
    sizes = np.diff(np.r_[group_start, n])
    before = cum - c_sorted - np.repeat((cum - c_sorted)[group_start], sizes)
    host_before = np.empty(n)
    host_before[by_host] = before
    fits_host = (host_before + cost <= budget.round_seconds) | (
        (host_before == 0) & (cost > budget.round_seconds)
    )
    taken = np.flatnonzero(fits_host)
    total_cap = budget.crawlers * budget.round_seconds
    running = np.cumsum(cost[taken])
    keep = running <= total_cap  # a prefix: costs are not negative
    if taken.size and not keep[0]:
        keep[0] = True  # one partition bigger than the whole round still goes alone
    chosen = order[taken[keep]]
    return [cands.parts[i].partition_id for i in chosen.tolist()]


class ScoringPolicy:
    """A policy defined by a score per online partition (higher = scan sooner)."""

    name = "base"

    def score(self, cands: Candidates, now: float, budget: Budget) -> np.ndarray:
        raise NotImplementedError

    def choose(self, parts: Sequence[PartitionState], now: float, budget: Budget) -> list[str]:
        cands = Candidates.of(parts, now)
        if not cands.parts:
            return []
        return pack(cands, self.score(cands, now, budget), budget)


class RoundRobin(ScoringPolicy):
    """Oldest scan first: plain full recrawls, as LAN search engines such as AllTer did."""

    name = "roundrobin"

    def score(self, cands: Candidates, now: float, budget: Budget) -> np.ndarray:
        return cands.age_s


class PoissonPolicy(ScoringPolicy):
    """Thesis §3.5.1: the highest probability of having changed, 1 - exp(-lambda (t - t0))."""

    name = "poisson"

    def score(self, cands: Candidates, now: float, budget: Budget) -> np.ndarray:
        return prob_changed(cands.rate_per_s, cands.age_s)


def prob_changed(rate_per_s: np.ndarray, age_s: np.ndarray) -> np.ndarray:
    return -np.expm1(-rate_per_s * np.where(np.isfinite(age_s), age_s, 1e300))


class LossPolicy(ScoringPolicy):
    """Thesis §3.5.2: the highest expected loss of scanning now.

    Scanning a partition that has not changed since t0 costs `s`; one that changed at t'
    costs d + e^x - x - 1 with x = (t - t')/T: users hardly notice a short delay and grow
    unhappy quickly past the staleness threshold T. With the first change after t0
    exponential (rate lambda), the expectation over t' has the closed form in
    `expected_loss`. `per_cost=True` divides it by the scan cost (not in the thesis).
    """

    name = "loss"

    def __init__(
        self,
        threshold_s: float = 1800.0,
        unchanged_loss: float = 0.0,
        changed_loss: float = 1.0,
        per_cost: bool = False,
    ) -> None:
        if threshold_s <= 0:
            raise ValueError("loss policy: threshold_s must be positive")
        self.threshold_s = threshold_s
        self.unchanged_loss = unchanged_loss
        self.changed_loss = changed_loss
        self.per_cost = per_cost

    def score(self, cands: Candidates, now: float, budget: Budget) -> np.ndarray:
        loss = expected_loss(
            cands.rate_per_s,
            cands.age_s,
            self.threshold_s,
            self.unchanged_loss,
            self.changed_loss,
        )
        if self.per_cost:
            loss = loss / np.maximum(cands.cost, 1e-3)
        return loss


def expected_loss(
    rate_per_s: np.ndarray, age_s: np.ndarray, threshold_s: float, s: float, d: float
) -> np.ndarray:
    """E[R] for scanning `age_s` after the last scan (thesis §3.5.2), in closed form:

    s e^{-lD} + d (1 - e^{-lD}) + l e^{-lD} int_0^D e^{lv} (e^{v/T} - v/T - 1) dv
    = ... + l (e^{D/T} - e^{-lD}) / (l + 1/T) - D/T + (1 - e^{-lD}) / (l T) - (1 - e^{-lD}).
    """
    lam = np.maximum(rate_per_s, 1e-15)
    big = 700.0 * threshold_s  # keep e^{D/T} finite; such partitions come first anyway
    age = np.minimum(np.where(np.isfinite(age_s), age_s, big), big)
    p = -np.expm1(-lam * age)  # 1 - e^{-lD}
    inv_t = 1.0 / threshold_s
    growth = (
        lam * (np.exp(age * inv_t) - (1.0 - p)) / (lam + inv_t)
        - age * inv_t
        + p / (lam * threshold_s)
        - p
    )
    return s * (1.0 - p) + d * p + np.maximum(growth, 0.0)


class AdaptivePolicy(ScoringPolicy):
    """Nutch's AdaptiveFetchSchedule: the interval shrinks by (1 - dec) after a scan that found
    a change and grows by (1 + inc) after one that did not, within [min, max] (Nutch's
    defaults, but an initial interval of an hour, the crawl's cron period, not 30 days). The
    interval is replayed from the history, memoised per partition. As in Nutch's generator
    only due partitions (age >= interval) are chosen, most overdue first; `due_only=False`
    fills the budget."""

    name = "adaptive"

    def __init__(
        self,
        initial_s: float = 3600.0,
        inc_rate: float = 0.4,
        dec_rate: float = 0.2,
        min_s: float = 60.0,
        max_s: float = 365 * 86400.0,
        due_only: bool = True,
    ) -> None:
        if not (0 < min_s <= initial_s <= max_s) or not (0 <= dec_rate < 1) or inc_rate < 0:
            raise ValueError("adaptive policy: need 0 < min_s <= initial_s <= max_s, 0 <= dec < 1")
        self.initial_s, self.inc_rate, self.dec_rate = initial_s, inc_rate, dec_rate
        self.min_s, self.max_s = min_s, max_s
        self.due_only = due_only
        # partition_id -> (time of the last history entry replayed, history length, interval)
        self._memo: dict[str, tuple[float, int, float]] = {}
        # partition_id -> last scan and interval at the previous call, to skip unchanged ones.
        self._last: dict[str, float] = {}
        self._intervals: dict[str, float] = {}

    def interval(self, p: PartitionState) -> float:
        hist = p.history
        if not hist:
            return self.initial_s
        last_t = hist[-1][0]
        memo = self._memo.get(p.partition_id)
        if memo is not None and memo[0] == last_t and memo[1] == len(hist):
            return memo[2]
        start, interval = 1, self.initial_s  # the first scan found the partition, not a change
        if memo is not None:
            # Resume after the entry replayed last time when the history only grew at its end.
            j = len(hist) - 1
            while j >= 0 and hist[j][0] > memo[0]:
                j -= 1
            if j >= 0 and hist[j][0] == memo[0]:
                start, interval = j + 1, memo[2]
        grow, shrink = 1.0 + self.inc_rate, 1.0 - self.dec_rate
        for _, changed in hist[start:]:
            interval *= shrink if changed else grow
            interval = min(max(interval, self.min_s), self.max_s)
        self._memo[p.partition_id] = (last_t, len(hist), interval)
        return interval

    def score(self, cands: Candidates, now: float, budget: Budget) -> np.ndarray:
        ids = list(map(attrgetter("partition_id"), cands.parts))
        n = len(ids)
        last = np.where(np.isfinite(cands.age_s), now - cands.age_s, -math.inf)
        # Replay only the partitions scanned since the previous call (or never seen).
        known_last = np.fromiter(map(self._last.get, ids, repeat(math.nan)), float, count=n)
        intervals = np.fromiter(map(self._intervals.get, ids, repeat(math.nan)), float, count=n)
        for i in np.flatnonzero(last != known_last).tolist():
            p = cands.parts[i]
            intervals[i] = self._intervals[p.partition_id] = self.interval(p)
            self._last[p.partition_id] = float(last[i])
        return cands.age_s / intervals

    def choose(self, parts: Sequence[PartitionState], now: float, budget: Budget) -> list[str]:
        cands = Candidates.of(parts, now)
        if not cands.parts:
            return []
        score = self.score(cands, now, budget)
        return pack(cands, score, budget, score >= 1.0 if self.due_only else None)


class OptimalPolicy(ScoringPolicy):
    """Revisit rates that maximise expected freshness per unit of scan cost under the budget
    (Cho & Garcia-Molina's optimal refresh; Azar et al. 2018; Kolobov et al. 2019).

    A partition refreshed every 1/f seconds is fresh a share F = (f/l)(1 - e^{-l/f}) of the
    time. Maximising sum F_i subject to sum c_i f_i = B (B = crawlers * utilisation,
    crawler-seconds per second) gives, with a Lagrange multiplier m,
    1 - (1 + r_i) e^{-r_i} = m c_i l_i for r_i = l_i / f_i, or f_i = 0 when m c_i l_i >= 1
    (a partition changing too fast to be worth its cost). m is found by bisection; f_i is
    capped at one scan per `min_interval_s`. The schedule takes partitions by deficit, the
    number of intervals 1/f_i elapsed since the last scan, largest first; only due ones
    (deficit >= 1) unless `due_only=False`, so a round holds what is due and no more.
    """

    name = "optimal"

    def __init__(
        self, utilisation: float = 1.0, min_interval_s: float = 60.0, due_only: bool = True
    ) -> None:
        if not 0 < utilisation <= 1 or min_interval_s <= 0:
            raise ValueError("optimal policy: need 0 < utilisation <= 1, min_interval_s > 0")
        self.utilisation = utilisation
        self.min_interval_s = min_interval_s
        self.due_only = due_only
        self._log_m: float | None = None  # last multiplier: where the next bisection starts

    def score(self, cands: Candidates, now: float, budget: Budget) -> np.ndarray:
        freq, self._log_m = optimal_frequencies(
            cands.rate_per_s,
            cands.cost,
            budget_rate=budget.crawlers * self.utilisation,
            max_freq=1.0 / self.min_interval_s,
            hint=self._log_m,
        )
        # Partitions not worth refreshing still get spare budget, oldest first.
        return np.where(freq > 0, cands.age_s * freq, cands.age_s * 1e-12)

    def choose(self, parts: Sequence[PartitionState], now: float, budget: Budget) -> list[str]:
        cands = Candidates.of(parts, now)
        if not cands.parts:
            return []
        score = self.score(cands, now, budget)
        return pack(cands, score, budget, score >= 1.0 if self.due_only else None)


# y(r) = 1 - (1 + r) e^{-r} is inverted through a table of log r over an even grid of
# v = logit(y), which is smooth in both tails (r ~ sqrt(2y) near 0, r ~ -log(1 - y) near 1),
# so a lookup is arithmetic instead of a search.
_V0, _DV, _NV = -60.0, 0.005, 19201  # v in [-60, 36]
_R_FINE = np.logspace(-14, math.log10(80.0), 200_000)
_Y_FINE = np.where(
    _R_FINE < 1e-3,
    _R_FINE**2 / 2 - _R_FINE**3 / 3 + _R_FINE**4 / 8,
    -np.expm1(-_R_FINE) - _R_FINE * np.exp(-_R_FINE),
)
_V_FINE = np.log(_Y_FINE) - np.log1p(-np.minimum(_Y_FINE, 1 - 1e-16))
_LOG_R_TABLE = np.interp(
    _V0 + _DV * np.arange(_NV), _V_FINE, np.log(_R_FINE), left=math.nan, right=math.nan
)


def _r_of_y(y: np.ndarray) -> np.ndarray:
    """Inverse of y = 1 - (1 + r) e^{-r} on (0, 1); inf for y >= 1 (never refresh)."""
    y = np.asarray(y, dtype=float)
    yc = np.clip(y, 1e-300, 1.0 - 1e-16)
    v = np.log(yc) - np.log1p(-yc)
    with np.errstate(over="ignore"):
        pos = np.clip((v - _V0) / _DV, 0.0, _NV - 1.000001)
        i = pos.astype(np.intp)
        frac = pos - i
        log_r = _LOG_R_TABLE[i] * (1.0 - frac) + _LOG_R_TABLE[i + 1] * frac
        r = np.exp(log_r)
    r = np.where(v < _V0, np.sqrt(2.0 * np.maximum(y, 0.0)), r)
    return np.where((y >= 1.0) | (v > _V0 + _DV * (_NV - 1)), math.inf, r)


def optimal_frequencies(
    rate_per_s: np.ndarray,
    cost_s: np.ndarray,
    budget_rate: float,
    max_freq: float = math.inf,
    *,
    tolerance: float = 1e-3,
    hint: float | None = None,
) -> tuple[np.ndarray, float]:
    """Scans per second maximising sum of freshness subject to sum(cost * freq) <= budget_rate,
    and log m, the log of the Lagrange multiplier (pass it back as `hint` to start the
    bisection near it; the answer is the same to `tolerance` in log m)."""
    lam = np.maximum(np.asarray(rate_per_s, dtype=float), 1e-15)
    cost = np.maximum(np.asarray(cost_s, dtype=float), 1e-6)
    c_lam = cost * lam

    def freqs(log_m: float) -> np.ndarray:
        r = _r_of_y(math.exp(log_m) * c_lam)
        with np.errstate(divide="ignore"):
            return np.minimum(np.where(np.isinf(r), 0.0, lam / r), max_freq)

    def overspent(log_m: float) -> bool:  # spent cost decreases as m grows
        return float(np.dot(cost, freqs(log_m))) > budget_rate

    floor, ceiling = -80.0, 40.0
    if not overspent(floor):
        return freqs(floor), floor  # the budget covers every partition at the cap
    if hint is None or not floor < hint < ceiling:
        lo, hi = floor, ceiling
    else:  # gallop out from the hint until the answer is bracketed
        lo, hi, step = hint - 0.05, hint + 0.05, 0.1
        while lo > floor and not overspent(lo):
            lo, hi, step = max(lo - step, floor), lo, step * 4
        while hi < ceiling and overspent(hi):
            lo, hi, step = hi, min(hi + step, ceiling), step * 4
    while hi - lo > tolerance:
        mid = 0.5 * (lo + hi)
        if overspent(mid):
            lo = mid
        else:
            hi = mid
    return freqs(hi), hi


def freshness_of(rate_per_s: np.ndarray, freq: np.ndarray) -> np.ndarray:
    """Expected share of time fresh when refreshed every 1/freq seconds (Poisson changes)."""
    lam = np.asarray(rate_per_s, dtype=float)
    freq = np.asarray(freq, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = lam / freq
        f = np.where(r < 1e-9, 1.0 - r / 2, -np.expm1(-r) / r)
    f = np.where(lam <= 0, 1.0, f)
    return np.where((freq <= 0) & (lam > 0), 0.0, f)


_POLICIES: dict[str, type[ScoringPolicy]] = {
    "roundrobin": RoundRobin,
    "poisson": PoissonPolicy,
    "loss": LossPolicy,
    "adaptive": AdaptivePolicy,
    "optimal": OptimalPolicy,
}
POLICY_NAMES: tuple[str, ...] = tuple(_POLICIES)


def get_policy(name: str, **settings: float) -> Policy:
    """A fresh policy by name; settings are its constructor's keyword arguments."""
    try:
        cls = _POLICIES[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown policy {name!r}; choose one of {', '.join(POLICY_NAMES)}"
        ) from None
    try:
        return cls(**settings)
    except TypeError as e:
        raise ValueError(f"policy {name!r}: bad settings {sorted(settings)}: {e}") from None

"""Scheduling policies by name (docs/DESIGN.md, Scheduling; thesis §3.5): the heuristics and
`sensors` here, `optimal` in a module of its own, all choosing through `choice.ScoringPolicy`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter

import numpy as np

from sharecrawl.pipeline.scheduling.choice import Budget, Candidates, PartitionState, ScoringPolicy
from sharecrawl.pipeline.scheduling.optimal import OptimalPolicy
from sharecrawl.pipeline.scheduling.signals import DEFAULT_SAFETY_S


class RoundRobin(ScoringPolicy):
    """Oldest scan first: plain full recrawls, as LAN search engines such as AllTer did."""

    name = "roundrobin"
    summary = "oldest scan first (plain full recrawls)"

    def score(self, cands: Candidates, now: float, budget: Budget) -> np.ndarray:
        return cands.age_s


class PoissonPolicy(ScoringPolicy):
    """Thesis §3.5.1: the highest probability of having changed, 1 - exp(-lambda (t - t0))."""

    name = "poisson"
    summary = "most likely to have changed first (thesis §3.5.1)"

    def score(self, cands: Candidates, now: float, budget: Budget) -> np.ndarray:
        return prob_changed(cands.rate_per_s, cands.age_s)


def prob_changed(rate_per_s: np.ndarray, age_s: np.ndarray) -> np.ndarray:
    return -np.expm1(-rate_per_s * np.where(np.isfinite(age_s), age_s, 1e300))


@dataclass
class LossPolicy(ScoringPolicy):
    """Thesis §3.5.2: the highest expected loss of scanning now. A scan of an unchanged partition
    costs `s`; staleness since t' costs d + e^x - x - 1, x = (t - t')/T (threshold T). The
    expectation is `expected_loss`; `per_cost=True` divides it by the scan cost (not in the
    thesis)."""

    name = "loss"
    summary = "highest expected loss of staying stale first (thesis §3.5.2)"

    threshold_s: float = 1800.0
    unchanged_loss: float = 0.0
    changed_loss: float = 1.0
    per_cost: bool = False

    def __post_init__(self) -> None:
        if self.threshold_s <= 0:
            raise ValueError("loss policy: threshold_s must be positive")

    def score(self, cands: Candidates, now: float, budget: Budget) -> np.ndarray:
        loss = expected_loss(
            cands.rate_per_s, cands.age_s, self.threshold_s, self.unchanged_loss, self.changed_loss
        )
        if self.per_cost:
            loss = loss / np.maximum(cands.cost, 1e-3)
        return loss


def expected_loss(
    rate_per_s: np.ndarray, age_s: np.ndarray, threshold_s: float, s: float, d: float
) -> np.ndarray:
    """E[R] for scanning `age_s` after the last scan (thesis §3.5.2), in closed form:
    s e^{-lD} + d (1 - e^{-lD}) + l (e^{D/T} - e^{-lD}) / (l + 1/T) - D/T + (1 - e^{-lD}) / (l T)
    - (1 - e^{-lD})."""
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


@dataclass
class AdaptivePolicy(ScoringPolicy):
    """Nutch's AdaptiveFetchSchedule: the interval shrinks by (1 - dec) after a change and grows by
    (1 + inc) otherwise, within [min, max], starting at an hour (the cron period); replayed from
    the history. Only due partitions, most overdue first, unless `due_only=False`."""

    name = "adaptive"
    summary = "Nutch's adaptive interval: shorter after a change, longer after none"

    initial_s: float = 3600.0
    inc_rate: float = 0.4
    dec_rate: float = 0.2
    min_s: float = 60.0
    max_s: float = 365 * 86400.0
    due_only: bool = True
    # partition_id -> (time of the last history entry replayed, the interval then)
    _memo: dict[str, tuple[float, float]] = field(default_factory=dict, init=False, repr=False)
    # partition_id -> last scan and interval at the previous call, to skip unchanged ones.
    _last: dict[str, float] = field(default_factory=dict, init=False, repr=False)
    _intervals: dict[str, float] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        ordered = 0 < self.min_s <= self.initial_s <= self.max_s
        if not ordered or not (0 <= self.dec_rate < 1) or self.inc_rate < 0:
            raise ValueError("adaptive policy: need 0 < min_s <= initial_s <= max_s, 0 <= dec < 1")

    def interval(self, p: PartitionState) -> float:
        hist = p.history
        if not hist:
            return self.initial_s
        memo = self._memo.get(p.partition_id)
        start, interval = 1, self.initial_s  # the first scan found the partition, not a change
        if memo is not None:
            # Resume after the entry replayed last time when the history only grew at its end.
            j = len(hist) - 1
            while j >= 0 and hist[j][0] > memo[0]:
                j -= 1
            if j >= 0 and hist[j][0] == memo[0]:
                start, interval = j + 1, memo[1]
        grow, shrink = 1.0 + self.inc_rate, 1.0 - self.dec_rate
        for _, changed in hist[start:]:
            interval *= shrink if changed else grow
            interval = min(max(interval, self.min_s), self.max_s)
        self._memo[p.partition_id] = (hist[-1][0], interval)
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


@dataclass
class SensorsPolicy(OptimalPolicy):
    """Zemskov, Mathematical Structures and Modeling vol. 10, 2002 (crawlers told of changes
    beat polling ones): a watched partition with no hint did not change and is skipped until
    `safety_s` after its last scan; the rest gets the optimal schedule."""

    name = "sensors"
    summary = "optimal, but watched shares are scanned only when they notify (or daily)"

    safety_s: float = DEFAULT_SAFETY_S

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.safety_s > 0:
            raise ValueError("sensors policy: need safety_s > 0")

    def score(self, cands: Candidates, now: float, budget: Budget) -> np.ndarray:
        # Watched ones take no share of the schedule (weight 0), and score 0 until their
        # safety interval has passed: not even spare time goes to them.
        watched = cands.watched
        deficits = super().score(cands, now, budget, weight=np.where(watched, 0.0, 1.0))
        safety = cands.age_s / self.safety_s
        return np.where(watched, np.where(safety >= 1.0, safety, 0.0), deficits)


_POLICIES: dict[str, type[ScoringPolicy]] = {
    "roundrobin": RoundRobin,
    "poisson": PoissonPolicy,
    "loss": LossPolicy,
    "adaptive": AdaptivePolicy,
    "optimal": OptimalPolicy,
    "sensors": SensorsPolicy,
}
POLICY_NAMES: tuple[str, ...] = tuple(_POLICIES)
# What each policy does, in a few words (for help texts).
POLICY_HELP: dict[str, str] = {name: cls.summary for name, cls in _POLICIES.items()}


def get_policy(name: str, **settings: float) -> ScoringPolicy:
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

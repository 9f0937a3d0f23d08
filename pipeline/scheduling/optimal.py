"""The optimal policy, and the formulas the simulator's freshness bound uses
(`optimal_frequencies`, `freshness_of`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from sharecrawl.pipeline.scheduling.choice import Budget, Candidates, ScoringPolicy


@dataclass
class OptimalPolicy(ScoringPolicy):
    """Revisit rates maximising expected freshness per unit of scan cost under the budget (Cho &
    Garcia-Molina's optimal refresh; Azar et al. 2018; Kolobov et al. 2019), at most one scan per
    `min_interval_s`; by deficit (intervals 1/f_i elapsed), only due ones (deficit >= 1) unless
    `due_only=False`, but for `fill_s` seconds of each crawler (a round's fixed cost anyway)."""

    name = "optimal"
    summary = "revisit rates that maximise expected freshness for the budget (Cho & Garcia-Molina)"

    utilisation: float = 1.0
    min_interval_s: float = 60.0
    due_only: bool = True
    fill_s: float = 60.0
    _log_m: float | None = field(default=None, init=False, repr=False)  # where bisection starts

    def __post_init__(self) -> None:
        if not 0 < self.utilisation <= 1 or self.min_interval_s <= 0 or self.fill_s < 0:
            raise ValueError(
                "optimal policy: need 0 < utilisation <= 1, min_interval_s > 0, fill_s >= 0"
            )

    def score(
        self, cands: Candidates, now: float, budget: Budget, weight: np.ndarray | None = None
    ) -> np.ndarray:
        """Deficits: intervals 1/f elapsed since each partition's last scan; `weight` as in
        `optimal_frequencies` (0 leaves a partition out of the allocation)."""
        freq, self._log_m = optimal_frequencies(
            cands.rate_per_s,
            cands.cost,
            budget_rate=budget.crawlers * self.utilisation,
            max_freq=1.0 / self.min_interval_s,
            weight=weight,
            hint=self._log_m,
        )
        # Partitions not worth refreshing still get spare budget, oldest first.
        with np.errstate(invalid="ignore"):  # never scanned (age inf) and f = 0: not used
            return np.where(freq > 0, cands.age_s * freq, cands.age_s * 1e-12)


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
    weight: np.ndarray | None = None,
    tolerance: float = 1e-3,
    hint: float | None = None,
) -> tuple[np.ndarray, float]:
    """Scans per second maximising sum(weight * F(f)) subject to sum(cost * f) <= budget_rate, with
    F = (f/l)(1 - e^{-l/f}), and log m of the Lagrange multiplier (pass it back as `hint`). The
    optimum solves w_i F'(f_i) = m c_i, or f_i = 0 when a partition is not worth its cost."""
    lam = np.maximum(np.asarray(rate_per_s, dtype=float), 1e-15)
    cost = np.maximum(np.asarray(cost_s, dtype=float), 1e-6)
    c_lam = cost * lam
    if weight is not None:
        c_lam = c_lam / np.maximum(np.asarray(weight, dtype=float), 1e-12)

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

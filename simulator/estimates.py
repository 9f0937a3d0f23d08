"""The rate estimator's sufficient statistics per partition, as a replay gathers them:
intervals of scans that found a change binned on a log scale (their likelihood depends on the
interval), scans that found nothing only their time, and for complete (watched) intervals the
changes notified and the time watched; the estimates are the real `estimate_rates`'."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sharecrawl.pipeline.scheduling.rates import (
    DEFAULT_PRIOR_RATE_PER_S,
    DEFAULT_PRIOR_WEIGHT,
    estimate_rates,
)
from sharecrawl.simulator.lan import DAY

_DT_EDGES = np.logspace(0, math.log10(64 * DAY), 81)
_DT_MID = np.sqrt(_DT_EDGES[:-1] * _DT_EDGES[1:])


@dataclass
class RateStats:
    """The rate estimator's sufficient statistics per partition."""

    changed_counts: np.ndarray  # scans that found a change, per interval bin
    unchanged_s: np.ndarray  # total interval of scans that found nothing
    notified: np.ndarray  # changes notified while watched (complete signals)
    watched_s: np.ndarray  # time watched without a break

    @classmethod
    def empty(cls, n: int) -> RateStats:
        return cls(np.zeros((n, _DT_MID.size)), np.zeros(n), np.zeros(n), np.zeros(n))

    def add(self, idx: np.ndarray, dt: np.ndarray, found: np.ndarray, complete: np.ndarray) -> None:
        """Scans of partitions idx after dt seconds that found `found` changes; for `complete`
        ones every change was notified, so the count is known, not only whether."""
        self.notified[idx[complete]] += found[complete]
        self.watched_s[idx[complete]] += dt[complete]
        inc = ~complete
        changed = inc & (found > 0)
        bins = np.clip(np.searchsorted(_DT_EDGES, dt) - 1, 0, _DT_MID.size - 1)
        np.add.at(self.changed_counts, (idx[changed], bins[changed]), 1.0)
        unchanged = inc & (found == 0)
        self.unchanged_s[idx[unchanged]] += dt[unchanged]

    def rates(self, idx: np.ndarray) -> np.ndarray:
        counts = self.changed_counts[idx]
        rows, cols = np.nonzero(counts)
        return estimate_rates(
            changed_dt=_DT_MID[cols],
            changed_weight=counts[rows, cols],
            changed_group=rows,
            unchanged_s=self.unchanged_s[idx],
            prior_rate_per_s=DEFAULT_PRIOR_RATE_PER_S,
            prior_weight=DEFAULT_PRIOR_WEIGHT,
            notified_changes=self.notified[idx],
            watched_s=self.watched_s[idx],
        )

"""The sensors policy (docs/DESIGN.md, Scheduling; Zemskov, Mathematical Structures and
Modeling vol. 10, 2002: crawlers told of changes beat polling ones): a watched partition with
no hint did not change and is skipped until `safety_s` after its last scan; the rest gets the
optimal schedule. Hinted partitions come first through the packer, for every policy."""

from __future__ import annotations

import numpy as np

from pipeline.scheduling.choice import Budget, Candidates
from pipeline.scheduling.optimal import OptimalPolicy
from pipeline.scheduling.signals import DEFAULT_SAFETY_S


class SensorsPolicy(OptimalPolicy):
    name = "sensors"
    summary = "optimal, but watched shares are scanned only when they notify (or daily)"

    def __init__(self, safety_s: float = DEFAULT_SAFETY_S, **optimal_settings: float) -> None:
        if not safety_s > 0:
            raise ValueError("sensors policy: need safety_s > 0")
        super().__init__(**optimal_settings)
        self.safety_s = safety_s

    def score(self, cands: Candidates, now: float, budget: Budget) -> np.ndarray:
        watched = cands.watched
        if not watched.any():
            return self.deficits(cands, budget)
        # Watched partitions take no share of the schedule (weight 0: never refreshed) and
        # are due once the safety interval has passed; before, not even spare time goes to
        # them (score 0).
        deficits = self.deficits(cands, budget, weight=np.where(watched, 0.0, 1.0))
        safety = cands.age_s / self.safety_s
        return np.where(watched, np.where(safety >= 1.0, safety, 0.0), deficits)

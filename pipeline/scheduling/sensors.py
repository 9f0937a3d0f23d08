"""The sensors policy: scan where the hosts say something changed, schedule the rest.

Zemskov's simulation study of collection concepts (Mathematical Structures and Modeling,
vol. 10, 2002) found a crawler that only polls ("robots") far less fresh than one that is
told about changes ("sensors"). SMB2 CHANGE_NOTIFY tells us, for the hosts whose shares can
be watched:
- a hinted partition (a notification for a path in it arrived since its last scan) comes
  first; the packer does that for every policy, so that a real hint is never left waiting;
- a watched partition (its share's watch unbroken since its last scan) without a hint did
  not change: it is skipped until `safety_s` after its last scan, in case a server dropped a
  notification. A broken watch ends that trust until the next scan (the watcher then posts an
  overflow hint, "rescan the share", which makes the partition hinted);
- everything else (hosts without notify, watches that are down) gets the optimal schedule,
  whose budget is no longer spent on the silent watched partitions.
"""

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

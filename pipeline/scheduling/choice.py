"""What every scheduling policy shares (thesis §3.5): the partitions' state, the round's budget
and the one packer. Order: untagged media, hinted, never scanned, due (a watched one past its
safety interval), then the policy's score; offline hosts skipped."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

import numpy as np

from sharecrawl.pipeline.scheduling.rates import DEFAULT_PRIOR_RATE_PER_S, estimate_rate


@dataclass
class PartitionState:
    partition_id: str
    host: str
    cost_s: float  # expected scan cost: listing time + expected tag reads
    last_scan: float | None  # epoch seconds, None = never scanned
    history: list[tuple[float, bool]]  # (scan time epoch s, found a change), oldest first
    rate_per_h: float | None  # stored estimate, may be None
    hinted: bool = False  # a change notification came since its last scan: first
    watched: bool = False  # its share watched unbroken since its last scan: silence = unchanged
    untagged: int = 0  # media files known but not yet tagged: due first
    online: bool = True  # host reachable at the last liveness check
    due: bool = False  # watched, past its safety interval (a notification may have been lost)


@dataclass
class Budget:
    crawlers: int  # hosts scanned at once
    round_seconds: float  # length of a round; one host never busier than this


# Priority classes, lowest first.
_UNTAGGED, _HINTED, _NEW, _DUE, _SCORED = 0, 1, 2, 3, 4


# PartitionTable's columns besides host, read from the rows by `PartitionTable.of` (None: nan).
_NUMBERS = ("cost_s", "last_scan", "rate_per_h", "untagged")
_FLAGS = ("hinted", "watched", "online", "due")


@dataclass
class PartitionTable(Sequence[PartitionState]):
    """Partitions as columns beside their rows (None as nan); a caller that keeps arrays anyway
    (the simulator) updates the columns, and the rows only for ids and histories."""

    rows: list[PartitionState]
    host: np.ndarray  # an integer per host: equal hosts, equal values
    cost_s: np.ndarray
    last_scan: np.ndarray
    rate_per_h: np.ndarray
    untagged: np.ndarray
    hinted: np.ndarray
    watched: np.ndarray
    online: np.ndarray
    due: np.ndarray | None = None  # None: none is

    @classmethod
    def of(cls, rows: Sequence[PartitionState]) -> PartitionTable:
        rows = list(rows)
        hosts = map(hash, map(attrgetter("host"), rows))
        return cls(
            rows,
            host=np.fromiter(hosts, dtype=np.int64, count=len(rows)),
            **{name: np.array(list(map(attrgetter(name), rows)), float) for name in _NUMBERS},
            **{name: np.array(list(map(attrgetter(name), rows)), bool) for name in _FLAGS},
        )

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> PartitionState:  # type: ignore[override]
        return self.rows[i]


@dataclass
class Candidates:
    """The online partitions as arrays, for vectorised scoring."""

    parts: list[PartitionState]
    cost: np.ndarray
    age_s: np.ndarray  # now - last_scan; inf when never scanned
    rate_per_s: np.ndarray
    priority: np.ndarray
    host: np.ndarray  # a 64-bit value per host: equal hosts, equal values
    watched: np.ndarray

    @classmethod
    def of(cls, parts: Sequence[PartitionState], now: float) -> Candidates:
        table = parts if isinstance(parts, PartitionTable) else PartitionTable.of(parts)
        idx = np.flatnonzero(table.online)
        online = [table.rows[i] for i in idx.tolist()]
        last_a = table.last_scan[idx]
        # A last scan in the future (the clock moved back) counts as now, and is due: only a
        # scan stores a time of the clock now in use; until then it would never age.
        ahead = last_a > now
        due = ahead if table.due is None else ahead | table.due[idx]
        age = np.where(np.isnan(last_a), math.inf, np.where(ahead, 0.0, now - last_a))
        rates = table.rate_per_h[idx] / 3600.0
        for i in np.flatnonzero(~np.isfinite(rates)).tolist():
            p = online[i]
            rates[i] = estimate_rate(p.history, now) if p.history else DEFAULT_PRIOR_RATE_PER_S
        priority = np.where(
            table.untagged[idx] > 0,
            _UNTAGGED,
            np.where(table.hinted[idx], _HINTED, np.where(np.isinf(age), _NEW, _SCORED)),
        )
        priority[due] = np.minimum(priority[due], _DUE)
        return cls(
            parts=online,
            cost=np.maximum(table.cost_s[idx], 0.0),
            age_s=age,
            rate_per_s=np.maximum(rates, 0.0),
            priority=priority.astype(int),
            host=table.host[idx].astype(np.int64),
            watched=table.watched[idx].astype(bool),
        )


def pack(
    cands: Candidates,
    score: np.ndarray,
    budget: Budget,
    due: np.ndarray | None = None,
    fill_s: float = 0.0,
) -> list[str]:
    """Fill the round in priority then score order (a vectorised greedy). With `due`, scored
    partitions not due are left out, but those with a positive score, nearest to due first, may
    fill `fill_s` seconds of each crawler. A host's first partition may exceed `round_seconds`
    alone, so that nothing starves."""
    n = len(cands.parts)
    if n == 0 or budget.crawlers <= 0 or budget.round_seconds <= 0:
        return []
    score = np.where(np.isfinite(score), score, np.where(score > 0, np.finfo(float).max, 0.0))
    # Ties (say P(changed) = 1 for many) go to the longest unscanned, then the cheapest.
    age = np.where(np.isfinite(cands.age_s), cands.age_s, np.finfo(float).max)
    order = np.lexsort((cands.cost, -age, -score, cands.priority))
    if due is not None:
        taken = (due | (cands.priority != _SCORED))[order]
        spare = ~taken & (score[order] > 0)  # in score order, after every due one
        cost_o = cands.cost[order]
        # What the due ones leave of `fill_s` per crawler (a round no longer for the rest).
        fill = min(fill_s, budget.round_seconds) * budget.crawlers - cost_o[taken].sum()
        spare &= (np.cumsum(np.where(spare, cost_o, 0.0)) <= fill) & (cost_o <= fill_s)
        order = order[taken | spare]
        n = order.size
        if n == 0:
            return []
    cost = cands.cost[order]
    host = cands.host[order]
    # Running cost per host in this order.
    by_host = np.argsort(host, kind="stable")
    host_before = np.empty(n)
    host_before[by_host] = sum_before(host[by_host], cost[by_host])
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


def sum_before(groups: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The sum of the values before each one in its run of equal `groups` (grouped already)."""
    cum = np.cumsum(values) - values
    first = np.r_[0, np.flatnonzero(np.diff(groups)) + 1]
    return cum - np.repeat(cum[first], np.diff(np.r_[first, groups.size]))


class ScoringPolicy:
    """A policy by a score per online partition (higher = sooner); with `due_only`, only those
    scoring 1 or more (and `pack`'s `fill_s`), else the budget is filled."""

    name = "base"
    summary = ""  # what it does, in a few words (help texts)
    due_only = False
    fill_s = 0.0

    def score(self, cands: Candidates, now: float, budget: Budget) -> np.ndarray:
        raise NotImplementedError

    def choose(self, parts: Sequence[PartitionState], now: float, budget: Budget) -> list[str]:
        """partition_ids to scan this round, in order, within the budget."""
        cands = Candidates.of(parts, now)
        if not cands.parts:
            return []
        score = self.score(cands, now, budget)
        return pack(cands, score, budget, score >= 1.0 if self.due_only else None, self.fill_s)

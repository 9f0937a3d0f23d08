"""One policy's replay of the LAN's trace with the real scheduling code: each round the policy
chooses from a `PartitionTable` within the budget; scans queue on the crawlers (one host per
crawler at a time), see the changes made before they start and read the new media's tags.
Rounds run back to back (`crawl --rounds N`), as long as their scans, at least `min_round_s`.
Rates are re-estimated by the real estimator (`simulator.estimates`); only HINTED_POLICIES are
told of notifications, scanned on `hint_crawlers` (`simulator.hints`). Measured after the
warm-up: freshness over time, each change's staleness (to the end of the scan that indexes it,
or of the run), scans, empty scans, tag reads."""

from __future__ import annotations

import heapq
import time
from functools import partial

import numpy as np

from sharecrawl.pipeline.scheduling.choice import Budget, PartitionState, PartitionTable, sum_before
from sharecrawl.pipeline.scheduling.policies import get_policy
from sharecrawl.pipeline.scheduling.rates import DEFAULT_PRIOR_RATE_PER_S
from sharecrawl.simulator.estimates import RateStats
from sharecrawl.simulator.hints import HintBook, HintPath
from sharecrawl.simulator.lan import DAY, HOUR, Lan, slices

HINTED_POLICIES = ("sensors",)


# The staleness figures of the result, by the name in its keys.
_STALENESS = {"min": np.min, "mean": np.mean, "p95": partial(np.percentile, q=95), "max": np.max}


class _Run:
    """The replay's state: what the index holds of each partition, and what was measured."""

    def __init__(self, lan: Lan, table: PartitionTable, hints: HintBook | None) -> None:
        n = lan.host_of.size
        self.lan = lan
        self.table = table  # what the policies see; its last_scan is the index's
        self.hints = hints
        self.seen = lan.changes_upto(np.arange(n), table.last_scan)  # changes indexed
        self.fresh_from = table.last_scan.copy()  # stale intervals start after a scan ended
        self.stats = RateStats.empty(n)
        self.tags_total = np.zeros(n)
        self.n_scans = np.zeros(n)
        self.staleness: list[np.ndarray] = []
        self.stale_time = np.zeros(n)  # seconds stale inside the measured period
        self.scans = self.empty = self.tags = 0

    def apply(self, chosen: np.ndarray, start: np.ndarray, listing: np.ndarray) -> None:
        """Scans of the distinct partitions `chosen` from `start` on, each listing for
        `listing` seconds."""
        lan, p = self.lan, self.lan.params
        upto = lan.changes_upto(chosen, start)
        lo = self.seen[chosen]
        found = upto - lo
        changed = found > 0
        media = lan.cum_media[upto] - lan.cum_media[lo]
        finish = start + listing + p.tag_s_per_file * media
        measured = start >= lan.measure_from
        self.scans += int(measured.sum())
        self.empty += int((measured & ~changed).sum())
        self.tags += int(media[measured].sum())

        # Staleness of every change indexed now, and the time its partition was stale.
        if changed.any():
            c_idx, c_lo, c_n = chosen[changed], lo[changed], found[changed]
            c_end = finish[changed]
            ctime = lan.change_time[slices(c_lo, c_n)]
            delay = np.repeat(c_end, c_n) - ctime
            self.staleness.append(delay[ctime >= lan.measure_from])
            stale_from = np.maximum(lan.change_time[c_lo], self.fresh_from[c_idx])
            self.stale_time[c_idx] += np.maximum(
                0.0, np.minimum(c_end, lan.end) - np.maximum(stale_from, lan.measure_from)
            )

        # The rate estimator's statistics, then what the policies see of these partitions:
        # new estimates, the expected cost (listing plus an average scan's tag reads), history.
        if self.hints is None:
            complete = np.zeros(chosen.size, dtype=bool)
        else:
            complete = self.hints.hinted_scan(chosen, start)
            self.hints.scanned(chosen, start)
        table = self.table
        self.stats.add(chosen, start - table.last_scan[chosen], found, complete)
        self.tags_total[chosen] += media
        self.n_scans[chosen] += 1
        self.seen[chosen] = upto
        self.fresh_from[chosen] = finish
        table.last_scan[chosen] = start
        table.rate_per_h[chosen] = self.stats.rates(chosen) * HOUR
        tags = self.tags_total[chosen] / self.n_scans[chosen]
        table.cost_s[chosen] = lan.list_cost[chosen] + p.tag_s_per_file * tags
        for i, s, c in zip(chosen.tolist(), start.tolist(), changed.tolist(), strict=True):
            history = table.rows[i].history
            history.append((s, c))
            if len(history) > p.history_keep:
                del history[0]

    def finish(self) -> tuple[np.ndarray, np.ndarray]:
        """Changes still unindexed at the end count as stale until the end (a lower bound);
        the freshness of each partition and the staleness of each change."""
        lan = self.lan
        idx_all = np.arange(lan.host_of.size)
        pending = lan.changes_upto(idx_all, lan.end) - self.seen
        if pending.any():
            p_idx = np.flatnonzero(pending)
            first = self.seen[p_idx]
            ctime = lan.change_time[slices(first, pending[p_idx])]
            self.staleness.append((lan.end - ctime)[ctime >= lan.measure_from])
            stale_from = np.maximum(lan.change_time[first], self.fresh_from[p_idx])
            self.stale_time[p_idx] += np.maximum(
                0.0, lan.end - np.maximum(stale_from, lan.measure_from)
            )
        fresh = 1.0 - self.stale_time / (lan.end - lan.measure_from)
        return fresh, np.concatenate(self.staleness) if self.staleness else np.empty(0)


def replay(lan: Lan, policy_name: str) -> dict[str, float | int | None]:
    """Run one policy over the LAN's trace, round by round: its entry of the result."""
    started, cpu_started = time.perf_counter(), time.process_time()
    p = lan.params
    policy = get_policy(policy_name)
    told = policy_name in HINTED_POLICIES
    # Crawlers are kept for notified changes only when some host notifies, and one is left.
    notifying = bool(lan.watch.notify.any())
    hint_crawlers = min(p.hint_crawlers, p.crawlers - 1) if told and notifying else 0
    crawlers = p.crawlers - hint_crawlers
    budget = Budget(crawlers=crawlers, round_seconds=p.round_seconds)
    n = lan.host_of.size
    rng = np.random.default_rng(p.seed + 1)  # the same initial crawl for every policy

    # Before the start, a full crawl at staggered times over the previous day.
    last_scan = -rng.uniform(0, DAY, n)
    hints = HintBook(lan, last_scan, single_changes=hint_crawlers == 0) if told else None
    path = HintPath(lan, hint_crawlers, hints) if hint_crawlers and hints else None
    host_names = [f"h{h:04d}" for h in range(p.hosts)]
    # The policies read the columns; the rows serve for ids and histories only.
    table = PartitionTable.of(
        PartitionState(
            partition_id=f"p{i:05d}",
            host=host_names[lan.host_of[i]],
            cost_s=float(lan.list_cost[i]),
            last_scan=float(last_scan[i]),
            history=[(float(last_scan[i]), False)],
            rate_per_h=DEFAULT_PRIOR_RATE_PER_S * HOUR,
        )
        for i in range(n)
    )
    run = _Run(lan, table, hints)
    index_of = {row.partition_id: i for i, row in enumerate(table.rows)}
    latest_start = last_scan.copy()  # of any scan planned so far, for the hint path

    failed = rounds = 0
    t = 0.0
    while t < lan.end:
        rounds += 1
        table.online = lan.host_online(np.arange(p.hosts), t)[lan.host_of]
        if hints is not None:
            hints.tell(table, t)

        chosen = np.array([index_of[pid] for pid in policy.choose(table, t, budget)], dtype=int)
        # Rounds run back to back: as long as their fetch list takes, at least min_round_s.
        round_end = t + min(p.min_round_s, p.round_seconds)
        start = listing = np.empty(0)
        if chosen.size:
            hinted_scan = (
                False if hints is None else table.hinted[chosen] & hints.hinted_scan(chosen, t)
            )
            listing = lan.listing_cost(chosen, hinted_scan)
            start, cost = _queue(lan, chosen, listing, run.seen, t, crawlers)
            ok = lan.host_online(lan.host_of[chosen], start)
            failed += int((~ok & (start >= lan.measure_from)).sum())
            round_end = max(round_end, float((start + cost).max()))
            chosen, start, listing = chosen[ok], start[ok], listing[ok]
        if path is not None:
            latest_start[chosen] = np.maximum(latest_start[chosen], start)
            h_parts, h_start, h_listing = path.plan(round_end, latest_start)
            chosen, start = np.r_[chosen, h_parts], np.r_[start, h_start]
            listing = np.r_[listing, h_listing]
        _apply_in_order(run, chosen, start, listing)
        t = round_end

    fresh, st = run.finish()
    changing = lan.rate > 0
    return {
        "freshness": round(float(fresh.mean()), 6),
        "freshness_changing": round(float(fresh[changing].mean()), 6) if changing.any() else 1.0,
        **{
            f"staleness_{k}_s": round(float(f(st)), 1) if st.size else None
            for k, f in _STALENESS.items()
        },
        "changes": int(st.size),
        "scans": run.scans,
        "empty_scans": run.empty,
        "tag_reads": run.tags,
        "failed_scans": failed,
        "rounds": rounds,
        "seconds": round(time.perf_counter() - started, 2),
        "cpu_seconds": round(time.process_time() - cpu_started, 2),
    }


def _apply_in_order(run: _Run, parts: np.ndarray, start: np.ndarray, listing: np.ndarray) -> None:
    """Scans where a partition may occur more than once: each partition's first scans, then
    its second ones, and so on, so that its scans are applied in order of start."""
    if parts.size == 0:
        return
    order = np.lexsort((start, parts))
    parts, start, listing = parts[order], start[order], listing[order]
    occurrence = sum_before(parts, np.ones(parts.size))
    for k in range(int(occurrence.max()) + 1):
        layer = occurrence == k
        run.apply(parts[layer], start[layer], listing[layer])


def _queue(
    lan: Lan, chosen: np.ndarray, listing: np.ndarray, seen: np.ndarray, t: float, crawlers: int
) -> tuple[np.ndarray, np.ndarray]:
    """Start times and costs of the chosen scans (listing for `listing` seconds each) on the
    crawlers: hosts in the order the policy first named them, each to the crawler free first,
    its partitions back to back."""
    p = lan.params
    pending_media = lan.cum_media[lan.changes_upto(chosen, t)] - lan.cum_media[seen[chosen]]
    cost = listing + p.tag_s_per_file * pending_media
    _, first_pos, inverse = np.unique(lan.host_of[chosen], return_index=True, return_inverse=True)
    host_total = np.bincount(inverse, weights=cost, minlength=first_pos.size)
    free = [t] * crawlers
    host_start = np.empty(first_pos.size)
    for h in np.argsort(first_pos).tolist():  # hosts in the order first named
        s = heapq.heappop(free)
        host_start[h] = s
        heapq.heappush(free, s + host_total[h])
    # Back to back within a host, in the policy's order.
    by_host = np.lexsort((np.arange(chosen.size), first_pos[inverse]))
    h_sorted = inverse[by_host]
    start = np.empty(chosen.size)
    start[by_host] = host_start[h_sorted] + sum_before(h_sorted, cost[by_host])
    return start, cost

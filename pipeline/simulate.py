"""`sharecrawl simulate`: replay a synthetic LAN against the real scheduling policies.

The LAN (thesis scale by default): 1000 hosts, about 10 partitions each, 2 000 folders and
20 000 files per host; listing costs 15 ms per folder (times a per-host speed factor, the
thesis saw tens of times between hosts) and reading a tag 150 ms. Change rates are heavy
tailed: "incoming" folders of file servers change every few minutes, busy folders every few
hours, film folders every few days, some every few months and most never, so that about 1 %
of partitions change on a given day. Changes happen only while a host is on: desktops are
switched off at night (and some days not switched on), every host reboots now and then.

One event trace (changes, hosts on and off) is generated per seed and replayed for every
policy. The replay goes in rounds: at each round start the policy's `choose` gets the
partitions' `PartitionState` and the budget, the chosen scans are queued on `crawlers`
crawlers (one host per crawler at a time), each scan sees the changes made before it started,
reads the tags of the new media and indexes them when it ends. Rounds run back to back, as
`sharecrawl crawl --rounds N` does: a round lasts as long as its scans take, and at least
`min_round_s` (its fixed part: generate, update, index); `min_round_s = round_seconds` gives
rounds of fixed length. After every round the scanned
partitions' history grows and their rate is re-estimated with the real estimator
(`pipeline.rates.estimate_rates`, the batch form of `estimate_rate`, over the same
sufficient statistics: intervals of scans that found a change, binned on a log scale, and the
total interval of scans that found none).

Measured after a warm-up (half a day) in which the estimates settle (seed 001 also measures the
stationary regime): time-averaged freshness (share of partitions whose index matches the
host), staleness of each change (from the change to the end of the scan that indexes it; a
change still unindexed at the end counts until the end), scans, scans that found nothing,
tag reads. The bound is the freshness of Cho & Garcia-Molina's optimal periodic refresh for
the true rates under the same crawler budget (a Lagrangian optimum, ignoring the per-host
limit and idle crawlers at night, so no policy that only knows the rates can beat it).
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import multiprocessing
import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from pipeline.policies import (
    POLICY_NAMES,
    Budget,
    PartitionState,
    freshness_of,
    get_policy,
    optimal_frequencies,
)
from pipeline.rates import DEFAULT_PRIOR_RATE_PER_S, DEFAULT_PRIOR_WEIGHT, estimate_rates

DAY = 86400.0
HOUR = 3600.0
MINUTE = 60.0

# Change classes: share of partitions, range of mean intervals between changes (seconds, drawn
# log-uniformly), mean new media files per change. "incoming" lives on file servers.
CHANGE_CLASSES: dict[str, tuple[float, tuple[float, float], float]] = {
    "incoming": (0.003, (2 * MINUTE, 10 * MINUTE), 2.0),
    "busy": (0.005, (1 * HOUR, 12 * HOUR), 3.0),
    "films": (0.012, (2 * DAY, 7 * DAY), 5.0),
    "rare": (0.10, (30 * DAY, 365 * DAY), 5.0),
}


@dataclass(frozen=True)
class SimParams:
    hosts: int = 1000
    days: float = 7.0
    crawlers: int = 10
    seed: int = 0
    round_seconds: float = 300.0  # the budget: crawlers * round_seconds, per host round_seconds
    min_round_s: float = 60.0  # a round's fixed part (generate, update, index)
    warmup_days: float = 0.5
    partitions_per_host: float = 10.0
    folders_per_host: float = 2000.0
    files_per_folder: float = 10.0
    media_share: float = 0.1
    list_s_per_folder: float = 0.015
    tag_s_per_file: float = 0.150
    server_share: float = 0.2  # hosts that stay on day and night
    reboots_per_day: float = 0.5
    history_keep: int = 64  # history entries kept in PartitionState (the policies' view)


@dataclass
class Lan:
    """The synthetic network and its event trace, shared by every policy's replay."""

    params: SimParams
    host_of: np.ndarray  # partition -> host index
    list_cost: np.ndarray  # seconds to list each partition
    n_folders: np.ndarray
    n_files: np.ndarray
    rate: np.ndarray  # true changes per second while the host is on
    kind: np.ndarray  # change class name per partition
    media_per_change: np.ndarray
    change_part: np.ndarray  # per change, sorted by (partition, time)
    change_time: np.ndarray
    change_key: np.ndarray  # partition * KEY_SPAN + time, for searchsorted
    cum_media: np.ndarray  # prefix sums of new media per change, leading 0
    off_start_key: np.ndarray  # merged offline intervals per host, keyed like changes
    off_end_key: np.ndarray
    online_share: np.ndarray  # per host, over the simulated time
    end: float
    measure_from: float

    def key(self, part: np.ndarray, t: np.ndarray | float) -> np.ndarray:
        return part * KEY_SPAN + (np.asarray(t) + KEY_OFFSET)

    def changes_upto(self, part: np.ndarray, t: np.ndarray | float) -> np.ndarray:
        """Index into the change arrays just past the changes of `part` at or before `t`."""
        return np.searchsorted(self.change_key, self.key(part, t), side="right")

    def host_online(self, host: np.ndarray, t: np.ndarray | float) -> np.ndarray:
        k = self.key(host, t)
        inside = np.searchsorted(self.off_start_key, k, side="right") - np.searchsorted(
            self.off_end_key, k, side="right"
        )
        return inside == 0


SERIES_STEP_S = 300.0  # freshness is sampled for the plot at most this often
KEY_OFFSET = 3 * DAY  # times from -3 days on are keyed
KEY_SPAN = 64 * DAY * 2  # > simulated time + offset; keys stay exact to ~1e-3 s at 1e5 items


def build_lan(params: SimParams) -> Lan:
    rng = np.random.default_rng(params.seed)
    warmup = params.warmup_days * DAY
    end = warmup + params.days * DAY
    if end + KEY_OFFSET >= KEY_SPAN:
        raise ValueError(f"simulate: at most {int(KEY_SPAN / DAY / 2 - 3)} days")
    n_hosts = params.hosts

    # Partitions per host and their sizes: log-normal, scaled to the thesis' totals.
    per_host = np.maximum(
        1, np.rint(rng.lognormal(math.log(params.partitions_per_host) - 0.32, 0.8, n_hosts))
    ).astype(int)
    host_of = np.repeat(np.arange(n_hosts), per_host)
    n_parts = host_of.size
    folders = rng.lognormal(0.0, 1.0, n_parts)
    folders = np.maximum(1, np.rint(folders * params.folders_per_host * n_hosts / folders.sum()))
    files = np.rint(folders * params.files_per_folder * rng.lognormal(-0.125, 0.5, n_parts))
    speed = rng.lognormal(-0.18, 0.6, n_hosts)  # mean 1: hosts differ up to tens of times
    list_cost = folders * params.list_s_per_folder * speed[host_of]

    servers = rng.random(n_hosts) < params.server_share
    rate = np.zeros(n_parts)
    kind = np.full(n_parts, "never", dtype=object)
    media_per_change = np.full(n_parts, 5.0)
    free = np.ones(n_parts, dtype=bool)
    for name, (share, (lo, hi), media) in CHANGE_CLASSES.items():
        count = max(1, round(share * n_parts)) if share * n_parts >= 0.5 else 0
        pool = np.flatnonzero(free & (servers[host_of] if name == "incoming" else True))
        if pool.size == 0:
            pool = np.flatnonzero(free)
        picked = rng.choice(pool, size=min(count, pool.size), replace=False)
        rate[picked] = 1.0 / np.exp(rng.uniform(math.log(lo), math.log(hi), picked.size))
        kind[picked] = name
        media_per_change[picked] = media
        free[picked] = False

    off_start, off_end, online_share = _offline_intervals(rng, params, servers, end)

    # Poisson changes over the whole time, kept only while the host is on (thinning).
    counts = rng.poisson(rate * (end + KEY_OFFSET / 3))
    part = np.repeat(np.arange(n_parts), counts)
    t = rng.uniform(-KEY_OFFSET / 3, end, part.size)
    lan = Lan(
        params=params,
        host_of=host_of,
        list_cost=list_cost,
        n_folders=folders,
        n_files=files,
        rate=rate,
        kind=kind,
        media_per_change=media_per_change,
        change_part=part,
        change_time=t,
        change_key=np.empty(0),
        cum_media=np.zeros(1),
        off_start_key=off_start,
        off_end_key=off_end,
        online_share=online_share,
        end=end,
        measure_from=warmup,
    )
    keep = lan.host_online(host_of[part], t)
    part, t = part[keep], t[keep]
    order = np.lexsort((t, part))
    part, t = part[order], t[order]
    media = rng.geometric(1.0 / media_per_change[part])
    lan.change_part, lan.change_time = part, t
    lan.change_key = lan.key(part, t)
    lan.cum_media = np.concatenate(([0], np.cumsum(media)))
    return lan


def _offline_intervals(
    rng: np.random.Generator, params: SimParams, servers: np.ndarray, end: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merged [start, end) offline intervals of every host as sorted keys, and online shares."""
    starts: list[float] = []
    ends: list[float] = []
    share = np.ones(params.hosts)
    first_day = -math.ceil(KEY_OFFSET / 3 / DAY)
    days = range(first_day, math.ceil(end / DAY) + 1)
    lo_t = -KEY_OFFSET / 3
    for h in range(params.hosts):
        spans: list[tuple[float, float]] = []
        if not servers[h]:
            # Desktops: on between about 7-10 h and 21-02 h; some days not switched on.
            for d in days:
                on = d * DAY + rng.uniform(7, 10) * HOUR
                off = d * DAY + rng.uniform(21, 26) * HOUR
                spans.append((off, (d + 1) * DAY + rng.uniform(7, 10) * HOUR))
                if rng.random() < 0.1:
                    spans.append((on, off))
        n_reboots = rng.poisson(params.reboots_per_day * (end - lo_t) / DAY)
        for s in rng.uniform(lo_t, end, n_reboots):
            spans.append((s, s + rng.uniform(2, 10) * MINUTE))
        merged: list[list[float]] = []
        for s, e in sorted(spans):
            if merged and s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        base = h * KEY_SPAN + KEY_OFFSET
        offline = 0.0
        for s, e in merged:
            starts.append(base + max(s, -KEY_OFFSET))
            ends.append(base + min(e, KEY_SPAN - KEY_OFFSET - 1))
            offline += max(0.0, min(e, end) - max(s, 0.0))
        share[h] = 1.0 - offline / end
    return np.array(starts), np.array(ends), share


def freshness_bound(lan: Lan) -> tuple[float, float]:
    """Upper bound of time-averaged freshness (all partitions, changing ones) for the budget.

    Per online second a partition changes at its true rate; scanning it f times per online
    second costs online_share * list_cost * f crawler-seconds per second. Tag reads are paid
    whatever the schedule, so they come off the budget first.
    """
    p = lan.params
    share = lan.online_share[lan.host_of]
    tag_load = float(np.sum(p.tag_s_per_file * lan.media_per_change * lan.rate * share))
    freq, _ = optimal_frequencies(
        lan.rate,
        share * lan.list_cost,
        budget_rate=max(p.crawlers - tag_load, 1e-9),
        max_freq=1.0 / min(p.min_round_s, p.round_seconds),
    )
    fresh = freshness_of(lan.rate, freq)
    changing = lan.rate > 0
    return float(fresh.mean()), float(fresh[changing].mean()) if changing.any() else 1.0


# Changed-scan intervals are binned on a log scale for the rate estimator's statistics.
_DT_EDGES = np.logspace(0, math.log10(64 * DAY), 81)
_DT_MID = np.sqrt(_DT_EDGES[:-1] * _DT_EDGES[1:])


@dataclass
class PolicyRun:
    """What one policy's replay measured."""

    freshness: float
    freshness_changing: float
    staleness: np.ndarray
    scans: int
    empty_scans: int
    tag_reads: int
    failed_scans: int
    rounds: int
    seconds: float
    series_t: list[float] = field(default_factory=list)
    series_fresh: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, float | int]:
        st = self.staleness
        has = st.size > 0
        return {
            "freshness": round(self.freshness, 6),
            "freshness_changing": round(self.freshness_changing, 6),
            "staleness_min_s": round(float(st.min()), 1) if has else None,
            "staleness_mean_s": round(float(st.mean()), 1) if has else None,
            "staleness_p95_s": round(float(np.percentile(st, 95)), 1) if has else None,
            "staleness_max_s": round(float(st.max()), 1) if has else None,
            "changes": int(st.size),
            "scans": self.scans,
            "empty_scans": self.empty_scans,
            "tag_reads": self.tag_reads,
            "failed_scans": self.failed_scans,
            "rounds": self.rounds,
            "seconds": round(self.seconds, 2),
        }


def replay(lan: Lan, policy_name: str) -> PolicyRun:
    """Run one policy over the LAN's trace, round by round, and measure it."""
    started = time.perf_counter()
    p = lan.params
    policy = get_policy(policy_name)
    budget = Budget(crawlers=p.crawlers, round_seconds=p.round_seconds)
    n = lan.host_of.size
    idx_all = np.arange(n)
    rng = np.random.default_rng(p.seed + 1)  # the same initial crawl for every policy

    # Before the start, a full crawl at staggered times over the previous day.
    last_scan = -rng.uniform(0, DAY, n)
    seen = lan.changes_upto(idx_all, last_scan)  # changes up to here are in the index
    fresh_from = last_scan.copy()  # stale intervals cannot start before the last scan ended
    changed_counts = np.zeros((n, _DT_MID.size))
    unchanged_s = np.zeros(n)
    tags_total = np.zeros(n)
    n_scans = np.zeros(n)
    rate = np.full(n, DEFAULT_PRIOR_RATE_PER_S)
    host_names = [f"h{h:04d}" for h in range(p.hosts)]
    ids = [f"p{i:05d}" for i in range(n)]
    index_of = {pid: i for i, pid in enumerate(ids)}
    online_now = lan.host_online(np.arange(p.hosts), 0.0)
    states = [
        PartitionState(
            partition_id=ids[i],
            host=host_names[lan.host_of[i]],
            cost_s=float(lan.list_cost[i]),
            last_scan=float(last_scan[i]),
            history=[(float(last_scan[i]), False)],
            rate_per_h=rate[i] * HOUR,
            online=bool(online_now[lan.host_of[i]]),
        )
        for i in range(n)
    ]
    parts_of_host: list[list[int]] = [[] for _ in range(p.hosts)]
    for i, h in enumerate(lan.host_of.tolist()):
        parts_of_host[h].append(i)

    staleness: list[np.ndarray] = []
    stale_time = np.zeros(n)  # seconds stale inside the measured period
    scans = empty = tags = failed = rounds = 0
    series_t: list[float] = []
    series_fresh: list[float] = []
    t = 0.0
    while t < lan.end:
        rounds += 1
        now_online = lan.host_online(np.arange(p.hosts), t)
        for h in np.flatnonzero(now_online != online_now).tolist():
            for i in parts_of_host[h]:
                states[i].online = bool(now_online[h])
        online_now = now_online
        if t >= lan.measure_from and (not series_t or t - series_t[-1] >= SERIES_STEP_S):
            stale_now = lan.changes_upto(idx_all, t) > seen
            series_t.append(t)
            series_fresh.append(1.0 - float(stale_now.mean()))

        chosen = np.array([index_of[pid] for pid in policy.choose(states, t, budget)], dtype=int)
        # Rounds run back to back: as long as their fetch list takes, at least min_round_s.
        round_end = t + min(p.min_round_s, p.round_seconds)
        if chosen.size:
            start, cost = _queue(lan, chosen, seen, t)
            ok = lan.host_online(lan.host_of[chosen], start)
            failed += int((~ok & (start >= lan.measure_from)).sum())
            round_end = max(round_end, float((start + cost).max()))
            chosen, start = chosen[ok], start[ok]
            upto = lan.changes_upto(chosen, start)
            lo = seen[chosen]
            found = upto - lo
            changed = found > 0
            media = lan.cum_media[upto] - lan.cum_media[lo]
            finish = start + lan.list_cost[chosen] + p.tag_s_per_file * media
            measured = start >= lan.measure_from
            scans += int(measured.sum())
            empty += int((measured & ~changed).sum())
            tags += int(media[measured].sum())

            # Staleness of every change indexed now, and the time its partition was stale.
            if changed.any():
                c_idx, c_lo, c_n = chosen[changed], lo[changed], found[changed]
                c_end = finish[changed]
                ctime = lan.change_time[_slices(c_lo, c_n)]
                delay = np.repeat(c_end, c_n) - ctime
                staleness.append(delay[ctime >= lan.measure_from])
                stale_from = np.maximum(lan.change_time[c_lo], fresh_from[c_idx])
                stale_time[c_idx] += np.maximum(
                    0.0, np.minimum(c_end, lan.end) - np.maximum(stale_from, lan.measure_from)
                )

            # The rate estimator's statistics, then the new estimates for these partitions.
            dt = start - last_scan[chosen]
            bins = np.clip(np.searchsorted(_DT_EDGES, dt) - 1, 0, _DT_MID.size - 1)
            np.add.at(changed_counts, (chosen[changed], bins[changed]), 1.0)
            unchanged_s[chosen[~changed]] += dt[~changed]
            rate[chosen] = _estimate(changed_counts[chosen], unchanged_s[chosen])
            tags_total[chosen] += media
            n_scans[chosen] += 1
            seen[chosen] = upto
            last_scan[chosen] = start
            fresh_from[chosen] = finish
            _update_states(states, chosen, start, changed, rate, lan, tags_total, n_scans)
        t = round_end

    # Changes still unindexed at the end: stale until the end (a lower bound).
    pending = lan.changes_upto(idx_all, lan.end) - seen
    if pending.any():
        p_idx = np.flatnonzero(pending)
        first = seen[p_idx]
        ctime = lan.change_time[_slices(first, pending[p_idx])]
        staleness.append((lan.end - ctime)[ctime >= lan.measure_from])
        stale_from = np.maximum(lan.change_time[first], fresh_from[p_idx])
        stale_time[p_idx] += np.maximum(0.0, lan.end - np.maximum(stale_from, lan.measure_from))

    period = lan.end - lan.measure_from
    fresh = 1.0 - stale_time / period
    changing = lan.rate > 0
    return PolicyRun(
        freshness=float(fresh.mean()),
        freshness_changing=float(fresh[changing].mean()) if changing.any() else 1.0,
        staleness=np.concatenate(staleness) if staleness else np.empty(0),
        scans=scans,
        empty_scans=empty,
        tag_reads=tags,
        failed_scans=failed,
        rounds=rounds,
        seconds=time.perf_counter() - started,
        series_t=series_t,
        series_fresh=series_fresh,
    )


def _slices(start: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Concatenated ranges start[k] .. start[k] + count[k]."""
    offsets = np.cumsum(count) - count
    return np.repeat(start - offsets, count) + np.arange(int(count.sum()))


def _queue(
    lan: Lan, chosen: np.ndarray, seen: np.ndarray, t: float
) -> tuple[np.ndarray, np.ndarray]:
    """Start times and costs of the chosen scans on the crawlers: hosts in the order the
    policy first named them, each to the crawler free first, its partitions back to back."""
    p = lan.params
    pending_media = lan.cum_media[lan.changes_upto(chosen, t)] - lan.cum_media[seen[chosen]]
    cost = lan.list_cost[chosen] + p.tag_s_per_file * pending_media
    hosts = lan.host_of[chosen]
    uniq, first_pos, inverse = np.unique(hosts, return_index=True, return_inverse=True)
    host_order = np.argsort(first_pos, kind="stable")  # position of each host in the queue
    rank = np.empty_like(host_order)
    rank[host_order] = np.arange(uniq.size)
    host_total = np.bincount(inverse, weights=cost, minlength=uniq.size)
    free = [t] * p.crawlers
    host_start = np.empty(uniq.size)
    for h in host_order.tolist():
        s = heapq.heappop(free)
        host_start[h] = s
        heapq.heappush(free, s + host_total[h])
    # Back to back within a host, in the policy's order.
    by_host = np.lexsort((np.arange(chosen.size), rank[inverse]))
    c_sorted = cost[by_host]
    h_sorted = inverse[by_host]
    cum = np.cumsum(c_sorted) - c_sorted
    group_start = np.r_[0, np.flatnonzero(np.diff(h_sorted)) + 1]
    offset = cum - np.repeat(cum[group_start], np.diff(np.r_[group_start, h_sorted.size]))
    start = np.empty(chosen.size)
    start[by_host] = host_start[h_sorted] + offset
    return start, cost


def _estimate(counts: np.ndarray, unchanged_s: np.ndarray) -> np.ndarray:
    rows, cols = np.nonzero(counts)
    return estimate_rates(
        changed_dt=_DT_MID[cols],
        changed_weight=counts[rows, cols],
        changed_group=rows,
        unchanged_s=unchanged_s,
        prior_rate_per_s=DEFAULT_PRIOR_RATE_PER_S,
        prior_weight=DEFAULT_PRIOR_WEIGHT,
    )


def _update_states(
    states: list[PartitionState],
    chosen: np.ndarray,
    start: np.ndarray,
    changed: np.ndarray,
    rate: np.ndarray,
    lan: Lan,
    tags_total: np.ndarray,
    n_scans: np.ndarray,
) -> None:
    keep = lan.params.history_keep
    tag_s = lan.params.tag_s_per_file
    # Expected cost: listing plus the tag reads an average scan of this partition needed.
    cost = lan.list_cost[chosen] + tag_s * tags_total[chosen] / n_scans[chosen]
    for i, s, c, r, k in zip(
        chosen.tolist(),
        start.tolist(),
        changed.tolist(),
        (rate[chosen] * HOUR).tolist(),
        cost.tolist(),
        strict=True,
    ):
        st = states[i]
        st.last_scan = s
        st.history.append((s, c))
        if len(st.history) > keep:
            del st.history[0]
        st.rate_per_h = r
        st.cost_s = k


def simulate(
    hosts: int = 1000,
    days: float = 7.0,
    crawlers: int = 10,
    policies: Sequence[str] = POLICY_NAMES,
    seed: int = 0,
    *,
    round_seconds: float = 300.0,
    min_round_s: float = 60.0,
    warmup_days: float = 0.5,
    keep_series: bool = False,
    workers: int = 1,
    **lan_settings: float,
) -> dict:
    """Replay one synthetic LAN for every policy; the --json object of `sharecrawl simulate`.

    With keep_series=True the result also holds "series": {name: [[t_h, freshness], ...]}
    for `plot`. workers > 1 replays policies in that many forked processes (same results).
    """
    for name in policies:
        get_policy(name)  # unknown names fail before the long part
    params = SimParams(
        hosts=hosts,
        days=days,
        crawlers=crawlers,
        seed=seed,
        round_seconds=round_seconds,
        min_round_s=min_round_s,
        warmup_days=warmup_days,
        **lan_settings,
    )
    _check(params)
    built = time.perf_counter()
    lan = build_lan(params)
    build_s = time.perf_counter() - built
    bound, bound_changing = freshness_bound(lan)
    runs = _replay_all(lan, list(policies), workers)
    changing_day = float(np.mean(1.0 - np.exp(-lan.rate * DAY * lan.online_share[lan.host_of])))
    result: dict = {
        "params": {
            **asdict(params),
            "partitions": int(lan.host_of.size),
            "folders": int(lan.n_folders.sum()),
            "files": int(lan.n_files.sum()),
            "changes": int(np.sum(lan.change_time >= lan.measure_from)),
            "changing_per_day": round(changing_day, 4),
            "full_crawl_s": round(float(lan.list_cost.sum() / crawlers), 1),
            "build_s": round(build_s, 2),
        },
        "bound": round(bound, 6),
        "bound_changing": round(bound_changing, 6),
        "policies": {name: run.summary() for name, run in runs.items()},
    }
    if keep_series:
        result["series"] = {
            name: [
                [round(t / HOUR, 4), f] for t, f in zip(run.series_t, run.series_fresh, strict=True)
            ]
            for name, run in runs.items()
        }
    return result


_SHARED_LAN: Lan | None = None  # the trace, inherited by forked workers


def _replay_shared(name: str) -> PolicyRun:
    assert _SHARED_LAN is not None
    return replay(_SHARED_LAN, name)


def _replay_all(lan: Lan, names: list[str], workers: int) -> dict[str, PolicyRun]:
    global _SHARED_LAN
    workers = min(workers, len(names))
    if workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return {name: replay(lan, name) for name in names}
    _SHARED_LAN = lan
    try:
        context = multiprocessing.get_context("fork")
        # Policies that choose only what is due run many short rounds: start them first.
        slow_first = sorted(names, key=lambda n: n not in ("adaptive", "optimal"))
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            runs = dict(zip(slow_first, pool.map(_replay_shared, slow_first), strict=True))
        return {name: runs[name] for name in names}
    finally:
        _SHARED_LAN = None


def _check(params: SimParams) -> None:
    if params.hosts < 1:
        raise ValueError("simulate: --hosts must be at least 1")
    if not params.days > 0:
        raise ValueError("simulate: --days must be positive")
    if params.crawlers < 1:
        raise ValueError("simulate: --crawlers must be at least 1")
    if not params.round_seconds > 0:
        raise ValueError("simulate: --round-seconds must be positive")
    if params.warmup_days < 0:
        raise ValueError("simulate: --warmup-days must not be negative")


def plot(result_or_series: dict, path: str | Path) -> Path:
    """Draw freshness over time per policy (and the bound, when known) to a PNG file."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = result_or_series.get("series", result_or_series)
    if not series or not all(isinstance(v, list) for v in series.values()):
        raise ValueError("plot: need a simulate(..., keep_series=True) result or its series")
    fig, ax = plt.subplots(figsize=(10, 5), dpi=100)
    for name, points in series.items():
        if points:
            t, f = zip(*points, strict=True)
            ax.plot(t, f, label=name, linewidth=1)
    if "bound" in result_or_series:
        ax.axhline(result_or_series["bound"], color="black", linestyle="--", label="bound")
    ax.set_xlabel("time, hours")
    ax.set_ylabel("freshness (share of partitions up to date)")
    ax.set_title("sharecrawl simulate: freshness over time")
    ax.grid(alpha=0.3)
    ax.legend()
    path = Path(path)
    fig.savefig(path, format="png")
    plt.close(fig)
    return path


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * HOUR:
        return f"{seconds / MINUTE:.1f} min"
    return f"{seconds / HOUR:.1f} h"


def print_table(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    p = result["params"]
    table = Table(
        title=(
            f"{p['hosts']} hosts, {p['partitions']} partitions, {p['folders']:,} folders, "
            f"{p['files']:,} files; {p['crawlers']} crawlers, rounds of "
            f"{p['round_seconds']:.0f} s; {p['days']:g} days measured after "
            f"{p['warmup_days']:g} warm-up, seed {p['seed']}"
        )
    )
    table.add_column("policy", no_wrap=True)
    for col in ("freshness", "changing", "stale min", "mean", "p95", "max"):
        table.add_column(col, justify="right")
    for col in ("changes", "scans", "empty", "tag reads"):
        table.add_column(col, justify="right")
    for name, m in result["policies"].items():
        table.add_row(
            name,
            f"{m['freshness']:.4%}",
            f"{m['freshness_changing']:.2%}",
            _duration(m["staleness_min_s"]),
            _duration(m["staleness_mean_s"]),
            _duration(m["staleness_p95_s"]),
            _duration(m["staleness_max_s"]),
            f"{m['changes']:,}",
            f"{m['scans']:,}",
            f"{m['empty_scans']:,}",
            f"{m['tag_reads']:,}",
        )
    table.add_row("bound", f"{result['bound']:.4%}", f"{result['bound_changing']:.2%}", *[""] * 8)
    # Wide enough for every column when the output goes to a file or a pipe.
    console = Console(width=None if sys.stdout.isatty() else 150)
    console.print(table)
    console.print(
        "freshness: time-averaged share of partitions whose index matches the host "
        "('changing': of those that ever change); staleness: change to index."
    )


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="sharecrawl simulate",
        description="Compare the scheduling policies on a synthetic LAN (one trace, one seed).",
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--hosts", type=int, default=1000)
    ap.add_argument("--days", type=float, default=7.0, help="measured days (after warm-up)")
    ap.add_argument("--crawlers", type=int, default=10)
    ap.add_argument("--policies", default=",".join(POLICY_NAMES), help="comma separated")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--round-seconds", type=float, default=300.0)
    ap.add_argument("--warmup-days", type=float, default=0.5)
    ap.add_argument(
        "--min-round-s", type=float, default=60.0, help="fixed part of a round (back to back)"
    )
    ap.add_argument("--plot", metavar="FILE.png", help="draw freshness over time")
    ap.add_argument(
        "--workers", type=int, default=os.cpu_count() or 1, help="policies replayed at once"
    )
    return ap


def run_cli(argv: list[str] | None) -> int:
    """`sharecrawl simulate [--json] [--hosts N] [--days D] [--crawlers K] [--policies a,b]
    [--seed S] [--plot FILE.png]`; 0 on success, 2 on bad arguments."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # argparse has printed its message (or the help)
        return int(e.code or 0)
    policies = [s.strip() for s in args.policies.split(",") if s.strip()]
    try:
        if not policies:
            raise ValueError("simulate: --policies names no policy")
        result = simulate(
            hosts=args.hosts,
            days=args.days,
            crawlers=args.crawlers,
            policies=policies,
            seed=args.seed,
            round_seconds=args.round_seconds,
            warmup_days=args.warmup_days,
            min_round_s=args.min_round_s,
            keep_series=bool(args.plot),
            workers=args.workers,
        )
        if args.plot:
            plot(result, args.plot)
    except (ValueError, OSError) as e:
        print(f"sharecrawl simulate: {e}", file=sys.stderr)
        return 2
    result.pop("series", None)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result)
        if args.plot:
            print(f"plot: {args.plot}")
    return 0


main_simulate = run_cli

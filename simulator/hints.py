"""What a policy told about change notifications knows and does during a replay.

`HintBook`: a partition is hinted when an overflow hint of its share (or, with no crawlers
kept for single changes, any hint) arrived since its last scan started, and watched while its
share's watch has had no break since then; each kept as one time per partition, set when it
is scanned, so a round costs two comparisons per partition.

`HintPath`: the notifications served as they arrive on the crawlers kept for them.
"""

from __future__ import annotations

import heapq

import numpy as np

from pipeline.scheduling.choice import PartitionTable
from simulator.lan import KEY_OFFSET, KEY_SPAN, Lan, Watch, slices


def _watch(lan: Lan) -> Watch:
    if lan.watch is None:
        raise ValueError("simulate: the LAN has no notification trace")
    return lan.watch


class HintBook:
    """With `single_changes`, notifications of single changes make their partition hinted
    too (when no crawlers serve them as they come, they wait for the next round)."""

    def __init__(self, lan: Lan, last_scan: np.ndarray, single_changes: bool = False) -> None:
        self.lan = lan
        self.watch = _watch(lan)
        n = lan.host_of.size
        self.notify = self.watch.notify[lan.host_of]
        w = self.watch
        self.hint_key = (
            np.sort(lan.key(w.hint_part, w.hint_arrival)) if single_changes else np.empty(0)
        )
        self.hint_at = np.full(n, np.inf)  # arrival of the first hint after the last scan
        self.trust_until = np.full(n, -np.inf)  # start of the first break after it
        self.scanned(np.arange(n), last_scan)

    def scanned(self, idx: np.ndarray, start: np.ndarray) -> None:
        """Partitions idx were scanned from `start` on: their hints and trust start anew."""
        lan, w = self.lan, self.watch
        hosts = lan.host_of[idx]
        self.hint_at[idx] = np.minimum(
            _next_after(w.overflow_key, hosts, start), _next_after(self.hint_key, idx, start)
        )
        # The first break that has not ended by `start`: trusted until it begins (not at all
        # when it already has).
        n_breaks = w.break_start_key.size
        if n_breaks:
            b = np.searchsorted(w.break_end_key, lan.key(hosts, start), side="right")
            has = b < n_breaks
            b_start = np.where(has, w.break_start_key[np.minimum(b, n_breaks - 1)], 0.0)
            same_host = has & (b_start < (hosts + 1) * KEY_SPAN)
            until = np.where(same_host, b_start - hosts * KEY_SPAN - KEY_OFFSET, np.inf)
        else:
            until = np.full(idx.size, np.inf)
        self.trust_until[idx] = np.where(self.notify[idx], until, -np.inf)

    def hinted_scan(self, idx: np.ndarray, t: np.ndarray | float) -> np.ndarray:
        """Whether the watch of partitions idx had no break from their last scan to t: a scan
        at t may list only around the hints, and its count of changes is complete."""
        return self.trust_until[idx] > t

    def tell(self, table: PartitionTable, t: float) -> None:
        """Set the table's `hinted` and `watched` as they are at time t."""
        table.hinted, table.watched = self.hint_at <= t, self.trust_until > t


class HintPath:
    """Scans of notifications on the crawlers kept for them, planned one window (a round) at
    a time: a single change's partition, and (`overflows`) every partition of an overflowed
    share, listed whole, as `watch --crawl`'s rounds for the hints take both. A waiting single
    change goes before a waiting overflow (it is one cheap scan; an overflow is a share's)."""

    def __init__(self, lan: Lan, crawlers: int, book: HintBook, overflows: bool = True) -> None:
        self.lan = lan
        self.book = book
        w = _watch(lan)
        self.single = _Queue(w.hint_part, w.hint_arrival, w.hint_change, whole=False)
        o_part = o_arrival = np.empty(0, dtype=int)
        if overflows and w.overflow_key.size:
            # An overflow is served as a change at its arrival in each partition of its host:
            # a scan started after it sees whatever the server lost count of.
            o_host = (w.overflow_key // KEY_SPAN).astype(int)
            o_t = w.overflow_key - o_host * KEY_SPAN - KEY_OFFSET
            per_host = np.bincount(lan.host_of, minlength=lan.params.hosts)
            first = np.r_[0, np.cumsum(per_host)[:-1]]  # partitions are numbered host by host
            n = per_host[o_host]
            o_part = slices(first[o_host], n)
            o_arrival = np.repeat(o_t, n)
        self.overflow = _Queue(o_part, o_arrival, o_arrival, whole=True)
        self.free = [-np.inf] * crawlers  # when each hint crawler is free, a heap

    def plan(
        self, until: float, latest_start: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Partitions, start times and listing costs of the hint scans that start before
        `until`. A notification is served unless a scan started at or after its change covers
        it; `latest_start` (per partition, the latest scan start planned) is updated."""
        lan = self.lan
        tag_s = lan.params.tag_s_per_file
        parts: list[int] = []
        starts: list[float] = []
        listing: list[float] = []
        single, overflow = self.single, self.overflow
        while True:
            s_ok, o_ok = single.waiting(until), overflow.waiting(until)
            if not (s_ok or o_ok):
                break
            free = self.free[0]
            take_single = s_ok and (
                not o_ok or single.arrival_now() <= max(free, overflow.arrival_now())
            )
            queue = single if take_single else overflow
            i, arrived, changed_at = queue.now()
            prev = float(latest_start[i])
            if prev >= changed_at:
                queue.next += 1
                continue
            start = max(arrived, free)
            if start >= until:
                break
            if not lan.host_online(lan.host_of[i : i + 1], start)[0]:
                queue.next += 1  # gone off: its reconnect brings an overflow hint
                continue
            new_media = lan.cum_media[lan.changes_upto(np.array([i, i]), np.array([start, prev]))]
            one = np.array([i])
            hinted_scan = self.book.hinted_scan(one, start) & (not queue.whole)
            list_s = float(lan.listing_cost(one, hinted_scan)[0])
            cost = list_s + tag_s * float(new_media[0] - new_media[1])
            heapq.heapreplace(self.free, start + cost)
            latest_start[i] = start
            parts.append(i)
            starts.append(start)
            listing.append(list_s)
            queue.next += 1
        return np.array(parts, dtype=int), np.array(starts), np.array(listing)


class _Queue:
    """Notifications in order of arrival, served from `next` on."""

    def __init__(self, part: np.ndarray, arrival: np.ndarray, change: np.ndarray, whole: bool):
        order = np.argsort(arrival, kind="stable")
        self.part = part[order].tolist()
        self.arrival = arrival[order].tolist()
        self.change = change[order].tolist()
        self.whole = whole  # listed whole, never a hinted scan
        self.next = 0

    def waiting(self, until: float) -> bool:
        return self.next < len(self.part) and self.arrival[self.next] < until

    def arrival_now(self) -> float:
        return float(self.arrival[self.next])

    def now(self) -> tuple[int, float, float]:
        k = self.next
        return int(self.part[k]), float(self.arrival[k]), float(self.change[k])


def _next_after(keys: np.ndarray, owner: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Time of each owner's first key after t (inf when none); keys sorted, owner-major."""
    if keys.size == 0:
        return np.full(owner.size, np.inf)
    pos = np.searchsorted(keys, owner * KEY_SPAN + (t + KEY_OFFSET), side="right")
    k = keys[np.minimum(pos, keys.size - 1)]
    ok = (pos < keys.size) & (k < (owner + 1) * KEY_SPAN)
    return np.where(ok, k - owner * KEY_SPAN - KEY_OFFSET, np.inf)

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

from sharecrawl.pipeline.scheduling.choice import PartitionTable
from sharecrawl.simulator.lan import KEY_OFFSET, KEY_SPAN, Lan, slices


class HintBook:
    """With `single_changes`, notifications of single changes make their partition hinted
    too (when no crawlers serve them as they come, they wait for the next round)."""

    def __init__(self, lan: Lan, last_scan: np.ndarray, single_changes: bool = False) -> None:
        self.lan = lan
        self.watch = w = lan.watch
        n = lan.host_of.size
        self.notify = w.notify[lan.host_of]
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
        w = lan.watch
        self.single = _Queue(w.hint_part, w.hint_arrival, w.hint_change, whole=False)
        o_part = o_arrival = np.empty(0, dtype=int)
        if overflows and w.overflow_key.size:
            # An overflow is served as a change at its arrival in each partition of its host:
            # a scan started after it sees whatever the server lost count of.
            o_host = (w.overflow_key // KEY_SPAN).astype(int)
            o_t = w.overflow_key - o_host * KEY_SPAN - KEY_OFFSET
            first = np.searchsorted(lan.host_of, o_host)  # partitions numbered host by host
            n = np.searchsorted(lan.host_of, o_host, side="right") - first
            o_part = slices(first, n)
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
        parts: list[int] = []
        starts: list[float] = []
        listing: list[float] = []
        while self.free[0] < until:
            free, s_head, o_head = self.free[0], self.single.head(until), self.overflow.head(until)
            if s_head is not None and (o_head is None or s_head[1] <= max(free, o_head[1])):
                queue, (i, arrived, changed_at) = self.single, s_head
            elif o_head is not None:
                queue, (i, arrived, changed_at) = self.overflow, o_head
            else:
                break
            queue.next += 1
            start, prev = max(arrived, free), float(latest_start[i])
            # Skipped when covered by a scan started since the change, or when the host went
            # off (its reconnect brings an overflow hint).
            if prev >= changed_at or not lan.host_online(lan.host_of[i : i + 1], start)[0]:
                continue
            new_media = lan.cum_media[lan.changes_upto(np.array([i, i]), np.array([start, prev]))]
            one = np.array([i])
            hinted_scan = self.book.hinted_scan(one, start) & (not queue.whole)
            list_s = float(lan.listing_cost(one, hinted_scan)[0])
            cost = list_s + lan.params.tag_s_per_file * float(new_media[0] - new_media[1])
            heapq.heapreplace(self.free, start + cost)
            latest_start[i] = start
            parts.append(i)
            starts.append(start)
            listing.append(list_s)
        return np.array(parts, dtype=int), np.array(starts), np.array(listing)


class _Queue:
    """Notifications (partition, arrival, change time) in order of arrival, from `next` on."""

    def __init__(self, part: np.ndarray, arrival: np.ndarray, change: np.ndarray, whole: bool):
        order = np.argsort(arrival, kind="stable")
        columns = (part[order].tolist(), arrival[order].tolist(), change[order].tolist())
        self.items: list[tuple[int, float, float]] = list(zip(*columns, strict=True))
        self.whole = whole  # listed whole, never a hinted scan
        self.next = 0

    def head(self, until: float) -> tuple[int, float, float] | None:
        """The next notification, if it arrives before `until`."""
        if self.next < len(self.items) and self.items[self.next][1] < until:
            return self.items[self.next]
        return None


def _next_after(keys: np.ndarray, owner: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Time of each owner's first key after t (inf when none); keys sorted, owner-major."""
    if keys.size == 0:
        return np.full(owner.size, np.inf)
    pos = np.searchsorted(keys, owner * KEY_SPAN + (t + KEY_OFFSET), side="right")
    k = keys[np.minimum(pos, keys.size - 1)]
    ok = (pos < keys.size) & (k < (owner + 1) * KEY_SPAN)
    return np.where(ok, k - owner * KEY_SPAN - KEY_OFFSET, np.inf)

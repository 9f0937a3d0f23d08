"""The synthetic LAN of `sharecrawl simulate` and its event trace, at thesis scale by default
(`SimParams`): listing speeds differ between hosts tens of times (as the thesis saw), change
rates are heavy tailed (`CHANGE_CLASSES`: about 1 % of partitions change on a given day), and
changes happen only while a host is on (desktops off at night, every host reboots now and then).
One trace per seed, replayed for every policy; times are seconds from the start of the warm-up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

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
    # Change notifications (what is modelled: `Watch`).
    notify_share: float = 0.9  # hosts whose shares can be watched
    hint_delay_s: tuple[float, float] = (1.0, 5.0)  # change to hint: transport and settle
    reconnect_s: tuple[float, float] = (5.0, 60.0)  # host back on to watch re-armed (backoff)
    watch_drops_per_day: float = 1.0  # connection drops while the host stays on
    watch_drop_s: tuple[float, float] = (10.0, 300.0)  # how long such a drop lasts
    overflow_share: float = 0.01  # changes that come as bursts overflowing the notify buffer
    hint_crawlers: int = 2  # of `crawlers`, kept for scans of single-change notifications
    # Folders a hinted scan lists (the changed folder and the one above; jobs.hinted_walk) when
    # the watch was unbroken since the partition's last scan; 0: hinted partitions listed whole.
    hinted_scan_folders: int = 2


@dataclass
class Lan:
    """The synthetic network and its event trace, shared by every policy's replay."""

    params: SimParams
    host_of: np.ndarray  # partition -> host index
    list_cost: np.ndarray  # seconds to list each partition
    n_folders: np.ndarray
    n_files: np.ndarray
    rate: np.ndarray  # true changes per second while the host is on
    change_part: np.ndarray  # per change, sorted by (partition, time)
    change_time: np.ndarray
    change_key: np.ndarray  # partition * KEY_SPAN + time, for searchsorted
    cum_media: np.ndarray  # prefix sums of new media per change, leading 0
    off_start_key: np.ndarray  # merged offline intervals per host, keyed like changes
    off_end_key: np.ndarray
    online_share: np.ndarray  # per host, over the simulated time
    end: float
    measure_from: float
    watch: Watch = field(init=False)  # the change notifications, set by build_lan

    @staticmethod
    def key(part: np.ndarray, t: np.ndarray | float) -> np.ndarray:
        return part * KEY_SPAN + (np.asarray(t) + KEY_OFFSET)

    def changes_upto(self, part: np.ndarray, t: np.ndarray | float) -> np.ndarray:
        """Index into the change arrays just past the changes of `part` at or before `t`."""
        return np.searchsorted(self.change_key, self.key(part, t), side="right")

    def host_online(self, host: np.ndarray, t: np.ndarray | float) -> np.ndarray:
        return overlapping(self.off_start_key, self.off_end_key, self.key(host, t)) == 0

    def online_seconds(self, lo: float, hi: float) -> np.ndarray:
        """Seconds each host was on between lo and hi."""
        host = (self.off_start_key // KEY_SPAN).astype(np.intp)
        base = host * KEY_SPAN + KEY_OFFSET
        off_lo = np.maximum(self.off_start_key - base, lo)
        off_hi = np.minimum(self.off_end_key - base, hi)
        off = np.maximum(off_hi - off_lo, 0.0)
        return (hi - lo) - np.bincount(host, weights=off, minlength=self.params.hosts)

    def listing_cost(self, part: np.ndarray, hinted_scan: np.ndarray | bool = False) -> np.ndarray:
        """Seconds to list partitions: whole, or for a hinted scan the folders around the
        change only (`hinted_scan_folders` of them, at the partition's cost per folder)."""
        whole = self.list_cost[part]
        k = self.params.hinted_scan_folders
        if not k:
            return whole
        share = np.minimum(1.0, k / np.maximum(self.n_folders[part], 1.0))
        return np.where(hinted_scan, whole * share, whole)


def overlapping(start_key: np.ndarray, end_key: np.ndarray, key: np.ndarray) -> np.ndarray:
    """How many of the disjoint intervals [start, end), keyed and sorted, hold `key`."""
    return np.searchsorted(start_key, key, "right") - np.searchsorted(end_key, key, "right")


def slices(start: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Concatenated ranges start[k] .. start[k] + count[k]."""
    offsets = np.cumsum(count) - count
    return np.repeat(start - offsets, count) + np.arange(int(count.sum()))


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
    media_per_change = np.full(n_parts, 5.0)
    free = np.ones(n_parts, dtype=bool)
    for name, (share, (lo, hi), media) in CHANGE_CLASSES.items():
        count = max(1, round(share * n_parts)) if share * n_parts >= 0.5 else 0
        pool = np.flatnonzero(free & (servers[host_of] if name == "incoming" else True))
        if pool.size == 0:
            pool = np.flatnonzero(free)
        picked = rng.choice(pool, size=min(count, pool.size), replace=False)
        rate[picked] = 1.0 / np.exp(rng.uniform(math.log(lo), math.log(hi), picked.size))
        media_per_change[picked] = media
        free[picked] = False

    off_start, off_end = _offline_intervals(rng, params, servers, end)

    # Poisson changes over the whole time, kept only while the host is on (thinning).
    counts = rng.poisson(rate * (end + KEY_OFFSET / 3))
    part = np.repeat(np.arange(n_parts), counts)
    t = rng.uniform(-KEY_OFFSET / 3, end, part.size)
    keep = overlapping(off_start, off_end, Lan.key(host_of[part], t)) == 0
    order = np.lexsort((t[keep], part[keep]))
    part, t = part[keep][order], t[keep][order]
    media = rng.geometric(1.0 / media_per_change[part])
    lan = Lan(
        params=params,
        host_of=host_of,
        list_cost=list_cost,
        n_folders=folders,
        n_files=files,
        rate=rate,
        change_part=part,
        change_time=t,
        change_key=Lan.key(part, t),
        cum_media=np.concatenate(([0], np.cumsum(media))),
        off_start_key=off_start,
        off_end_key=off_end,
        online_share=np.empty(0),
        end=end,
        measure_from=warmup,
    )
    lan.online_share = lan.online_seconds(0.0, end) / end
    lan.watch = _build_watch(lan, np.random.default_rng([params.seed, 2]))
    return lan


def _offline_intervals(
    rng: np.random.Generator, params: SimParams, servers: np.ndarray, end: float
) -> tuple[np.ndarray, np.ndarray]:
    """Merged [start, end) offline intervals of every host as sorted keys."""
    spans: list[tuple[int, float, float]] = []  # host, start, end
    days = range(-math.ceil(KEY_OFFSET / 3 / DAY), math.ceil(end / DAY) + 1)
    lo_t = -KEY_OFFSET / 3
    for h in range(params.hosts):
        if not servers[h]:
            # Desktops: on between about 7-10 h and 21-02 h; some days not switched on.
            for d in days:
                on = d * DAY + rng.uniform(7, 10) * HOUR
                off = d * DAY + rng.uniform(21, 26) * HOUR
                spans.append((h, off, (d + 1) * DAY + rng.uniform(7, 10) * HOUR))
                if rng.random() < 0.1:
                    spans.append((h, on, off))
        n_reboots = rng.poisson(params.reboots_per_day * (end - lo_t) / DAY)
        for s in rng.uniform(lo_t, end, n_reboots):
            spans.append((h, s, s + rng.uniform(2, 10) * MINUTE))
    host, s, e = np.array(spans, dtype=float).reshape(-1, 3).T
    return _merge(Lan.key(host, s), Lan.key(host, np.minimum(e, KEY_SPAN - KEY_OFFSET - 1)))


@dataclass
class Watch:
    """Change notifications (SMB2 CHANGE_NOTIFY, one tree watch per share; a host's
    partitions count as one share) as the `sensors` policy would receive them.

    Each change on a watched share is notified after `hint_delay_s`; a burst (`overflow_share`)
    overflows the server's buffer (STATUS_NOTIFY_ENUM_DIR: "rescan the share"). The watch
    breaks while the host is off and when the connection drops (`watch_drops_per_day`);
    changes during a break are lost, and the re-armed watch (`reconnect_s` later) posts an
    overflow hint. Not modelled: a single notification dropped silently (the safety interval
    covers it) and Samba's unreported disk-side changes (such hosts count as not notifying).
    """

    notify: np.ndarray  # per host: its shares are watched
    break_start_key: np.ndarray  # merged per-host intervals when the watch is broken, keyed
    break_end_key: np.ndarray  # like offline intervals; an overflow is a break of length 0
    hint_part: np.ndarray  # notifications of one change each, in order of arrival:
    hint_arrival: np.ndarray  # partition, time it arrives,
    hint_change: np.ndarray  # time of the change
    overflow_key: np.ndarray  # arrival of each overflow hint, keyed by (host, time)


def _build_watch(lan: Lan, rng: np.random.Generator) -> Watch:
    """The notifications of the trace (their own random stream: the changes stay the same)."""
    p = lan.params
    notify = rng.random(p.hosts) < p.notify_share
    c_host = lan.host_of[lan.change_part]
    watched = notify[c_host]
    overflow = watched & (rng.random(lan.change_part.size) < p.overflow_share)
    span_lo, span_hi = -KEY_OFFSET / 3, lan.end

    # Broken watches: offline spans extended by the reconnect backoff, dropped connections,
    # and each overflow as an instant break. Only hosts with notify have any.
    base = np.arange(p.hosts) * KEY_SPAN + KEY_OFFSET
    off_host = (lan.off_start_key // KEY_SPAN).astype(np.intp)
    off_s = lan.off_start_key - base[off_host]
    off_e = lan.off_end_key - base[off_host] + rng.uniform(*p.reconnect_s, off_host.size)
    n_drops = rng.poisson(p.watch_drops_per_day * (span_hi - span_lo) / DAY, p.hosts)
    drop_host = np.repeat(np.arange(p.hosts), n_drops)
    drop_s = rng.uniform(span_lo, span_hi, drop_host.size)
    drop_e = drop_s + rng.uniform(*p.watch_drop_s, drop_host.size)
    o_host, o_t = c_host[overflow], lan.change_time[overflow]
    host = np.concatenate([off_host, drop_host, o_host])
    s = np.concatenate([off_s, drop_s, o_t])
    e = np.concatenate([off_e, drop_e, o_t])
    keep = notify[host]
    start_key, end_key = _merge(lan.key(host[keep], s[keep]), lan.key(host[keep], e[keep]))

    # A change is notified when its host has notify, it is no overflow, and the watch is up.
    up = overlapping(start_key, end_key, lan.key(c_host, lan.change_time)) == 0
    arrival = lan.change_time + rng.uniform(*p.hint_delay_s, lan.change_part.size)
    hinted = np.flatnonzero(watched & ~overflow & up)
    hinted = hinted[np.argsort(arrival[hinted], kind="stable")]  # in order of arrival
    # Every break ends with an overflow hint: when the watch is re-armed (an overflow's own
    # break ends at once), after the usual delay.
    overflow_key = np.sort(end_key + rng.uniform(*p.hint_delay_s, end_key.size))
    part, arrival, change = lan.change_part[hinted], arrival[hinted], lan.change_time[hinted]
    return Watch(notify, start_key, end_key, part, arrival, change, overflow_key)


def _merge(start_key: np.ndarray, end_key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merged intervals (keys of one host never meet another host's)."""
    if start_key.size == 0:
        return start_key, end_key
    order = np.argsort(start_key, kind="stable")
    start_key, end_key = start_key[order], end_key[order]
    reach = np.maximum.accumulate(end_key)
    first = np.flatnonzero(np.r_[True, start_key[1:] > reach[:-1]])
    last = np.r_[first[1:], start_key.size] - 1
    return start_key[first], reach[last]

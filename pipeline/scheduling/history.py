"""Partitions' scan histories as flat numpy arrays with per-partition offsets (a month of events
for ten thousand partitions would take minutes as Python datetimes). A `complete` event (its
interval watched unbroken on a trusted host) counts as watched time with its change notified,
not as a scan outcome: scans made because a notification came would read "always changed"."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sharecrawl.crawl_io.schema import SCAN_EVENT
from sharecrawl.pipeline.scheduling.rates import DEFAULT_WINDOW_S, estimate_rates


@dataclass
class Histories:
    """Events of partitions `ids[i]`: t_us[offsets[i]:offsets[i+1]], oldest first."""

    ids: list[str]
    offsets: np.ndarray  # int64, len(ids) + 1
    t_us: np.ndarray  # int64 microseconds since the epoch
    changed: np.ndarray  # bool
    complete: np.ndarray  # bool

    @classmethod
    def of(cls, partitions: pa.Table) -> Histories:
        column = partitions["history"].combine_chunks()
        lengths = pc.fill_null(pc.list_value_length(column), 0).to_numpy(zero_copy_only=False)
        events = column.flatten()
        t_us = pc.cast(events.field("t"), pa.int64()).to_numpy(zero_copy_only=False)
        changed = events.field("changed").to_numpy(zero_copy_only=False).astype(bool)
        complete = np.zeros(t_us.size, dtype=bool)
        if events.type.get_field_index("complete") >= 0:  # older tables: every event incomplete
            field = pc.fill_null(events.field("complete"), False)
            complete = field.to_numpy(zero_copy_only=False).astype(bool)
        offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
        return cls(partitions["partition_id"].to_pylist(), offsets, t_us, changed, complete)

    def events(self) -> list[list[tuple[float, bool]]]:
        """Every partition's events as (epoch seconds, changed), for the policies."""
        t, changed = (self.t_us / 1e6).tolist(), self.changed.tolist()
        bounds = self.offsets.tolist()
        return [list(zip(t[a:b], changed[a:b], strict=True)) for a, b in pairwise(bounds)]

    def updated(
        self,
        ids: list[str],
        new: dict[str, tuple[int, bool] | tuple[int, bool, bool]] | None = None,
        since_us: int | None = None,
    ) -> Histories:
        """The histories of `ids` (unknown ones empty): stored events from `since_us` on,
        then each id's new event from `new` (time in µs, changed, complete when given)."""
        row = {pid: i for i, pid in enumerate(self.ids)}
        where = np.array([row.get(pid, -1) for pid in ids], dtype=np.int64)
        starts = np.where(where >= 0, self.offsets[where], 0)
        lengths = np.where(where >= 0, self.offsets[where + 1] - starts, 0)
        owner = np.repeat(np.arange(len(ids)), lengths)
        first = np.cumsum(lengths) - lengths  # where each id's events go in the result
        take = np.repeat(starts - first, lengths) + np.arange(int(lengths.sum()))
        if since_us is not None:
            keep = self.t_us[take] >= since_us
            owner, take = owner[keep], take[keep]
        t_us, changed, complete = self.t_us[take], self.changed[take], self.complete[take]
        new = new or {}
        added = [(j, *new[pid][:3], False)[:4] for j, pid in enumerate(ids) if pid in new]
        if added:
            j, t, c, w = (np.array(col) for col in zip(*added, strict=True))
            order = np.argsort(np.concatenate([owner, j]), kind="stable")  # stored first
            owner = np.concatenate([owner, j])[order]
            t_us = np.concatenate([t_us, t.astype(np.int64)])[order]
            changed = np.concatenate([changed, c.astype(bool)])[order]
            complete = np.concatenate([complete, w.astype(bool)])[order]
        counts = np.bincount(owner, minlength=len(ids))
        offsets = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
        return Histories(list(ids), offsets, t_us, changed, complete)

    def rates_per_s(self, now: float, window_s: float = DEFAULT_WINDOW_S) -> np.ndarray:
        """Every partition's change rate from its scans inside the window (the prior for none), as
        `rates.estimate_rate` for all at once."""
        n = len(self.ids)
        owner = np.repeat(np.arange(n), np.diff(self.offsets))
        t = self.t_us / 1e6
        inside = (t >= now - window_s) & (t <= now)
        owner, t, changed = owner[inside], t[inside], self.changed[inside]
        complete = self.complete[inside]
        follows = owner[1:] == owner[:-1]  # an interval needs the previous scan
        dt = np.diff(t)
        keep = follows & (dt > 0)
        dt, group, changed = dt[keep], owner[1:][keep], changed[1:][keep]
        complete = complete[1:][keep]
        scan = ~complete  # incomplete signals: whether a scan found a change
        found, quiet = scan & changed, scan & ~changed
        return estimate_rates(
            changed_dt=dt[found],
            changed_weight=np.ones(int(found.sum())),
            changed_group=group[found],
            unchanged_s=np.bincount(group[quiet], weights=dt[quiet], minlength=n),
            notified_changes=np.bincount(group[complete], weights=changed[complete], minlength=n),
            watched_s=np.bincount(group[complete], weights=dt[complete], minlength=n),
        )

    def column(self) -> pa.ListArray:
        events = pa.StructArray.from_arrays(
            [
                pa.array(self.t_us, pa.int64()).cast(SCAN_EVENT.field("t").type),
                pa.array(self.changed, pa.bool_()),
                pa.array(self.complete, pa.bool_()),
            ],
            fields=list(SCAN_EVENT),
        )
        return pa.ListArray.from_arrays(pa.array(self.offsets, pa.int32()), events)

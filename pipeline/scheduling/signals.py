"""What change notifications tell Generate, whatever the policy (docs/DESIGN.md, Scheduling):
hinted partitions first; silent ones on trusted, unbroken watches skipped until `safety_s`
after their last scan; hinted scans of a few paths (jobs.hinted_walk); `watched` scans."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sharecrawl.jobs.hint_counts import PartitionSignal
from sharecrawl.pipeline.scheduling.choice import PartitionState

DEFAULT_SAFETY_S = 86400.0  # every partition is scanned at least once a day
MAX_HINTED_PATHS = 256  # more hinted paths than this: the partition is listed whole
FAILED = ("unreachable", "timeout", "error")  # partitions.status after a failed scan


@dataclass(frozen=True)
class ScanPlan:
    """Why a partition would be scanned this round, and how."""

    reason: str  # one of crawl_io.schema.SCAN_REASONS
    watched: bool  # a complete signal (see the module's notes)
    hinted_paths: list[str] | None = None  # a hinted scan of these paths' folders
    hints_as_of: datetime | None = None


@dataclass
class Signals:
    """The states to hand the policy (silent ones left out) and a plan per partition."""

    states: list[PartitionState]
    plans: dict[str, ScanPlan]
    hinted: int = 0  # partitions hinted
    silent: int = 0  # partitions skipped: watched, trusted and silent


def apply_signals(
    states: list[PartitionState],
    rows: dict[str, dict],
    signals: dict[str, PartitionSignal],
    trusted: dict[str, bool],
    now: float,
    safety_s: float = DEFAULT_SAFETY_S,
    whole_scans: bool = False,
) -> Signals:
    """`rows`: partitions rows by id (hash, status); `trusted`: host -> ?notify=trusted;
    `whole_scans`: no hinted scans this round (the crawl rules changed)."""
    kept: list[PartitionState] = []
    out = Signals(kept, {})
    for state in states:
        pid = state.partition_id
        row = rows[pid]
        signal = signals.get(pid)
        listed = row["hash"] is not None
        unbroken = signal is not None and signal.unbroken and trusted.get(state.host, False)
        if signal is not None and signal.hinted:
            state.hinted = True
            out.hinted += 1
        elif unbroken and listed and state.last_scan is not None:
            if 0 <= now - state.last_scan < safety_s:  # not when scanned in the future
                out.silent += 1
                continue  # nothing changed: not even offered to the policy
            state.watched = state.due = True
        kept.append(state)
        out.plans[pid] = _plan(row, signal, unbroken, listed, whole_scans)
    return out


def _plan(
    row: dict, signal: PartitionSignal | None, unbroken: bool, listed: bool, whole_scans: bool
) -> ScanPlan:
    overflow = signal is not None and signal.overflow
    complete = unbroken and not overflow
    if not listed:
        return ScanPlan("new", complete)
    if overflow:
        return ScanPlan("overflow", False)
    if signal is not None and signal.paths:
        few = signal.as_of is not None and len(signal.paths) <= MAX_HINTED_PATHS
        if unbroken and not whole_scans and few:
            return ScanPlan("hint", complete, sorted(signal.paths), signal.as_of)
        return ScanPlan("hint", complete)
    return ScanPlan("retry" if row.get("status") in FAILED else "scheduled", complete)

"""What change notifications tell a real round's Generate, whatever the policy (DESIGN.md,
Scheduling; Zemskov's "sensors" against "robots"):

- hinted: a path in the partition was hinted since its last scan, or its share overflowed (the
  server lost count): it is taken first, within the round's budget (the packer's hinted class).
- silent: its host's notifications are trusted (`?notify=trusted` in the hosts file), its
  share's watch has been unbroken since its last scan, and no hint came: it did not change,
  and is skipped until `safety_s` after its last scan; then it must be scanned (`due`), in
  case a server dropped a notification. A broken watch (a disconnect, a refusal, a restart of
  the watcher, hints lost to retention) starts a new `since`, later than every last scan, so
  the trust ends until each partition's next scan. Untrusted hosts (Samba does not report
  changes made on the server's own disk below the watched folder) get their hints taken
  first, and their silence means nothing.
- a hinted scan: a partition of a trusted, unbroken share hinted only for a few paths lists
  just those paths' folders and keeps the rest of its stored rows (jobs.hinted_walk); an
  overflow, an untrusted host or new crawl rules list it whole.
- watched: the scan's interval was watched without a break on a trusted host, so every
  change in it was notified: a complete signal for the rate estimate (pipeline.scheduling.
  history).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from jobs.hint_counts import PartitionSignal
from pipeline.scheduling.choice import PartitionState

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
    """The round's view of the watch: the states to hand the policy (silent ones left out,
    hinted and due ones marked) and a plan per partition."""

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
        partial = (
            unbroken
            and not whole_scans
            and signal.as_of is not None
            and len(signal.paths) <= MAX_HINTED_PATHS
        )
        if partial:
            return ScanPlan("hint", complete, sorted(signal.paths), signal.as_of)
        return ScanPlan("hint", complete)
    return ScanPlan("retry" if row.get("status") in FAILED else "scheduled", complete)

"""Progress of a fetch: per host and overall partitions, entries, tags, rate and ETA.

Workers put small events on a queue; the parent shows them with rich when stderr is a
terminal, and as plain log lines (one per finished host, one overall every few seconds)
when it is not, so cron mails and CI logs stay readable.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("sharecrawl.fetch")


@dataclass
class HostProgress:
    due: int
    partitions: int = 0
    entries: int = 0
    tags: int = 0
    done: bool = False
    summary: str = ""


@dataclass
class FetchProgress:
    hosts: dict[str, HostProgress]
    every_s: float = 10.0
    started: float = field(default_factory=time.monotonic)
    _last_line: float = field(default_factory=time.monotonic)
    _live: Any = None
    _tasks: dict[str, Any] = field(default_factory=dict)
    # running totals: an event must not cost a pass over a thousand hosts
    _done: int = 0
    _entries: int = 0
    _tags: int = 0

    def __post_init__(self) -> None:
        self._due = sum(h.due for h in self.hosts.values())

    def __enter__(self) -> FetchProgress:
        if sys.stderr.isatty():
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
            )

            self._live = Progress(
                TextColumn("{task.description:<24}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[detail]}"), TimeRemainingColumn(), transient=False,
            )  # fmt: skip
            self._live.start()
            self._tasks[""] = self._live.add_task("all hosts", total=self._due, detail="")
            for host, h in self.hosts.items():
                self._tasks[host] = self._live.add_task(host[:24], total=h.due, detail="")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()

    def event(self, host: str, kind: str, **counts: int | str) -> None:
        """kind: 'partition' (one scanned: entries, tags) or 'done' (summary)."""
        h = self.hosts[host]
        before = h.partitions
        if kind == "partition":
            entries, tags = int(counts.get("entries", 0)), int(counts.get("tags", 0))
            h.partitions += 1
            h.entries += entries
            h.tags += tags
            self._entries += entries
            self._tags += tags
        elif kind == "done":
            h.done, h.summary = True, str(counts.get("summary", ""))
            h.partitions = max(h.partitions, h.due)
        self._done += h.partitions - before
        self._show(host, h, kind)

    def totals(self) -> tuple[int, int, int, int]:
        """Partitions done, due, entries and tags over all hosts."""
        return self._done, self._due, self._entries, self._tags

    def _show(self, host: str, h: HostProgress, kind: str) -> None:
        done, due, entries, tags = self.totals()
        elapsed = max(time.monotonic() - self.started, 1e-6)
        rate = entries / elapsed
        if self._live is not None:
            self._live.update(self._tasks[host], completed=h.partitions,
                              detail=f"{h.entries} entries, {h.tags} tags")  # fmt: skip
            self._live.update(self._tasks[""], completed=done,
                              detail=f"{entries} entries ({rate:.0f}/s), {tags} tags")  # fmt: skip
            return
        if kind == "done":
            log.info("%s: %s", host, h.summary)
        now = time.monotonic()
        if now - self._last_line >= self.every_s:
            self._last_line = now
            eta = elapsed / done * (due - done) if done else float("nan")
            log.info("fetch: %d/%d partitions, %d entries (%.0f/s), %d tags, ETA %.0f s",
                     done, due, entries, rate, tags, eta)  # fmt: skip

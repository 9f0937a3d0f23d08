"""Progress of a fetch over all hosts: partitions, entries, tags, rate and ETA; a rich bar when
stderr is a terminal, else log lines (one per finished host, one overall every `every_s`) so
cron mails and CI logs stay readable."""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from sharecrawl.crawl_io.readable import plural, readable_text

log = logging.getLogger("sharecrawl.fetch")


@dataclass
class HostProgress:
    due: int
    partitions: int = 0


@dataclass
class FetchProgress:
    hosts: dict[str, HostProgress]
    every_s: float = 10.0
    started: float = field(default_factory=time.monotonic)
    _last_line: float = field(default_factory=time.monotonic)
    _bar: Any = None
    # running totals: an event must not cost a pass over a thousand hosts
    _done: int = 0
    _entries: int = 0
    _tags: int = 0

    def __post_init__(self) -> None:
        self._due = sum(h.due for h in self.hosts.values())

    def __enter__(self) -> FetchProgress:
        if sys.stderr.isatty():
            from rich import progress as rp

            self._bar = rp.Progress(
                rp.TextColumn("fetch"),
                rp.BarColumn(),
                rp.MofNCompleteColumn(),
                rp.TextColumn("{task.fields[detail]}"),
                rp.TimeRemainingColumn(),
            )
            self._bar.start()
            self._bar.add_task("fetch", total=self._due, detail="")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def event(self, host: str, kind: str, **counts: int | str) -> None:
        """kind: 'partition' (one scanned: entries, tags), 'due' (partitions: how many the
        host's worker will scan; until then its count is a guess) or 'done' (summary)."""
        h = self.hosts[host]
        before = h.partitions
        if kind == "due":
            due = max(int(counts["partitions"]), h.partitions)
            self._due += due - h.due
            h.due = due
        elif kind == "partition":
            h.partitions += 1
            self._entries += int(counts.get("entries", 0))
            self._tags += int(counts.get("tags", 0))
        elif kind == "done":
            h.partitions = max(h.partitions, h.due)
        if h.partitions > h.due:  # a worker that scanned more than it said: never past 100 %
            self._due += h.partitions - h.due
            h.due = h.partitions
        self._done += h.partitions - before
        if kind == "done":
            line = f"{readable_text(host)}: {counts.get('summary', '')}"
            if self._bar is not None:
                self._bar.console.print(line)
            else:
                log.info("%s", line)
        self._show()

    def totals(self) -> tuple[int, int, int, int]:
        """Partitions done, due, entries and tags over all hosts."""
        return self._done, self._due, self._entries, self._tags

    def _show(self) -> None:
        done, due, entries, tags = self.totals()
        elapsed = max(time.monotonic() - self.started, 1e-6)
        what = f"{plural(entries, 'entry', 'entries')} ({entries / elapsed:.0f}/s), "
        what += plural(tags, "tag")
        if self._bar is not None:
            self._bar.update(self._bar.task_ids[0], total=due, completed=done, detail=what)
            return
        now = time.monotonic()
        if now - self._last_line >= self.every_s:
            self._last_line = now
            left = elapsed / done * (due - done) if 0 < done < due else 0.0
            eta = f", ETA {left / 60:.0f} min" if left >= 90 else ""
            log.info("fetch: %d/%d partitions, %s%s", done, due, what, eta)

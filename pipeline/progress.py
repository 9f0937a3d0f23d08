"""Progress of a fetch: per host and overall partitions, entries, tags, rate and ETA.

Workers put small messages on a queue (`receive`); the parent shows them with rich when
stderr is a terminal, and as plain log lines (one per finished host, one overall every few
seconds) when it is not, so cron mails and CI logs stay readable.

A host's count of due partitions is a guess until its worker has looked: a `discover` row
(a host with no partition yet, or shares to look for) turns into one root partition per
share found, so the worker says how many partitions it will scan once it knows
(`due_message`), and done never passes due.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from crawl_io.readable import plural, readable_text

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
                TextColumn("{task.description:<24}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[detail]}"),
                TimeRemainingColumn(),
                transient=False,
            )
            self._live.start()
            self._tasks[""] = self._live.add_task("all hosts", total=self._due, detail="")
            for host, h in self.hosts.items():
                name = readable_text(host)[:24]
                self._tasks[host] = self._live.add_task(name, total=h.due, detail="")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()

    def receive(self, message: tuple) -> None:
        """A worker's message: (host, entries, tags) for a partition scanned, or
        due_message()."""
        if message[1] == "due":
            self.event(message[0], "due", partitions=int(message[2]))
        else:
            host, entries, tags = message
            self.event(host, "partition", entries=entries, tags=tags)

    def event(self, host: str, kind: str, **counts: int | str) -> None:
        """kind: 'partition' (one scanned: entries, tags), 'due' (the partitions the host's
        worker is to scan, now that it knows: partitions) or 'done' (summary)."""
        h = self.hosts[host]
        before = h.partitions
        if kind == "due":
            due = max(int(counts["partitions"]), h.partitions)
            self._due += due - h.due
            h.due = due
            if self._live is not None:
                self._live.update(self._tasks[host], total=due)
                self._live.update(self._tasks[""], total=self._due)
            return
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
        if h.partitions > h.due:  # a worker that scanned more than it said: never past 100 %
            self._due += h.partitions - h.due
            h.due = h.partitions
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
            self._live.update(
                self._tasks[host],
                total=h.due,
                completed=h.partitions,
                detail=f"{plural(h.entries, 'entry', 'entries')}, {plural(h.tags, 'tag')}",
            )
            self._live.update(
                self._tasks[""],
                total=due,
                completed=done,
                detail=f"{plural(entries, 'entry', 'entries')} ({rate:.0f}/s), "
                f"{plural(tags, 'tag')}",
            )
            return
        if kind == "done":
            log.info("%s: %s", readable_text(host), h.summary)
        now = time.monotonic()
        if now - self._last_line >= self.every_s:
            self._last_line = now
            eta = f", ETA {eta_text(elapsed, done, due)}" if 0 < done < due else ""
            listed = plural(entries, "entry", "entries")
            log.info(
                "fetch: %d/%d partitions, %s (%.0f/s), %s%s",
                done,
                due,
                listed,
                rate,
                plural(tags, "tag"),
                eta,
            )


def host_summary(
    host: str,
    partitions: int,
    statuses: dict[str, int],
    entries: int,
    tags_read: int,
    error: str | None,
) -> str:
    """A fetched host's line: '3 partitions (2 changed, 1 unchanged), 106 entries, 1 tag
    read', and why it stopped (without the host's name again)."""
    counts = ", ".join(f"{n} {status}" for status, n in sorted(statuses.items()))
    scanned = f"{plural(partitions, 'partition')} ({counts})" if partitions else "no partitions"
    why = ""
    if error:
        why = "; " + readable_text(error.removeprefix(f"{host}: "))
    return f"{scanned}, {plural(entries, 'entry', 'entries')}, {plural(tags_read, 'tag')} read{why}"


def due_message(host: str, partitions: int) -> tuple[str, str, int]:
    """A worker's message: `host` is to scan `partitions` partitions this round."""
    return (host, "due", partitions)


def eta_text(elapsed_s: float, done: int, due: int) -> str:
    """The time left at the rate so far, for 0 < done < due: '40 s', '3 min', '1.5 h'."""
    left = max(0.0, elapsed_s / done * (due - done))
    if left < 90:
        return f"{left:.0f} s"
    if left < 90 * 60:
        return f"{left / 60:.0f} min"
    return f"{left / 3600:.1f} h"

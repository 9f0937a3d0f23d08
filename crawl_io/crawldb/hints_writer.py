"""Writing crawl/hints: one writer, holding watch.lock. FRESH_LIMIT flush parts merge into one;
MERGED_LIMIT merged parts (or a day) merge all, dropping hints past retention; a compacted
part is deleted GRACE_S later (a reader may have listed it)."""

from __future__ import annotations

import fcntl
import logging
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sharecrawl.crawl_io.config_error import ConfigError
from sharecrawl.crawl_io.crawldb import hints
from sharecrawl.crawl_io.crawldb.crawldir import write_parquet

log = logging.getLogger("sharecrawl")
FRESH_LIMIT = 32
MERGED_LIMIT = 8
FULL_EVERY_S = 86400.0
GRACE_S = 60.0
KEYS = ["host", "share", "path", "action", "overflow"]


class WatchRunning(ConfigError):
    """Another watcher writes the hints of this crawl directory."""


class HintsWriter:
    """The one writer of crawl/hints; raises WatchRunning when another holds the lock."""

    def __init__(self, crawl_dir: str | Path, keep_days: float = 7.0) -> None:
        self.store = hints.HintsStore(crawl_dir)
        self.keep = timedelta(days=keep_days)
        self.store.dir.mkdir(parents=True, exist_ok=True)
        self._lock_fd = self._take_lock()
        self._doomed: list[tuple[float, Path]] = []
        _, metadata = self.store.watches()
        complete = metadata.get(hints.COMPLETE_SINCE)
        self.complete_since = datetime.fromisoformat(complete.decode()) if complete else None
        self._remove_leftovers()
        ranges = [hints.part_range(p) for p in self.store.all_parts()]
        self._next = max((r[1] for r in ranges if r), default=0) + 1
        self._last_full = time.monotonic()
        self.parts_written = 0

    def _take_lock(self) -> int:
        fd = os.open(self.store.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise WatchRunning(
                f"another `sharecrawl watch` (pid {pid}) is writing to "
                f"{str(self.store.dir)!r}: stop it first"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        return fd

    def _remove_leftovers(self) -> None:
        """A killed writer's temporary files, damaged parts, and parts compacted away."""
        for tmp in self.store.dir.glob(".*.tmp*"):
            tmp.unlink(missing_ok=True)
        kept = set(self.store.parts())
        for path in kept:
            try:
                pq.read_metadata(path)
            except (OSError, pa.ArrowException):
                self._set_aside(path)
        for path in self.store.all_parts():
            if path not in kept:
                self._doomed.append((time.monotonic() + GRACE_S, path))

    def _set_aside(self, path: Path) -> None:
        """Rename a damaged part out of the readers' way; its hints count as lost."""
        aside = path.with_name(path.name + ".damaged")
        os.replace(path, aside)
        self.complete_since = datetime.now(UTC)
        log.warning(
            "sharecrawl: watch: damaged hints part set aside as %s; its hints are lost "
            "and the schedule covers them (delete it when seen)",
            aside,
        )

    def close(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # the lock goes with the descriptor
            self._lock_fd = -1

    def append(self, rows: list[dict], now: datetime | None = None) -> None:
        """Write one part of hints (dicts with HINTS' columns); compact when due. On OSError
        the hints stay with the caller and the folder as it was."""
        if rows:
            write_parquet(
                pa.Table.from_pylist(rows, hints.HINTS), self._path(self._next, self._next)
            )
            self._next += 1
            self.parts_written += 1
        self._compact(now or datetime.now(UTC))
        due = time.monotonic()
        for item in [d for d in self._doomed if d[0] <= due]:
            self._doomed.remove(item)
            item[1].unlink(missing_ok=True)

    def _path(self, first: int, last: int) -> Path:
        return self.store.dir / hints.part_name(first, last)

    def _compact(self, now: datetime) -> None:
        parts = self.store.parts()
        fresh = [p for p in parts if _is_fresh(p)]
        if len(fresh) >= FRESH_LIMIT:
            self._merge(fresh, None)
            parts = self.store.parts()
        merged = len(parts) - sum(1 for p in parts if _is_fresh(p))
        overdue = time.monotonic() - self._last_full >= FULL_EVERY_S
        if parts and (merged >= MERGED_LIMIT or overdue):
            self._merge(parts, now - self.keep)
            self._last_full = time.monotonic()

    def _merge(self, parts: list[Path], cut: datetime | None) -> None:
        """Replace a run of parts by one (the latest sighting of each hint; none before cut)."""
        tables = []
        for path in parts:
            try:
                tables.append(pq.read_table(path, schema=hints.HINTS))
            except (OSError, pa.ArrowException):
                self._set_aside(path)
        table = pa.concat_tables(tables) if tables else hints.HINTS.empty_table()
        table = table.group_by(KEYS).aggregate([("seen_at", "max")])
        table = table.rename_columns([*KEYS, "seen_at"]).select(hints.HINTS.names).cast(hints.HINTS)
        if cut is not None:
            table = table.filter(
                pc.greater_equal(
                    table["seen_at"], pa.scalar(cut, hints.HINTS.field("seen_at").type)
                )
            )
            if self.complete_since is None or cut > self.complete_since:
                self.complete_since = cut
        table = table.sort_by([("seen_at", "ascending"), ("host", "ascending")])
        first, last = hints.part_range(parts[0]), hints.part_range(parts[-1])
        assert first and last
        write_parquet(table, self._path(first[0], last[1]))
        due = time.monotonic() + GRACE_S
        self._doomed.extend((due, p) for p in parts if p.exists())

    def write_watches(self, rows: list[dict]) -> None:
        metadata = {hints.STALE_KEY: str(hints.STALE_AFTER_S).encode()}
        if self.complete_since is not None:
            metadata[hints.COMPLETE_SINCE] = self.complete_since.isoformat().encode()
        table = pa.Table.from_pylist(rows, hints.WATCHES).replace_schema_metadata(metadata)
        write_parquet(table, self.store.watches_path)


def _is_fresh(path: Path) -> bool:
    numbers = hints.part_range(path)
    return numbers is not None and numbers[0] == numbers[1]

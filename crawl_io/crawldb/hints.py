"""Reading crawl/hints (docs/watch.md): the watcher's change hints, `h<first>-<last>.parquet`
parts of which a reader takes the widest (a part inside another's range was compacted into
it), and `watches.parquet`, each share's watch state."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from sharecrawl.crawl_io.schema import TS

HINTS = pa.schema(
    [
        ("host", pa.string()),
        ("share", pa.string()),
        ("path", pa.string()),
        ("action", pa.string()),
        ("overflow", pa.bool_()),
        ("seen_at", TS),
    ]
)
WATCHES = pa.schema(
    [
        ("host", pa.string()),
        ("share", pa.string()),
        ("state", pa.string()),  # watching, down, refused, stopped
        ("since", TS),  # when the share entered this state (watching: armed unbroken since)
        ("alive_at", TS),  # every notification received before this is in a part
        ("detail", pa.string()),  # why it is down or refused
    ]
)
WATCHING = "watching"
PART = re.compile(r"^h(\d{10})-(\d{10})\.parquet$")
STALE_AFTER_S = 30.0  # a watcher silent for longer is taken for dead: its watches are broken
# watches.parquet metadata
COMPLETE_SINCE = b"complete_since"  # hints before this time may have been dropped
STALE_KEY = b"stale_after_s"


def part_name(first: int, last: int) -> str:
    return f"h{first:010d}-{last:010d}.parquet"


def part_range(path: Path) -> tuple[int, int] | None:
    match = PART.match(path.name)
    return (int(match[1]), int(match[2])) if match else None


def cover(paths: Iterable[Path]) -> list[Path]:
    """The parts a reader takes, by number: each part inside a wider one is left out."""
    ranges = sorted(
        ((r, p) for p in paths if (r := part_range(p)) is not None),
        key=lambda item: (item[0][0], -item[0][1]),
    )
    kept, reach = [], 0
    for (_first, last), path in ranges:
        if last <= reach:
            continue  # compacted into a part already taken
        kept.append(path)
        reach = last
    return kept


def storable(path: str) -> str:
    """`path` up to its first name that is not valid Unicode (a lone UTF-16 surrogate from a
    Windows server): the hint still leads to the right folder."""
    kept = []
    for name in path.split("/"):
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            break
        kept.append(name)
    return "/".join(kept)


def timestamp_us(value: datetime) -> int:
    return round(value.timestamp() * 1_000_000)


class HintsStore:
    """Read access to crawl/hints (the watcher writes through crawl_io.crawldb.hints_writer)."""

    def __init__(self, crawl_dir: str | Path) -> None:
        self.dir = Path(crawl_dir) / "hints"
        self.watches_path = self.dir / "watches.parquet"
        self.lock_path = self.dir / "watch.lock"
        self.damaged: list[Path] = []  # parts the last read could not read

    def all_parts(self) -> list[Path]:
        return sorted(p for p in self.dir.glob("h*.parquet") if part_range(p))

    def parts(self) -> list[Path]:
        """The parts that hold every hint once (for the `hints` view)."""
        return cover(self.all_parts())

    def read(self) -> pa.Table:
        """Every hint kept; a part compacted away meanwhile is looked for again, a damaged one
        left out and named in `self.damaged`."""
        self.damaged = []
        for _ in range(5):
            tables, vanished = [], False
            for path in self.parts():
                try:
                    tables.append(pq.read_table(path, schema=HINTS))
                except FileNotFoundError:
                    vanished = True
                    break
                except (OSError, pa.ArrowException):
                    self.damaged.append(path)
            if not vanished:
                return pa.concat_tables(tables) if tables else HINTS.empty_table()
        return HINTS.empty_table()

    def watches(self) -> tuple[pa.Table, dict[bytes, bytes]]:
        """The watches file and its metadata (empty when no watcher ever ran, or damaged)."""
        try:
            table = pq.read_table(self.watches_path)
            metadata = dict(table.schema.metadata or {})
            return table.select(WATCHES.names).cast(WATCHES), metadata
        except (OSError, pa.ArrowException, KeyError):
            return WATCHES.empty_table(), {}

    def snapshot(self, now: datetime | None = None) -> HintsSnapshot:
        """Hints and watch states as of now, read once; after a damaged part, no silence
        before now is trusted."""
        now = now or datetime.now(UTC)
        watches, metadata = self.watches()
        complete = metadata.get(COMPLETE_SINCE)
        stale_s = float(metadata.get(STALE_KEY, b"0") or 0) or STALE_AFTER_S
        hints = self.read()
        complete_since = datetime.fromisoformat(complete.decode()) if complete else None
        if self.damaged:
            complete_since = now
        return HintsSnapshot(hints, watches, now, stale_s, complete_since)


class SharedHint(NamedTuple):
    path: str
    overflow: bool
    seen_at_us: int


class HintsSnapshot:
    """Which paths of a share were hinted since t, and was its watch unbroken since t."""

    def __init__(
        self,
        hints: pa.Table,
        watches: pa.Table,
        now: datetime,
        stale_after_s: float = STALE_AFTER_S,
        complete_since: datetime | None = None,
    ) -> None:
        self.now = now
        self.complete_since = complete_since
        self._by_share: dict[tuple[str, str], list[SharedHint]] = {}
        columns = [hints[c].to_pylist() for c in ("host", "share", "path", "overflow", "seen_at")]
        for host, share, path, overflow, seen in zip(*columns, strict=True):
            entry = SharedHint(path, bool(overflow), timestamp_us(seen))
            self._by_share.setdefault((host, share), []).append(entry)
        self._watches: dict[tuple[str, str], dict] = {
            (row["host"], row["share"]): row for row in watches.to_pylist()
        }
        self._live_after_us = timestamp_us(now) - round(stale_after_s * 1_000_000)

    def shares(self) -> list[tuple[str, str]]:
        return sorted(self._by_share)

    def hints_for(self, host: str, share: str) -> list[SharedHint]:
        return self._by_share.get((host, share), [])

    def watch_state(self, host: str, share: str) -> dict | None:
        return self._watches.get((host, share))

    def watched_since(
        self, host: str, share: str, t: datetime | None
    ) -> tuple[bool, datetime | None]:
        """Whether the share's watch was unbroken from t on (armed by t, watcher alive, nothing
        after t lost to retention), and as of when changes are known (None: not watched)."""
        row = self._watches.get((host, share))
        watching = row is not None and row["state"] == WATCHING and row["since"] is not None
        alive = watching and timestamp_us(row["alive_at"]) >= self._live_after_us
        complete = self.complete_since is None or (t is not None and t >= self.complete_since)
        armed = alive and t is not None and timestamp_us(row["since"]) <= timestamp_us(t)
        return bool(armed and complete), (row["alive_at"] if alive else None)

"""How long the disk of a crawl directory lasts at the pace the crawl fills it.

With keep_rounds 0 (the default) a crawl keeps every round, so its directory grows by what
each round changed, for ever (about 14 MiB of blocks a round at 1,000 hosts and 20 M files,
crawl_io.retention): a crawl left to cron fills its disk one day, and the round that meets
the full disk stops. `status` therefore says how much room is left and how many rounds and
days it lasts, and a crawl warns on stderr, which cron mails, a week before the disk fills.

What a round added is measured on the disk, not guessed: the blocks of its segment and of
the files of its version that are not hard links to the previous version's (an unchanged
part is linked forward and costs nothing), averaged over the last ROUNDS_MEASURED rounds.
With keep_rounds N each round removes one old round as it adds one, and what stays for
good is the round's fetchlog. The search index is replaced, not added to, but its new file
is written beside the old one: a round needs the index's size free besides. (An update on a
file system that clones files writes only the blocks it changes, crawl_io.atomic.clone_file,
but a full build, every `full_every` rounds or after damage, writes the whole file; telling
the two file systems apart would take a write, and `status` writes nothing.)
The pace is the mean time between the last rounds' versions being published, once they
span an hour or more.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

from crawl_io.crawldir import CrawlDir
from crawl_io.readable import human_bytes

ROUNDS_MEASURED = 8  # the last rounds a round's growth is averaged over
WARN_DAYS = 7.0  # a crawl warns once the disk fills sooner than this
WARN_ROUNDS = 24  # ... or, when the rounds' pace is not known, in fewer rounds than this
DAY_S = 86400.0
PACE_ROUNDS = 200  # the last rounds whose times give the pace
# Rounds run back to back (`crawl --rounds 10`, a first day of tries) say nothing of the
# pace a crawl keeps: the pace is taken from rounds that span an hour at least.
PACE_MIN_SPAN_S = 3600.0


@dataclass(frozen=True)
class Room:
    free_bytes: int  # free to this user where the crawl directory lives
    index_bytes: int  # the search index, whose new file is written beside it
    round_bytes: int | None  # what a round leaves on the disk, on average; None: unknown
    rounds_measured: int
    round_interval_s: float | None  # mean time between rounds; None: unknown
    keep_rounds: int

    @property
    def rounds_left(self) -> int | None:
        """Rounds until the disk is full, the index's copy set aside; None when rounds
        leave nothing measured."""
        if not self.round_bytes:
            return None
        return max(0, self.free_bytes - self.index_bytes) // self.round_bytes

    @property
    def days_left(self) -> float | None:
        if self.rounds_left is None or self.round_interval_s is None:
            return None
        return self.rounds_left * self.round_interval_s / DAY_S

    def report(self) -> dict:
        """For `status --json`."""
        interval = self.round_interval_s
        return {
            **asdict(self),
            "round_interval_s": None if interval is None else round(interval, 1),
            "rounds_left": self.rounds_left,
            "days_left": None if self.days_left is None else round(self.days_left, 1),
            "warning": room_warning(self),
        }


def disk_room(crawl: CrawlDir, keep_rounds: int) -> Room:
    """The room left where `crawl` lives, and the pace at which its rounds take it."""
    disk = os.statvfs(crawl.root)
    versions = set(crawl.versions())
    live = crawl.current()
    # the last rounds still on the disk; without keep_rounds, with the version before each,
    # which its version's unchanged parts are links to. The first round, which lists every
    # host whole, says nothing of the pace once there are others.
    oldest = max(live - ROUNDS_MEASURED + 1, 2 if live > 1 else 1)
    measured = [
        r
        for r in range(oldest, live + 1)
        if r in versions
        and crawl.segment_dir(r).is_dir()
        and (keep_rounds > 0 or r == 1 or r - 1 in versions)
    ]
    if keep_rounds > 0:
        sizes = [_blocks(crawl.segment_dir(r) / "fetchlog.parquet") for r in measured]
    else:
        files = {v: _inodes(crawl.version_dir(v)) for r in measured for v in (r - 1, r)}
        sizes = [
            _round_bytes(files[r - 1], files[r], _inodes(crawl.segment_dir(r))) for r in measured
        ]
    return Room(
        free_bytes=disk.f_bavail * disk.f_frsize,
        index_bytes=_blocks(crawl.index),
        round_bytes=round(statistics.fmean(sizes)) if sizes else None,
        rounds_measured=len(sizes),
        round_interval_s=_round_interval(crawl, sorted(v for v in versions if v <= live)),
        keep_rounds=keep_rounds,
    )


def room_warning(room: Room) -> str | None:
    """One line saying the disk fills soon and what to do, or None."""
    days, rounds = room.days_left, room.rounds_left
    if room.free_bytes < room.index_bytes:
        soon = "is too full to write the search index anew beside the old one"
    elif days is not None and days < WARN_DAYS:
        soon = f"fills in about {days:.1f} days ({_rounds(rounds or 0)})"
    elif days is None and rounds is not None and rounds < WARN_ROUNDS:
        soon = f"fills in about {_rounds(rounds)}"
    else:
        return None
    if room.keep_rounds > 0:
        what = f"free space (the crawl keeps only the last {room.keep_rounds} rounds)"
    else:
        what = (
            "set keep_rounds under [sharecrawl] in luigi.cfg to delete old rounds "
            "(docs/crawl-dir.md), or free space"
        )
    return f"the disk of the crawl directory {soon}: {describe(room)}; {what}"


def summary(report: dict) -> str:
    """A Room's report() in a line: what `status` shows when there is no warning."""
    room = Room(**{name: report[name] for name in Room.__dataclass_fields__})
    if room.days_left is not None:
        return f"{describe(room)}; full in about {room.days_left:,.0f} days"
    if room.rounds_left is not None:
        return f"{describe(room)}; full in about {_rounds(room.rounds_left)}"
    return describe(room)


def describe(room: Room) -> str:
    """The room in a few words: free space, a round's growth, the pace."""
    parts = [f"{human_bytes(room.free_bytes)} free"]
    if room.round_bytes is not None:
        kept = " for good (its fetchlog)" if room.keep_rounds > 0 else ""
        parts.append(f"a round adds {human_bytes(room.round_bytes)}{kept}")
    if room.round_interval_s is not None:
        parts.append(f"one round every {_duration(room.round_interval_s)}")
    return ", ".join(parts)


Inodes = dict[int, str]  # inode -> a path of that file


def _round_bytes(before: Inodes, version: Inodes, segment: Inodes) -> int:
    """The blocks a round took: its segment's files, and its version's that are not the
    previous version's (hard links); a file with two names counted once. Only the new
    files are stat'ed: a folder's listing gives every inode (a version of 1,000 hosts has
    8,000 files, nearly all links)."""
    new = {inode: path for inode, path in {**version, **segment}.items() if inode not in before}
    return sum(_blocks(path) for path in new.values())


def _inodes(folder: Path) -> Inodes:
    """The regular files below `folder` by inode (none when it is gone meanwhile). One
    crawl directory is on one file system, as hard links between its versions require."""
    found: Inodes = {}
    pending = [str(folder)]
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except OSError:
            continue  # removed meanwhile (a round's cleanup)
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                pending.append(entry.path)
            elif entry.is_file(follow_symlinks=False):
                found[entry.inode()] = entry.path
    return found


def _blocks(path: str | Path) -> int:
    try:
        return os.stat(path).st_blocks * 512
    except OSError:
        return 0


def _round_interval(crawl: CrawlDir, versions: list[int]) -> float | None:
    """The mean time between the last PACE_ROUNDS rounds' versions being published (their
    manifests' times), or None when they span less than PACE_MIN_SPAN_S."""
    times = []
    for version in versions[-PACE_ROUNDS:]:
        try:
            times.append(os.stat(crawl.version_dir(version) / "MANIFEST.json").st_mtime)
        except OSError:
            continue
    if len(times) < 2 or times[-1] - times[0] < PACE_MIN_SPAN_S:
        return None
    return (times[-1] - times[0]) / (len(times) - 1)


def _rounds(n: int) -> str:
    return f"{n:,} round" + ("" if n == 1 else "s")


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * DAY_S:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / DAY_S:.1f} days"

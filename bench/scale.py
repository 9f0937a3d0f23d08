"""Benchmark: the thesis' scale on one machine (thesis §1: 500-1000 hosts, ~20 M files).

A synthetic LAN of `--hosts` hosts and `--files` files, as a fetch would write it: each
host's listing, media and fetchlog parts in a segment (bench/incremental.py's synthetic
tables: shares of 50 folders of 100 files, one in ten an mp3, each share one partition
within the limits), not real folders. Then:
- round 1: every host new, Update (with publish) and Index;
- rounds 2 and 3: every partition scanned, `--changed` of them changed (an mp3 added to
  each), Update and Index again (round 2 also counts every host's new files of round 1
  back to zero; round 3 is a round as most are).
Each round prints its wall time, the peak RSS of the whole process tree (this process and
the jobs' runner processes, sampled every 50 ms) and what each stage cost. Goals: peak RSS
<= 4 GiB, and each changed round <= 60 s.

    .venv/bin/python bench/scale.py [--hosts 1000] [--files 20000000] [--changed 0.01]
                                    [--runner local] [--workdir DIR]

The last line is the ratio of the slower changed round's time to its goal (60 s).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa
import pyarrow.compute as pc

from bench.incremental import (
    changed_listing,
    finish_segment,
    log_row,
    share_listing,
    tags_of,
    write_fetched_host,
)
from bench.progress import step
from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir
from sharecrawl.jobs.membership import PartitionKey
from sharecrawl.jobs.subtree_hash import summarize
from sharecrawl.pipeline.settings import Settings, read_settings

FOLDERS_PER_SHARE = 50  # 5 000 files a share: one partition within the limits
GOAL_S = 60.0
GOAL_RSS = 4 << 30


class TreeRSS:
    """The peak resident memory of this process and all its descendants, sampled."""

    def __init__(self, every_s: float = 0.05) -> None:
        self.every_s, self.peak = every_s, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def now() -> int:
        children: dict[int, list[int]] = defaultdict(list)
        rss: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                children[int(fields[1])].append(int(entry))
                rss[int(entry)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
            except (OSError, IndexError, ValueError):
                continue
        total, stack = 0, [os.getpid()]
        while stack:
            pid = stack.pop()
            total += rss.get(pid, 0)
            stack += children.get(pid, [])
        return total

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.peak = max(self.peak, self.now())

    def __enter__(self) -> TreeRSS:
        self.peak = self.now()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class Stages:
    """Seconds spent in named functions of the round, by wrapping them for the run."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._undo: list[Callable[[], None]] = []

    def wrap(self, owner: object, name: str, label: str) -> None:
        original = getattr(owner, name)

        def timed(*args: object, **kwargs: object) -> object:
            t0 = time.perf_counter()
            try:
                result = original(*args, **kwargs)
                if hasattr(result, "__next__"):  # a generator (run_job): drain it here
                    result = list(result)
                return result
            finally:
                self.seconds[label] += time.perf_counter() - t0

        setattr(owner, name, timed)
        self._undo.append(lambda: setattr(owner, name, original))

    def undo(self) -> None:
        for undo in reversed(self._undo):
            undo()


@contextmanager
def measured(stages: Stages) -> Iterator[None]:
    import sharecrawl.jobs.mr_prefix_stats
    import sharecrawl.pipeline.host_rewrite
    import sharecrawl.pipeline.update
    import sharecrawl.queries.index
    from sharecrawl.pipeline import publish

    stages.wrap(sharecrawl.pipeline.update, "run_listing_jobs", "listing jobs (hashes, split plan)")
    stages.wrap(sharecrawl.pipeline.update, "round_prefix_stats", "prefix statistics")
    stages.wrap(sharecrawl.jobs.mr_prefix_stats, "run_job", "  of which the prefix-stats job")
    stages.wrap(
        sharecrawl.pipeline.update, "read_old_stats", "reading the stored prefix statistics"
    )
    stages.wrap(sharecrawl.pipeline.update, "write_stats", "writing or linking prefix_stats parts")
    stages.wrap(sharecrawl.pipeline.update, "rewrite_host", "rewriting touched hosts' groups")
    stages.wrap(sharecrawl.pipeline.host_rewrite, "folder_summaries", "  of which folder hashes")
    stages.wrap(
        sharecrawl.pipeline.host_rewrite, "updated_folder_summaries", "  of which folder updates"
    )
    stages.wrap(
        sharecrawl.pipeline.host_rewrite, "merged_media", "  of which media rows and their changes"
    )
    stages.wrap(publish.VersionBuild, "write_media_changes", "writing the record of media changes")
    stages.wrap(publish.VersionBuild, "link_host", "linking untouched hosts")
    stages.wrap(publish.VersionBuild, "publish", "manifest, rules, rename, CURRENT")
    stages.wrap(sharecrawl.pipeline.update, "updated_partitions", "partitions' history and rates")
    stages.wrap(sharecrawl.queries.index, "build_index", "Index: building the search index")
    stages.wrap(sharecrawl.queries.index, "update_index", "Index: updating the search index")
    try:
        yield
    finally:
        stages.undo()


def round_one(crawl: CrawlDir, hosts: int, files: int, t: datetime) -> int:
    """Round 1's segment: every host new, its shares listed and tagged whole."""
    shares = max(1, files // hosts // (FOLDERS_PER_SHARE * 100))
    names = [f"h{h:04d}" for h in range(hosts)]
    for host in names:
        listings, logs = [], []
        for s in range(shares):
            listing, (key,) = share_listing(host, f"share{s}", FOLDERS_PER_SHARE, t, media_every=10)
            listings.append(listing)
            logs.append(log_row(1, key, "new", summarize(listing)[key.id], t))
        listing = pa.concat_tables(listings)
        write_fetched_host(crawl, 1, host, listing, tags_of(listing, t), logs)
    finish_segment(crawl, 1, names, t)
    return hosts * shares * FOLDERS_PER_SHARE * 101


def changed_round(crawl: CrawlDir, round_: int, changed: float, t: datetime) -> int:
    """Round `round_`'s segment: every partition scanned, a share `changed` of them with an
    mp3 added (its listing and its one tag read), the others unchanged."""
    partitions = crawl.read(round_ - 1, "partitions").to_pylist()
    rng = random.Random(1307 + round_)
    count = max(1, round(changed * len(partitions)))
    chosen = {p["partition_id"] for p in rng.sample(partitions, count)}
    by_host: dict[str, list[dict]] = defaultdict(list)
    for p in partitions:
        by_host[p["host"]].append(p)
    for host, mine in sorted(by_host.items()):
        listings, logs = [], []
        for p in mine:
            key = PartitionKey(host, p["share"], p["root"], p["lo"], p["hi"])
            if p["partition_id"] in chosen:
                listing = changed_listing(crawl, round_ - 1, key, t, name=f"added{round_}.mp3")
                listings.append(listing)
                logs.append(log_row(round_, key, "changed", summarize(listing)[key.id], t))
            else:
                logs.append(log_row(round_, key, "unchanged", p, t))
        listing = pa.concat_tables(listings) if listings else None
        media = None
        if listing is not None:  # the added files' tags, read this round
            media = tags_of(listing.filter(pc.match_substring(listing["path"], "/added")), t)
        write_fetched_host(crawl, round_, host, listing, media, logs)
    finish_segment(crawl, round_, sorted(by_host), t)
    return len(chosen)


def run_round(
    settings: Settings, crawl: CrawlDir, round_: int
) -> tuple[float, int, dict[str, float]]:
    from sharecrawl.pipeline.index import Index
    from sharecrawl.pipeline.update import Update

    stages = Stages()
    with TreeRSS() as rss, measured(stages):
        t0 = time.perf_counter()
        Update(crawl_dir=str(crawl.root), round=round_, settings=settings).run()
        stages.seconds["Update with publish (all)"] = time.perf_counter() - t0
        t1 = time.perf_counter()
        Index(crawl_dir=str(crawl.root), round=round_, settings=settings).run()
        stages.seconds["Index (all)"] = time.perf_counter() - t1
        wall = time.perf_counter() - t0
    assert crawl.current() == round_
    return wall, rss.peak, dict(stages.seconds)


def report(name: str, wall: float, peak: int, stages: dict[str, float]) -> None:
    print(f"{name}: {wall:.1f} s, peak RSS of the process tree {peak / 2**30:.2f} GiB")
    for label, seconds in sorted(stages.items(), key=lambda kv: -kv[1]):
        print(f"    {label:<40} {seconds:8.1f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=1000)
    ap.add_argument("--files", type=int, default=20_000_000)
    ap.add_argument("--changed", type=float, default=0.01, help="share of partitions changed")
    ap.add_argument("--runner", default="local", help="the jobs' mrjob runner")
    ap.add_argument("--workdir")
    args = ap.parse_args()
    root = Path(args.workdir or tempfile.mkdtemp(prefix="sharecrawl-scale-"))
    crawl = CrawlDir(root / "crawl")
    crawl.crawldb.mkdir(parents=True)
    settings = read_settings(crawl_dir=crawl.root, runner=args.runner)
    t = datetime(2026, 1, 1, tzinfo=UTC)
    try:
        with step(f"writing round 1's segment: {args.hosts} hosts"):
            rows = round_one(crawl, args.hosts, args.files, t)
        print(f"round 1's segment: {rows:,} listing rows of {args.hosts} hosts")
        wall1, peak1, stages1 = run_round(settings, crawl, 1)
        report("round 1 (every host new)", wall1, peak1, stages1)
        walls, peaks = [], [peak1]
        for round_, what in (
            (2, "of partitions changed; every host's counts of round 1's new files go to 0"),
            (3, "of partitions changed again: a round as most are"),
        ):
            with step(f"writing round {round_}'s segment"):
                changed = changed_round(crawl, round_, args.changed, t + timedelta(hours=round_))
            n = crawl.read(round_ - 1, "partitions").num_rows
            print(f"round {round_}'s segment: {changed} of {n} partitions changed")
            wall, peak, stages = run_round(settings, crawl, round_)
            report(f"round {round_} ({args.changed:.0%} {what})", wall, peak, stages)
            walls.append(wall)
            peaks.append(peak)
        peak, worst = max(peaks), max(walls)
        print(
            f"peak RSS {peak / 2**30:.2f} GiB (goal <= {GOAL_RSS / 2**30:.0f} GiB); changed "
            f"rounds {walls[0]:.1f} s and {walls[1]:.1f} s (goal <= {GOAL_S:.0f} s); load "
            f"average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
        )
        print(f"ratio changed round/goal: {worst / GOAL_S:.2f}")
    finally:
        if not args.workdir:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

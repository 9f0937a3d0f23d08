"""Benchmark: what a round writes when one partition of a big host changed.

A crawldb (bench/incremental.py's synthetic tables) with a NAS of `--files` files (folders of
100 files, one in ten an mp3, in range partitions of 10 folders: what the B*-subtree split
leaves of a big flat share) and `--small-hosts` hosts of 20 000 files, published as the
previous release wrote it: one files, media and folders part per host. Then Update (with
publish) runs three times, each after one partition of the NAS changed (one mp3 added):
- round 2 converts the NAS to parts per group of partitions: it writes all of its rows, as
  every round did before, and is the reference;
- rounds 3 and 4 write only the groups of the changed partition (and the folders above it).
For each round: the bytes it wrote into its version (new files: parts, state tables,
manifest; hard links cost nothing) against the NAS's bytes in that version, and its time;
then the files it wrote that are not the NAS's parts (the state tables, the manifest).

Then the analysts' queries of docs/analysts.md run as `sharecrawl sql` runs them, on the
previous release's storage (version 1) and on the groups (version 4), interleaved, median of
`--passes`, so that both storages are timed in the same run on the same load.

    .venv/bin/python bench/host_parts.py [--files 1000000] [--small-hosts 20] [--workdir DIR]

The last two lines: the time of Update with one partition changed (rounds 3 and 4) against
the round that rewrote the whole NAS (round 2), and the ratio of bytes written to the NAS's
bytes in the last round (goal <= 0.05).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.incremental import (
    as_files,
    changed_listing,
    log_row,
    partition_rows,
    share_listing,
    tags_of,
    write_segment,
    write_version,
)
from bench.progress import step
from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir
from sharecrawl.jobs.subtree_hash import summarize
from sharecrawl.pipeline.settings import Settings, read_settings
from sharecrawl.queries.views import query, rows

NAS = "nas"
RANGE_FOLDERS = 10  # folders per range partition: about 1 000 rows
NAS_TAG_S = 0.6  # the NAS's measured seconds per tag read: its partitions are within limits
QUERIES = {
    "largest media folders": """
        SELECT host, share, regexp_extract(path, '^(.*)/[^/]*$', 1) AS folder,
               count(*) AS n_media, sum(size) AS media_bytes
        FROM media GROUP BY ALL ORDER BY media_bytes DESC, host, share, folder LIMIT 20""",
    "hosts by media bytes": """
        SELECT h.host, h.online, count(m.path) AS n_media,
               count(m.path) FILTER (m.kind = 'audio') AS audio,
               count(m.path) FILTER (m.kind = 'video') AS video,
               coalesce(sum(m.size), 0) AS media_bytes
        FROM hosts h LEFT JOIN media m USING (host)
        GROUP BY ALL ORDER BY media_bytes DESC, h.host""",
    "formats by host": """
        SELECT host, format, count(*) AS n_media, sum(size) AS bytes,
               round(avg(bitrate_kbps)) AS avg_kbps
        FROM media GROUP BY ALL ORDER BY host, n_media DESC, format""",
    "duplicate folders": """
        SELECT n_hosts, n_copies, n_files, bytes, (n_copies - 1) * bytes AS redundant_bytes,
               hosts, copies
        FROM duplicate_folders ORDER BY redundant_bytes DESC, n_files DESC LIMIT 20""",
    "files per share": "SELECT host, share, count(*) AS n, sum(size) AS bytes FROM files "
    "GROUP BY ALL ORDER BY n DESC",
}


def build(crawl: CrawlDir, files: int, small_hosts: int, t: datetime) -> list:
    """Version 1 in the previous release's form; the NAS's range partition keys."""
    crawl.crawldb.mkdir(parents=True)
    tables, partitions = {}, []
    listing, nas_keys = share_listing(
        NAS, "share", files // 100, t, media_every=10, range_folders=RANGE_FOLDERS
    )
    tables[NAS] = (as_files(listing, t), tags_of(listing, t))
    partitions += partition_rows(nas_keys, summarize(listing), t)
    for h in range(small_hosts):
        listing, keys = share_listing(f"pc-{h:03d}", "share", 200, t, media_every=10)
        tables[keys[0].host] = (as_files(listing, t), tags_of(listing, t))
        partitions += partition_rows(keys, summarize(listing), t)
    # the NAS's measured tag reads: its range partitions fit the limits, none is re-split
    write_version(crawl, 1, tables, partitions, t, tag_s={NAS: NAS_TAG_S})
    return nas_keys[1:]


def change_round(
    settings: Settings, crawl: CrawlDir, round_: int, key, t: datetime
) -> tuple[float, int, int]:
    """One mp3 added to partition `key` of the NAS, Update run: (seconds, bytes written, the
    NAS's bytes in the new version)."""
    from sharecrawl.pipeline.update import Update

    listing = changed_listing(crawl, round_ - 1, key, t, name=f"added{round_}.mp3")
    log = [log_row(round_, key, "changed", summarize(listing)[key.id], t)]
    hosts = [h for h in crawl.read(round_ - 1, "hosts")["host"].to_pylist()]
    write_segment(
        crawl,
        round_,
        {
            h: (listing, tags_of(listing.slice(listing.num_rows - 1), t), log)
            if h == NAS
            else (None, None, [])
            for h in hosts
        },
        t,
    )
    started = time.perf_counter()
    Update(crawl_dir=str(crawl.root), round=round_, settings=settings).run()
    elapsed = time.perf_counter() - started
    assert crawl.current() == round_
    return elapsed, written_bytes(crawl, round_), nas_bytes(crawl, round_)


def written_files(crawl: CrawlDir, version: int) -> dict[str, int]:
    """The files of `version` (relative path -> bytes) that are not hard links to the
    previous version's: what the round wrote."""
    vdir = crawl.version_dir(version)
    old = {p.stat().st_ino for p in crawl.version_dir(version - 1).rglob("*") if p.is_file()}
    return {
        str(p.relative_to(vdir)): p.stat().st_size
        for p in vdir.rglob("*")
        if p.is_file() and p.stat().st_ino not in old
    }


def written_bytes(crawl: CrawlDir, version: int) -> int:
    return sum(written_files(crawl, version).values())


def nas_parts_written(crawl: CrawlDir, version: int) -> int:
    """Of what the round wrote, the bytes of the NAS's own parts (the rest: the state
    tables every round writes whole, and the manifest)."""
    return sum(
        size
        for rel, size in written_files(crawl, version).items()
        if rel.split("/")[-1].startswith(NAS)
    )


def nas_bytes(crawl: CrawlDir, version: int) -> int:
    hosts = crawl.hosts(version)
    return sum(
        hosts.path(t, NAS, g).stat().st_size
        for t in ("files", "media", "folders")
        for g in hosts.groups(NAS)
        if hosts.path(t, NAS, g).exists()
    )


def sql_times(crawl: CrawlDir, versions: tuple[int, int], passes: int) -> dict[str, list]:
    """Median seconds of each query on each version, passes interleaved; results checked
    alike (the versions differ by the mp3 files the rounds added)."""
    times: dict[str, list[list[float]]] = {q: [[], []] for q in QUERIES}
    for _ in range(passes):
        for name, sql in QUERIES.items():
            for i, version in enumerate(versions):
                t0 = time.perf_counter()
                _, found = query(crawl, version, sql, rows, lambda line: None)
                times[name][i].append(time.perf_counter() - t0)
                assert found, name
    return {q: [statistics.median(t) for t in pair] for q, pair in times.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=1_000_000, help="the NAS's files")
    ap.add_argument("--small-hosts", type=int, default=20)
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--runner", default="inline")
    ap.add_argument("--workdir")
    args = ap.parse_args()
    root = Path(args.workdir or tempfile.mkdtemp(prefix="sharecrawl-bench-"))
    crawl = CrawlDir(root / "crawl")
    t = datetime(2026, 1, 1, tzinfo=UTC)
    settings = read_settings(crawl_dir=crawl.root, runner=args.runner)
    try:
        with step("building the crawldb"):
            keys = build(crawl, args.files, args.small_hosts, t)
        total = sum(p.stat().st_size for p in crawl.version_dir(1).rglob("*") if p.is_file())
        print(
            f"version 1: a NAS of {args.files:,} files in {len(keys)} range partitions and "
            f"{args.small_hosts} hosts of 20,000 files, one part per host: {total:,} bytes"
        )
        ratio, times = 0.0, {}
        for round_, key, what in (
            (2, keys[len(keys) // 3], "converts the NAS to groups"),
            (3, keys[2 * len(keys) // 3], "groups"),
            (4, keys[-1], "groups"),
        ):
            seconds, wrote, nas = change_round(
                settings, crawl, round_, key, t + timedelta(hours=round_)
            )
            ratio, times[round_] = wrote / nas, seconds
            own = nas_parts_written(crawl, round_)
            n_parts = len(crawl.hosts(round_).groups(NAS))
            print(
                f"round {round_} ({what}): wrote {wrote:,} bytes ({own:,} of them the NAS's "
                f"parts, {own / nas:.4f} of its bytes), the NAS holds {nas:,} in {n_parts} "
                f"groups; ratio {ratio:.4f}; Update {seconds:.1f} s"
            )
            rest = {
                rel: size
                for rel, size in written_files(crawl, round_).items()
                if not rel.split("/")[-1].startswith(NAS)
            }
            print("  the rest: " + ", ".join(f"{rel} {n:,}" for rel, n in sorted(rest.items())))
        with step("analysts' queries on both storages"):
            timed = sql_times(crawl, (1, 4), args.passes)
        for name, (old, new) in timed.items():
            print(
                f"sql {name:<22} one part per host {old:6.3f} s, groups {new:6.3f} s "
                f"({new / old:.2f}x)"
            )
        old_sum, new_sum = (sum(v[i] for v in timed.values()) for i in (0, 1))
        print(
            f"sql all queries: {old_sum:.3f} s one part per host, {new_sum:.3f} s groups "
            f"({new_sum / old_sum:.2f}x); load average {os.getloadavg()[0]:.1f}"
        )
        changed = statistics.mean((times[3], times[4]))
        print(
            f"Update with one partition changed: {changed:.1f} s, rewriting the whole NAS "
            f"(round 2): {times[2]:.1f} s"
        )
        print(f"ratio time changed round/full rewrite: {changed / times[2]:.2f}")
        print(f"ratio bytes written/host bytes: {ratio:.4f}")
    finally:
        if not args.workdir:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: what measuring the room on the disk costs a round (crawl_io.disk_room), with
`du` over the same rounds as the reference.

Writes a synthetic crawl directory shaped as bench/scale.py leaves one at 1,000 hosts:
`--rounds` versions of `--parts` parts each (files, media, folders and prefix_stats parts
of every host), each version's parts hard links to the previous version's but for the
`--changed` share written anew, as Publish links them; a segment of `--segment-files`
files a round; versions published an hour apart. Then times, median of `--passes`:
- sharecrawl: `disk_room`, which a crawl runs after every round and `status` once (the
  last ROUNDS_MEASURED rounds: a listing of their versions, a stat of their new files);
- reference: `du -s` over the same rounds' versions and segments (a stat of every file),
  which counts each file once however many names it has, as disk_room does.
Both must find the same bytes (checked). The last line is the ratio of their times.

    .venv/bin/python bench/disk_room.py [--rounds 9] [--parts 8000] [--changed 0.02]
                                        [--segment-files 1000] [--passes 7]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from crawl_io.crawldir import CrawlDir
from crawl_io.disk_room import ROUNDS_MEASURED, disk_room
from simulator.progress import step

TABLES = ("files", "media", "folders", "prefix_stats")
PART = b"\0" * 6000  # two blocks, as a small host's part


def write_crawl(root: Path, rounds: int, parts: int, changed: float, segment_files: int) -> None:
    crawl = CrawlDir(root)
    names = [f"{TABLES[i % 4]}/h{i // 4:04d}.parquet" for i in range(parts)]
    every = max(1, round(1 / changed)) if changed > 0 else parts + 1
    start = time.time() - rounds * 3600
    for version in range(1, rounds + 1):
        vdir = crawl.version_dir(version)
        for table in TABLES:
            (vdir / table).mkdir(parents=True)
        for i, name in enumerate(names):
            if version == 1 or (i + version) % every == 0:
                (vdir / name).write_bytes(PART)
            else:
                os.link(crawl.version_dir(version - 1) / name, vdir / name)
        for state in ("hosts.parquet", "partitions.parquet", "MANIFEST.json"):
            (vdir / state).write_bytes(PART * 20)
        stamp = start + version * 3600
        os.utime(vdir / "MANIFEST.json", (stamp, stamp))
        segment = crawl.segment_dir(version)
        for folder in ("listing", "media", "fetchlog"):
            (segment / folder).mkdir(parents=True)
        for i in range(segment_files):
            (segment / ("listing", "media", "fetchlog")[i % 3] / f"h{i:04d}.parquet").write_bytes(
                PART
            )
        (segment / "fetchlog.parquet").write_bytes(PART * 10)
    (crawl.crawldb / "CURRENT").write_text(f"v{rounds:06d}\n")
    crawl.index.parent.mkdir(parents=True)
    crawl.index.write_bytes(PART * 100)


def du(*folders: Path) -> int:
    """Bytes of blocks below `folders`, each file once, folders included (GNU du)."""
    out = subprocess.run(
        ["du", "-s", "-B1", "-c", *map(str, folders)], capture_output=True, text=True, check=True
    ).stdout
    return int(out.splitlines()[-1].split()[0])


def folder_blocks(folder: Path) -> int:
    """Bytes of blocks of `folder` and the folders below it, themselves."""
    return sum(os.stat(root).st_blocks * 512 for root, _, _ in os.walk(folder))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=ROUNDS_MEASURED + 1)
    ap.add_argument("--parts", type=int, default=8000)
    ap.add_argument("--changed", type=float, default=0.02)
    ap.add_argument("--segment-files", type=int, default=1000)
    ap.add_argument("--passes", type=int, default=7)
    args = ap.parse_args()
    if shutil.which("du") is None:
        print("du is not installed: no reference", file=sys.stderr)
        return 1
    root = Path(tempfile.mkdtemp(prefix="sharecrawl-disk-room-"))
    try:
        with step(f"writing {args.rounds} versions of {args.parts:,} parts"):
            write_crawl(root / "crawl", args.rounds, args.parts, args.changed, args.segment_files)
        crawl = CrawlDir(root / "crawl")
        live = args.rounds
        rounds = list(range(max(2, live - ROUNDS_MEASURED + 1), live + 1))
        before = crawl.version_dir(rounds[0] - 1)
        folders = [before]
        for r in rounds:
            folders += [crawl.version_dir(r), crawl.segment_dir(r)]
        ours, theirs = [], []
        for _ in range(args.passes):
            t = time.perf_counter()
            room = disk_room(crawl, 0)
            ours.append(time.perf_counter() - t)
            t = time.perf_counter()
            total = du(*folders) - du(before)
            theirs.append(time.perf_counter() - t)
        total -= sum(folder_blocks(f) for f in folders[1:])  # disk_room counts files only
        assert room.round_bytes is not None and room.rounds_measured == len(rounds)
        found = room.round_bytes * room.rounds_measured
        same = abs(found - total) <= room.rounds_measured  # the mean's rounding
        print(
            f"{len(rounds)} rounds measured, {args.parts:,} parts a version: a round adds "
            f"{room.round_bytes:,} bytes (du: {total / len(rounds):,.0f}; "
            f"{'the same' if same else 'DIFFERENT'}); one round every "
            f"{room.round_interval_s or 0:.0f} s"
        )
        a, b = statistics.median(ours), statistics.median(theirs)
        print(f"disk_room: {a * 1000:.1f} ms; du over the same rounds: {b * 1000:.1f} ms")
        print(f"ratio disk_room/du: {a / b:.2f}")
        return 0 if same else 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: incremental rounds.

A LAN of file:// hosts with 1 M files: a full first crawl, an unchanged round, a round
after 1 % of partitions changed -- each round's time and tag reads, against listing alone
(a plain os.scandir walk of the same folders in the same run). Then publish (Update) time
with a crawldb of 100 k and of 1 M files for the same change. Goals: the unchanged round
reads 0 tags and takes no longer than listing alone; publish with a 10x crawldb <= 1.2x.

A round has a fixed cost of about 0.2 s here (Luigi, publishing with fsync, relabelling the
index, starting the fetch workers) on top of its per-entry work: with `--files 200000` the
unchanged round measured 1.17-1.24x listing alone, with 1 M files 0.90-0.96x (2 cores).

    python bench/incremental.py [--files 1000000] [--workdir DIR] [--publish-only]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa
import pyarrow.compute as pc

from crawl_io.crawldir import CrawlDir, host_file, write_parquet
from crawl_io.schema import FETCHLOG, FILES, HOSTS, LISTING, MEDIA, PARTITIONS, PREFIX_STATS
from crawl_io.version_manifest import write_manifest as write_version_manifest
from demolan.templates import write_tagged
from jobs.membership import share_root
from pipeline import settings as config
from pipeline.inject import INJECT
from pipeline.rounds import run_round
from queries.status import round_report
from simulator.progress import step

SHARES_PER_HOST = 10
FOLDERS_PER_SHARE = 50
MEDIA_EVERY = 10  # one file in ten is a tagged mp3


def build_lan(root: Path, files: int) -> tuple[Path, list[Path]]:
    per_share = FOLDERS_PER_SHARE * max(1, files // (FOLDERS_PER_SHARE * 200))
    hosts = max(1, files // (per_share * SHARES_PER_HOST))
    template = root / "template.mp3"
    write_tagged("mp3", template, {"artist": "Bench", "title": "Tone", "album": "Bench"})
    shares: list[Path] = []
    for h in range(hosts):
        for s in range(SHARES_PER_HOST):
            share = root / "hosts" / f"host{h:03d}" / f"share{s}"
            shares.append(share)
            for f in range(per_share):
                folder = share / f"folder{f % FOLDERS_PER_SHARE:03d}"
                folder.mkdir(parents=True, exist_ok=True)
                if f % MEDIA_EVERY == 0:
                    shutil.copyfile(template, folder / f"track{f:05d}.mp3")
                else:
                    (folder / f"file{f:05d}.dat").touch()
    hosts_file = root / "hosts.txt"
    hosts_file.write_text("".join(f"file://{root / 'hosts' / f'host{h:03d}'}\n"
                                  for h in range(hosts)))  # fmt: skip
    return hosts_file, shares


def listing_alone(top: Path) -> tuple[float, int]:
    """The reference: list every folder with sizes and mtimes, nothing else."""
    started, n = time.perf_counter(), 0
    stack = [str(top)]
    while stack:
        with os.scandir(stack.pop()) as it:
            for e in it:
                e.stat(follow_symlinks=False)
                n += 1
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
    return time.perf_counter() - started, n


def timed_round(crawl: CrawlDir, n: int) -> dict:
    started = time.perf_counter()
    run_round(str(crawl.root), n)
    report = round_report(crawl)
    report["wall_s"] = time.perf_counter() - started
    return report


def synthetic_crawldb(crawl: CrawlDir, hosts: int, files_per_host: int) -> None:
    """Version 1 of a crawldb with hosts x files_per_host files, and round 2's segment in
    which one partition of one host changed (one file added)."""
    t = datetime(2026, 1, 1, tzinfo=UTC)
    crawl.crawldb.mkdir(parents=True)
    v1 = crawl.version_dir(1)
    part_rows, host_rows, inject_rows = [], [], []
    for h in range(hosts):
        name = f"h{h:04d}"
        key = share_root(name, "share")
        # Folders of 100 files, one of them media: within the partition limits (folder
        # listings plus tag reads), so the round replaces the partition and splits nothing.
        paths = []
        for d in range(files_per_host // 100):
            paths.append(f"d{d:04d}")
            paths += [f"d{d:04d}/f{i:03d}.{'mp3' if i == 0 else 'dat'}" for i in range(100)]
        n = len(paths)
        rows = {"host": [name] * n, "share": ["share"] * n, "path": paths,
                "name": [p.rsplit("/", 1)[-1] for p in paths],
                "is_dir": ["/" not in p for p in paths],
                "size": [0 if "/" not in p else 1000 for p in paths], "mtime": [t] * n,
                "partition_id": [key.id] * n, "first_seen": [t] * n,
                "last_seen": [t] * n}  # fmt: skip
        files = pa.table(rows, FILES)
        write_parquet(files, v1 / "files" / host_file(name))
        media = files.filter(pc.ends_with(files["path"], ".mp3")).select(
            ["host", "share", "path", "size", "mtime", "partition_id"]
        )
        media = media.append_column("kind", pa.array(["audio"] * media.num_rows))
        media = media.append_column("title", media["path"])
        media_schema = pa.schema([MEDIA.field(c) for c in media.column_names])
        write_parquet(media.cast(media_schema), v1 / "media" / host_file(name))
        part_rows.append({**dict.fromkeys(PARTITIONS.names), "partition_id": key.id,
                          "host": name, "share": "share", "root": "", "hash": "old",
                          "n_scans": 1, "n_changes": 0, "history": [], "n_folders": 1,
                          "last_scan": t})  # fmt: skip
        part_rows[-1]["n_folders"] = files_per_host // 100 + 1
        host_rows.append({"host": name, "url": f"file:///nowhere/{name}", "online": True})
        inject_rows.append({"host": name, "url": f"file:///nowhere/{name}", "shares": [],
                            "online": True, "checked_at": t})  # fmt: skip
    write_parquet(pa.Table.from_pylist(part_rows, PARTITIONS), v1 / "partitions.parquet")
    write_parquet(pa.Table.from_pylist(host_rows, HOSTS), v1 / "hosts.parquet")
    write_parquet(PREFIX_STATS.empty_table(), v1 / "prefix_stats.parquet")
    write_version_manifest(v1, {})  # a version of this release, not a legacy one
    crawl.note_manifests_from(1)
    crawl.publish(1)
    seg = crawl.segment_dir(2)
    write_parquet(pa.Table.from_pylist(inject_rows, INJECT), seg / "inject.parquet")
    changed = share_root("h0000", "share")
    listing = pa.concat_tables([
        pa.table({c: rows_of(crawl, 1, "h0000")[c] for c in LISTING.names}, LISTING),
        pa.Table.from_pylist([{"host": "h0000", "share": "share", "path": "new.mp3",
                               "name": "new.mp3", "is_dir": False, "size": 5, "mtime": t,
                               "partition_id": changed.id}], LISTING),
    ])  # fmt: skip
    write_parquet(listing, seg / "listing" / host_file("h0000"))
    write_parquet(MEDIA.empty_table(), seg / "media" / host_file("h0000"))
    log = [{"round": 2, "partition_id": changed.id, "host": "h0000", "share": "share",
            "started": t, "duration_s": 1.0, "status": "changed", "n_entries": listing.num_rows,
            "n_tags_read": 0, "bytes_read": 0, "listing_s": 1.0, "tags_s": 0.0,
            "n_folders": 1, "hash": None}]  # fmt: skip
    from jobs.subtree_hash import partition_hash

    mt = listing["mtime"].cast("int64").to_pylist()
    log[0]["hash"] = partition_hash(zip(listing["path"].to_pylist(), listing["is_dir"].to_pylist(),
                                        listing["size"].to_pylist(), mt, strict=True))  # fmt: skip
    table = pa.Table.from_pylist(log, FETCHLOG)
    write_parquet(table, seg / "fetchlog" / host_file("h0000"))
    write_parquet(table, seg / "fetchlog.parquet")
    write_parquet(pa.Table.from_pylist([], pa.schema([("host", pa.string())])),
                  seg / "fetchlist.parquet")  # fmt: skip


def rows_of(crawl: CrawlDir, version: int, host: str) -> pa.Table:
    return crawl.read_host(version, "files", host)


def publish_time(root: Path, hosts: int, files_per_host: int) -> float:
    from pipeline.update import Update

    crawl = CrawlDir(root)
    synthetic_crawldb(crawl, hosts, files_per_host)
    task = Update(crawl_dir=str(root), round=2)
    started = time.perf_counter()
    task.run()
    elapsed = time.perf_counter() - started
    rows = hosts * (files_per_host + files_per_host // 100) + 1  # files, folders, new.mp3
    assert crawl.current() == 2 and crawl.read(2, "files").num_rows == rows
    return elapsed


def rounds_on_a_lan(root: Path, files: int) -> float:
    """A full, an unchanged and a 1 %-changed round; the unchanged one against listing alone."""
    t0 = time.perf_counter()
    with step("building the LAN"):
        hosts_file, shares = build_lan(root, files)
    crawl = CrawlDir(root / "crawl")
    crawl.crawldb.mkdir(parents=True)
    config.override(hosts_file=hosts_file, crawl_dir=crawl.root, runner="local")
    print(f"LAN: {len(shares)} shares, built in {time.perf_counter() - t0:.1f} s")
    list_s, entries = listing_alone(root / "hosts")
    print(f"listing alone (os.scandir walk, 1 process): {entries} entries in {list_s:.2f} s")
    full = timed_round(crawl, 1)
    unchanged = timed_round(crawl, 2)
    for share in shares[::100]:  # 1 % of partitions: one new media file in each
        shutil.copyfile(root / "template.mp3", share / "folder000" / "added.mp3")
    changed = timed_round(crawl, 3)
    for name, r in (("full", full), ("unchanged", unchanged), ("1% changed", changed)):
        p = r["partitions"]
        print(f"round {name:>10}: {r['wall_s']:7.2f} s, {r['entries_listed']:>7} entries "
              f"listed, {r['tags_read']:>6} tags read, {p['changed'] + p['new']} "
              f"partitions changed/new of {p['scanned']}")  # fmt: skip
    print(f"unchanged round tags read: {unchanged['tags_read']} (goal 0)")
    return unchanged["wall_s"] / list_s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=1_000_000)
    ap.add_argument("--workdir")
    ap.add_argument("--publish-only", action="store_true", help="only the publish-time part")
    args = ap.parse_args()
    root = Path(args.workdir or tempfile.mkdtemp(prefix="sharecrawl-bench-"))
    try:
        ratio = None if args.publish_only else rounds_on_a_lan(root, args.files)
        config.override(runner="local")
        with step("publish, 100 k and 1 M files"):
            small = publish_time(root / "pub-small", 5, 20_000)
            large = publish_time(root / "pub-large", 50, 20_000)
        print(f"publish with 100 k files: {small:.2f} s; with 1 M files: {large:.2f} s "
              f"(same change: one partition of one host)")  # fmt: skip
        print(f"publish ratio 1 M / 100 k: {large / small:.2f} (goal <= 1.2)")
        if ratio is not None:
            print(f"unchanged round / listing alone: {ratio:.2f} (goal <= 1.0)")
    finally:
        if not args.workdir:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

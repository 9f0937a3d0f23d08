"""Benchmark: incremental rounds.

A LAN of file:// hosts with 1 M files: a full first crawl, five unchanged rounds, a round
after 1 % of partitions changed -- each round's time and tag reads, against listing alone
(a plain os.scandir walk of the same folders in the same run). Then publish (Update) time
with a crawldb of 100 k and of 1 M files for the same change. Goals: the unchanged round
reads 0 tags and its median takes <= 1.1x listing alone (the median of the walks that follow
each unchanged round: the page cache makes the walk before the rounds the slower by up to
1.5x here); publish with a 10x crawldb <= 1.2x. Each walk or round alone moves by 15 % from
run to run here: medians of five, of like against like (the median round against the best
walk of four was 1.01-1.20 over three runs of the same code, medians 0.96-1.03); the ratio
against the best walk is printed too.

Where an unchanged round's time goes (1 M files, 2 cores): the fetch 3.4-3.7 s, Update
0.13-0.43 s, the index 0.06-0.08 s, Inject and Generate 0.03-0.05 s. The fetch is per-entry
work that 2 workers share: every host fetched in one process takes 1.85x the bare walk (7.4
against 4.0 s; per entry the same stat, then FileSource's entry, the sort, the walk's
generator and the hash's line), 2.4x before its workers left cycle collection out of the
walk. CPU seconds count this process and every worker, and are printed beside the wall
times.

    python bench/incremental.py [--files 1000000] [--workdir DIR] [--publish-only]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench.progress import step
from sharecrawl.crawl_io.crawldb.atomic import write_parquet
from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir, host_file
from sharecrawl.crawl_io.crawldb.host_parts import partitions_metadata
from sharecrawl.crawl_io.crawldb.stored_hosts import StoredHost
from sharecrawl.crawl_io.crawldb.version_manifest import write_manifest as write_version_manifest
from sharecrawl.crawl_io.schema import FETCHLOG, HOSTS, LISTING, MEDIA, PARTITIONS, TS
from sharecrawl.crawl_io.workers import server_pid, worker_context
from sharecrawl.demolan.templates import write_tagged
from sharecrawl.jobs.membership import PartitionKey, share_root
from sharecrawl.jobs.subtree_hash import folder_summaries, summarize
from sharecrawl.pipeline.inject import INJECT
from sharecrawl.pipeline.rounds import run_round
from sharecrawl.pipeline.settings import Settings, read_settings
from sharecrawl.queries.status import round_report

SHARES_PER_HOST = 10
FOLDERS_PER_SHARE = 50
MEDIA_EVERY = 10  # one file in ten is a tagged mp3
FILES_PER_FOLDER = 100  # in the synthetic crawldb
LIST_S, TAG_S = 0.015, 0.15  # a synthetic host's costs: luigi.cfg's first guesses


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
    hosts_file.write_text(
        "".join(f"file://{root / 'hosts' / f'host{h:03d}'}\n" for h in range(hosts))
    )
    return hosts_file, shares


def cpu_seconds() -> float:
    """CPU seconds of this process, its children and the fork server's children (the round's
    workers, counted once it reaps them; not the server's own imports): less noisy than wall
    time on a shared machine."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    total = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
    pid = server_pid()
    if pid is not None:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += sum(map(int, fields[13:15])) / os.sysconf("SC_CLK_TCK")  # cutime, cstime
    return total


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


def timed_round(settings: Settings, crawl: CrawlDir, n: int) -> dict:
    cpu, started = cpu_seconds(), time.perf_counter()
    run_round(settings, n)
    report = round_report(crawl)
    report["wall_s"] = time.perf_counter() - started
    report["cpu_s"] = cpu_seconds() - cpu
    return report


# -- synthetic crawldb tables and segments, as the stages write them ------------------------
def _names(values: np.ndarray, fmt: str) -> pa.Array:
    return pa.array(np.char.mod(fmt, values).astype(object), pa.string())


def share_listing(
    host: str,
    share: str,
    folders: int,
    t: datetime,
    *,
    media_every: int = 100,
    range_folders: int = 0,
) -> tuple[pa.Table, list[PartitionKey]]:
    """LISTING rows of one share as a fetch writes them: `folders` folders d00000... under the
    share root, FILES_PER_FOLDER files each, one in `media_every` an mp3. With
    `range_folders`, range partitions of that many folders under the share root (what the
    split leaves of a big flat share), else the share root partition alone. The keys: the
    share root first."""
    folder = np.arange(folders)
    d_names = _names(folder, "d%05d")
    file_folder = np.repeat(folder, FILES_PER_FOLDER)
    number = np.tile(np.arange(FILES_PER_FOLDER), folders)
    is_media = number % media_every == 0
    f_names = pa.array(
        np.where(
            is_media, np.char.mod("f%03d.mp3", number), np.char.mod("f%03d.dat", number)
        ).astype(object)
    )
    f_paths = pc.binary_join_element_wise(d_names.take(pa.array(file_folder)), f_names, "/")
    n = folders + len(f_names)
    root = share_root(host, share)
    keys = [root]
    if range_folders:
        blocks = (folders + range_folders - 1) // range_folders
        for b in range(blocks):
            lo = None if b == 0 else f"d{b * range_folders:05d}"
            hi = None if b == blocks - 1 else f"d{(b + 1) * range_folders:05d}"
            keys.append(PartitionKey(host, share, "", lo, hi))
        owner = np.concatenate([folder, file_folder]) // range_folders + 1
    else:
        owner = np.zeros(n, np.int64)
    ids = pa.array([k.id for k in keys]).take(pa.array(owner))
    table = pa.table(
        {
            "host": pa.array([host] * n),
            "share": pa.array([share] * n),
            "path": pa.concat_arrays([d_names, f_paths]),
            "name": pa.concat_arrays([d_names, f_names]),
            "is_dir": np.arange(n) < folders,
            "size": np.where(np.arange(n) < folders, 0, 1000 + np.arange(n) % 5_000_000),
            "mtime": pa.array(np.full(n, int(t.timestamp() * 1e6)), pa.timestamp("us", tz="UTC")),
            "partition_id": ids,
        }
    ).cast(LISTING)
    return table, keys


def as_files(listing: pa.Table, t: datetime) -> pa.Table:
    stamp = pa.array([t] * listing.num_rows, TS)
    return listing.append_column("first_seen", stamp).append_column("last_seen", stamp)


def tags_of(listing: pa.Table, t: datetime) -> pa.Table:
    """MEDIA rows as a fetch reads them for the listing's mp3 files."""
    mp3 = listing.filter(pc.ends_with(listing["path"], ".mp3"))
    n = mp3.num_rows
    folder = pc.utf8_slice_codeunits(mp3["path"], 0, 6)
    stem = pc.utf8_slice_codeunits(mp3["name"], 0, -4)
    columns = {name: pa.nulls(n, MEDIA.field(name).type) for name in MEDIA.names}
    columns.update({c: mp3[c] for c in ("host", "share", "path", "size", "mtime", "partition_id")})
    columns.update(
        {
            "kind": pa.array(["audio"] * n),
            "format": pa.array(["mp3"] * n),
            "artist": pc.binary_join_element_wise("Artist", mp3["host"], folder, " "),
            "title": pc.binary_join_element_wise("Song", stem, folder, " "),
            "album": folder,
            "bitrate_kbps": pa.array([192] * n, pa.int32()),
            "duration_s": pa.array([200.0] * n),
            "tagged_at": pa.array([t] * n, TS),
        }
    )
    return pa.table(columns).cast(MEDIA)


def log_row(round_: int, key: PartitionKey, status: str, summary: dict, t: datetime) -> dict:
    """A fetchlog row of one partition scan (`summary`: jobs.subtree_hash.summarize's)."""
    return {
        "round": round_,
        "partition_id": key.id,
        "host": key.host,
        "share": key.share,
        "started": t,
        "duration_s": 1.0,
        "status": status,
        "hash": summary["hash"],
        "n_entries": summary["n_folders"] + summary["n_files"],
        "n_tags_read": 0,
        "bytes_read": 0,
        "listing_s": LIST_S * summary["n_folders"],
        "tags_s": 0.0,
        "n_folders": summary["n_folders"],
        "n_denied": 0,
        "denied": [],
    }


def write_fetched_host(
    crawl: CrawlDir,
    round_: int,
    host: str,
    listing: pa.Table | None,
    media: pa.Table | None,
    log: list[dict],
) -> None:
    """One host's segment parts as its fetch worker leaves them: listing and media when it
    has rows, and its fetchlog part."""
    seg = crawl.segment_dir(round_)
    for folder, table in (("listing", listing), ("media", media)):
        if table is not None and table.num_rows:
            write_parquet(table, seg / folder / host_file(host))
    write_parquet(pa.Table.from_pylist(log, FETCHLOG), seg / "fetchlog" / host_file(host))


def finish_segment(crawl: CrawlDir, round_: int, hosts: list[str], t: datetime) -> None:
    """What Inject and Fetch leave besides the hosts' parts: every host alive, the fetch
    list, the round's fetchlog."""
    seg = crawl.segment_dir(round_)
    inject = [
        {
            "host": h,
            "url": f"file:///nowhere/{h}",
            "shares": [],
            "online": True,
            "checked_at": t,
            "status": "ok",
        }
        for h in hosts
    ]
    write_parquet(pa.Table.from_pylist(inject, INJECT), seg / "inject.parquet")
    write_parquet(
        pa.concat_tables(
            pq.read_table(seg / "fetchlog" / host_file(h), schema=FETCHLOG) for h in hosts
        ),
        seg / "fetchlog.parquet",
    )
    write_parquet(
        pa.Table.from_pylist([], pa.schema([("host", pa.string())])), seg / "fetchlist.parquet"
    )


def write_segment(
    crawl: CrawlDir,
    round_: int,
    hosts: dict[str, tuple[pa.Table | None, pa.Table | None, list[dict]]],
    t: datetime,
) -> None:
    """A round's segment: host -> (listing, media, fetchlog rows)."""
    for host, (listing, media, log) in hosts.items():
        write_fetched_host(crawl, round_, host, listing, media, log)
    finish_segment(crawl, round_, list(hosts), t)


def write_version(
    crawl: CrawlDir,
    version: int,
    tables: dict[str, tuple[pa.Table, pa.Table]],
    partitions: list[dict],
    t: datetime,
    tag_s: dict[str, float] | None = None,
) -> None:
    """Publish a version with one part per host (group 0) of files, media and folders, hosts
    (costs: LIST_S, and TAG_S unless `tag_s` says), partitions, no prefix statistics, a
    manifest."""
    vdir = crawl.version_dir(version)
    for host, (files, media) in tables.items():
        # each part's footer names its partitions, as Publish writes it
        ids = {p["partition_id"] for p in partitions if p["host"] == host}
        for name, table in (("files", files), ("media", media)):
            write_parquet(table, vdir / name / host_file(host), metadata=partitions_metadata(ids))
        write_parquet(
            folder_summaries(files),
            vdir / "folders" / host_file(host),
            metadata=partitions_metadata(ids),
        )
    hosts = [
        {
            "host": h,
            "url": f"file:///nowhere/{h}",
            "online": True,
            "status": "ok",
            "list_s_per_folder": LIST_S,
            "tag_s_per_file": (tag_s or {}).get(h, TAG_S),
            "first_seen": t,
            "last_seen": t,
            "last_check": t,
        }
        for h in tables
    ]
    write_parquet(pa.Table.from_pylist(hosts, HOSTS), vdir / "hosts.parquet")
    write_parquet(pa.Table.from_pylist(partitions, PARTITIONS), vdir / "partitions.parquet")
    (vdir / "prefix_stats").mkdir(exist_ok=True)  # no statistics yet
    write_version_manifest(vdir, {})
    crawl.publish(version)


def partition_rows(keys: list[PartitionKey], summaries: dict[str, dict], t: datetime) -> list[dict]:
    """Stored partitions (the first key is the others' parent), scanned once at `t`."""
    empty = {"hash": "", "n_folders": 0, "n_files": 0, "n_media": 0, "bytes": 0}
    return [
        {
            **dict.fromkeys(PARTITIONS.names),
            "partition_id": k.id,
            "host": k.host,
            "share": k.share,
            "root": k.root,
            "lo": k.lo,
            "hi": k.hi,
            "parent_id": None if i == 0 else keys[0].id,
            "status": "ok",
            "n_scans": 1,
            "n_changes": 0,
            "history": [],
            "first_seen": t,
            "last_scan": t,
            **summaries.get(k.id, empty),
        }
        for i, k in enumerate(keys)
    ]


def changed_listing(
    crawl: CrawlDir, version: int, key: PartitionKey, t: datetime, name: str = "added.mp3"
) -> pa.Table:
    """A partition's listing after a new media file appeared in its first folder."""
    stored = StoredHost(crawl.hosts(version), key.host).rows("files", {key.id})
    stored = stored.select(LISTING.names).cast(LISTING)
    folder = pc.min(pc.if_else(stored["is_dir"], stored["path"], None)).as_py()
    new = {
        "host": key.host,
        "share": key.share,
        "path": f"{folder}/{name}",
        "name": name,
        "is_dir": False,
        "size": 4242,
        "mtime": t,
        "partition_id": key.id,
    }
    return pa.concat_tables([stored, pa.Table.from_pylist([new], LISTING)])


def synthetic_crawldb(crawl: CrawlDir, hosts: int, files_per_host: int) -> None:
    """Version 1 of a crawldb with hosts x files_per_host files (one partition each), and
    round 2's segment in which one partition of one host changed (one file added)."""
    t = datetime(2026, 1, 1, tzinfo=UTC)
    crawl.crawldb.mkdir(parents=True)
    tables, partitions = {}, []
    for h in range(hosts):
        # Folders of 100 files, one of them media: within the partition limits (folder
        # listings plus tag reads), so the round replaces the partition and splits nothing.
        listing, keys = share_listing(f"h{h:04d}", "share", files_per_host // 100, t)
        tables[keys[0].host] = (as_files(listing, t), tags_of(listing, t))
        partitions += partition_rows(keys, summarize(listing), t)
    write_version(crawl, 1, tables, partitions, t)
    changed = share_root("h0000", "share")
    listing = changed_listing(crawl, 1, changed, t)
    summary = summarize(listing)[changed.id]
    logs = {h: [] for h in tables}
    logs["h0000"] = [log_row(2, changed, "changed", summary, t)]
    write_segment(
        crawl, 2, {h: (listing if h == "h0000" else None, None, log) for h, log in logs.items()}, t
    )


def publish_time(root: Path, hosts: int, files_per_host: int) -> float:
    from sharecrawl.pipeline.update import Update

    crawl = CrawlDir(root)
    synthetic_crawldb(crawl, hosts, files_per_host)
    settings = read_settings(crawl_dir=root, runner="local")
    task = Update(crawl_dir=str(root), round=2, settings=settings)
    started = time.perf_counter()
    task.run()
    elapsed = time.perf_counter() - started
    rows = hosts * (files_per_host + files_per_host // 100) + 1  # files, folders, added.mp3
    assert crawl.current() == 2 and crawl.read(2, "files").num_rows == rows
    return elapsed


PUBLISH_RUNS = 7  # one publish alone moves by 30 % here: 0.34-0.58 s for the same


def publish_times(root: Path) -> tuple[float, float]:
    """Median publish seconds with a 100 k and a 1 M crawldb, measured in turn after one
    unmeasured publish (the first Update in a process loads its modules: 1.2 s more here):
    one pair alone differs by 0.1 s from run to run, the whole of the goal's margin."""
    publish_time(root / "pub-warm-up", 5, 20_000)
    small, large = [], []
    for n in range(PUBLISH_RUNS):
        small.append(publish_time(root / f"pub-small-{n}", 5, 20_000))
        large.append(publish_time(root / f"pub-large-{n}", 50, 20_000))
    return statistics.median(small), statistics.median(large)


UNCHANGED_RUNS = 5


def fixed(seconds: list[float]) -> str:
    return ", ".join(f"{s:.2f}" for s in seconds)


def rounds_on_a_lan(root: Path, files: int) -> float:
    """A full round, UNCHANGED_RUNS unchanged ones and a 1 %-changed one; the median unchanged
    round against the median walk after them (one round alone moved by 0.5 s from run to run
    here)."""
    t0 = time.perf_counter()
    with step("building the LAN"):
        hosts_file, shares = build_lan(root, files)
    crawl = CrawlDir(root / "crawl")
    crawl.crawldb.mkdir(parents=True)
    settings = read_settings(hosts_file=hosts_file, crawl_dir=crawl.root, runner="local")
    print(f"LAN: {len(shares)} shares, built in {time.perf_counter() - t0:.1f} s")
    worker_context()  # the fork server up, so that cpu_seconds counts every worker
    cpu = cpu_seconds()
    list_s, entries = listing_alone(root / "hosts")
    list_cpu = cpu_seconds() - cpu
    print(
        f"listing alone (os.scandir walk, 1 process): {entries} entries in {list_s:.2f} s "
        f"({list_cpu:.2f} CPU s)"
    )
    full = timed_round(settings, crawl, 1)
    rounds, walks = [], [list_s]
    for n in range(UNCHANGED_RUNS):  # each unchanged round, then a walk
        rounds.append(timed_round(settings, crawl, 2 + n))
        walks.append(listing_alone(root / "hosts")[0])
    print(f"listing alone again, after each unchanged round: {fixed(walks[1:])} s")
    print(f"unchanged rounds: {fixed([r['wall_s'] for r in rounds])} s")
    unchanged = sorted(rounds, key=lambda r: r["wall_s"])[UNCHANGED_RUNS // 2]  # the median
    best_walk, list_s = min(walks), statistics.median(walks[1:])
    for share in shares[::100]:  # 1 % of partitions: one new media file in each
        shutil.copyfile(root / "template.mp3", share / "folder000" / "added.mp3")
    changed = timed_round(settings, crawl, 2 + UNCHANGED_RUNS)
    for name, r in (("full", full), ("unchanged", unchanged), ("1% changed", changed)):
        p = r["partitions"]
        print(
            f"round {name:>10}: {r['wall_s']:7.2f} s ({r['cpu_s']:6.2f} CPU s), "
            f"{r['entries_listed']:>7} entries "
            f"listed, {r['tags_read']:>6} tags read, {p['changed'] + p['new']} "
            f"partitions changed/new of {p['scanned']}"
        )
    print(f"unchanged round tags read: {unchanged['tags_read']} (goal 0)")
    print(f"unchanged round / listing alone, CPU seconds: {unchanged['cpu_s'] / list_cpu:.2f}")
    print(f"unchanged round / the best walk: {unchanged['wall_s'] / best_walk:.2f}")
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
        with step("publish, 100 k and 1 M files"):
            small, large = publish_times(root)
        print(
            f"publish with 100 k files: {small:.2f} s; with 1 M files: {large:.2f} s "
            f"(same change: one partition of one host; median of {PUBLISH_RUNS}, alternating)"
        )
        print(f"publish ratio 1 M / 100 k: {large / small:.2f} (goal <= 1.2)")
        if ratio is not None:
            print(f"unchanged round / listing alone: {ratio:.2f} (goal <= 1.1)")
    finally:
        if not args.workdir:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Fetch one host in a fetch worker process: walk its due partitions, hash them on the fly,
read tags of what changed. Writes its listing/, media/ and, last, fetchlog/ parts: a host
whose fetchlog part exists is done, and a rerun skips it."""

from __future__ import annotations

import gc
import os
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path

import pyarrow as pa

from sharecrawl.crawl_io.checked import CheckedSource, ShareNotFound, mtime_datetime
from sharecrawl.crawl_io.connect import open_source
from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir, host_file, write_parquet
from sharecrawl.crawl_io.crawldb.stored_hosts import StoredHost
from sharecrawl.crawl_io.mediatypes import media_kind
from sharecrawl.crawl_io.rangefile import RangeFile
from sharecrawl.crawl_io.readable import plural, readable_text
from sharecrawl.crawl_io.schema import FETCHLOG, MEDIA
from sharecrawl.crawl_io.sources import (
    AccessDenied,
    ConfigError,
    Entry,
    HostUnreachable,
    HostURL,
    NotFound,
    Source,
    SourceError,
    SourceTimeout,
    parse_host_url,
)
from sharecrawl.jobs.crawl_rules import filtered, load_rules
from sharecrawl.jobs.hinted_walk import WholeScan, hinted_walk
from sharecrawl.jobs.membership import PartitionKey, Ranges, share_root
from sharecrawl.jobs.subtree_hash import walk_hash
from sharecrawl.jobs.walk import SharedRoots, WalkStats, listing_table, walk_partition


def _progress(event: tuple) -> None:
    """Sends a worker's progress event: none unless a fetch worker sets one (set_progress)."""


def set_progress(send: Callable[[tuple], None]) -> None:
    global _progress
    _progress = send


@contextmanager
def cycle_collection(on: bool) -> Iterator[None]:
    """Cycle collection on or off meanwhile. Off over a scan: its walk makes tuples and strings
    by the million, none in a cycle, which each collection would only traverse again (a fifth
    of a fetch's CPU), and over the whole scan, as the first collection after the walk would
    traverse the entries still held (6 % of an unchanged round's fetch). On for its tag reads,
    whose parsers and SMB reads may leave cycles, as many as the files a first scan reads."""
    was_on = gc.isenabled()
    (gc.enable if on else gc.disable)()
    try:
        yield
    finally:
        (gc.enable if was_on else gc.disable)()


@dataclass
class HostJob:
    crawl_dir: str
    round: int
    version: int  # the crawldb version this round reads
    host: str  # the host's key in tables
    url: str  # hosts.url: the host URL (with its share when it names one), no password
    shares: list[str]  # the shares to crawl; empty: every share the host offers
    due: list[dict]  # fetchlist rows of this host (partition_id None: discover shares)
    known: list[dict]  # every partition of the host: partition_id, share, root, lo, hi, hash
    timeout_s: float = 30.0


@dataclass
class HostResult:
    host: str
    summary: str  # '3 partitions (2 changed, 1 unchanged), 106 entries, 1 tag read; why it stopped'


class _HostFetch:
    def __init__(self, job: HostJob) -> None:
        self.job = job
        self.url_error: SourceError | None = None
        try:
            self.host = replace(parse_host_url(job.url), host=job.host)  # a range's host
        except ConfigError as e:  # a URL this parser no longer reads: the host fails alone
            self.host = HostURL("smb", job.host, "", None, None, None)
            self.url_error = SourceError(str(e))
        self.crawl = CrawlDir(job.crawl_dir)
        self.listing: list[pa.Table] = []
        self.media: list[dict] = []
        self.log: list[dict] = []
        self.clamped: set[tuple[str, str]] = set()  # (share, path) of entries clamped
        # why each due partition is scanned, and how (fetchlist rows by partition_id)
        self.plans = {r["partition_id"]: r for r in job.due if r["partition_id"]}
        self.known = {
            r["partition_id"]: PartitionKey(self.host.host, r["share"], r["root"], r["lo"], r["hi"])
            for r in job.known
        }

    @cached_property
    def stored(self) -> StoredHost:
        """The host's stored rows, read only for the partitions that changed."""
        version = self.job.version
        return StoredHost(self.crawl.hosts(version) if version else None, self.host.host)

    def stored_entries(self, partition_id: str) -> list[tuple[str, Entry]]:
        """The partition's stored rows as (path, entry)."""
        rows = self.stored.rows("files", {partition_id})
        columns = [rows[c].to_pylist() for c in ("path", "name", "is_dir", "size")]
        mtimes = rows["mtime"].cast(pa.int64()).to_pylist()
        return [
            (path, Entry(name, is_dir, size, mtime))
            for path, name, is_dir, size, mtime in zip(*columns, mtimes, strict=True)
        ]

    def scan(
        self,
        source: Source,
        key: PartitionKey,
        stored_hash: str | None,
        ranges: Ranges,
        shared: SharedRoots | None = None,
    ) -> None:
        started = time.time()
        stats = WalkStats()
        plan = self.plans.get(key.id, {})
        hinted = plan.get("hinted_paths")
        counted = started  # a hinted scan counts from when its hints were read (later ones wait)
        if hinted and plan.get("hints_as_of") is not None:
            counted = min(started, plan["hints_as_of"].timestamp())
        log = self._log_row(key.id, key.share, datetime.fromtimestamp(counted, UTC))
        entries: list[tuple[str, Entry]] | None = None
        try:
            if hinted:  # around its hinted paths when it can (jobs.hinted_walk)
                try:
                    stored = self.stored_entries(key.id)
                    entries = hinted_walk(source, key, ranges, stored, stored_hash, hinted, stats)
                except WholeScan:
                    stats.folders_listed = 0  # what it listed is listed again
            if entries is None:
                entries = list(walk_partition(source, key, ranges, stats, shared))
            if stats.listed_at is not None and stats.listed_at < counted:
                # a folder listed for it by an earlier walk: the scan stands for that moment
                log["started"] = datetime.fromtimestamp(stats.listed_at, UTC)
        except ShareNotFound:
            raise  # no partition row: the host's row says it (run)
        except NotFound:
            log.update(status="gone", error=f"{key.share}/{key.root}: no longer there")
        except SourceError as e:
            log.update(status=_status(e), error=str(e), host_status=e.host_status)
            if isinstance(e, AccessDenied) and not key.is_share_root:
                log.update(n_denied=1, denied=[key.root])  # its rows stay: nothing is replaced
            self._finish(log, started, stats)
            raise
        else:
            digest = walk_hash(entries)
            # Denied folders are listed without their children: Update keeps their stored
            # rows, and the hash (of what could be read) stays the same while they stay shut.
            log.update(
                hash=digest, n_entries=len(entries), n_denied=len(stats.denied), denied=stats.denied
            )
            if self.clamped:  # entries kept with a value clamped or marked (crawl_io.checked)
                log["n_clamped"] = sum((key.share, p) in self.clamped for p, _ in entries)
            if digest == stored_hash:
                log["status"] = "unchanged"  # nothing more is read or written for it
            else:
                log["status"] = "new" if stored_hash is None else "changed"
                listed = time.time()
                log["listing_s"] = listed - started
                self.listing.append(listing_table(key, entries))
                with cycle_collection(on=True):
                    self._read_new_tags(source, key, entries, log)
                log["tags_s"] = time.time() - listed
        self._finish(log, started, stats)

    def _finish(self, log: dict, started: float, stats: WalkStats) -> None:
        log["duration_s"] = time.time() - started
        if not log["listing_s"]:
            log["listing_s"] = log["duration_s"]
        log["n_folders"] = stats.folders_listed
        self.log.append(log)
        counts = {"entries": log["n_entries"], "tags": log["n_tags_read"]}
        _progress((self.host.host, "partition", counts))

    def _read_new_tags(
        self, source: Source, key: PartitionKey, entries: list[tuple[str, Entry]], log: dict
    ) -> None:
        from sharecrawl.crawl_io.tags import read_tags  # mutagen loads only in fetch workers

        old = {path: (e.size, e.mtime_us) for path, e in self.stored_entries(key.id)}
        for path, entry in entries:
            if entry.is_dir or not media_kind(entry.name):
                continue
            if old.get(path) == (entry.size, entry.mtime_us):
                continue  # unchanged file: its stored tags stay
            # a file moved within the host keeps its stored tags
            moved = self.stored.tags_by_file().get((entry.name, entry.size, entry.mtime_us))
            if moved is not None:
                tags = {k: v for k, v in moved.items() if k in MEDIA.names}
            else:
                f = RangeFile(source, key.share, path, entry.size)
                tags = read_tags(f, path)  # folders help parse video names
                log["n_tags_read"] += 1
                log["bytes_read"] += f.bytes_read
                if isinstance(f.error, HostUnreachable | SourceTimeout):
                    raise f.error  # read_tags never raises, but a lost host ends the host
            tags.update(
                host=key.host,
                share=key.share,
                path=path,
                size=entry.size,
                mtime=mtime_datetime(entry.mtime_us),
                partition_id=key.id,
                tagged_at=datetime.now(UTC),
            )
            self.media.append(tags)

    def due_keys(self) -> list[PartitionKey]:
        """The known partitions this round is to scan (without the shares to discover)."""
        due = (r["partition_id"] for r in self.job.due)
        return [self.known[pid] for pid in due if pid in self.known]

    def run(self) -> HostResult:
        job, host, known = self.job, self.host, self.known
        stored = {row["partition_id"]: row["hash"] for row in job.known}
        due = self.due_keys()
        rules = load_rules(self.crawl.segment_dir(job.round) / "rules.txt")
        source, error = None, None
        try:
            if self.url_error:
                raise self.url_error
            # opened for every share: a named one that is missing is reported with those it
            # has; excluded shares and folders are never listed (hashes cover what is crawled)
            every = replace(host, share=None)
            opened = CheckedSource(open_source(every, timeout_s=job.timeout_s), job.shares)
            source = filtered(opened, rules, host.host)
            self.clamped = opened.changed
            # a new share gets a root partition, scanned at once (a due partition of a
            # vanished share finds its root gone when scanned)
            roots = {k.share for k in known.values() if k.is_share_root}
            shares = job.shares or source.shares()
            new = [share_root(host.host, s) for s in shares if s not in roots]
            known.update((key.id, key) for key in new)
            due = new + due
        except SourceError as e:
            if source is not None:
                source.close()
            self._failed(e, None, *due)
            return self._write(str(e))
        _progress((host.host, "due", {"partitions": len(due)}))  # discover rows became shares
        shared = SharedRoots({(k.share, k.root) for k in due if not k.is_share_root})
        try:
            ranges_by_share: dict[str, Ranges] = {}
            missing: set[str] = set()  # shares named in the hosts file that are not there
            for i, key in enumerate(due):
                if key.share in missing:
                    continue  # its partitions keep their rows; the host row says why
                ranges = ranges_by_share.setdefault(
                    key.share, Ranges(k for k in known.values() if k.share == key.share)
                )
                try:
                    with cycle_collection(on=False):
                        self.scan(source, key, stored.get(key.id), ranges, shared)
                except SourceError as e:
                    if isinstance(e, ShareNotFound):
                        missing.add(key.share)
                        self._failed(e, None)
                    if isinstance(e, HostUnreachable | SourceTimeout):
                        self._failed(e, *due[i + 1 :])
                        error = str(e)
                        break
        finally:
            source.close()
        return self._write(error)

    def _failed(self, error: SourceError, *keys: PartitionKey | None) -> None:
        """Log `keys` not scanned; None: the host's row (it did not open, or a share is missing)."""
        failed = {"status": _status(error), "error": str(error), "host_status": error.host_status}
        for key in keys:
            row = self._log_row(key and key.id, key and key.share, datetime.now(UTC))
            self.log.append(row | failed | {"duration_s": 0.0})

    def _log_row(self, partition_id: str | None, share: str | None, started: datetime) -> dict:
        """A fetchlog row of nothing done yet; why the partition was due, from its plan."""
        plan = self.plans.get(partition_id, {}) if partition_id else {}
        counts = ("n_entries", "n_tags_read", "bytes_read", "n_folders", "n_denied", "n_clamped")
        return {
            **dict.fromkeys(FETCHLOG.names),  # hash, error, host_status: none yet
            **dict.fromkeys(counts, 0),
            **{"round": self.job.round, "partition_id": partition_id, "host": self.host.host},
            **{"share": share, "started": started, "listing_s": 0.0, "tags_s": 0.0, "denied": []},
            "reason": plan.get("reason", "new") if partition_id else None,
            "watched": plan.get("watched"),
            "worker": f"{socket.gethostname()}:{os.getpid()}",
        }

    def _write(self, error: str | None = None) -> HostResult:
        seg = self.crawl.segment_dir(self.job.round)
        name = host_file(self.host.host)
        # An unchanged host (most, most rounds) has no listing or tags: no part, which reads
        # as empty; a part left by an attempt of this round that was killed goes.
        listing = pa.concat_tables(self.listing) if self.listing else None
        media = pa.Table.from_pylist(self.media, MEDIA) if self.media else None
        for folder, table in (("listing", listing), ("media", media)):
            if table is None:
                (seg / folder / name).unlink(missing_ok=True)
            else:
                write_parquet(table, seg / folder / name)
        write_parquet(pa.Table.from_pylist(self.log, FETCHLOG), seg / "fetchlog" / name)
        log = self.log  # and the host's line in the progress: what it did, why it stopped
        statuses = Counter(r["status"] for r in log)
        counts = ", ".join(f"{n} {status}" for status, n in sorted(statuses.items()))
        scanned = f"{plural(len(log), 'partition')} ({counts})" if log else "no partitions"
        entries = plural(sum(r["n_entries"] for r in log), "entry", "entries")
        tags = plural(sum(r["n_tags_read"] for r in log), "tag")
        why = "; " + readable_text(error.removeprefix(f"{self.host.host}: ")) if error else ""
        return HostResult(self.host.host, f"{scanned}, {entries}, {tags} read{why}")


def _status(error: SourceError) -> str:
    """A fetchlog status: "timeout" or "unreachable" for a lost host, else "error"."""
    return error.reason if isinstance(error, HostUnreachable | SourceTimeout) else "error"


def fetch_host(job: HostJob) -> HostResult:
    return _HostFetch(job).run()


def host_done(crawl_dir: str | Path, round_: int, host: str) -> bool:
    return (CrawlDir(crawl_dir).segment_dir(round_) / "fetchlog" / host_file(host)).exists()


def host_lost(job: HostJob, why: str) -> HostResult:
    """Record `job`'s host as not fetched this round, for `why` (its worker died or failed):
    its fetchlog part says so for the host and each due partition, whose stored rows stay,
    and any part the worker left goes. Its next round fetches it again."""
    fetch = _HostFetch(job)
    fetch._failed(SourceError(why), None, *fetch.due_keys())
    return fetch._write(why)

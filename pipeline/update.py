"""Update: fold a fetched segment into crawldb version N-1 and publish version N.

Runs the subtree-hash mrjob job over the segment's listings (its hashes must equal the ones
the fetchers streamed), rewrites the files and media of the hosts the round touched,
hard-links the others' parts unchanged, updates partitions (scan history, rate), hosts and
prefix statistics, and hands the finished version to pipeline.publish, which writes its
manifest and the automatic rules, renames it into place and moves CURRENT.

A damaged or missing part is never linked forward: its host's rows are left out and its
partitions' hashes cleared, so a round lists them again as new (Generate puts them first)
while their scan history stays. A damaged state table (hosts, partitions) stops the round
(crawl_io.crawldir.CrawlDamaged) instead of starting history over.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from pathlib import Path

import luigi
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from crawl_io.crawldir import (
    CrawlDamaged,
    CrawlDir,
    host_file,
    read_parquet,
    write_parquet,
)
from crawl_io.duck import cursor
from crawl_io.schema import FETCHLOG, FILES, HOSTS, LISTING, MEDIA, PARTITIONS, PREFIX_STATS
from crawl_io.sources import CONFIG_STATUSES, HOST_OK, UNREACHABLE_STATUSES
from jobs.bstar_split import Limits
from jobs.crawl_rules import load_rules
from jobs.membership import share_root
from jobs.mr_prefix_stats import round_prefix_stats
from jobs.mr_subtree_hash import MRSubtreeHash
from jobs.runner import run_job, write_manifest
from jobs.subtree_hash import folder_summaries, summarize
from pipeline import repartition
from pipeline.fetch import Fetch
from pipeline.inject import Inject
from pipeline.publish import VersionBuild
from pipeline.scheduling.history import Histories
from pipeline.scheduling.rates import DEFAULT_WINDOW_S
from pipeline.settings import sharecrawl
from pipeline.targets import PublishedVersion

REPLACED = ("changed", "new")
LOST = ("unreachable", "timeout")
EWMA = 0.3  # weight of this round's measurement in a host's cost estimates

logger = logging.getLogger("sharecrawl")  # `log` is the round's fetchlog in this module


def _ts(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def listing_manifest(seg: Path) -> Path | None:
    """The manifest of the round's non-empty listing parts, the jobs' input."""
    parts = [p for p in sorted((seg / "listing").glob("*.parquet")) if pq.read_metadata(p).num_rows]
    return write_manifest(parts, seg / "jobs" / "listing.manifest") if parts else None


def merged_files(old: pa.Table, listing: pa.Table, log: pa.Table, drop: set[str]) -> pa.Table:
    """The host's rows now: stored rows of partitions not rescanned, plus the new listings
    (first_seen kept from the stored row of the same path). A folder whose listing was
    refused keeps its stored rows below it: a folder we may not read is not a deleted one."""
    con = cursor()
    con.register("old", old)
    con.register("listing", listing)
    con.register("log", log)
    sql = """
        WITH denied AS (
            SELECT DISTINCT partition_id, share, unnest(denied) || '/' AS below FROM log
            WHERE status IN ('changed', 'new') AND coalesce(n_denied, 0) > 0
        )
        SELECT l.*, coalesce(o.first_seen, f.started) AS first_seen, f.started AS last_seen
        FROM listing l JOIN log f USING (partition_id)
        LEFT JOIN old o ON o.share = l.share AND o.path = l.path AND o.is_dir = l.is_dir
        UNION ALL BY NAME
        SELECT * FROM old WHERE NOT list_contains($drop, partition_id)
        UNION ALL BY NAME
        SELECT * FROM old o WHERE list_contains($drop, o.partition_id) AND EXISTS (
            SELECT 1 FROM denied d WHERE d.partition_id = o.partition_id
                AND d.share = o.share AND starts_with(o.path, d.below))
        ORDER BY share, path
    """
    table = con.sql(sql, params={"drop": sorted(drop)}).to_arrow_table()
    con.close()
    return table.select(FILES.names).cast(FILES)


def denied_hashes(files: pa.Table, log: pa.Table) -> dict[str, str]:
    """partition_id -> hash without the kept rows below this round's denied folders, for the
    partitions holding such rows: what the next walk hashes while those folders stay shut
    (re-partitioning recomputes hashes from the rows, which include the kept ones)."""
    con = cursor()
    con.register("files", files)
    con.register("log", log)
    hidden = """
        WITH below AS (
            SELECT DISTINCT share, unnest(denied) || '/' AS prefix FROM log
            WHERE coalesce(n_denied, 0) > 0
        )
        SELECT DISTINCT f.share, f.path, f.partition_id FROM files f
        JOIN below b ON f.share = b.share AND starts_with(f.path, b.prefix)
    """
    affected = [pid for (pid,) in con.sql(f"SELECT DISTINCT partition_id FROM ({hidden})")
                .fetchall()]  # fmt: skip
    visible = con.sql(f"""
        WITH hidden AS ({hidden})
        SELECT f.* FROM files f ANTI JOIN hidden h ON f.share = h.share AND f.path = h.path
        WHERE f.partition_id IN (SELECT partition_id FROM hidden)
    """).to_arrow_table()
    con.close()
    summaries = summarize(visible)
    return {pid: summaries.get(pid, repartition.EMPTY)["hash"] for pid in affected}


def merged_media(old: pa.Table, fetched: pa.Table, files: pa.Table) -> pa.Table:
    """Stored tags of files still present unchanged, plus the tags read this round; each
    with its file's partition."""
    con = cursor()
    for name, table in (("old", old), ("fetched", fetched), ("files", files)):
        con.register(name, table)
    sql = """
        WITH kept AS (
            SELECT o.* FROM old o
            JOIN files f ON f.share = o.share AND f.path = o.path AND f.size = o.size
                        AND f.mtime = o.mtime AND NOT f.is_dir
            ANTI JOIN fetched n ON n.share = o.share AND n.path = o.path
            UNION ALL BY NAME
            SELECT * FROM fetched
        )
        SELECT k.* REPLACE (f.partition_id AS partition_id) FROM kept k
        JOIN files f ON f.share = k.share AND f.path = k.path
        ORDER BY share, path
    """
    table = con.sql(sql).to_arrow_table()
    con.close()
    return table.select(MEDIA.names).cast(MEDIA)


def partitions_table(partitions: list[dict], histories: Histories) -> pa.Table:
    """The rows, each with its history (none for partitions made by this round's splits)."""
    table = pa.Table.from_pylist(
        [{**p, "history": None} for p in partitions], PARTITIONS
    )  # fmt: skip
    column = histories.updated([p["partition_id"] for p in partitions]).column()
    return table.set_column(table.schema.get_field_index("history"), "history", column)


def updated_partitions(
    old: pa.Table, log: list[dict], summaries: dict[str, dict], listed_hosts: set[str],
    now: float,
) -> tuple[list[dict], set[str], Histories]:  # fmt: skip
    """Partitions after the round (their `history` left out), the ids of those removed (gone
    or retired), and the kept ones' scan histories over the rate window."""
    rows = old.drop_columns(["history"]).to_pylist()
    parts = {p["partition_id"]: p for p in rows if p["host"] in listed_hosts}
    removed = {p["partition_id"] for p in rows} - set(parts)
    scans: dict[str, tuple[int, bool]] = {}  # partition_id -> this round's history event
    for row in log:
        pid, status, t = row["partition_id"], row["status"], row["started"]
        if pid is None:
            continue  # a host row: the host could not be opened (see updated_hosts)
        part = parts.get(pid)
        if part is None:
            key = share_root(row["host"], row["share"])
            if key.id != pid or status not in REPLACED:
                continue
            part = parts[pid] = {
                **dict.fromkeys(PARTITIONS.names), "partition_id": pid, "host": key.host,
                "share": key.share, "root": key.root, "first_seen": t, "n_scans": 0,
                "n_changes": 0, "history": [],
            }  # fmt: skip
        if status == "gone":
            removed.add(pid)
            continue
        part["status"] = "ok" if status in ("unchanged", *REPLACED) else status
        if status in LOST or status == "error":
            continue
        if part["n_scans"]:  # the first scan found the partition, not a change
            scans[pid] = (round(t.timestamp() * 1e6), status == "changed", bool(row.get("watched")))
        part["n_scans"] += 1
        part["last_scan"] = t
        if status in REPLACED:
            summary = summaries.get(pid, {"n_folders": 0, "n_files": 0, "n_media": 0, "bytes": 0,
                                          "hash": row["hash"]})  # fmt: skip
            if summary["hash"] != row["hash"]:
                raise RuntimeError(f"partition {pid}: job hash differs from the fetcher's")
            part.update(
                {k: summary[k] for k in ("hash", "n_folders", "n_files", "n_media", "bytes")}
            )
            if status == "changed" or part["last_change"] is None:
                part["last_change"] = t  # a partition listed again after damage is not new
            part["n_changes"] += status == "changed"
    # a removed partition takes the partitions under it along
    children: dict[str | None, list[str]] = {}
    for pid, part in parts.items():
        children.setdefault(part["parent_id"], []).append(pid)
    stack = [pid for pid in removed]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in removed:
                removed.add(child)
                stack.append(child)
    kept = [part for pid, part in parts.items() if pid not in removed]
    histories = Histories.of(old).updated(
        [p["partition_id"] for p in kept], scans, since_us=round((now - DEFAULT_WINDOW_S) * 1e6)
    )
    for part, rate in zip(kept, histories.rates_per_s(now), strict=True):
        part["rate_per_h"] = 3600 * float(rate)
    return kept, removed, histories


def host_outcome(checked: dict, mine: list[dict], prev: dict) -> tuple[str, str | None]:
    """A host's `hosts.status` and `last_error` after the round, from its liveness check
    (`checked`, an Inject row), its fetchlog rows and its previous hosts row.

    A host fails when it is lost mid-round, cannot be opened (a host row without a
    partition), or every scan of a share failed (a share refused, a wrong password). A
    folder refused below a share's root is no failure of the host: its rows are kept."""
    if not checked["online"]:
        return checked.get("status") or "offline", checked["error"]
    scans = [r for r in mine if not (r["status"] == "error" and r.get("n_denied"))]
    failed = [r for r in scans if r["status"] in (*LOST, "error")]
    lost = next((r for r in failed if r["status"] in LOST or r["partition_id"] is None), None)
    if lost is None and failed and len(failed) == len(scans):
        lost = failed[0]
    if lost is not None:
        by_status = {"timeout": "timed_out", "unreachable": "offline"}
        return lost.get("host_status") or by_status.get(lost["status"], "error"), lost["error"]
    if not mine and prev.get("status") in CONFIG_STATUSES:
        return prev["status"], prev.get("last_error")  # not tried this round: it still stands
    return HOST_OK, None


def updated_hosts(
    old: pa.Table, inject: list[dict], log: list[dict], defaults: tuple[float, float]
) -> list[dict]:
    previous = {h["host"]: h for h in old.to_pylist()}
    rows = []
    for h in inject:
        mine = [r for r in log if r["host"] == h["host"]]
        prev = previous.get(h["host"], {})
        status, error = host_outcome(h, mine, prev)
        # Hosts that answer stay online even when they refuse us (a wrong password, a share
        # closed to us): their files stay searchable for those who may read them.
        online = status not in UNREACHABLE_STATUSES
        row = {
            "host": h["host"], "url": h["url"], "online": online, "last_error": error,
            "last_seen": h["checked_at"] if online else prev.get("last_seen"),
            "first_seen": prev.get("first_seen") or h["checked_at"],
            "last_check": h["checked_at"], "status": status,
        }  # fmt: skip
        for column, spent, count, default in (
            ("list_s_per_folder", "listing_s", "n_folders", defaults[0]),
            ("tag_s_per_file", "tags_s", "n_tags_read", defaults[1]),
        ):
            n = sum(r[count] for r in mine)
            before = prev.get(column) or default
            row[column] = (
                before if not n else (1 - EWMA) * before + EWMA * sum(r[spent] for r in mine) / n
            )
        rows.append(row)
    return rows


class Update(luigi.Task):
    crawl_dir = luigi.Parameter()
    round = luigi.IntParameter()

    def requires(self) -> dict[str, luigi.Task]:
        return {
            "fetch": Fetch(crawl_dir=self.crawl_dir, round=self.round),
            "inject": Inject(crawl_dir=self.crawl_dir, round=self.round),
        }

    def output(self) -> PublishedVersion:
        return PublishedVersion(self.crawl_dir, self.round)

    def run(self) -> None:
        settings = sharecrawl()
        crawl = CrawlDir(self.crawl_dir)
        crawl.drop_unpublished()
        prev, seg = self.round - 1, crawl.segment_dir(self.round)
        now = time.time()
        inject = pq.read_table(self.input()["inject"].path).to_pylist()
        log_table = pq.read_table(self.input()["fetch"].path, schema=FETCHLOG)
        log = log_table.to_pylist()
        manifest = listing_manifest(seg)
        summaries = dict(run_job(MRSubtreeHash, manifest, settings.runner)) if manifest else {}

        hosts = updated_hosts(crawl.read(prev, "hosts"), inject, log,
                              (settings.list_s_per_folder, settings.tag_s_per_file))  # fmt: skip
        listed = {h["host"] for h in hosts}
        partitions, removed, histories = updated_partitions(
            crawl.read(prev, "partitions"), log, summaries, listed, now
        )
        replaced = {r["partition_id"] for r in log if r["status"] in REPLACED}
        touched = {r["host"] for r in log if r["partition_id"] in replaced | removed}
        limits = Limits(settings.partition_max_seconds, settings.partition_max_bytes)
        split_plan = repartition.plan(manifest, partitions, hosts, replaced & {
            p["partition_id"] for p in partitions}, limits, settings.runner)  # fmt: skip
        reshaped = repartition.apply(split_plan, partitions, datetime.fromtimestamp(now, UTC))
        touched |= reshaped
        rules = load_rules(seg / "rules.txt")
        if rules.digest != load_rules(crawl.segment_dir(prev) / "rules.txt").digest:
            touched = set(listed)  # new rules: excluded rows leave every host's parts

        build = VersionBuild(crawl, self.round)
        out = build.begin()
        by_host: dict[str, list[dict]] = {}
        for p in partitions:
            by_host.setdefault(p["host"], []).append(p)
        unlinked: set[str] = set()
        for host in sorted(listed):
            if host not in touched:
                if not build.link_host(host):
                    unlinked.add(host)
                continue
            part = host_file(host)
            files = merged_files(
                crawl.read_host(prev, "files", host), read_parquet(seg / "listing" / part, LISTING),
                log_table.filter(pc.equal(log_table["host"], host)), replaced | removed,
            )  # fmt: skip
            if host in reshaped:
                files, sizes = repartition.reassign(files, by_host.get(host, []))
                shut = denied_hashes(files, log_table.filter(pc.equal(log_table["host"], host)))
                for p in by_host.get(host, []):
                    p.update(sizes[p["partition_id"]])
                    p["hash"] = shut.get(p["partition_id"], p["hash"])  # as the walk sees it
            files = rules.drop_excluded(files)
            media = merged_media(crawl.read_host(prev, "media", host),
                                 read_parquet(seg / "media" / part, MEDIA), files)  # fmt: skip
            write_parquet(files, out / "files" / part)
            write_parquet(media, out / "media" / part)
            write_parquet(folder_summaries(files), out / "folders" / part)
        # hosts whose old rows were lost to a damaged part (found by a stat, or on reading
        # a touched host's parts in full): what this round did not list again is listed
        # as new by the next one
        lost = (crawl.damaged_hosts(prev) if prev else set()) | unlinked
        for p in partitions:
            if p["host"] in lost and p["partition_id"] not in replaced:
                p["hash"] = None
        host_rows = {h["host"]: h for h in hosts}
        for p in partitions:  # the scheduler's cost: listing every folder, at the host's pace
            pace = host_rows[p["host"]]["list_s_per_folder"]
            p["est_scan_s"] = max(p["n_folders"] or 0, 1) * pace
        write_parquet(pa.Table.from_pylist(hosts, HOSTS), out / "hosts.parquet")
        write_parquet(partitions_table(partitions, histories), out / "partitions.parquet")
        redo_stats = touched | lost  # a host whose rows were lost keeps no stale statistics
        try:
            old_stats = crawl.read(prev, "prefix_stats")
        except CrawlDamaged as e:  # derived from the files parts: computed again in full
            logger.warning("sharecrawl: %s; prefix statistics are computed again", e.what)
            old_stats, redo_stats = PREFIX_STATS.empty_table(), set(listed)
        stats = round_prefix_stats(
            round_=self.round, version_dir=out, prev_dir=crawl.version_dir(prev) if prev else None,
            old_stats=old_stats, listed=listed, touched=redo_stats, damaged=lost,
            runner=settings.runner, depth=settings.stats_depth,
            min_entries=settings.stats_min_entries, stats_every=settings.stats_every,
            workdir=seg / "jobs",
        )  # fmt: skip
        write_parquet(stats, out / "prefix_stats.parquet")
        build.publish(stats)

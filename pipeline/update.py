"""Update (docs/DESIGN.md): fold a fetched segment into crawldb version N-1 and publish version N.
A damaged part's partitions get no hash (listed again as new, their history kept); a damaged
state table stops the round (CrawlDamaged)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import luigi
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from mrjob.step import StepFailedException

from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir, host_file, read_parquet
from sharecrawl.crawl_io.crawldb.disk_full import is_disk_full
from sharecrawl.crawl_io.crawldb.history import prune_changes
from sharecrawl.crawl_io.crawldb.media_changes import ChangesRecord
from sharecrawl.crawl_io.crawldb.scrub import ScrubRecord, mend_version
from sharecrawl.crawl_io.schema import FETCHLOG, HOSTS, LISTING, MEDIA, PARTITIONS
from sharecrawl.crawl_io.sources import CONFIG_STATUSES, HOST_OK, UNREACHABLE_STATUSES
from sharecrawl.jobs.crawl_rules import load_rules
from sharecrawl.jobs.membership import descendants, share_root
from sharecrawl.jobs.mr_listing import run_listing_jobs, split_state
from sharecrawl.jobs.mr_prefix_stats import round_prefix_stats
from sharecrawl.jobs.prefix_stats import is_complete_round
from sharecrawl.jobs.scan_cost import Limits, listing_seconds
from sharecrawl.pipeline import repartition
from sharecrawl.pipeline.discovery import IDENTITY_COLUMNS
from sharecrawl.pipeline.fetch import Fetch
from sharecrawl.pipeline.host_rewrite import HostChange, rewrite_host
from sharecrawl.pipeline.inject import Inject
from sharecrawl.pipeline.publish import VersionBuild
from sharecrawl.pipeline.scheduling.history import Histories
from sharecrawl.pipeline.scheduling.rates import DEFAULT_WINDOW_S
from sharecrawl.pipeline.settings import SettingsParameter, job_runner
from sharecrawl.pipeline.stats_parts import read_old_stats, write_stats
from sharecrawl.pipeline.targets import PublishedVersion

REPLACED = ("changed", "new")
# how a read of a damaged part fails (a job's task: StepFailedException)
READ_FAILURES = (duckdb.Error, pa.ArrowException, OSError, StepFailedException)
LOST = ("unreachable", "timeout")
EWMA = 0.3  # weight of this round's measurement in a host's cost estimates


def listing_parts(seg: Path) -> list[Path]:
    """The round's non-empty listing parts, the listing jobs' input."""
    return [p for p in sorted((seg / "listing").glob("*.parquet")) if pq.read_metadata(p).num_rows]


def updated_partitions(
    old: pa.Table, log: list[dict], summaries: dict[str, dict], listed_hosts: set[str], now: float
) -> tuple[list[dict], set[str], Histories]:
    """Partitions after the round (their `history` left out), the ids of those removed (gone
    or retired), and the kept ones' scan histories over the rate window."""
    rows = old.drop_columns(["history"]).to_pylist()
    parts = {p["partition_id"]: p for p in rows if p["host"] in listed_hosts}
    removed = {p["partition_id"] for p in rows} - set(parts)
    scans: dict[str, tuple[int, bool, bool]] = {}  # partition_id -> this round's history event
    for row in log:
        pid, status, t = row["partition_id"], row["status"], row["started"]
        if pid is None:
            continue  # a host row: the host could not be opened (see updated_hosts)
        part = parts.get(pid)
        if part is None:
            key = share_root(row["host"], row["share"])
            if key.id != pid or status not in REPLACED:
                continue
            part = parts[pid] = dict.fromkeys(PARTITIONS.names)
            part.update(partition_id=pid, host=key.host, share=key.share, root=key.root)
            part.update(first_seen=t, n_scans=0, n_changes=0, history=[])
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
            summary = summaries.get(pid, {**repartition.EMPTY, "hash": row["hash"]})
            if summary["hash"] != row["hash"]:
                raise RuntimeError(f"partition {pid}: job hash differs from the fetcher's")
            part.update({k: summary[k] for k in repartition.EMPTY})
            if status == "changed" or part["last_change"] is None:
                part["last_change"] = t  # a partition listed again after damage is not new
            part["n_changes"] += status == "changed"
    # a removed partition takes the partitions under it along
    removed = descendants(removed, {pid: part["parent_id"] for pid, part in parts.items()})
    kept = [part for pid, part in parts.items() if pid not in removed]
    histories = Histories.of(old).updated(
        [p["partition_id"] for p in kept], scans, since_us=round((now - DEFAULT_WINDOW_S) * 1e6)
    )
    for part, rate in zip(kept, histories.rates_per_s(now), strict=True):
        part["rate_per_h"] = 3600 * float(rate)
    return kept, removed, histories


def host_outcome(checked: dict, mine: list[dict], prev: dict) -> tuple[str, str | None]:
    """A host's `hosts.status` and `last_error` from its Inject row, fetchlog rows and
    previous hosts row. It fails when lost mid-round, not opened (a host row without a
    partition), or when every scan failed; a folder refused below a share's root is no
    failure (its rows are kept)."""
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
            "host": h["host"],
            "url": h["url"],
            "online": online,
            "last_error": error,
            "last_seen": h["checked_at"] if online else prev.get("last_seen"),
            "first_seen": min(prev.get("first_seen") or h["checked_at"], h["checked_at"]),
            "last_check": h["checked_at"],
            "status": status,
            # what it said about itself; kept from before while it says nothing
            **{c: prev.get(c) if h.get(c) is None else h[c] for c in IDENTITY_COLUMNS},
        }
        seen = prev.get("addresses_seen") or []
        row["addresses_seen"] = seen + [a for a in [h.get("address")] if a and a not in seen]
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
    settings = SettingsParameter()

    def requires(self) -> dict[str, luigi.Task]:
        where = {"crawl_dir": self.crawl_dir, "round": self.round, "settings": self.settings}
        return {"fetch": Fetch(**where), "inject": Inject(**where)}

    def output(self) -> PublishedVersion:
        return PublishedVersion(self.crawl_dir, self.round)

    def run(self) -> None:
        try:
            self.update()
        except READ_FAILURES as error:
            # a linked part of version N-1 that does not read, which the scrub had not reached:
            # N-1 mended as `check --repair` mends it, then the update again from it
            crawl = CrawlDir(self.crawl_dir)
            if is_disk_full(error) or self.round == 1 or crawl.current() >= self.round:
                raise
            mended = mend_version(crawl, self.round - 1)
            if mended is None:
                raise
            self.update(mended)

    def update(self, mended: ScrubRecord | None = None) -> None:
        """Build version N from N-1 and the segment, and publish it."""
        settings = self.settings
        crawl = CrawlDir(self.crawl_dir)
        crawl.drop_unpublished()
        prev, seg = self.round - 1, crawl.segment_dir(self.round)
        now = time.time()
        inject = pq.read_table(self.input()["inject"].path).to_pylist()
        log_table = pq.read_table(self.input()["fetch"].path, schema=FETCHLOG)
        log = log_table.to_pylist()
        runner = job_runner(settings, crawl.root)

        paces = (settings.list_s_per_folder, settings.tag_s_per_file)
        old_hosts = crawl.read(prev, "hosts")
        hosts = updated_hosts(old_hosts, inject, log, paces)
        listed = {h["host"] for h in hosts}
        old_partitions = crawl.read(prev, "partitions")
        replaced = {r["partition_id"] for r in log if r["status"] in REPLACED}
        # the listing jobs (hashes and the split's plan) in one runner start; the plan reads
        # the partitions after the round, whose counts aside from the hashes' are known now
        before, _, _ = updated_partitions(old_partitions, log, {}, listed, now)
        limits = Limits(settings.partition_max_seconds, settings.partition_max_bytes)
        rescanned = replaced & {p["partition_id"] for p in before}
        state = split_state(before, hosts, rescanned, limits)
        listing = run_listing_jobs(listing_parts(seg), seg / "jobs", state, runner)
        partitions, removed, histories = updated_partitions(
            old_partitions, log, listing.summaries, listed, now
        )
        reshaped = repartition.apply(listing.plan, partitions, datetime.fromtimestamp(now, UTC))
        touched = {r["host"] for r in log if r["partition_id"] in replaced | removed} | reshaped
        rules = load_rules(seg / "rules.txt")
        rules_changed = rules.digest != load_rules(crawl.segment_dir(prev) / "rules.txt").digest
        if rules_changed:
            touched = set(listed)  # new rules: excluded rows leave every host's parts

        build = VersionBuild(crawl, self.round)
        out = build.begin()
        by_host: dict[str, list[dict]] = {}
        for p in partitions:
            by_host.setdefault(p["host"], []).append(p)
        stored = crawl.hosts(prev) if prev else None
        lost: set[str] = set()  # partitions whose stored rows a damaged part took
        complete = is_complete_round(self.round, settings.stats_every)  # every host's stats
        media_changes = ChangesRecord()  # for the search index: what it need not compare
        for host in sorted(listed):
            if host not in touched:
                build.link_host(host)  # a group that does not link is found lost below
                continue
            change = HostChange(
                host=host,
                listing=read_parquet(seg / "listing" / host_file(host), LISTING),
                fetched=read_parquet(seg / "media" / host_file(host), MEDIA),
                log=log_table.filter(pc.equal(log_table["host"], host)),
                drop=replaced | removed,
                partitions=by_host.get(host, []),
                reshaped=host in reshaped,
                rules=rules,
                rules_changed=rules_changed,
                complete=complete,
            )
            lost |= rewrite_host(build, stored, change)
            if change.media_changes is not None:
                media_changes.add(host, *change.media_parts, change.media_changes)
        build.scrub(settings.scrub_mb_per_round, mended)  # a slice of the linked parts verified
        # partitions whose stored rows were lost to a damaged part (found by a stat, on
        # linking, on reading a touched host's parts, or by the scrub): what this round did
        # not list again is listed as new by the next one
        if stored is not None:
            lost |= stored.lost_partitions(old_partitions)
        lost -= replaced
        for p in partitions:
            if p["partition_id"] in lost:
                p["hash"] = None
        # hosts with a damaged part: their statistics are computed again, all rows as new
        lost_hosts = {h for h, _ in stored.damaged_groups()} if stored is not None else set()
        pace = {h["host"]: h["list_s_per_folder"] for h in hosts}
        for p in partitions:  # the scheduler's cost: listing every folder, at the host's pace
            p["est_scan_s"] = listing_seconds(p["n_folders"], pace[p["host"]])
        build.write_table("hosts", pa.Table.from_pylist(hosts, HOSTS))
        if stored is not None:
            build.write_media_changes(media_changes)
        # each row with its history (none for partitions made by this round's splits)
        table = pa.Table.from_pylist([{**p, "history": None} for p in partitions], PARTITIONS)
        column = histories.updated([p["partition_id"] for p in partitions]).column()
        table = table.set_column(table.schema.get_field_index("history"), "history", column)
        build.write_table("partitions", table)
        old_stats = read_old_stats(crawl, prev)
        # a host whose rows were lost keeps no stale stats; one whose stats part is damaged
        # has them computed again in full
        redo_stats = touched | lost_hosts | old_stats.damaged
        stats = round_prefix_stats(
            round_=self.round,
            version_dir=out,
            prev_dir=crawl.version_dir(prev) if prev else None,
            old_stats=old_stats.table,
            listed=listed,
            touched=redo_stats,
            damaged=lost_hosts,
            runner=runner,
            depth=settings.stats_depth,
            min_entries=settings.stats_min_entries,
            stats_every=settings.stats_every,
            workdir=seg / "jobs",
        )
        carried = set() if complete else set(listed)
        write_stats(build, stats, old_stats, touched | lost_hosts, carried - redo_stats)
        # the history: what the round changed, and every media row of a host it retired
        retired = set(old_hosts["host"].to_pylist()) - listed
        gone = [stored.read_host("media", h) for h in sorted(retired)] if stored else []
        build.write_changes(media_changes, pa.concat_tables([MEDIA.empty_table(), *gone]))
        build.publish(stats, settings)
        prune_changes(crawl.crawldb, settings.history_days, build.published or datetime.now(UTC))

"""Publish: how Update builds version N in a hidden folder (groups of parts written there or
hard-linked from N-1) and makes it live: rules.auto, MANIFEST.json last, the rename, CURRENT
moved; every part and folder entry fsynced first (docs/DESIGN.md, The crawl directory)."""

from __future__ import annotations

import logging
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa

from sharecrawl.crawl_io.crawldb.atomic import (
    fsync_folder,
    rename_into_place,
    temp_name,
    write_parquet,
)
from sharecrawl.crawl_io.crawldb.crawldir import PER_HOST_TABLES, CrawlDir
from sharecrawl.crawl_io.crawldb.history import round_changes, write_changes
from sharecrawl.crawl_io.crawldb.host_parts import (
    ROW_TABLES,
    parse_part_file,
    partitions_metadata,
    rel_path,
)
from sharecrawl.crawl_io.crawldb.media_changes import FILE_NAME as MEDIA_CHANGES_FILE
from sharecrawl.crawl_io.crawldb.media_changes import ChangesRecord
from sharecrawl.crawl_io.crawldb.scrub import (
    MIB,
    ScrubRecord,
    read_record,
    scrub_carried,
    scrub_line,
    write_record,
)
from sharecrawl.crawl_io.crawldb.version_manifest import Manifest
from sharecrawl.crawl_io.crawldb.version_manifest import write_manifest as write_version_manifest
from sharecrawl.pipeline.rules_store import RulesStore
from sharecrawl.pipeline.settings import Settings

log = logging.getLogger("sharecrawl")


class VersionBuild:
    """Version `version` of a crawl directory, being built from version `version - 1`."""

    def __init__(self, crawl: CrawlDir, version: int) -> None:
        self.crawl, self.version, self.prev = crawl, version, version - 1
        self.dir = crawl.crawldb / f".v{version:06d}.tmp"
        self.carried: Manifest = {}  # manifest entries of the parts linked from version N-1
        self.published: datetime | None = None  # the manifest's time, once write_changes set it

    def begin(self) -> Path:
        """The version's folder, emptied of what a killed attempt left."""
        if not self.prev:
            self.crawl.make()  # the first version: the crawldb records its format
        shutil.rmtree(self.dir, ignore_errors=True)
        for name in PER_HOST_TABLES:
            (self.dir / name).mkdir(parents=True)
        return self.dir

    def link_group(self, host: str, group: int, tables: tuple[str, ...] = ROW_TABLES) -> bool:
        """Hard-link a group's parts from the previous version with their manifest entries;
        only a stat checks them (their bytes are checked when read, and by `check`), so that
        publishing costs what changed. False: a part is damaged or missing; none is linked."""
        prev = self.prev
        if not prev:
            return True
        if self.crawl.hosts(prev).group_damaged(host, group):
            why = "a part in v%06d is damaged or missing; its partitions are crawled again as new"
            log.warning("sharecrawl: %s: " + why, host, prev)
            return False
        # a part in the manifest is there with its size (group_damaged's stat): linked
        manifest = self.crawl.manifest(prev)
        for name in tables:
            if (rel := rel_path(name, host, group)) in manifest:
                self._link(rel, manifest)
        return True

    def link_host(self, host: str) -> None:
        """Link every group of a host the round left as it was (that do link)."""
        for g in self.crawl.hosts(self.prev).groups(host) if self.prev else []:
            self.link_group(host, g)

    def link_part(self, table: str, host: str, group: int) -> None:
        """Link one part the caller found equal to what it would write."""
        self._link(rel_path(table, host, group), self.crawl.manifest(self.prev))

    def _link(self, rel: str, manifest: Manifest) -> None:
        # names, not Paths: publishing a big LAN links thousands of parts
        old = os.fspath(self.crawl.version_dir(self.prev))
        os.link(f"{old}/{rel}", f"{os.fspath(self.dir)}/{rel}")
        if rel in manifest:
            self.carried[rel] = manifest[rel]

    def scrub(self, mb_per_round: float, earlier: ScrubRecord | None = None) -> ScrubRecord:
        """Verify `mb_per_round` MiB of the files, media and folders parts linked from version
        N-1, going on from where the previous round's scrub stopped (crawl_io.crawldb.scrub:
        the damaged ones are mended there as `check --repair` mends them); link the restored
        ones again and take out every part of a group whose part was dropped: its partitions,
        lost, are listed again as new. Record it in the round's segment (with `earlier`, this
        round's mend after a read failed), and say it in one line when something was damaged.
        prefix_stats parts need no scrub: Update reads each in full, checksum included."""
        carried = {r: e for r, e in self.carried.items() if r.partition("/")[0] in ROW_TABLES}
        before = read_record(self.crawl.segment_dir(self.prev)) if self.prev else None
        budget = round(mb_per_round * MIB)
        after = before.last if before is not None else None
        record, repairs = scrub_carried(self.crawl, self.prev, carried, budget, after)
        for repair in repairs:
            name = repair.rel.partition("/")[2]
            if repair.source is not None:  # a link to the damaged inode: to the intact one
                tmp = temp_name(self.dir / repair.rel)
                os.link(self.crawl.version_dir(self.prev) / repair.rel, tmp)
                os.replace(tmp, self.dir / repair.rel)
            elif repair.dropped and (key := parse_part_file(name)) is not None:
                for rel in (rel_path(t, *key) for t in ROW_TABLES):
                    (self.dir / rel).unlink(missing_ok=True)
                    self.carried.pop(rel, None)
        record.add(earlier)
        write_record(self.crawl.segment_dir(self.version), record)
        if line := scrub_line(self.version, record):
            log.warning("%s", line)
        return record

    def write_group(
        self,
        host: str,
        group: int,
        tables: dict[str, pa.Table],
        partitions: set[str] | frozenset[str],
    ) -> None:
        """Write a group's parts, naming its partitions in each footer."""
        for name, table in tables.items():
            write_parquet(
                table,
                self.dir / rel_path(name, host, group),
                durable=True,
                metadata=partitions_metadata(partitions),
                compact=name not in ROW_TABLES,
            )

    def write_table(self, name: str, table: pa.Table) -> None:
        write_parquet(table, self.dir / f"{name}.parquet", durable=True, compact=True)

    def write_media_changes(self, record: ChangesRecord) -> None:
        write_parquet(
            record.table(),
            self.dir / MEDIA_CHANGES_FILE,
            durable=True,
            metadata=record.metadata(self.crawl.version_dir(self.prev).name),
            compact=True,
        )

    def write_changes(self, record: ChangesRecord, retired: pa.Table) -> None:
        """Write the round's history part (crawl_io.crawldb.history) from its media-changes
        record and the media rows of the hosts it retired, dated as the manifest will be."""
        self.published = datetime.now(UTC)
        rows = round_changes(record.table(), retired, self.version, self.published)
        write_changes(self.crawl.crawldb, self.version, rows, self.published)

    def publish(self, prefix_stats: pa.Table, settings: Settings) -> None:
        """Write the automatic rules (as `settings` say) and the manifest, rename the folder
        into place and move CURRENT to it."""
        if settings.auto_rules:  # big folders without media are not worth crawling
            RulesStore(self.crawl.root, settings.rules_file or None).regenerate_auto(
                prefix_stats, min_entries=settings.auto_rule_min_entries
            )
        for name in PER_HOST_TABLES:  # the parts' (and links') names, on disk
            fsync_folder(self.dir / name)
        # the manifest goes in last, before the rename: a version with one is complete
        write_version_manifest(self.dir, self.carried, self.published)
        rename_into_place(self.dir, self.crawl.version_dir(self.version))
        self.crawl.publish(self.version)

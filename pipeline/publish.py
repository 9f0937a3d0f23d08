"""Publish: how a round's Update turns the version it builds into the live version.

Update (pipeline.update) builds version N in a hidden folder, crawldb/.v000013.tmp/, begun
empty by `VersionBuild.begin`: the parts of the hosts it rewrote, written there, and those of
the hosts it did not touch, hard-linked from version N-1 (`link_host`, which carries their
manifest entries forward). `publish` then writes, in this order:

    crawl/rules.auto                 the automatic crawl rules from the new prefix statistics
    crawldb/.v000013.tmp/MANIFEST.json   every part's size and SHA-256, written last inside
                                     the folder: a version with a manifest is complete
    crawldb/v000013/                 the folder renamed into place
    crawldb/CURRENT                  moved to v000013 (write + rename): the version is live

A round killed before CURRENT moves leaves version N-1 live and whole, and its rerun builds N
again (Luigi's complete() for Update is "CURRENT names N or later": pipeline.targets).
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pyarrow as pa

from crawl_io.crawldir import PER_HOST_TABLES, CrawlDir, host_file
from crawl_io.version_manifest import Manifest, read_problem
from crawl_io.version_manifest import write_manifest as write_version_manifest
from pipeline.rules_store import RulesStore
from pipeline.settings import sharecrawl

log = logging.getLogger("sharecrawl")


class VersionBuild:
    """Version `version` of a crawl directory, being built from version `version - 1`."""

    def __init__(self, crawl: CrawlDir, version: int) -> None:
        self.crawl, self.version, self.prev = crawl, version, version - 1
        self.dir = crawl.crawldb / f".v{version:06d}.tmp"
        self.carried: Manifest = {}  # manifest entries of the parts linked from version N-1

    def begin(self) -> Path:
        """The version's folder, empty (what a killed attempt left in it is dropped)."""
        shutil.rmtree(self.dir, ignore_errors=True)
        for name in PER_HOST_TABLES:
            (self.dir / name).mkdir(parents=True)
        return self.dir

    def link_host(self, host: str) -> bool:
        """An untouched host's parts are shared with the previous version, not copied, and
        carry their manifest entries forward. Only their size is checked here (a stat), so
        that publishing costs what changed; their bytes are checked when a round rewrites
        them and by `sharecrawl check`. A part of a legacy version (no manifest) is read in
        full once, and gets its entry in the new manifest. False: a part is damaged or
        missing, and none of the host's parts is linked."""
        crawl, prev = self.crawl, self.prev
        if not prev:
            return True
        manifest = crawl.manifest(prev)
        if crawl.host_damaged(prev, host):
            log.warning("sharecrawl: %s: a part in v%06d is damaged or missing; "
                        "crawled again as new", host, prev)  # fmt: skip
            return False
        links = []
        for name in PER_HOST_TABLES:
            rel = f"{name}/{host_file(host)}"
            src = crawl.version_dir(prev) / rel
            if manifest is None and src.exists() and (problem := read_problem(src)):
                log.warning("sharecrawl: %s: %s; its host is crawled again as new", src, problem)
                return False
            if manifest is None or rel in manifest:
                links.append((src, rel))
        for src, rel in links:
            if src.exists():
                os.link(src, self.dir / rel)
                if manifest is not None:
                    self.carried[rel] = manifest[rel]
        return True

    def publish(self, prefix_stats: pa.Table) -> None:
        """Write the automatic rules and the manifest, rename the folder into place and move
        CURRENT to it. Every table of the version must be in its folder."""
        settings = sharecrawl()
        if settings.auto_rules:  # big folders without media are not worth crawling
            RulesStore(self.crawl.root, settings.rules_file or None).regenerate_auto(
                prefix_stats, min_entries=settings.auto_rule_min_entries
            )
        # the manifest goes in last, before the rename: a version with one is complete
        write_version_manifest(self.dir, self.carried)
        self.crawl.note_manifests_from(self.version)
        os.replace(self.dir, self.crawl.version_dir(self.version))
        self.crawl.publish(self.version)

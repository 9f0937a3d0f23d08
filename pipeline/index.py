"""Index: bring the search index up to the live version (queries.index: what the round
changed) or build it in full when there is none, it is damaged or of another format, or every
`full_every` versions ([Index] in luigi.cfg), so what updates leave behind does not pile up."""

from __future__ import annotations

import logging

import luigi

from sharecrawl.crawl_io.crawldb.crawldir import VERSION_NAME, CrawlDir
from sharecrawl.crawl_io.crawldb.disk_full import is_disk_full
from sharecrawl.crawl_io.crawldb.scrub import add_mend, mend_version
from sharecrawl.pipeline.settings import SettingsParameter
from sharecrawl.pipeline.targets import IndexedVersion
from sharecrawl.pipeline.update import Update

log = logging.getLogger("sharecrawl")


def full_build_reason(crawl: CrawlDir, live: int, full_every: int) -> str | None:
    """Why the index must be built in full for version `live`, or None (an update does)."""
    from sharecrawl.queries.index_store import FORMAT, index_meta

    if not crawl.index.exists():
        return "there is no index"
    meta = index_meta(crawl.index)
    if meta is None:
        return "the index does not open, or is of an older format"
    if meta.get("format") != FORMAT:
        return f"the index is of format {meta.get('format') or '1'}, not {FORMAT}"
    held = VERSION_NAME.fullmatch(meta.get("version") or "")
    full = VERSION_NAME.fullmatch(meta.get("full_version") or "")
    if held is None or full is None:
        return "the index names no version"
    if int(held[1]) > live or crawl.incomplete(int(held[1])):
        return f"the version it holds ({held[0]}) is not there"
    if live - int(full[1]) >= full_every:
        return f"it was last built in full at {full[0]}"
    return None


class Index(luigi.Task):
    crawl_dir = luigi.Parameter()
    round = luigi.IntParameter()
    settings = SettingsParameter()
    # a full build every this many versions at most; in luigi.cfg's [Index] section
    full_every = luigi.IntParameter(default=24, significant=False)

    def requires(self) -> Update:
        return Update(crawl_dir=self.crawl_dir, round=self.round, settings=self.settings)

    def output(self) -> IndexedVersion:
        return IndexedVersion(self.crawl_dir, self.round)

    def run(self) -> None:
        import duckdb
        import pyarrow as pa

        from sharecrawl.queries.index import build_index, update_index
        from sharecrawl.queries.index_store import index_version

        crawl = CrawlDir(self.crawl_dir)
        live = crawl.current()
        crawl.index.parent.mkdir(parents=True, exist_ok=True)
        reason = full_build_reason(crawl, live, max(int(self.full_every), 1))
        if reason is None:
            held = index_version(crawl.index)
            assert held is not None
            try:
                update_index(crawl.index, crawl.crawldb / held, crawl.version_dir(live))
                return
            except (duckdb.Error, OSError, pa.ArrowException) as e:  # a part that does not read
                first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
                reason = f"updating it failed ({first})"
        log.info("sharecrawl: building the search index in full: %s", reason)
        try:
            build_index(crawl.version_dir(live), crawl.index)
        except (duckdb.Error, OSError, pa.ArrowException) as e:
            # a media part that does not read: mended as `check --repair` mends it, then again
            if is_disk_full(e) or (mended := mend_version(crawl, live)) is None:
                raise
            add_mend(crawl.segment_dir(self.round), self.round, mended)
            build_index(crawl.version_dir(live), crawl.index)

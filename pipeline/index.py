"""Index: build the search index of the live version and swap it in.

When a round changed no file and no host went on or off line, the index of the previous
version still holds: it is relabelled instead of rebuilt.
"""

from __future__ import annotations

import luigi
import pyarrow.compute as pc

from crawl_io.crawldir import PER_HOST_TABLES, CrawlDir
from crawl_io.host_parts import changed_parts
from pipeline.targets import IndexedVersion
from pipeline.update import Update


def same_content(crawl: CrawlDir, old: int, new: int) -> bool:
    """Do two versions hold the same files, media and host states? Parts left as they were
    are hard links with the same manifest entries (crawl_io.host_parts.changed_parts)."""
    for name in PER_HOST_TABLES:
        if changed_parts(crawl.version_dir(old), crawl.version_dir(new), name):
            return False
    columns = ["host", "url", "online"]
    hosts = [crawl.read(v, "hosts").select(columns) for v in (old, new)]
    hosts = [t.sort_by("host") for t in hosts]
    return hosts[0].equals(hosts[1]) and not pc.any(pc.is_null(hosts[1]["online"])).as_py()


class Index(luigi.Task):
    crawl_dir = luigi.Parameter()
    round = luigi.IntParameter()

    def requires(self) -> Update:
        return Update(crawl_dir=self.crawl_dir, round=self.round)

    def output(self) -> IndexedVersion:
        return IndexedVersion(self.crawl_dir, self.round)

    def run(self) -> None:
        from queries.index import build_index, index_version, relabel_index

        crawl = CrawlDir(self.crawl_dir)
        live = crawl.current()
        crawl.index.parent.mkdir(parents=True, exist_ok=True)
        indexed = index_version(crawl.index) if crawl.index.exists() else None
        previous = int(indexed.lstrip("v")) if indexed else None
        if (
            previous is not None
            and crawl.version_dir(previous).exists()
            and same_content(crawl, previous, live)
        ):
            relabel_index(crawl.index, crawl.version_dir(live))
        else:
            build_index(crawl.version_dir(live), crawl.index)

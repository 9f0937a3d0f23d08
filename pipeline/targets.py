"""Luigi targets for outputs that are not single files: a published crawldb version and the
search index of a version. Both exist once the pointer moved, never before."""

from __future__ import annotations

import luigi

from crawl_io.crawldir import CrawlDir


class PublishedVersion(luigi.Target):
    def __init__(self, crawl_dir: str, version: int) -> None:
        self.crawl, self.version = CrawlDir(crawl_dir), version

    def exists(self) -> bool:
        return self.crawl.current() >= self.version


class IndexedVersion(luigi.Target):
    def __init__(self, crawl_dir: str, version: int) -> None:
        self.crawl, self.version = CrawlDir(crawl_dir), version

    def exists(self) -> bool:
        from queries.index import index_version

        if not self.crawl.index.exists():
            return False
        name = index_version(self.crawl.index)
        return name is not None and int(name.lstrip("v")) >= self.version

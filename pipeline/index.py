"""Index: build the search index of the live version and swap it in."""

from __future__ import annotations

import luigi

from crawl_io.crawldir import CrawlDir
from pipeline.targets import IndexedVersion
from pipeline.update import Update


class Index(luigi.Task):
    crawl_dir = luigi.Parameter()
    round = luigi.IntParameter()

    def requires(self) -> Update:
        return Update(crawl_dir=self.crawl_dir, round=self.round)

    def output(self) -> IndexedVersion:
        return IndexedVersion(self.crawl_dir, self.round)

    def run(self) -> None:
        from queries.index import build_index

        crawl = CrawlDir(self.crawl_dir)
        crawl.index.parent.mkdir(parents=True, exist_ok=True)
        build_index(crawl.version_dir(crawl.current()), crawl.index)

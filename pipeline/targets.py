"""Luigi targets that exist once CURRENT or the index names a version. `PublishedRound` is the
previous round's Update seen from below, so the stages import each other one way only."""

from __future__ import annotations

import luigi

from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir


class PublishedVersion(luigi.Target):
    def __init__(self, crawl_dir: str, version: int) -> None:
        self.crawl, self.version = CrawlDir(crawl_dir), version

    def exists(self) -> bool:
        return self.crawl.current() >= self.version


class IndexedVersion(luigi.Target):
    def __init__(self, crawl_dir: str, version: int) -> None:
        self.crawl, self.version = CrawlDir(crawl_dir), version

    def exists(self) -> bool:
        from sharecrawl.queries.index_store import index_version

        if not self.crawl.index.exists():
            return False
        name = index_version(self.crawl.index)
        return name is not None and int(name.lstrip("v")) >= self.version


class PublishedRound(luigi.ExternalTask):
    """Round `round` published (else Luigi reports it missing rather than run out of order)."""

    crawl_dir = luigi.Parameter()
    round = luigi.IntParameter()

    def output(self) -> PublishedVersion:
        return PublishedVersion(self.crawl_dir, self.round)

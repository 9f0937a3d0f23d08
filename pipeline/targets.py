"""Luigi targets for outputs that are not single files: a published crawldb version and the
search index of a version. Both exist once the pointer moved, never before.

`PublishedRound` chains the rounds: a round's Inject requires the previous round published.
It is the previous round's Update seen from below (the same target), so that the stages of
one round import each other in one direction only: inject <- generate <- fetch <- update <-
index."""

from __future__ import annotations

import luigi

from crawl_io.crawldb.crawldir import CrawlDir


class PublishedVersion(luigi.Target):
    def __init__(self, crawl_dir: str, version: int) -> None:
        self.crawl, self.version = CrawlDir(crawl_dir), version

    def exists(self) -> bool:
        return self.crawl.current() >= self.version


class IndexedVersion(luigi.Target):
    def __init__(self, crawl_dir: str, version: int) -> None:
        self.crawl, self.version = CrawlDir(crawl_dir), version

    def exists(self) -> bool:
        from queries.index_store import index_version

        if not self.crawl.index.exists():
            return False
        name = index_version(self.crawl.index)
        return name is not None and int(name.lstrip("v")) >= self.version


class PublishedRound(luigi.ExternalTask):
    """Round `round` published: what the next round starts from. The rounds run one after the
    other (pipeline.rounds.run_rounds, which first finishes an interrupted one), so it is
    there when required; were it not, Luigi reports the dependency missing instead of
    running a round out of order."""

    crawl_dir = luigi.Parameter()
    round = luigi.IntParameter()

    def output(self) -> PublishedVersion:
        return PublishedVersion(self.crawl_dir, self.round)

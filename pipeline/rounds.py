"""Run rounds: each is Inject -> Generate -> Fetch -> Update -> Index, chained to the last.

A round killed part way leaves CURRENT on the previous version; the next run takes up that
same round and Luigi's complete() skips whatever stage already finished.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import luigi

from crawl_io.crawldir import CrawlDir
from pipeline.fetch import worker_context
from pipeline.index import Index

log = logging.getLogger("sharecrawl")


class Round(luigi.WrapperTask):
    crawl_dir = luigi.Parameter()
    round = luigi.IntParameter()

    def requires(self) -> Index:
        return Index(crawl_dir=self.crawl_dir, round=self.round)


class RoundFailed(RuntimeError):
    pass


def run_round(crawl_dir: str, round_: int) -> None:
    worker_context()  # the fetch workers' server boots while Inject and Generate run
    result = luigi.build(
        [Round(crawl_dir=crawl_dir, round=round_)],
        local_scheduler=True,
        detailed_summary=True,
        log_level="WARNING",
    )
    if result.status not in (
        luigi.LuigiStatusCode.SUCCESS,
        luigi.LuigiStatusCode.SUCCESS_WITH_RETRY,
    ):
        raise RoundFailed(f"round {round_} failed:\n{result.summary_text}")


def run_rounds(
    crawl_dir: str, rounds: int, after_round: Callable[[int], None] | None = None
) -> int:
    """Run `rounds` more rounds after the live version; return the last round's number."""
    crawl = CrawlDir(crawl_dir)
    first = crawl.current() + 1
    for n in range(first, first + rounds):
        run_round(crawl_dir, n)
        if after_round:
            after_round(n)
    return first + rounds - 1

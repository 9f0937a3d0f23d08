"""Run rounds: each is Inject -> Generate -> Fetch -> Update -> Index, chained to the last.

A round killed part way leaves CURRENT on the previous version; the next run takes up that
same round and Luigi's complete() skips whatever stage already finished. A round killed after
it published its version but before its Index is that round still: the next run finishes it
with Index alone, and counts it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import luigi

from crawl_io.crawldir import CrawlDir
from crawl_io.tempfiles import remove_stale_temp_files
from jobs.runner import remove_job_temp_dirs
from pipeline.fetch import worker_context
from pipeline.index import Index
from pipeline.interrupt import (
    Interrupted,
    end_child_processes,
    interruptible,
    on_interrupt,
    received,
    stop,
)
from pipeline.targets import IndexedVersion

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


def unfinished_round(crawl: CrawlDir) -> int:
    """The round a crawl continues with: the live version's own when its Index is missing
    (killed between publish and Index), else the next one."""
    live = crawl.current()
    if live and not IndexedVersion(str(crawl.root), live).exists():
        return live
    return live + 1


def run_rounds(
    crawl_dir: str, rounds: int, after_round: Callable[[int], None] | None = None
) -> int:
    """Run `rounds` more rounds, the first finishing an interrupted one; return the last
    round's number. SIGINT or SIGTERM stops it with Interrupted (see stop_interrupted)."""
    crawl = CrawlDir(crawl_dir)
    # Only ever called under the crawl lock (cli's cmd_crawl holds it), so no other crawl
    # writes here: the temporary files of writers that are gone are a killed run's leftovers.
    remove_stale_temp_files(crawl.root)
    remove_job_temp_dirs()
    first = unfinished_round(crawl)
    with interruptible():
        on_interrupt(lambda: stop_interrupted(crawl))
        try:
            for n in range(first, first + rounds):
                run_round(crawl_dir, n)
                if after_round:
                    after_round(n)
        except BaseException as e:
            signum = received()
            if signum is None:
                raise
            raise Interrupted(signum, stop()) from e
        finally:
            on_interrupt(None)
    return first + rounds - 1


def stop_interrupted(crawl: CrawlDir) -> str:
    """Clean up after a signal stopped a round, before this process exits: its helper
    processes end (none may write after it), temporary files go; the live version is
    untouched. Returns the line that tells the operator where things stand."""
    end_child_processes(grace_s=1.0)
    remove_job_temp_dirs()
    remove_stale_temp_files(crawl.root)
    live, pending = crawl.current(), unfinished_round(crawl)
    state = f"the live version is still v{live:06d}" if live else "no version is live yet"
    verb = "finish" if crawl.segment_dir(pending).exists() else "run"
    return f"interrupted: {state}; run the same command again to {verb} round {pending}"

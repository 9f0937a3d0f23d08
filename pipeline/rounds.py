"""Run rounds: Inject -> Generate -> Fetch -> Update -> Index, each chained to the last. A killed
round leaves CURRENT on the previous version; the next run takes it up and Luigi's complete()
skips the stages done (a round killed after publishing is finished with Index alone)."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable

import luigi
from luigi.execution_summary import LuigiRunResult
from luigi.rpc import RemoteScheduler, RPCError

from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir
from sharecrawl.crawl_io.crawldb.disk_full import disk_full_line, is_disk_full
from sharecrawl.crawl_io.crawldb.lock import CrawlLock
from sharecrawl.crawl_io.crawldb.retention import remove_old_rounds
from sharecrawl.crawl_io.crawldb.tempfiles import remove_stale_temp_files
from sharecrawl.crawl_io.processes import stopping
from sharecrawl.crawl_io.workers import worker_context
from sharecrawl.jobs.runner import remove_job_temp_dirs
from sharecrawl.pipeline.fetch import shard_tasks
from sharecrawl.pipeline.index import Index
from sharecrawl.pipeline.settings import (
    SMB_CONNECTIONS,
    round_shards,
    scheduler_url,
    set_smb_connections,
    sharecrawl,
    smb_connections,
)
from sharecrawl.pipeline.targets import IndexedVersion


class RoundFailed(RuntimeError):
    pass


FAILED = (
    luigi.LuigiStatusCode.FAILED,
    luigi.LuigiStatusCode.FAILED_AND_SCHEDULING_FAILED,
    luigi.LuigiStatusCode.SCHEDULING_FAILED,
)

_failures: list[BaseException] = []  # the errors of the tasks this process ran and saw fail


@luigi.Task.event_handler(luigi.Event.FAILURE)
def _note_failure(task: luigi.Task, error: BaseException) -> None:
    _failures.append(error)


# a full disk is said by the round's one line, not Luigi's traceback of the task
logging.getLogger("luigi-interface").addFilter(
    lambda record: not (record.exc_info and is_disk_full(record.exc_info[1]))
)


def _build(tasks: list[luigi.Task], **where: object) -> LuigiRunResult:
    _failures.clear()
    return luigi.build(tasks, detailed_summary=True, log_level="WARNING", **where)


def round_failed(what: str, crawl_dir: str, summary: str) -> RoundFailed:
    """One line when a disk was full, else Luigi's summary of what failed."""
    full = next((e for e in _failures if is_disk_full(e)), None)
    if full is not None:
        then = "run the crawl again: it goes on from where this round stopped"
        return RoundFailed(f"{what} failed: {disk_full_line(full, crawl_dir, then)}")
    return RoundFailed(f"{what} failed:\n{summary}")


def run_round(crawl_dir: str, round_: int) -> None:
    """Run a round with Luigi's local scheduler, or the central one luigi.cfg's [core] names."""
    worker_context()  # the fetch workers' server boots while Inject and Generate run
    url = scheduler_url()
    if url:
        share_connection_cap(url)
        # wait for shards that other workers run, rather than end with the round undone
        luigi.configuration.get_config().set("worker", "keep_alive", "true")
    where: dict[str, object] = {"scheduler_url": url} if url else {"local_scheduler": True}
    task = Index(crawl_dir=crawl_dir, round=round_)
    result = _build([task], **where)
    # the round is done when its Index is (under a central scheduler, Luigi reports the
    # shards that other workers ran as left pending)
    if not task.complete():
        raise round_failed(f"round {round_}", crawl_dir, result.summary_text)


def share_connection_cap(url: str) -> None:
    """Agree with the central scheduler on the SMB connection cap: tell it ours when it has
    none (luigid's default for an unknown resource is 1), else take its own, so that no shard
    asks for more than the cap (it would never run)."""
    scheduler = RemoteScheduler(url)
    caps = {r["name"]: r["num_total"] for r in scheduler.resource_list() or []}
    if SMB_CONNECTIONS in caps:
        set_smb_connections(int(caps[SMB_CONNECTIONS]))
    else:
        scheduler.update_resource(SMB_CONNECTIONS, smb_connections() or sharecrawl().crawlers)


def join_round(crawl_dir: str, wait_s: float = 60.0, poll_s: float = 0.2) -> int:
    """Run fetch shards of the round that the crawl process holding the lock runs now, through
    the same central scheduler; return that round, or 0 when none reached its fetch within
    `wait_s`. Never takes the lock. Every process must name the crawl directory by the same
    path (it is part of the tasks' ids)."""
    url = scheduler_url()
    if not url:
        raise ValueError(
            "joining a round needs a central scheduler: set luigi.cfg's [core] "
            "default_scheduler_url"
        )
    crawl = CrawlDir(crawl_dir)
    lock = CrawlLock(crawl.root)
    worker_context()  # booted while waiting: the shards start at once when the round does
    deadline = time.monotonic() + wait_s
    while True:
        round_ = unfinished_round(crawl)
        if (crawl.segment_dir(round_) / "fetchlist.parquet").exists() and lock.held():
            break
        if time.monotonic() > deadline:
            return 0
        time.sleep(poll_s)
    share_connection_cap(url)
    shards = driver_shards(url, str(crawl.root), round_)
    result = _build(shard_tasks(str(crawl.root), round_, shards), scheduler_url=url)
    if result.status in FAILED:
        raise round_failed(f"fetch shards of round {round_}", crawl_dir, result.summary_text)
    return round_


def driver_shards(url: str, crawl_dir: str, round_: int) -> int:
    """How many shards the driver split the round into, as the central scheduler knows them
    (shards of another count would have two processes fetch one host); else our setting."""
    tasks = RemoteScheduler(url).task_list("", "", search="FetchShard") or {}
    found = {
        int(t["params"]["shards"])
        for t in tasks.values()
        if isinstance(t, dict)
        and t.get("name") == "FetchShard"
        and t["params"].get("crawl_dir") == crawl_dir
        and t["params"].get("round") == str(round_)
    }
    if len(found) > 1:
        raise ValueError(
            f"the scheduler holds round {round_}'s fetch shards in counts "
            f"{sorted(found)}; give every process the same fetch_shards"
        )
    return found.pop() if found else round_shards(sharecrawl())


def main(argv: list[str] | None = None) -> int:
    """`python -m pipeline.rounds --join CRAWL_DIR`: a fetch worker for the crawl's round."""
    parser = argparse.ArgumentParser(prog="python -m pipeline.rounds", description=main.__doc__)
    parser.add_argument("--join", metavar="CRAWL_DIR", required=True)
    parser.add_argument(
        "--wait-s", type=float, default=60.0, help="how long to wait for a round to reach its fetch"
    )
    args = parser.parse_args(argv)

    try:
        round_ = join_round(args.join, args.wait_s)
    except (ValueError, RoundFailed) as e:
        print(f"sharecrawl: error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    except RPCError:
        print(
            f"sharecrawl: error: cannot reach the central scheduler at {scheduler_url()}; "
            "start luigid there or fix [core] default_scheduler_url",
            file=sys.stderr,
        )
        return 1
    print(f"round {round_}: fetch shards done" if round_ else "no round to join", flush=True)
    return 0


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
    """Run `rounds` more rounds, the first finishing an interrupted one, each followed by
    `keep_rounds` retention; return the last round's number. SIGINT or SIGTERM stops it."""
    crawl = CrawlDir(crawl_dir)
    # under the crawl lock: temporary files of writers that are gone are a killed run's
    remove_stale_temp_files(crawl.root)
    remove_job_temp_dirs()
    first = unfinished_round(crawl)
    with stopping(lambda: stop_interrupted(crawl)):
        for n in range(first, first + rounds):
            run_round(crawl_dir, n)
            remove_old_rounds(crawl, sharecrawl().keep_rounds)
            if after_round:
                after_round(n)
    return first + rounds - 1


def stop_interrupted(crawl: CrawlDir) -> str:
    """Remove a stopped round's temporary files; the line that says where things stand."""
    remove_job_temp_dirs()
    remove_stale_temp_files(crawl.root)
    live, pending = crawl.current(), unfinished_round(crawl)
    state = f"the live version is still v{live:06d}" if live else "no version is live yet"
    verb = "finish" if crawl.segment_dir(pending).exists() else "run"
    return f"interrupted: {state}; run the same command again to {verb} round {pending}"


if __name__ == "__main__":
    sys.exit(main())

"""Run rounds: Inject -> Generate -> Fetch -> Update -> Index, each chained to the last. A killed
round leaves CURRENT on the previous version; the next run takes it up and Luigi's complete()
skips the stages done (a round killed after publishing is finished with Index alone)."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from dataclasses import replace

import luigi
from luigi.execution_summary import LuigiRunResult
from luigi.rpc import RemoteScheduler, RPCError
from luigi.scheduler import Scheduler
from luigi.worker import Worker

from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir
from sharecrawl.crawl_io.crawldb.disk_full import disk_full_line, is_disk_full
from sharecrawl.crawl_io.crawldb.lock import CrawlLock
from sharecrawl.crawl_io.crawldb.retention import remove_old_rounds
from sharecrawl.crawl_io.crawldb.round_times import write_round_times
from sharecrawl.crawl_io.crawldb.tempfiles import remove_stale_temp_files
from sharecrawl.crawl_io.processes import stopping
from sharecrawl.crawl_io.workers import worker_context
from sharecrawl.jobs.runner import remove_job_temp_dirs
from sharecrawl.pipeline.fetch import shard_tasks
from sharecrawl.pipeline.index import Index
from sharecrawl.pipeline.settings import (
    SMB_CONNECTIONS,
    Settings,
    round_shards,
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


_stage_s: dict[str, float] = {}  # each stage's run time this round, in this process


@luigi.Task.event_handler(luigi.Event.PROCESSING_TIME)
def _note_time(task: luigi.Task, seconds: float) -> None:
    stage = task.get_task_family().lower()  # fetch shards count together as `fetchshard`
    _stage_s[stage] = _stage_s.get(stage, 0.0) + seconds


# a full disk is said by the round's one line, not Luigi's traceback of the task
logging.getLogger("luigi-interface").addFilter(
    lambda record: not (record.exc_info and is_disk_full(record.exc_info[1]))
)


class WorkerFactory:
    """luigi.build's `worker_scheduler_factory`: Luigi's own schedulers, and a worker given its
    [worker] options as arguments rather than through Luigi's config."""

    def __init__(self, **worker_options: object) -> None:
        self.worker_options = worker_options

    def create_local_scheduler(self) -> Scheduler:
        return Scheduler(prune_on_get_work=True, record_task_history=False)

    def create_remote_scheduler(self, url: str) -> RemoteScheduler:
        return RemoteScheduler(url)

    def create_worker(
        self, scheduler: object, worker_processes: int, assistant: bool = False
    ) -> Worker:
        return Worker(
            scheduler=scheduler,
            worker_processes=worker_processes,
            assistant=assistant,
            **self.worker_options,
        )


def _build(tasks: list[luigi.Task], url: str, **worker_options: object) -> LuigiRunResult:
    """Run `tasks` under the central scheduler at `url`, or the local one ('')."""
    _failures.clear()
    where: dict[str, object] = {"scheduler_url": url} if url else {"local_scheduler": True}
    factory = WorkerFactory(**worker_options)
    return luigi.build(
        tasks, worker_scheduler_factory=factory, detailed_summary=True, log_level="WARNING", **where
    )


def round_failed(what: str, crawl_dir: str, summary: str) -> RoundFailed:
    """One line when a disk was full, else Luigi's summary of what failed."""
    full = next((e for e in _failures if is_disk_full(e)), None)
    if full is not None:
        then = "run the crawl again: it goes on from where this round stopped"
        return RoundFailed(f"{what} failed: {disk_full_line(full, crawl_dir, then)}")
    return RoundFailed(f"{what} failed:\n{summary}")


def run_round(settings: Settings, round_: int) -> dict[str, float]:
    """Run a round of the crawl `settings` name, with Luigi's local scheduler or the central
    one `settings.scheduler_url` names; the seconds each stage that ran here took, and the
    whole round's (`round`)."""
    started, started_at = time.monotonic(), time.time()
    _stage_s.clear()
    worker_context()  # the fetch workers' server boots while Inject and Generate run
    url, keep = settings.scheduler_url, {}
    if url:
        settings = share_connection_cap(settings)
        keep = {"keep_alive": True}  # wait for shards other workers run, not end undone
    task = Index(crawl_dir=settings.crawl_dir, round=round_, settings=settings)
    result = _build([task], url, **keep)
    # the round is done when its Index is (under a central scheduler, Luigi reports the
    # shards that other workers ran as left pending)
    if not task.complete():
        raise round_failed(f"round {round_}", settings.crawl_dir, result.summary_text)
    stages = {**_stage_s, "round": time.monotonic() - started}
    write_round_times(CrawlDir(settings.crawl_dir), round_, started_at, stages)
    return stages


def share_connection_cap(settings: Settings) -> Settings:
    """Agree with the central scheduler on the SMB connection cap: tell it ours when it has
    none (luigid's default for an unknown resource is 1), else take its own, so that no shard
    asks for more than the cap (it would never run). The settings under the agreed cap."""
    scheduler = RemoteScheduler(settings.scheduler_url)
    caps = {r["name"]: r["num_total"] for r in scheduler.resource_list() or []}
    if SMB_CONNECTIONS in caps:
        return replace(settings, smb_connections=int(caps[SMB_CONNECTIONS]))
    scheduler.update_resource(SMB_CONNECTIONS, settings.smb_connections or settings.crawlers)
    return settings


def join_round(settings: Settings, wait_s: float = 60.0, poll_s: float = 0.2) -> int:
    """Run fetch shards of the round that the crawl process holding the lock of
    `settings.crawl_dir` runs now, through the same central scheduler; return that round, or 0
    when none reached its fetch within `wait_s`. Never takes the lock. Every process must name
    the crawl directory by the same path (it is part of the tasks' ids)."""
    url, crawl_dir = settings.scheduler_url, settings.crawl_dir
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
    settings = share_connection_cap(settings)
    shards = driver_shards(settings, str(crawl.root), round_)
    result = _build(shard_tasks(str(crawl.root), round_, shards, settings), url)
    if result.status in FAILED:
        raise round_failed(f"fetch shards of round {round_}", crawl_dir, result.summary_text)
    return round_


def driver_shards(settings: Settings, crawl_dir: str, round_: int) -> int:
    """How many shards the driver split the round into, as the central scheduler knows them
    (shards of another count would have two processes fetch one host); else our setting."""
    tasks = RemoteScheduler(settings.scheduler_url).task_list("", "", search="FetchShard") or {}
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
    return found.pop() if found else round_shards(settings)


def run_join(settings: Settings, wait_s: float) -> int:
    """A fetch worker for the round of the crawl `settings` name: its exit status, and one
    line on stderr when it fails."""
    try:
        round_ = join_round(settings, wait_s)
    except (ValueError, RoundFailed) as e:
        print(f"sharecrawl: error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    except RPCError:
        print(
            f"sharecrawl: error: cannot reach the central scheduler at {settings.scheduler_url}; "
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
    settings: Settings,
    rounds: int,
    after_round: Callable[[int, dict[str, float]], None] | None = None,
) -> int:
    """Run `rounds` more rounds of the crawl `settings` name, the first finishing an
    interrupted one, each followed by `keep_rounds` retention and `after_round(n, seconds
    of its stages)`; return the last round's number. SIGINT or SIGTERM stops it."""
    crawl = CrawlDir(settings.crawl_dir)
    # under the crawl lock: temporary files of writers that are gone are a killed run's
    remove_stale_temp_files(crawl.root)
    remove_job_temp_dirs()
    first = unfinished_round(crawl)
    with stopping(lambda: stop_interrupted(crawl)):
        for n in range(first, first + rounds):
            stages = run_round(settings, n)
            remove_old_rounds(crawl, settings.keep_rounds)
            if after_round:
                after_round(n, stages)
    return first + rounds - 1


def stop_interrupted(crawl: CrawlDir) -> str:
    """Remove a stopped round's temporary files; the line that says where things stand."""
    remove_job_temp_dirs()
    remove_stale_temp_files(crawl.root)
    live, pending = crawl.current(), unfinished_round(crawl)
    state = f"the live version is still v{live:06d}" if live else "no version is live yet"
    verb = "finish" if crawl.segment_dir(pending).exists() else "run"
    return f"interrupted: {state}; run the same command again to {verb} round {pending}"

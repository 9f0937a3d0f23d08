"""Fetch workers (pipeline.fetch): a host whose fetch raises an error no fetch should meet
(a bug) is recorded as not fetched, with why, and the other hosts are fetched; the worker
goes on to its next host. (A worker killed by a signal: tests/test_host_failures.py.)"""

from __future__ import annotations

import logging
import os
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir, host_file
from sharecrawl.crawl_io.workers import start_worker
from sharecrawl.pipeline import fetch_workers
from sharecrawl.pipeline.fetch_host import HostJob
from sharecrawl.pipeline.fetch_workers import fetch_hosts
from tests.media import make_media
from tests.outcomes import outcomes_within


def job(crawl_dir: Path, host: Path, known: list[dict], due: list[dict]) -> HostJob:
    return HostJob(
        crawl_dir=str(crawl_dir),
        round=1,
        version=0,
        host=host.name,
        url=f"file://{host}",
        shares=[],
        due=due,
        known=known,
    )


def test_a_fetch_that_raises_is_recorded_for_its_host_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    crawl = tmp_path / "crawl"
    hosts = [tmp_path / "hosts" / name for name in ("alpha", "beta", "gamma")]
    for host in hosts:
        make_media(host / "music" / "song.mp3", "mp3", artist="Madonna", title="Music")
    discover = {"partition_id": None, "reason": "new"}
    # beta's known partition lacks its stored hash: its fetch raises KeyError, as a bug would
    broken = {"partition_id": "p1", "share": "music", "root": "", "lo": None, "hi": None}
    jobs = [
        job(crawl, hosts[0], [], [discover]),
        job(crawl, hosts[1], [broken], [{**discover, "partition_id": "p1"}]),
        job(crawl, hosts[2], [], [discover]),
    ]
    with caplog.at_level(logging.ERROR, logger="sharecrawl.fetch"):
        fetch_hosts(jobs, crawlers=1)  # one worker: it goes on after beta's failure
    seg = CrawlDir(crawl).segment_dir(1)
    logs = {h.name: pq.read_table(seg / "fetchlog" / host_file(h.name)).to_pylist() for h in hosts}
    for name in ("alpha", "gamma"):
        assert {r["status"] for r in logs[name]} == {"new"}, logs[name]
        assert (seg / "media" / host_file(name)).exists()
    assert {r["status"] for r in logs["beta"]} == {"error"}
    assert [r["partition_id"] is None for r in logs["beta"]] == [True, False]  # host, partition
    assert all("its fetch failed (KeyError: 'hash')" in r["error"] for r in logs["beta"])
    assert not (seg / "media" / host_file("beta")).exists()
    assert "Traceback" in caplog.text and "KeyError" in caplog.text


def exit_at_once(conn: Connection) -> None:
    os._exit(3)


def test_workers_that_die_as_they_start_end_the_round_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each worker is gone before it is given its first host (as when the fork server can
    start processes that cannot live): the first worker's host goes back and a new worker
    is started for it; that one dying too ends the fetch with why, rather than start
    workers for ever (tests/outcomes.py) or record every host as lost to a fault of none of
    them."""
    started: list[int | None] = []

    def start_dead(
        context: BaseContext, target: object, *args: object
    ) -> tuple[BaseProcess, Connection]:
        process, conn = start_worker(context, exit_at_once, *args)
        process.join()  # gone before its first host is sent
        started.append(process.exitcode)
        return process, conn

    monkeypatch.setattr(fetch_workers, "start_worker", start_dead)
    hosts = [tmp_path / "hosts" / name for name in ("alpha", "beta")]
    discover = {"partition_id": None, "reason": "new"}
    jobs = [job(tmp_path / "crawl", host, [], [discover]) for host in hosts]
    [outcome] = outcomes_within(lambda: fetch_hosts(jobs, crawlers=1), 1) or [None]
    assert isinstance(outcome, RuntimeError), outcome
    assert str(outcome) == (
        "sharecrawl: a fetch worker died as it started (its process ended with status 3 "
        "and no answer): see the system log, then run the round again"
    )
    assert started == [3, 3]  # the first worker, and the one started in its place
    assert not (tmp_path / "crawl").exists()  # nothing recorded for any host

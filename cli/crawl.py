"""`sharecrawl crawl` and `sharecrawl demo`, which write a crawl directory under its lock.
A crawl's cheap checks come first, then a look at the lock that writes nothing (a cron overlap
exits 75 at once, however loaded the machine), then the checks that load Luigi and the lock."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from sharecrawl.cli.inputs import NUMERIC_SETTINGS, UsageError, check_count, checked_flags, setting
from sharecrawl.cli.inputs import check_readable_file as check_file
from sharecrawl.crawl_io.crawldb.lock import CrawlLock, CrawlLocked
from sharecrawl.crawl_io.sources import check_credentials, read_hosts_file

if TYPE_CHECKING:
    from sharecrawl.pipeline.settings import Settings


def cmd_crawl(args: argparse.Namespace) -> int:
    check_count("--rounds", args.rounds)
    checked_flags(args, {k: NUMERIC_SETTINGS[k] for k in ("crawlers", "round_seconds")})
    if args.rules_file is not None:  # named: it must be there (luigi.cfg's default may not)
        check_file("--rules-file", args.rules_file)
    if args.hosts_file is not None:  # a range's width is checked with the settings (_crawl),
        read_hosts_file(args.hosts_file, allow_wide=True)  # which load Luigi: not before the lock
    check_credentials()
    if args.scheduler_url is not None and not args.scheduler_url.startswith(
        ("http://", "https://")
    ):
        raise UsageError(
            f"--scheduler-url must be an http:// or https:// URL, not {args.scheduler_url!r}"
        )
    lock = CrawlLock(args.crawl_dir or setting("crawl_dir") or ".")
    if not args.join and lock.held():  # --join: a worker of the round that holds the lock
        raise CrawlLocked(lock.path, lock.holder())  # at once, before Luigi loads
    return _join(args) if args.join else _crawl(args)


def _crawl(args: argparse.Namespace) -> int:
    from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir
    from sharecrawl.pipeline.scheduling.policies import get_policy

    settings = crawl_settings(args)
    read_hosts_file(settings.hosts_file, settings.allow_wide_ranges)
    try:
        get_policy(settings.policy)
    except ValueError as e:
        raise UsageError(str(e)) from None
    crawl = CrawlDir(settings.crawl_dir)
    crawl.check(create=True)
    crawl.root.mkdir(parents=True, exist_ok=True)
    with CrawlLock(crawl.root).acquire():  # before anything else is written
        from sharecrawl.crawl_io.crawldb.integrity import verify_round_start
        from sharecrawl.pipeline.rounds import RoundFailed, run_rounds
        from sharecrawl.queries.round_metrics import write_failed_round_metrics, write_round_metrics
        from sharecrawl.queries.status import attention, format_report, round_report

        needed: list[str] = []  # the last round's lines for a person, when it needs one

        def after_round(n: int, stages: dict[str, float]) -> None:
            report = round_report(crawl)
            lines, verdicts = attention(report)
            write_round_metrics(crawl, report, stages=stages, succeeded=not verdicts)
            if not args.quiet:  # the report names what the lines would
                print(format_report(report), flush=True)
            elif lines:
                print("\n".join(f"sharecrawl: {line}" for line in lines), file=sys.stderr)
            needed[:] = verdicts

        verify_round_start(crawl)  # damaged state tables: refuse (nothing written), never
        crawl.make()  # start history over; then the crawldb and its FORMAT
        try:
            run_rounds(replace(settings, crawl_dir=str(crawl.root)), args.rounds, after_round)
        except RoundFailed:  # monitoring sees it too, not only cron's mail
            write_failed_round_metrics(crawl)
            raise
    if not args.quiet:  # switched-off hosts never fail a round; these do
        for line in needed:
            print(f"sharecrawl: {line}", file=sys.stderr)
    return 1 if needed else 0


def crawl_settings(args: argparse.Namespace) -> Settings:
    """The settings of `crawl` (and `crawl --join`): the config files', its flags over them."""
    from sharecrawl.cli.inputs import load_settings

    return load_settings(
        hosts_file=args.hosts_file,
        rules_file=args.rules_file,
        crawl_dir=args.crawl_dir,
        crawlers=args.crawlers,
        round_seconds=args.round_seconds,
        policy=args.policy,
        runner=args.runner,
        hinted_only=args.hinted_only or None,
        allow_wide_ranges=args.allow_wide_ranges or None,
        spark_master=args.spark_master,
        scheduler_url=args.scheduler_url,
    )


def _join(args: argparse.Namespace) -> int:
    """`crawl --join`: fetch shards of the round a crawl on a central scheduler runs."""
    from sharecrawl.pipeline.rounds import run_join

    settings = crawl_settings(args)
    if not settings.scheduler_url:
        raise UsageError(
            "--join needs a central scheduler: --scheduler-url http://HOST:8082 "
            "or luigi.cfg's [core] default_scheduler_url"
        )
    # a worker waits up to a round's budget for the round
    return run_join(settings, settings.round_seconds)


def cmd_demo(args: argparse.Namespace) -> int:
    from sharecrawl.demolan.demo import run_demo

    return run_demo(Path(args.workdir))

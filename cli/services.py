"""The long-running and self-contained commands: `serve` (the search page), `watch` (SMB
change notifications) and `simulate` (the scheduling policies on a synthetic LAN)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from cli.inputs import SIMULATE_LIMITS, UsageError, check_number

if TYPE_CHECKING:
    from web.copy_source import StreamSettings


def cmd_serve(args: argparse.Namespace) -> int:
    from cli.read import crawl_dir
    from web.server import ListenError, serve

    crawl = crawl_dir(args)
    # only checks: a folder that is not a crawl dir is refused; a missing or empty one is
    # served with a page saying to run a crawl, until one has
    crawl.check(create=True)
    if not 0 <= args.port <= 65535:
        raise UsageError("--port must be from 0 (any free port) to 65535")
    if not 1 <= args.workers <= 64:
        raise UsageError("--workers must be from 1 to 64")
    try:
        return serve(crawl.root, args.host, args.port, args.workers, _stream_settings(args))
    except ListenError as e:
        raise UsageError(e.strerror) from None


def _stream_settings(args: argparse.Namespace) -> StreamSettings:
    from cli.inputs import setting
    from web.copy_source import StreamSettings

    caps = {}
    for name, default in (("stream_per_host", 4), ("stream_total", 32)):
        text = setting(name) or str(default)
        if not text.isdigit() or int(text) < 1:
            raise UsageError(f"{name} in luigi.cfg must be a whole number of 1 or more")
        caps[name] = int(text)
    timeout = setting("stream_timeout_s") or "30"
    if not timeout.replace(".", "", 1).isdigit() or not 0 < float(timeout) <= 86400:
        raise UsageError("stream_timeout_s in luigi.cfg must be seconds, above 0 and at most 86400")
    return StreamSettings(
        enabled=not args.no_stream,
        authenticated=args.stream_authenticated,
        per_host=caps["stream_per_host"],
        total=caps["stream_total"],
        timeout_s=float(timeout),
    )


def cmd_watch(args: argparse.Namespace) -> int:
    from crawl_io.crawldb.crawldir import CrawlDir
    from crawl_io.sources import read_hosts_lines
    from pipeline import settings as config
    from sensors.hosts import range_found
    from sensors.options import WatchOptions
    from sensors.watch import run_watch

    for flag, value in (
        ("--seconds", args.seconds),
        ("--max-backoff", args.max_backoff),
        ("--keep-days", args.keep_days),
        ("--settle", args.settle),
    ):
        if value is not None:
            check_number(flag, value, 0, True, 1e9)
    config.override(
        hosts_file=args.hosts_file, rules_file=args.rules_file, crawl_dir=args.crawl_dir
    )
    settings = config.sharecrawl()
    # fail now, before anything is written; a range is never swept here, whatever its width
    hosts, ranges = read_hosts_lines(settings.hosts_file, allow_wide=True)
    crawl = CrawlDir(settings.crawl_dir)
    crawl.check(create=True)
    crawl.make()  # what a first round would make
    hosts += range_found(crawl, ranges)
    crawl_args = None
    if args.crawl:  # a round for the hints: `sharecrawl crawl --hinted-only` on the same files
        crawl_args = [
            "--hosts-file",
            str(Path(settings.hosts_file).resolve()),
            "--crawl-dir",
            str(crawl.root.resolve()),
        ]
        if args.rules_file:
            crawl_args += ["--rules-file", str(Path(args.rules_file).resolve())]
    return run_watch(
        WatchOptions(
            crawl.root,
            hosts,
            settings.rules_file or None,
            args.seconds,
            timeout_s=settings.host_timeout_s,
            liveness_timeout_s=settings.liveness_timeout_s,
            max_backoff_s=args.max_backoff,
            keep_days=args.keep_days,
            crawl_args=crawl_args,
            settle_s=args.settle,
        )
    )


def cmd_simulate(args: argparse.Namespace) -> int:
    given = {k: v for k in SIMULATE_LIMITS if (v := getattr(args, k)) is not None}
    for name, value in given.items():
        check_number(f"--{name.replace('_', '-')}", value, *SIMULATE_LIMITS[name])
    from crawl_io.workers import WorkerDied
    from pipeline.scheduling.policies import POLICY_NAMES
    from simulator.lan import SimParams
    from simulator.simulate import print_table, simulate

    crawlers = given.get("crawlers", SimParams.crawlers)
    if args.hint_crawlers is not None and args.hint_crawlers > crawlers:
        raise UsageError(
            f"--hint-crawlers must be at most --crawlers ({args.hint_crawlers} > {crawlers})"
        )
    policies = [p.strip() for p in (args.policies or ",".join(POLICY_NAMES)).split(",")]
    policies = [p for p in policies if p]
    if unknown := [p for p in policies if p not in POLICY_NAMES]:
        raise UsageError(
            f"--policies: unknown policy {unknown[0]!r}; choose from {', '.join(POLICY_NAMES)}"
        )
    if not policies:
        raise UsageError("--policies names no policy")
    try:
        result = simulate(policies=policies, **given)
    except ValueError as e:
        raise UsageError(str(e)) from None
    except WorkerDied as e:  # each worker holds a copy of the trace: fewer need less memory
        print(f"sharecrawl simulate: {e}: run it again, with fewer --workers", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result)
    return 0

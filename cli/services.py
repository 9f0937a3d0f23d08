"""The long-running and self-contained commands: `serve` (the search page), `watch` (SMB
change notifications) and `simulate` (the scheduling policies on a synthetic LAN)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from sharecrawl.cli.inputs import DAY_S, SIMULATE_LIMITS, UsageError, checked_flags, number_setting

if TYPE_CHECKING:
    from sharecrawl.web.copy_source import StreamSettings


def cmd_serve(args: argparse.Namespace) -> int:
    from sharecrawl.cli.read import crawl_dir
    from sharecrawl.web.server import ListenError, serve

    crawl = crawl_dir(args)
    # only checks: a folder that is not a crawl dir is refused; a missing or empty one is
    # served with a page saying to run a crawl, until one has
    crawl.check(create=True)
    checked_flags(args, {"port": (0, False, 65535), "workers": (1, False, 64)})
    try:
        return serve(crawl.root, args.host, args.port, args.workers, _stream_settings(args))
    except ListenError as e:
        raise UsageError(e.strerror) from None


def _stream_settings(args: argparse.Namespace) -> StreamSettings:
    from sharecrawl.web.copy_source import StreamSettings

    whole = (1, False, math.inf)
    return StreamSettings(
        enabled=not args.no_stream,
        authenticated=args.stream_authenticated,
        per_host=number_setting("stream_per_host", "4", int, whole),
        total=number_setting("stream_total", "32", int, whole),
        timeout_s=number_setting("stream_timeout_s", "30", float, (0, True, DAY_S)),
    )


def cmd_watch(args: argparse.Namespace) -> int:
    from sharecrawl.cli.inputs import load_settings
    from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir
    from sharecrawl.crawl_io.sources import read_hosts_lines
    from sharecrawl.sensors.hosts import range_found
    from sharecrawl.sensors.options import WatchOptions
    from sharecrawl.sensors.watch import run_watch

    wait = (0, True, 1e9)  # seconds, or days
    checked_flags(args, dict.fromkeys(("seconds", "max_backoff", "keep_days", "settle"), wait))
    settings = load_settings(
        hosts_file=args.hosts_file, rules_file=args.rules_file, crawl_dir=args.crawl_dir
    )
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
    given = checked_flags(args, SIMULATE_LIMITS)
    from sharecrawl.crawl_io.workers import WorkerDied
    from sharecrawl.pipeline.scheduling.policies import POLICY_NAMES
    from sharecrawl.simulator.lan import SimParams
    from sharecrawl.simulator.simulate import print_table, simulate

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

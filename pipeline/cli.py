"""The `sharecrawl` command. Every subcommand exits non-zero on failure: 2 for bad input
(nothing is written then), 1 for a failed round or query."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path

from crawl_io.crawldir import CrawlDir
from crawl_io.sources import ConfigError, read_hosts_file
from pipeline import settings as config
from pipeline.interrupt import interruptible
from pipeline.interrupt import report as report_interrupt

log = logging.getLogger("sharecrawl")


class UsageError(Exception):
    """Bad input from the user: one line on stderr, exit status 2."""


def _crawl_dir(args: argparse.Namespace) -> CrawlDir:
    return CrawlDir(args.crawl_dir or config.sharecrawl().crawl_dir)


def _existing_crawl(args: argparse.Namespace) -> CrawlDir:
    crawl = _crawl_dir(args)
    crawl.check(create=False)
    if crawl.current() == 0:
        raise ConfigError(f"{str(crawl.root)!r} has no finished round yet")
    return crawl


def cmd_crawl(args: argparse.Namespace) -> int:
    from pipeline.policies import get_policy
    from pipeline.rounds import run_rounds
    from pipeline.status import format_report, round_report

    if args.rounds < 1:
        raise UsageError("--rounds must be at least 1")
    config.override(
        hosts_file=args.hosts_file, rules_file=args.rules_file, crawl_dir=args.crawl_dir,
        crawlers=args.crawlers,
        round_seconds=args.round_seconds, policy=args.policy, runner=args.runner,
    )  # fmt: skip
    settings = config.sharecrawl()
    read_hosts_file(settings.hosts_file)  # fail now, before anything is written
    try:
        get_policy(settings.policy)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if settings.crawlers < 1:
        raise UsageError("--crawlers must be at least 1")
    crawl = CrawlDir(settings.crawl_dir)
    crawl.check(create=True)
    crawl.crawldb.mkdir(parents=True, exist_ok=True)
    run_rounds(str(crawl.root), args.rounds, lambda n: print(format_report(round_report(crawl))))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from pipeline.status import format_report, round_report

    crawl = _existing_crawl(args)
    report = round_report(crawl)
    print(json.dumps(report, default=str) if args.json else format_report(report))
    if args.plot:
        from pipeline.plots import plot_status

        plot_status(crawl.version_dir(crawl.current()), Path(args.plot))
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from queries.search import QueryError, format_results, search

    crawl = _existing_crawl(args)
    if not crawl.index.exists():
        raise ConfigError(f"{str(crawl.root)!r} has no search index yet")
    try:
        results = search(crawl.index, " ".join(args.query), limit=args.limit,
                         all_hosts=args.all_hosts, latest=args.latest)  # fmt: skip
    except QueryError as e:
        raise UsageError(str(e)) from None
    print(json.dumps(results, default=str, ensure_ascii=False) if args.json
          else format_results(results))  # fmt: skip
    return 0


def cmd_sql(args: argparse.Namespace) -> int:
    from queries.views import SQLError, run_sql

    crawl = _existing_crawl(args)
    sql = args.sql if args.sql is not None else sys.stdin.read()
    try:
        columns, rows = run_sql(crawl, sql)
    except SQLError as e:
        print(f"sharecrawl: sql: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps([dict(zip(columns, r, strict=True)) for r in rows], default=str,
                         ensure_ascii=False))  # fmt: skip
    else:
        print("\t".join(columns))
        for row in rows:
            print("\t".join("" if v is None else str(v) for v in row))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from pipeline.demo import run_demo

    return run_demo(Path(args.workdir))


def cmd_simulate(args: argparse.Namespace) -> int:
    from pipeline.simulate import run_cli

    return run_cli(args.rest)  # the simulator parses its own options


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sharecrawl", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    def crawl_dir(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--crawl-dir", help="the crawl directory (luigi.cfg: crawl_dir)")

    sp = sub.add_parser("crawl", help="run more crawl rounds")
    sp.add_argument("--rounds", type=int, default=1)
    sp.add_argument("--hosts-file")
    sp.add_argument("--rules-file", help="the operator's crawl rules (luigi.cfg: rules_file)")
    crawl_dir(sp)
    sp.add_argument("--crawlers", type=int)
    sp.add_argument("--round-seconds", type=float)
    sp.add_argument("--policy")
    sp.add_argument("--runner", choices=config.RUNNERS)
    sp.set_defaults(func=cmd_crawl)

    sp = sub.add_parser("search", help="search the media index")
    sp.add_argument("--json", action="store_true")
    sp.add_argument("--limit", type=int, default=20)
    sp.add_argument("--all-hosts", action="store_true", help="show copies on offline hosts")
    sp.add_argument("--latest", action="store_true", help="newest episode first")
    crawl_dir(sp)
    sp.add_argument("query", nargs="+")
    sp.set_defaults(func=cmd_search)

    sp = sub.add_parser("sql", help="read-only SQL over the tables (stdin when no SQL given)")
    sp.add_argument("--json", action="store_true")
    crawl_dir(sp)
    sp.add_argument("sql", nargs="?")
    sp.set_defaults(func=cmd_sql)

    sp = sub.add_parser("status", help="what the last round did")
    sp.add_argument("--json", action="store_true")
    sp.add_argument("--plot", metavar="FILE.png", help="draw partition sizes, media per host")
    crawl_dir(sp)
    sp.set_defaults(func=cmd_status)

    sp = sub.add_parser("demo", help="crawl a demo LAN of real tagged media in three rounds")
    sp.add_argument("--workdir", default="demo-lan")
    sp.set_defaults(func=cmd_demo)

    sp = sub.add_parser("simulate", help="compare scheduling policies on a synthetic LAN "
                        "(sharecrawl simulate --help)", add_help=False)  # fmt: skip
    sp.set_defaults(func=cmd_simulate, rest=[])
    return p


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    for chatty in ("luigi", "luigi-interface"):  # their progress is ours to tell
        logging.getLogger(chatty).setLevel(logging.WARNING)
    logging.getLogger("mrjob").setLevel(logging.ERROR)  # it warns that no mrjob.conf exists
    argv = list(sys.argv[1:] if argv is None else argv)
    args, rest = parser().parse_known_args(argv)
    if args.command == "simulate":
        args.rest = rest
    elif rest:
        parser().error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        with interruptible(watchdog=True) if args.command == "crawl" else nullcontext():
            return args.func(args)
    except (UsageError, ConfigError) as e:
        print(f"sharecrawl: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # one line: where the crawl stopped, what to do next
        return report_interrupt(e)
    except Exception as e:  # a failed round: say what failed, not a traceback
        from pipeline.rounds import RoundFailed

        if isinstance(e, RoundFailed):
            print(f"sharecrawl: {e}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())

"""The `sharecrawl` command. Every subcommand exits non-zero on failure: 2 for bad input
(nothing is written then), 1 for a failed round or query or a damaged crawl directory (the
line says to run `sharecrawl check --repair`), 75 when another crawl holds the crawl
directory's lock (nothing is written then either)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path

from cli.inputs import check_count, check_output_file, check_readable_file, load_settings
from crawl_io.crawldir import CrawlDamaged, CrawlDir
from crawl_io.lock import EXIT_LOCKED, CrawlLock, CrawlLocked, LockError
from crawl_io.sources import ConfigError, check_credentials, read_hosts_file
from pipeline import settings as config
from pipeline.interrupt import interruptible
from pipeline.interrupt import report as report_interrupt

log = logging.getLogger("sharecrawl")


class UsageError(Exception):
    """Bad input from the user: one line on stderr, exit status 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad option gets one line on stderr (not usage text), exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"sharecrawl: error: {self.prog}: {message} (see {self.prog} --help)\n")


def _crawl_dir(args: argparse.Namespace) -> CrawlDir:
    return CrawlDir(args.crawl_dir or config.sharecrawl().crawl_dir)


def _existing_crawl(args: argparse.Namespace) -> CrawlDir:
    crawl = _crawl_dir(args)
    crawl.check(create=False)
    if crawl.current() == 0:
        raise ConfigError(f"{str(crawl.root)!r} has no finished round yet")
    return crawl


def cmd_crawl(args: argparse.Namespace) -> int:
    from pipeline.scheduling.policies import get_policy

    # everything is checked now, before anything is written
    check_count("--rounds", args.rounds)
    if args.rules_file is not None:  # named: it must be there (luigi.cfg's default may not)
        check_readable_file("--rules-file", args.rules_file)
    config.override(
        hosts_file=args.hosts_file, rules_file=args.rules_file, crawl_dir=args.crawl_dir,
        crawlers=args.crawlers,
        round_seconds=args.round_seconds, policy=args.policy, runner=args.runner,
        hinted_only=args.hinted_only or None,
    )  # fmt: skip
    flags = {"crawlers": "--crawlers", "round_seconds": "--round-seconds"}  # settings' checks
    settings = load_settings({k: v for k, v in flags.items() if getattr(args, k) is not None})
    read_hosts_file(settings.hosts_file)
    check_credentials()
    try:
        get_policy(settings.policy)
    except ValueError as e:
        raise UsageError(str(e)) from None
    crawl = CrawlDir(settings.crawl_dir)
    crawl.check(create=True)
    crawl.root.mkdir(parents=True, exist_ok=True)
    with CrawlLock(crawl.root).acquire():  # before anything else is written
        from crawl_io.integrity import verify_round_start  # (a refused crawl imports less)
        from pipeline.rounds import run_rounds
        from queries.status import config_failure_line, format_report, round_report

        verify_round_start(crawl)  # damaged state tables: refuse, never start history over
        crawl.crawldb.mkdir(exist_ok=True)
        refused: list[str] = []

        def after_round(n: int) -> None:
            report = round_report(crawl)
            print(format_report(report), flush=True)
            if report["config_failure"]:
                refused.append(config_failure_line(report))

        run_rounds(str(crawl.root), args.rounds, after_round)
    for line in refused:  # switched-off hosts never fail a round; refusing every one does
        print(f"sharecrawl: {line}", file=sys.stderr)
    return 1 if refused else 0


def cmd_check(args: argparse.Namespace) -> int:
    from crawl_io.integrity import check_crawl, repair_crawl

    crawl = _crawl_dir(args)
    crawl.check(create=False)
    if not args.repair:
        lines, ok = check_crawl(crawl)
        print("\n".join(lines))
        return 0 if ok else 1
    with CrawlLock(crawl.root).acquire():  # never repair under a running crawl
        repair = repair_crawl(crawl)
        print("\n".join(repair.lines))
        if repair.ok and repair.rebuild_index:
            from queries.index import build_index

            build_index(crawl.version_dir(repair.live), crawl.index)
            print(f"{crawl.index}: rebuilt from v{repair.live:06d}")
    return 0 if repair.ok else 1


def cmd_status(args: argparse.Namespace) -> int:
    from queries.status import format_report, round_report

    if args.plot:
        check_output_file("--plot", args.plot)
    crawl = _existing_crawl(args)
    report = round_report(crawl)
    print(json.dumps(report, default=str) if args.json else format_report(report))
    if args.plot:
        from cli.plots import plot_status

        plot_status(crawl.version_dir(crawl.current()), Path(args.plot))
    return 0


def _fail(message: str, status: int = 1) -> int:
    print(f"sharecrawl: {message}", file=sys.stderr)
    return status


def cmd_search(args: argparse.Namespace) -> int:
    from queries.search import IndexUnreadable, QueryError, format_results, search

    check_count("--limit", args.limit)
    crawl = _existing_crawl(args)  # a damaged CURRENT: CrawlDamaged, one line, exit 1
    try:
        results = search(crawl.index, " ".join(args.query), limit=args.limit,
                         all_hosts=args.all_hosts, latest=args.latest)  # fmt: skip
    except IndexUnreadable as e:
        return _fail(f"error: {e}")
    except FileNotFoundError:
        return _fail(f"error: no search index at {crawl.index}: the next round builds it "
                     "(`sharecrawl crawl`)")  # fmt: skip
    except QueryError as e:
        raise UsageError(str(e)) from None
    print(json.dumps(results, default=str, ensure_ascii=False) if args.json
          else format_results(results))  # fmt: skip
    return 0


def cmd_sql(args: argparse.Namespace) -> int:
    from queries.results import json_text, output_format, write_result
    from queries.views import SQLError, SQLRefused, arrow, query, rows

    crawl = _existing_crawl(args)  # a damaged CURRENT: CrawlDamaged, one line, exit 1
    version = crawl.current()
    output = Path(args.output) if args.output else None
    try:  # checked before the query runs: a refused --output writes nothing
        fmt = output_format(output, crawl.root) if output else "text"
    except ValueError as e:
        raise UsageError(str(e)) from None
    sql = args.sql if args.sql is not None else sys.stdin.read()

    def warn(line: str) -> None:
        print(f"sharecrawl: warning: {line}", file=sys.stderr)

    try:
        if fmt in ("csv", "parquet"):
            table = query(crawl, version, sql, arrow, warn)
        else:
            columns, values = query(crawl, version, sql, rows, warn)
    except SQLRefused as e:
        return _fail(f"sql: refused: {e}", 2)
    except SQLError as e:
        return _fail(f"sql: {e}")
    if output is not None:
        try:
            write_result(output, fmt, table if fmt != "json" else json_text(columns, values))
        except OSError as e:
            return _fail(f"sql: cannot write {str(output)!r}: {e.strerror or e}")
        n = table.num_rows if fmt != "json" else len(values)
        print(f"sharecrawl: sql: {n} rows written to {output}", file=sys.stderr)
        return 0
    try:
        if args.json:
            print(json_text(columns, values))
        else:
            print("\t".join(columns))
            for row in values:
                print("\t".join("" if v is None else str(v) for v in row))
        sys.stdout.flush()
    except BrokenPipeError:  # `sharecrawl sql ... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from web.server import ListenError, serve

    crawl = _crawl_dir(args)
    # only checks: a folder that is not a crawl dir is refused; a missing or empty one is
    # served with a page saying to run a crawl, until one has
    crawl.check(create=True)
    if not 0 <= args.port <= 65535:
        raise UsageError("--port must be from 0 (any free port) to 65535")
    if not 1 <= args.workers <= 64:
        raise UsageError("--workers must be from 1 to 64")
    try:
        return serve(crawl.root, args.host, args.port, args.workers)
    except ListenError as e:
        raise UsageError(e.strerror) from None

def cmd_watch(args: argparse.Namespace) -> int:
    from sensors.watch import WatchOptions, run_watch

    config.override(hosts_file=args.hosts_file, rules_file=args.rules_file,
                    crawl_dir=args.crawl_dir)  # fmt: skip
    settings = config.sharecrawl()
    hosts = read_hosts_file(settings.hosts_file)  # fail now, before anything is written
    if args.seconds is not None and args.seconds <= 0:
        raise UsageError("--seconds must be positive")
    crawl = CrawlDir(settings.crawl_dir)
    crawl.check(create=True)
    crawl.crawldb.mkdir(parents=True, exist_ok=True)  # what a first round would make
    if args.settle <= 0:
        raise UsageError("--settle must be positive")
    crawl_args = None
    if args.crawl:  # a round for the hints: `sharecrawl crawl --hinted-only` on the same files
        crawl_args = ["--hosts-file", str(Path(settings.hosts_file).resolve()),
                      "--crawl-dir", str(crawl.root.resolve())]  # fmt: skip
        if args.rules_file:
            crawl_args += ["--rules-file", str(Path(args.rules_file).resolve())]
    return run_watch(WatchOptions(
        crawl.root, hosts, settings.rules_file or None, args.seconds,
        timeout_s=settings.host_timeout_s, liveness_timeout_s=settings.liveness_timeout_s,
        max_backoff_s=args.max_backoff, keep_days=args.keep_days,
        crawl_args=crawl_args, settle_s=args.settle,
    ))  # fmt: skip


def cmd_demo(args: argparse.Namespace) -> int:
    from demolan.demo import run_demo

    return run_demo(Path(args.workdir))


def cmd_simulate(args: argparse.Namespace) -> int:
    from simulator.cli import run_cli

    return run_cli(args.rest)  # the simulator parses its own options


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="sharecrawl", description=__doc__)
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
    sp.add_argument("--hinted-only", action="store_true",
                    help="scan only the partitions that change notifications (`sharecrawl "
                         "watch`) point at, as `watch --crawl` does")  # fmt: skip
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
    sp.add_argument("--output", metavar="FILE", help="write the result to FILE.csv, "
                    "FILE.parquet or FILE.json (outside the crawl dir) instead of stdout")
    crawl_dir(sp)
    sp.add_argument("sql", nargs="?")
    sp.set_defaults(func=cmd_sql)

    sp = sub.add_parser("status", help="what the last round did")
    sp.add_argument("--json", action="store_true")
    sp.add_argument("--plot", metavar="FILE.png", help="draw partition sizes, media per host")
    crawl_dir(sp)
    sp.set_defaults(func=cmd_status)

    sp = sub.add_parser("check", help="verify the live version's parts and the search index")
    sp.add_argument("--repair", action="store_true",
                    help="point CURRENT at the newest usable version, rebuild the index")
    crawl_dir(sp)
    sp.set_defaults(func=cmd_check)

    sp = sub.add_parser("serve", help="the search page for the LAN (read-only, a web browser)")
    crawl_dir(sp)
    sp.add_argument("--host", default="127.0.0.1",
                    help="address to listen on (default 127.0.0.1; 0.0.0.0 for the whole LAN)")
    sp.add_argument("--port", type=int, default=8080, help="TCP port (default 8080; 0: any free)")
    sp.add_argument("--workers", type=int, default=1,
                    help="server processes (default 1; one per core for many users, each "
                         "holding the index in memory)")  # fmt: skip
    sp.set_defaults(func=cmd_serve)

    sp = sub.add_parser("watch", help="keep SMB change notifications as hints for the rounds")
    sp.add_argument("--hosts-file")
    sp.add_argument("--rules-file", help="the operator's crawl rules (luigi.cfg: rules_file)")
    crawl_dir(sp)
    sp.add_argument("--seconds", type=float, help="exit 0 after this long (for cron)")
    sp.add_argument("--max-backoff", type=float, default=300.0,
                    help="longest wait before trying a lost host again, seconds")  # fmt: skip
    sp.add_argument("--keep-days", type=float, default=7.0, help="how long hints are kept")
    sp.add_argument("--crawl", action="store_true",
                    help="when hints have come and gone quiet, run a round of the hinted "
                         "partitions (crawl --hinted-only) unless a crawl is running")
    sp.add_argument("--settle", type=float, default=5.0, metavar="S",
                    help="with --crawl: seconds without a new hint before that round starts")
    sp.set_defaults(func=cmd_watch)

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
    except (CrawlDamaged, LockError) as e:  # one line, saying what to do next
        print(f"sharecrawl: error: {e}", file=sys.stderr)
        return EXIT_LOCKED if isinstance(e, CrawlLocked) else 1
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

"""`search`, `sql`, `status` and `check`, which read a crawl directory without its lock
(published versions never change; CURRENT moves by rename); only `check --repair` takes it."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from sharecrawl.cli.inputs import DAY_S, UsageError, check_count, number_setting, setting

if TYPE_CHECKING:
    from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir
    from sharecrawl.crawl_io.crawldb.layout import CrawlLayout
    from sharecrawl.queries.sandbox import Limits

    Crawl = TypeVar("Crawl", bound=CrawlLayout)


def crawl_root(args: argparse.Namespace) -> str:
    return args.crawl_dir or setting("crawl_dir") or "."


def crawl_dir(args: argparse.Namespace) -> CrawlDir:
    from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir

    return CrawlDir(crawl_root(args))


def existing_crawl(args: argparse.Namespace) -> CrawlDir:
    """The crawl directory, which must hold a published round (a damaged CURRENT: exit 1)."""
    return published(crawl_dir(args))


def published(crawl: Crawl) -> Crawl:
    crawl.check(create=False)
    if crawl.current() == 0:
        raise UsageError(
            f"{str(crawl.root)!r} has no finished round yet: run `sharecrawl crawl` first"
        )
    return crawl


def fail(message: str, status: int = 1) -> int:
    print(f"sharecrawl: {message}", file=sys.stderr)
    return status


def warn(line: str) -> None:
    print(f"sharecrawl: warning: {line}", file=sys.stderr)


def cmd_search(args: argparse.Namespace) -> int:
    from sharecrawl.crawl_io.crawldb.layout import CrawlLayout  # no Arrow: a cold search
    from sharecrawl.queries.querylang import parse_query
    from sharecrawl.queries.search import IndexUnreadable, QueryError, format_results, search
    from sharecrawl.queries.search_results import episodes_gathered

    check_count("--limit", args.limit)
    if args.at is not None:
        raise UsageError(
            "search has no --at: only the live version has a search index; query an older "
            "one's media with `sharecrawl sql --at WHEN`"
        )
    crawl = published(CrawlLayout(crawl_root(args)))
    query = " ".join(args.query)
    try:
        results = search(
            crawl.index, query, limit=args.limit, all_hosts=args.all_hosts, latest=args.latest
        )
    except IndexUnreadable as e:
        return fail(f"error: {e}")
    except FileNotFoundError:
        return fail(
            f"error: no search index at {crawl.index}: the next round builds it "
            "(`sharecrawl crawl`)"
        )
    except QueryError as e:
        raise UsageError(str(e)) from None
    if warning := parse_query(query).unknown_warning():
        warn(f"{warning} (sharecrawl search --help)")
    if args.json:
        print(json.dumps(results, default=str, ensure_ascii=False))
    else:  # a series' episodes in order, unless the newest first were asked for
        print(format_results(results if args.latest else episodes_gathered(results)))
    return 0


SIZE = re.compile(r"\d+(\.\d+)?\s*([KMGT]i?B|B)", re.IGNORECASE)  # DuckDB's size strings


def size_setting(flag: str, given: str | None, name: str) -> str | None:
    """A size as DuckDB writes it: `given` (the value of `flag`), else [sharecrawl] `name`."""
    where, value = (flag, given) if given is not None else (f"[sharecrawl] {name}", setting(name))
    value = (value or "").strip()
    if value and not SIZE.fullmatch(value):
        raise UsageError(f"{where} must be a size such as 512MiB or 2GB, not {value!r}")
    return value or None


def sql_limits(args: argparse.Namespace) -> Limits:
    """The flags, else [sharecrawl] sql_* in luigi.cfg (memory: a quarter of the RAM if unset)."""
    from sharecrawl.queries.sandbox import Limits

    limits = (0, False, 365 * DAY_S)
    timeout = number_setting("sql_timeout_s", "0", float, limits, "--timeout", args.timeout)
    memory = size_setting("--memory-limit", args.memory_limit, "sql_memory_limit")
    if memory is None:
        memory = f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') // 4 // 2**20}MiB"
    return Limits(timeout, memory, size_setting("", None, "sql_temp_limit"))


def cmd_sql(args: argparse.Namespace) -> int:
    from sharecrawl.crawl_io.crawldb.versions import version_at
    from sharecrawl.crawl_io.readable import plural, readable_text
    from sharecrawl.queries.results import json_text, output_format, write_result
    from sharecrawl.queries.views import SQLError, SQLRefused, arrow, query, rows

    limits = sql_limits(args)
    crawl = existing_crawl(args)
    try:
        version = version_at(crawl, args.at) if args.at is not None else crawl.current()
    except ValueError as e:
        raise UsageError(str(e)) from None
    output = Path(args.output) if args.output else None
    try:  # checked before the query runs: a refused --output writes nothing
        fmt = output_format(output, crawl.root) if output else "text"
    except ValueError as e:
        raise UsageError(str(e)) from None
    sql = args.sql if args.sql is not None else sys.stdin.read()
    try:
        if fmt in ("csv", "parquet"):
            table = query(crawl, version, sql, arrow, warn, limits)
        else:
            columns, values = query(crawl, version, sql, rows, warn, limits)
    except SQLRefused as e:
        return fail(f"sql: refused: {e}", 2)
    except SQLError as e:
        return fail(f"sql: {e}")
    if output is not None:
        try:
            write_result(output, fmt, table if fmt != "json" else json_text(columns, values))
        except OSError as e:
            return fail(f"sql: cannot write {str(output)!r}: {e.strerror or e}")
        n = table.num_rows if fmt != "json" else len(values)
        print(f"sharecrawl: sql: {plural(n, 'row')} written to {output}", file=sys.stderr)
        return 0
    if args.json:
        print(json_text(columns, values))
    else:  # a row a line, its values between tabs: a share's names and tags can hold both,
        # and escapes that a terminal would obey (crawl_io.readable)
        print("\t".join(map(readable_text, columns)))
        for row in values:
            print("\t".join("" if v is None else readable_text(str(v)) for v in row))
    sys.stdout.flush()  # a closed pipe shows here, inside main's handling
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from sharecrawl.queries.status import format_report, round_report

    crawl = existing_crawl(args)
    report = round_report(crawl)
    print(json.dumps(report, default=str) if args.json else format_report(report))
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from sharecrawl.crawl_io.crawldb.integrity import check_crawl, repair_crawl
    from sharecrawl.crawl_io.crawldb.lock import CrawlLock

    crawl = crawl_dir(args)
    crawl.check(create=False)
    if not args.repair:
        lines, ok = check_crawl(crawl)
        print("\n".join(lines))
        return 0 if ok else 1
    with CrawlLock(crawl.root).acquire():  # never repair under a running crawl
        repair = repair_crawl(crawl)
        print("\n".join(repair.lines))
        if repair.ok and repair.rebuild_index:
            from sharecrawl.queries.index import build_index

            build_index(crawl.version_dir(repair.live), crawl.index)
            print(f"{crawl.index}: rebuilt from v{repair.live:06d}")
    return 0 if repair.ok else 1

"""The `sharecrawl` command line: every subcommand and every option, each with a sentence of
help and its default.

Building the parser imports nothing beyond argparse, so a command that runs (a refused crawl
above all) pays for nothing it does not use. What help shows from elsewhere is read only when
help is shown (`LazyHelp`): defaults from the [sharecrawl] section of luigi.cfg (the one the
command will use, LUIGI_CONFIG_PATH included), the scheduling policies from their registry,
the search fields from the query language. So help never disagrees with them.
"""

from __future__ import annotations

import argparse

from cli.options import (
    EXIT_STATUSES,
    RUNNER_HELP,
    OneLineParser,
    choices_help,
    crawl_dir_option,
    hosts_file_option,
    option,
    policy_help,
    query_help,
    rules_file_option,
)


def _crawl(sub: argparse._SubParsersAction) -> None:
    sp = sub.add_parser(
        "crawl",
        help="run more crawl rounds",
        description=(
            "Run more rounds on the crawl directory, each continuing from the last one published: "
            "inject (read the hosts file and the rules, check every host is there), generate "
            "(choose partitions by the policy, within the budget), fetch, update and publish a "
            "new crawldb version, index. A round interrupted earlier is finished first. One crawl "
            "at a time per crawl directory: another one exits 75 at once."
        ),
    )
    option(
        sp,
        "--rounds",
        type=int,
        default=1,
        metavar="N",
        help="rounds to run now (default: %(default)s; an hourly cron line runs one)",
    )
    hosts_file_option(
        sp,
        "one host URL a line, read again every round: "
        "smb://[user@]host[:port][/share] or file:///folder; '#' starts a comment",
    )
    rules_file_option(
        sp,
        "the operator's include/exclude rules, read again every round; one named here must exist",
    )
    crawl_dir_option(sp)
    option(
        sp,
        "--crawlers",
        type=int,
        metavar="K",
        setting="crawlers",
        help="hosts fetched at once, one worker process and one connection each",
    )
    option(
        sp,
        "--round-seconds",
        type=float,
        metavar="S",
        setting="round_seconds",
        help="a round's budget: crawlers x S seconds of estimated scan time, and no "
        "host busier than S",
    )
    option(
        sp,
        "--policy",
        metavar="P",
        setting="policy",
        more_help=policy_help,
        help="which partitions to scan first",
    )
    option(
        sp,
        "--runner",
        choices=tuple(RUNNER_HELP),
        setting="runner",
        metavar="R",
        more_help=lambda: choices_help(RUNNER_HELP),
        help="where the update's mrjob jobs run",
    )
    option(
        sp,
        "--hinted-only",
        action="store_true",
        help="scan only the partitions that change notifications (`sharecrawl watch`) "
        "point at, as `watch --crawl` does",
    )
    option(
        sp,
        "--allow-wide-ranges",
        action="store_true",
        setting="allow_wide_ranges",
        help="sweep hosts-file ranges wider than a /16 (65,536 addresses)",
    )
    option(
        sp,
        "--spark-master",
        metavar="URL",
        setting="spark_master",
        help="with --runner spark: the Spark master, e.g. spark://HOST:7077",
    )
    option(
        sp,
        "--scheduler-url",
        metavar="URL",
        help="a central Luigi scheduler (luigid), e.g. http://HOST:8082, that crawl "
        "processes on several machines share (luigi.cfg [core] "
        "default_scheduler_url; default: none, one process runs the round)",
    )
    option(
        sp,
        "--join",
        action="store_true",
        help="with a central scheduler: fetch shards of the round another crawl process "
        "runs on this crawl directory (named by the same path), without its lock; "
        "see docs/scale.md",
    )


def _search(sub: argparse._SubParsersAction) -> None:
    sp = sub.add_parser(
        "search",
        help="search the media index",
        epilog_from=query_help,
        description=(
            "Search the media of the live version: ranked works, the copies of one song, film "
            "or episode being one result, best copy first. Copies on hosts that are offline "
            "now are hidden unless --all-hosts."
        ),
    )
    option(
        sp,
        "--json",
        action="store_true",
        help="print a JSON list of results: each "
        "best copy's url percent-encoded for programs and its iri as people read it",
    )
    option(sp, "--limit", type=int, default=20, metavar="N", help="results to show")
    option(sp, "--all-hosts", action="store_true", help="also show copies on offline hosts")
    option(
        sp,
        "--latest",
        action="store_true",
        help="newest first: the latest season and episode of a series first",
    )
    crawl_dir_option(sp)
    option(sp, "query", nargs="+", help="words and field:value parts (see below)")


def _sql(sub: argparse._SubParsersAction) -> None:
    sp = sub.add_parser(
        "sql",
        help="read-only SQL over the tables",
        description=(
            "Run one read-only statement (SELECT, WITH, VALUES, EXPLAIN without ANALYZE, "
            "DESCRIBE, SHOW, SUMMARIZE) over the live version's tables and views (`SHOW TABLES` "
            "lists them); anything else is refused with exit status 2. Tab-separated lines "
            "with a header, unless --json or --output."
        ),
    )
    option(sp, "--json", action="store_true", help="print a JSON list of objects")
    option(
        sp,
        "--output",
        metavar="FILE",
        help="write the result to FILE.csv, FILE.parquet or FILE.json (by its extension, "
        "outside the crawl directory), whole or not at all",
    )
    option(
        sp,
        "--timeout",
        type=float,
        metavar="SECONDS",
        setting="sql_timeout_s",
        help="stop the statement after SECONDS (0: never), exit 1",
    )
    option(
        sp,
        "--memory-limit",
        metavar="SIZE",
        setting="sql_memory_limit",
        help="memory the statement may take, as DuckDB writes it (512MiB, 2GB; empty: a "
        "quarter of the RAM); past it and sql_temp_limit of spilled files, exit 1",
    )
    crawl_dir_option(sp)
    option(sp, "sql", nargs="?", help="the statement (read from stdin when left out)")


def _status(sub: argparse._SubParsersAction) -> None:
    sp = sub.add_parser(
        "status",
        help="what the last round did",
        description=(
            "What the last round did: partitions scanned and what they found, hosts online and "
            "every host not crawled with why, folders refused, errors."
        ),
    )
    option(
        sp,
        "--json",
        action="store_true",
        help="print one JSON object: the same report, every list whole",
    )
    crawl_dir_option(sp)


def _check(sub: argparse._SubParsersAction) -> None:
    sp = sub.add_parser(
        "check",
        help="verify the live version and the search index",
        description=(
            "Verify the live version: CURRENT names a complete version, every part is there, "
            "reads and matches its SHA-256 in the version's manifest, and the search index opens. "
            "One line per problem; exit status 1 if there is any."
        ),
    )
    option(
        sp,
        "--repair",
        action="store_true",
        help="point CURRENT at the newest intact version, move what is damaged or newer "
        "under damaged/ (never deleted), rebuild the search index; refused while a "
        "crawl runs (it takes the crawl lock)",
    )
    crawl_dir_option(sp)


def _serve(sub: argparse._SubParsersAction) -> None:
    sp = sub.add_parser(
        "serve",
        help="the search page for the LAN",
        description=(
            "Serve the search page for people on the LAN who will not open a terminal. It only "
            "reads the crawl directory, and serves a new round as soon as its index is there."
        ),
    )
    crawl_dir_option(sp)
    option(
        sp,
        "--host",
        default="127.0.0.1",
        metavar="ADDR",
        help="address to listen on; 0.0.0.0 for the whole LAN",
    )
    option(sp, "--port", type=int, default=8080, metavar="N", help="TCP port; 0 picks a free one")
    option(
        sp,
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="server processes, each holding the index in memory; one per core serves many people",
    )
    streaming = sp.add_mutually_exclusive_group()
    option(
        streaming,
        "--no-stream",
        action="store_true",
        help="do not serve copies' bytes at /copy/ID (the page then only shows where they are)",
    )
    option(
        streaming,
        "--stream-authenticated",
        action="store_true",
        help="also stream copies of hosts crawled with credentials, to whoever opens the page",
    )


def _watch(sub: argparse._SubParsersAction) -> None:
    sp = sub.add_parser(
        "watch",
        help="keep SMB change notifications as hints",
        description=(
            "Keep an SMB2 change notification watch on every share of every smb:// host (file:// "
            "hosts are not watched) and write what they say under the crawl directory's hints/, "
            "for analysts and the simulator. Runs until stopped; SIGTERM ends it with status 0. "
            "It never takes the crawl lock."
        ),
    )
    hosts_file_option(sp, "the hosts file, as crawl reads it")
    rules_file_option(sp, "crawl rules: hints for excluded paths are dropped")
    crawl_dir_option(sp)
    option(
        sp,
        "--seconds",
        type=float,
        metavar="S",
        help="stop with status 0 after S seconds, for cron (default: run until stopped)",
    )
    option(
        sp,
        "--max-backoff",
        type=float,
        default=300.0,
        metavar="S",
        help="longest wait, in seconds, before a lost host is tried again",
    )
    option(
        sp,
        "--keep-days",
        type=float,
        default=7.0,
        metavar="D",
        help="hints older than D days are removed",
    )
    option(
        sp,
        "--crawl",
        action="store_true",
        help="when hints have come and gone quiet, run a round of the hinted partitions "
        "(crawl --hinted-only) unless a crawl is running",
    )
    option(
        sp,
        "--settle",
        type=float,
        default=5.0,
        metavar="S",
        help="with --crawl: seconds without a new hint before that round starts",
    )


def _demo(sub: argparse._SubParsersAction) -> None:
    sp = sub.add_parser(
        "demo",
        help="crawl a demo LAN of real tagged media",
        description=(
            "Build a LAN of four hosts as local folders of real tagged media, crawl it in three "
            "rounds with changes in between (files added, retagged, deleted; a host switched "
            "off), print each round's report and search it. Takes the crawl lock like crawl."
        ),
    )
    option(
        sp,
        "--workdir",
        default="demo-lan",
        metavar="DIR",
        help="where the demo LAN and its crawl directory go, rebuilt at every run; a "
        "folder that is not a demo's is refused",
    )


def parser() -> OneLineParser:
    """The whole command line; a subcommand's `command` names the function that runs it."""
    p = OneLineParser(
        prog="sharecrawl",
        epilog=EXIT_STATUSES,
        description=(
            "A fresh, searchable index of the audio and video files that the hosts of a LAN "
            "share over SMB. `sharecrawl COMMAND --help` explains a command and its options."
        ),
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_crawl, _search, _sql, _status, _check, _serve, _watch, _demo):
        add(sub)
    sub.add_parser(
        "simulate",
        add_help=False,  # it parses its own options
        help="compare the scheduling policies on a synthetic LAN",
    )
    return p

"""The `sharecrawl` command line: every subcommand and every option, each with a sentence of
help and its default.

Building the parser imports nothing beyond argparse, so a command that runs (a refused crawl
above all) pays for nothing it does not use. What help shows from elsewhere is read only when
help is shown (`LazyHelp`): defaults from the [sharecrawl] section of the luigi.cfg the
command will use and from the simulator, the policies, the search fields. So help never
disagrees with them.
"""

from __future__ import annotations

import argparse
import os
import re
import textwrap
from collections.abc import Callable
from functools import partial

# mrjob's runners, as `crawl --runner` offers them.
RUNNER_HELP: dict[str, str] = {
    "inline": "in this process, one task after another (the simplest to debug)",
    "local": "in local subprocesses, one a task, on this machine",
    "spark": "on Spark through spark-submit (needs pyspark and Java)",
}

EXIT_STATUSES = """exit status: 0 success; 1 a failed round or query, a damaged crawl directory
(the message says to run `sharecrawl check --repair`), problems found by `check`; 2 bad
input, nothing written; 75 another crawl holds the crawl directory's lock; 130 / 143 a crawl
stopped by SIGINT / SIGTERM (run the same command again to finish its round)."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad option gets one line on stderr (not usage text), exit status 2;
    `epilog_from` makes the text after the options when help is shown."""

    def __init__(
        self, *args: object, epilog_from: Callable[[], str] | None = None, **kwargs: object
    ) -> None:
        kwargs.setdefault("formatter_class", LazyHelp)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.epilog_from = epilog_from

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"sharecrawl: error: {self.prog}: {message} (see {self.prog} --help)\n")

    def format_help(self) -> str:
        if self.epilog_from is not None:
            self.epilog = self.epilog_from()
        return super().format_help()

    def option(
        self,
        *flags: str,
        setting: str | None = None,
        default_from: Callable[[], str] | None = None,
        more_help: Callable[[], str] | None = None,
        **kwargs: object,
    ) -> None:
        """add_argument; help shows as the default [sharecrawl] `setting` from luigi.cfg, or
        `default_from()`, and `more_help()` after the help text."""
        action = self.add_argument(*flags, **kwargs)  # type: ignore[arg-type]
        if setting is not None:
            default_from = partial(from_config, setting)
        action.default_from = default_from  # type: ignore[attr-defined]
        action.more_help = more_help  # type: ignore[attr-defined]


class LazyHelp(argparse.RawDescriptionHelpFormatter):
    """Help text with its default and the texts made when shown (`OneLineParser.option`).
    Lines in a help text stay lines."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default_from = getattr(action, "default_from", None)
        if default_from is not None:
            text += f" (default: {default_from()})".replace("%", "%%")
        elif "%(default)" not in text and action.default not in (None, False, argparse.SUPPRESS):
            text += f" (default: %(default){'g' if isinstance(action.default, float) else 's'})"
        more = getattr(action, "more_help", None)
        if more is not None:
            text += more().replace("%", "%%")
        return text

    def _split_lines(self, text: str, width: int) -> list[str]:
        lines: list[str] = []
        for paragraph in text.splitlines():
            lines += _wrap(paragraph, width)
        return lines

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n".join(indent + line for line in self._split_lines(text, width - len(indent)))


def _wrap(paragraph: str, width: int) -> list[str]:
    """A paragraph wrapped to `width`; an indented one ('  name  text') hangs under its
    text, so that a list of choices stays a list."""
    hang = re.match(r" +\S+ +", paragraph)
    if hang is None:
        return textwrap.wrap(paragraph, width) or [""]
    return textwrap.wrap(paragraph, max(width, hang.end() + 20), subsequent_indent=" " * hang.end())


def from_config(name: str) -> str:
    """The value of [sharecrawl] `name` that a command would use now, and where it is from."""
    from cli.inputs import setting

    value = setting(name)
    value = "unset" if value is None else value or "none"
    return f"{value}, from [sharecrawl] {name} in luigi.cfg"


def from_simulator(name: str) -> str:
    from simulator.lan import SimParams

    return f"{getattr(SimParams, name):g}"


def choices_help(entries: dict[str, str]) -> str:
    width = max(map(len, entries)) + 2
    return ":" + "".join(f"\n  {name:<{width}}{text}" for name, text in entries.items())


def policy_help() -> str:
    from pipeline.scheduling.policies import POLICY_HELP

    return choices_help(POLICY_HELP)


def query_help() -> str:
    """`search --help`'s query syntax, with the fields the query language defines."""
    from queries.querylang import KINDS, NUMERIC_FIELDS, TEXT_FIELDS, field_names

    listed = [
        f"words in one field: {', '.join(TEXT_FIELDS)}",
        f"a number or a range: {', '.join(NUMERIC_FIELDS)}",
        f"kind: {' or '.join(KINDS)}",
    ]
    others = [f for f in field_names() if f not in {*TEXT_FIELDS, *NUMERIC_FIELDS, "kind"}]
    if others:
        listed.append(f"also: {', '.join(others)}")
    fields = "\n".join(f"  {line}" for line in listed)
    return f"""query syntax (as in beets): every part must match.
  madonna music                  words, found in tags and in file and folder names
  artist:madonna title:"frozen"  words in one field; quotes keep words together
  year:1999  year:1995..2005     a number, or a range (open ends: year:2000..)
  kind:video                     audio or video
fields:
{fields}
A field name the index does not know (foo:bar) is searched as plain words, with a warning.

examples:
  sharecrawl search madonna music
  sharecrawl search --all-hosts --json artist:madonna year:1995..2005
  sharecrawl search --latest series:lost season:6
  sharecrawl search мумий тролль           (Cyrillic and Latin spellings meet)"""


def _crawl_dir(sp: OneLineParser) -> None:
    sp.option(
        "--crawl-dir",
        metavar="DIR",
        setting="crawl_dir",
        help="the crawl directory: crawldb versions, segments, the search index",
    )


def _crawl(sp: OneLineParser) -> None:
    sp.option(
        "--rounds",
        type=int,
        default=1,
        metavar="N",
        help="rounds to run now (default: %(default)s; an hourly cron line runs one)",
    )
    sp.option(
        "--hosts-file",
        metavar="FILE",
        setting="hosts_file",
        help="one host URL a line, read again every round: "
        "smb://[user@]host[:port][/share] or file:///folder; '#' starts a comment",
    )
    sp.option(
        "--rules-file",
        metavar="FILE",
        setting="rules_file",
        help="the operator's include/exclude rules, read again every round; one named here "
        "must exist",
    )
    _crawl_dir(sp)
    sp.option(
        "--crawlers",
        type=int,
        metavar="K",
        setting="crawlers",
        help="hosts fetched at once, one worker process and one connection each",
    )
    sp.option(
        "--round-seconds",
        type=float,
        metavar="S",
        setting="round_seconds",
        help="a round's budget: crawlers x S seconds of estimated scan time, and no "
        "host busier than S",
    )
    sp.option(
        "--policy",
        metavar="P",
        setting="policy",
        more_help=policy_help,
        help="which partitions to scan first",
    )
    sp.option(
        "--runner",
        choices=tuple(RUNNER_HELP),
        setting="runner",
        metavar="R",
        more_help=lambda: choices_help(RUNNER_HELP),
        help="where the update's mrjob jobs run",
    )
    sp.option(
        "--hinted-only",
        action="store_true",
        help="scan only the partitions that change notifications (`sharecrawl watch`) "
        "point at, as `watch --crawl` does",
    )
    sp.option(
        "--allow-wide-ranges",
        action="store_true",
        setting="allow_wide_ranges",
        help="sweep hosts-file ranges wider than a /16 (65,536 addresses)",
    )
    sp.option(
        "--spark-master",
        metavar="URL",
        setting="spark_master",
        help="with --runner spark: the Spark master, e.g. spark://HOST:7077",
    )
    sp.option(
        "--scheduler-url",
        metavar="URL",
        help="a central Luigi scheduler (luigid), e.g. http://HOST:8082, that crawl "
        "processes on several machines share (luigi.cfg [core] "
        "default_scheduler_url; default: none, one process runs the round)",
    )
    sp.option(
        "--join",
        action="store_true",
        help="with a central scheduler: fetch shards of the round another crawl process "
        "runs on this crawl directory (named by the same path), without its lock; "
        "see docs/scale.md",
    )


def _search(sp: OneLineParser) -> None:
    sp.epilog_from = query_help
    sp.option(
        "--json",
        action="store_true",
        help="print a JSON list of results: each "
        "best copy's url percent-encoded for programs and its iri as people read it",
    )
    sp.option("--limit", type=int, default=20, metavar="N", help="results to show")
    sp.option("--all-hosts", action="store_true", help="also show copies on offline hosts")
    sp.option(
        "--latest",
        action="store_true",
        help="newest first: the latest season and episode of a series first",
    )
    _crawl_dir(sp)
    sp.option("query", nargs="+", help="words and field:value parts (see below)")


def _sql(sp: OneLineParser) -> None:
    sp.option("--json", action="store_true", help="print a JSON list of objects")
    sp.option(
        "--output",
        metavar="FILE",
        help="write the result to FILE.csv, FILE.parquet or FILE.json (by its extension, "
        "outside the crawl directory), whole or not at all",
    )
    sp.option(
        "--timeout",
        type=float,
        metavar="SECONDS",
        setting="sql_timeout_s",
        help="stop the statement after SECONDS (0: never), exit 1",
    )
    sp.option(
        "--memory-limit",
        metavar="SIZE",
        setting="sql_memory_limit",
        help="memory the statement may take, as DuckDB writes it (512MiB, 2GB; empty: a "
        "quarter of the RAM); past it and sql_temp_limit of spilled files, exit 1",
    )
    _crawl_dir(sp)
    sp.option("sql", nargs="?", help="the statement (read from stdin when left out)")


def _status(sp: OneLineParser) -> None:
    sp.option(
        "--json",
        action="store_true",
        help="print one JSON object: the same report, every list whole",
    )
    _crawl_dir(sp)


def _check(sp: OneLineParser) -> None:
    sp.option(
        "--repair",
        action="store_true",
        help="point CURRENT at the newest intact version, move what is damaged or newer "
        "under damaged/ (never deleted), rebuild the search index; refused while a "
        "crawl runs (it takes the crawl lock)",
    )
    _crawl_dir(sp)


def _serve(sp: OneLineParser) -> None:
    _crawl_dir(sp)
    sp.option(
        "--host",
        default="127.0.0.1",
        metavar="ADDR",
        help="address to listen on; 0.0.0.0 for the whole LAN",
    )
    sp.option("--port", type=int, default=8080, metavar="N", help="TCP port; 0 picks a free one")
    sp.option(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="server processes, each holding the index in memory; one per core serves many people",
    )
    streaming = sp.add_mutually_exclusive_group()
    streaming.add_argument(
        "--no-stream",
        action="store_true",
        help="do not serve copies' bytes at /copy/ID (the page then only shows where they are)",
    )
    streaming.add_argument(
        "--stream-authenticated",
        action="store_true",
        help="also stream copies of hosts crawled with credentials, to whoever opens the page",
    )


def _watch(sp: OneLineParser) -> None:
    sp.option("--hosts-file", metavar="FILE", setting="hosts_file", help="as crawl reads it")
    sp.option(
        "--rules-file",
        metavar="FILE",
        setting="rules_file",
        help="crawl rules: hints for excluded paths are dropped",
    )
    _crawl_dir(sp)
    sp.option(
        "--seconds",
        type=float,
        metavar="S",
        help="stop with status 0 after S seconds, for cron (default: run until stopped)",
    )
    sp.option(
        "--max-backoff",
        type=float,
        default=300.0,
        metavar="S",
        help="longest wait, in seconds, before a lost host is tried again",
    )
    sp.option(
        "--keep-days",
        type=float,
        default=7.0,
        metavar="D",
        help="hints older than D days are removed",
    )
    sp.option(
        "--crawl",
        action="store_true",
        help="when hints have come and gone quiet, run a round of the hinted partitions "
        "(crawl --hinted-only) unless a crawl is running",
    )
    sp.option(
        "--settle",
        type=float,
        default=5.0,
        metavar="S",
        help="with --crawl: seconds without a new hint before that round starts",
    )


def _demo(sp: OneLineParser) -> None:
    sp.option(
        "--workdir",
        default="demo-lan",
        metavar="DIR",
        help="where the demo LAN and its crawl directory go, rebuilt at every run; a "
        "folder that is not a demo's is refused",
    )


# `simulate`'s options: (flag, type, metavar, help); the defaults are the simulator's.
SIMULATE_OPTIONS: tuple[tuple[str, type, str, str], ...] = (
    ("--hosts", int, "N", "hosts on the synthetic LAN"),
    ("--days", float, "D", "measured days (after warm-up)"),
    ("--crawlers", int, "K", "hosts scanned at once"),
    ("--seed", int, "S", "the LAN and its trace"),
    ("--round-seconds", float, "S", "a round's budget: crawlers x S, and no host busier than S"),
    ("--warmup-days", float, "D", "simulated, not measured"),
    ("--min-round-s", float, "S", "rounds run back to back, at least S (= --round-seconds: fixed)"),
    ("--notify-share", float, "X", "share of hosts that send change notifications (to sensors)"),
    ("--hint-crawlers", int, "K", "crawlers kept by sensors for notified changes (0: none)"),
    ("--hinted-scan-folders", int, "N", "folders a hinted scan lists (0: the whole partition)"),
)


def _simulate(sp: OneLineParser) -> None:
    sp.option("--json", action="store_true", help="print one JSON object")
    for flag, kind, metavar, text in SIMULATE_OPTIONS:
        name = flag[2:].replace("-", "_")
        sp.option(
            flag,
            type=kind,
            metavar=metavar,
            default_from=partial(from_simulator, name),
            help=text,
        )
    sp.option(
        "--policies",
        metavar="a,b",
        more_help=policy_help,
        help="comma separated (default: all)",
    )
    sp.option(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        metavar="N",
        help="policies replayed at once, each in a worker process holding the trace",
    )


# name: (help, description, options)
COMMANDS: dict[str, tuple[str, str, Callable[[OneLineParser], None]]] = {
    "crawl": (
        "run more crawl rounds",
        "Run more rounds on the crawl directory, each continuing from the last one published: "
        "inject (read the hosts file and the rules, check every host is there), generate "
        "(choose partitions by the policy, within the budget), fetch, update and publish a "
        "new crawldb version, index. A round interrupted earlier is finished first. One crawl "
        "at a time per crawl directory: another one exits 75 at once.",
        _crawl,
    ),
    "search": (
        "search the media index",
        "Search the media of the live version: ranked works, the copies of one song, film "
        "or episode being one result, best copy first. Copies on hosts that are offline "
        "now are hidden unless --all-hosts.",
        _search,
    ),
    "sql": (
        "read-only SQL over the tables",
        "Run one read-only statement (SELECT, WITH, VALUES, EXPLAIN without ANALYZE, "
        "DESCRIBE, SHOW, SUMMARIZE) over the live version's tables and views (`SHOW TABLES` "
        "lists them); anything else is refused with exit status 2. Tab-separated lines "
        "with a header, unless --json or --output.",
        _sql,
    ),
    "status": (
        "what the last round did",
        "What the last round did: partitions scanned and what they found, hosts online and "
        "every host not crawled with why, folders refused, errors.",
        _status,
    ),
    "check": (
        "verify the live version and the search index",
        "Verify the live version: CURRENT names a complete version, every part is there, "
        "reads and matches its SHA-256 in the version's manifest, and the search index opens. "
        "One line per problem; exit status 1 if there is any.",
        _check,
    ),
    "serve": (
        "the search page for the LAN",
        "Serve the search page for people on the LAN who will not open a terminal. It only "
        "reads the crawl directory, and serves a new round as soon as its index is there.",
        _serve,
    ),
    "watch": (
        "keep SMB change notifications as hints",
        "Keep an SMB2 change notification watch on every share of every smb:// host (file:// "
        "hosts are not watched) and write what they say under the crawl directory's hints/, "
        "for analysts and the simulator. Runs until stopped; SIGTERM ends it with status 0. "
        "It never takes the crawl lock.",
        _watch,
    ),
    "demo": (
        "crawl a demo LAN of real tagged media",
        "Build a LAN of four hosts as local folders of real tagged media, crawl it in three "
        "rounds with changes in between (files added, retagged, deleted; a host switched "
        "off), print each round's report and search it. Takes the crawl lock like crawl.",
        _demo,
    ),
    "simulate": (
        "compare the scheduling policies on a synthetic LAN",
        "Compare the scheduling policies on a synthetic LAN (one trace, one seed): each "
        "replayed with the real scheduling code, side by side with the optimum at the true "
        "rates.",
        _simulate,
    ),
}


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
    for name, (short, description, add_options) in COMMANDS.items():
        add_options(sub.add_parser(name, help=short, description=description))
    return p

"""The `sharecrawl` command line: every command and option, each with a line of help and its
default. Building it imports only argparse, so a refused crawl pays for nothing more; defaults
from luigi.cfg and the simulator, policies and search fields are read when help is shown."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import textwrap
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

# mrjob's runners, as `crawl --runner` offers them.
RUNNER_HELP: dict[str, str] = {
    "inline": "in this process, one task after another (the simplest to debug)",
    "local": "in subprocesses on this machine",
    "spark": "on Spark through spark-submit (needs pyspark and Java)",
}

EXIT_STATUSES = """exit status: 0 success; 1 a failed round or query, a damaged crawl directory,
problems `check` found; 2 bad input, nothing written; 75 another crawl holds the lock; 130 / 143
a crawl stopped by SIGINT / SIGTERM (the same command again finishes its round)."""


# the table of README's "Exit status", for cron and systemd
CRAWL_EXIT_STATUSES = """exit status:
  0        as expected (hosts switched off are normal on a LAN)
  1        a person is needed (a line says why): no host answered at
           all, every host that answered refused us, none was crawled,
           damage the round could not mend, or the round failed
  2        bad input (hosts file, rules file, an option): nothing written
  75       another crawl holds the crawl directory: nothing written
  130/143  stopped by SIGINT/SIGTERM: run it again to finish the round"""


class HelpText(str):
    """A help text finished when help is shown: argparse fills a help text's `%(default)s`
    with `%` then, so that is when the default (from luigi.cfg, or the `default_from` call)
    and `more_help()` are added and the lines wrapped (RawTextHelpFormatter keeps them)."""

    default_from: Callable[[], str] | None
    more_help: Callable[[], str] | None

    def __new__(
        cls,
        text: str,
        default_from: Callable[[], str] | None = None,
        more_help: Callable[[], str] | None = None,
    ) -> HelpText:
        made = super().__new__(cls, text)
        made.default_from, made.more_help = default_from, more_help
        return made

    def __mod__(self, params: object) -> str:
        text = str(self)
        default = params.get("default") if isinstance(params, dict) else None
        if self.default_from is not None:
            text += f" (default: {self.default_from()})".replace("%", "%%")
        elif "%(default)" not in text and default not in (None, False):
            text += f" (default: %(default){'g' if isinstance(default, float) else 's'})"
        if self.more_help is not None:
            text += self.more_help().replace("%", "%%")
        # the columns right of the options: argparse's widest option column is 24
        return "\n".join(wrapped(text % params, max(text_width() - 24, 30)))


def text_width() -> int:
    """argparse's width of help: the terminal's, less 2."""
    return max(shutil.get_terminal_size().columns - 2, 40)


def wrapped(text: str, width: int) -> list[str]:
    """Each line of `text` wrapped to `width` (`_wrap`): lines in a help text stay lines."""
    return [line for paragraph in text.splitlines() for line in _wrap(paragraph, width)]


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad option gets one line on stderr (not usage text), exit status 2;
    every help text a HelpText (its default shown), texts wrapped here, and `epilog_from`
    makes the text after the options when help is shown."""

    epilog_from: Callable[[], str] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        for text in ("description", "epilog"):
            if kwargs.get(text):
                kwargs[text] = "\n".join(wrapped(kwargs[text], text_width()))
        super().__init__(*args, formatter_class=argparse.RawTextHelpFormatter, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        text = kwargs.get("help")
        if isinstance(text, str) and not isinstance(text, HelpText) and text != argparse.SUPPRESS:
            kwargs["help"] = HelpText(text)
        return super().add_argument(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"sharecrawl: error: {self.prog}: {message} (see {self.prog} --help)\n")

    def format_help(self) -> str:
        shown = super().format_help()
        if self.epilog_from is None:
            return shown
        return shown + "\n" + "\n".join(wrapped(self.epilog_from(), text_width())) + "\n"

    def option(
        self,
        *flags: str,
        setting: str | None = None,
        default_from: Callable[[], str] | None = None,
        more_help: Callable[[], str] | None = None,
        **kwargs: Any,
    ) -> None:
        """add_argument; help shows as the default [sharecrawl] `setting` from luigi.cfg, or
        `default_from()`, and `more_help()` after the help text."""
        if setting is not None:
            default_from = partial(from_config, setting)
        kwargs["help"] = HelpText(kwargs.get("help") or "", default_from, more_help)
        self.add_argument(*flags, **kwargs)


def _wrap(paragraph: str, width: int) -> list[str]:
    """An indented paragraph ('  name  text') hangs under its text: a list of choices stays one."""
    hang = re.match(r" +\S.*?  +", paragraph)
    if hang is None:
        return textwrap.wrap(paragraph, width) or [""]
    return textwrap.wrap(paragraph, max(width, hang.end() + 20), subsequent_indent=" " * hang.end())


def from_config(name: str) -> str:
    """The value of [sharecrawl] `name` that a command would use now, and where it is from."""
    from sharecrawl.cli.inputs import setting

    value = setting(name)
    value = "unset" if value is None else value or "none"
    return f"{value}, from [sharecrawl] {name} in luigi.cfg"


def from_simulator(name: str) -> str:
    from sharecrawl.simulator.lan import SimParams

    return f"{getattr(SimParams, name):g}"


def choices_help(entries: dict[str, str]) -> str:
    width = max(map(len, entries)) + 2
    return ":" + "".join(f"\n  {name:<{width}}{text}" for name, text in entries.items())


def policy_help() -> str:
    from sharecrawl.pipeline.scheduling.policies import POLICY_HELP

    return choices_help(POLICY_HELP)


def query_help() -> str:
    """`search --help`'s query syntax, with the fields the query language defines."""
    from sharecrawl.queries.querylang import COPY_FIELDS, KINDS, NUMERIC_FIELDS, TEXT_FIELDS

    return f"""query syntax (as in beets): every part must match.
  madonna music                  words, found in tags and in file and folder names
  artist:madonna title:"frozen"  words in one field: {", ".join(TEXT_FIELDS)}
  year:1999 year:1995..2005      a number, or a range (year:2000..): {", ".join(NUMERIC_FIELDS)}
  kind:video                     {" or ".join(KINDS)}
  also: {", ".join(COPY_FIELDS)}
A field name the index does not know (foo:bar) is searched as plain words, with a warning."""


# Options several commands share: add_argument's (and `OneLineParser.option`'s) keywords.
SHARED: dict[str, dict[str, Any]] = {
    "--json": dict(action="store_true", help="print JSON (its shape: docs/DESIGN.md)"),
    "--crawl-dir": dict(metavar="DIR", setting="crawl_dir", help="the crawl directory"),
    "--hosts-file": dict(
        metavar="FILE",
        setting="hosts_file",
        help="one host URL a line: smb://[user@]host[:port][/share] or file:///folder",
    ),
    "--rules-file": dict(metavar="FILE", setting="rules_file", help="include/exclude rules"),
}


def _shared(sp: OneLineParser, *flags: str) -> None:
    for flag in flags:
        sp.option(flag, **SHARED[flag])


def _crawl(sp: OneLineParser) -> None:
    """Run more rounds (inject, generate, fetch, update, index), first finishing an interrupted
    one. One crawl at a time per crawl directory: another exits 75 at once."""
    sp.option("--rounds", type=int, default=1, metavar="N", help="rounds to run now")
    _shared(sp, "--hosts-file", "--rules-file", "--crawl-dir")
    sp.option("--crawlers", type=int, metavar="K", setting="crawlers", help="hosts fetched at once")
    sp.option(
        "--round-seconds",
        type=float,
        metavar="S",
        setting="round_seconds",
        help="a round's budget: crawlers x S seconds of scans, no host busier than S",
    )
    sp.option("--policy", metavar="P", setting="policy", more_help=policy_help, help="scan order")
    sp.option(
        "--runner",
        choices=tuple(RUNNER_HELP),
        setting="runner",
        metavar="R",
        more_help=lambda: choices_help(RUNNER_HELP),
        help="where the update's mrjob jobs run",
    )
    sp.option("--hinted-only", action="store_true", help="scan only what watch's hints point at")
    sp.option(
        "--allow-wide-ranges",
        action="store_true",
        setting="allow_wide_ranges",
        help="sweep hosts-file ranges wider than a /16",
    )
    sp.option("--spark-master", metavar="URL", setting="spark_master", help="with --runner spark")
    sp.option(
        "--scheduler-url",
        metavar="URL",
        help="a central luigid, e.g. http://HOST:8082 (default: [core] default_scheduler_url)",
    )
    sp.option("--join", action="store_true", help="fetch for another crawl's round")
    sp.option(
        "--quiet",
        action="store_true",
        help="for cron: print only what a person should look at, one line each",
    )
    sp.epilog_from = lambda: CRAWL_EXIT_STATUSES


def _search(sp: OneLineParser) -> None:
    """Ranked works of the live version, best copy first; copies on hosts offline now are hidden
    unless --all-hosts."""
    sp.epilog_from = query_help
    _shared(sp, "--json", "--crawl-dir")
    sp.option("--limit", type=int, default=20, metavar="N", help="results to show")
    sp.option("--all-hosts", action="store_true", help="also show copies on offline hosts")
    sp.option("--latest", action="store_true", help="newest first (a series' latest episode)")
    # an older version has no search index: --at is refused with the way to query it
    sp.add_argument("--at", metavar="WHEN", help=argparse.SUPPRESS)
    sp.option("query", nargs="+", help="words and field:value parts (see below)")


def _sql(sp: OneLineParser) -> None:
    """Run one read-only statement (SELECT, WITH, VALUES, EXPLAIN, DESCRIBE, SHOW, SUMMARIZE)
    over the live version's tables and views (`SHOW TABLES`), or --at a kept one's; anything
    else exits 2."""
    _shared(sp, "--json", "--crawl-dir")
    sp.option("--output", metavar="FILE", help="write FILE.csv, .parquet or .json, whole or not")
    sp.option(
        "--at",
        metavar="WHEN",
        help="over a kept version: v000002, or the one live at a UTC time (2026-11-20 18:00)",
    )
    sp.option(
        "--timeout",
        type=float,
        metavar="SECONDS",
        setting="sql_timeout_s",
        help="stop the statement after SECONDS (0: never)",
    )
    sp.option(
        "--memory-limit",
        metavar="SIZE",
        setting="sql_memory_limit",
        help="such as 512MiB or 2GB (none: a quarter of the RAM)",
    )
    sp.option("sql", nargs="?", help="the statement (else read from stdin)")


def _status(sp: OneLineParser) -> None:
    """What the last round did: partitions scanned, hosts online and why others were not
    crawled, folders refused, errors."""
    _shared(sp, "--json", "--crawl-dir")


def _check(sp: OneLineParser) -> None:
    """Verify the live version (CURRENT, every part and its SHA-256, the search index): one line
    per problem, exit status 1 if any."""
    sp.option(
        "--repair",
        action="store_true",
        help="go back to the newest intact version, keep the rest under damaged/ (takes the lock)",
    )
    _shared(sp, "--crawl-dir")


def _serve(sp: OneLineParser) -> None:
    """Serve the search page to the LAN (docs/web.md); it only reads the crawl directory."""
    _shared(sp, "--crawl-dir")
    sp.option("--host", default="127.0.0.1", metavar="ADDR", help="0.0.0.0: the whole LAN")
    sp.option("--port", type=int, default=8080, metavar="N", help="TCP port (0: any free one)")
    sp.option("--workers", type=int, default=1, metavar="N", help="server processes (one a core)")
    streaming = sp.add_mutually_exclusive_group()
    streaming.add_argument(
        "--no-stream", action="store_true", help=HelpText("do not stream copies at /copy/ID")
    )
    streaming.add_argument(
        "--stream-authenticated",
        action="store_true",
        help=HelpText("also stream copies of hosts crawled with credentials"),
    )


def _watch(sp: OneLineParser) -> None:
    """Watch every share of every smb:// host for SMB2 change notifications and keep them under
    hints/ (docs/watch.md); never takes the crawl lock. SIGTERM ends it with status 0."""
    _shared(sp, "--hosts-file", "--rules-file", "--crawl-dir")
    sp.option("--seconds", type=float, metavar="S", help="stop, status 0, after S (default: never)")
    sp.option(
        "--max-backoff", type=float, default=300.0, metavar="S", help="longest wait to retry a host"
    )
    sp.option("--keep-days", type=float, default=7.0, metavar="D", help="how long hints are kept")
    sp.option("--crawl", action="store_true", help="crawl --hinted-only when hints go quiet")
    sp.option("--settle", type=float, default=5.0, metavar="S", help="quiet before --crawl's round")


def _demo(sp: OneLineParser) -> None:
    """Crawl a LAN of four folders of real tagged media in three rounds with changes between,
    printing each round's report, and search it. Takes the crawl lock like crawl."""
    sp.option(
        "--workdir", default="demo-lan", metavar="DIR", help="the demo's folder, rebuilt every run"
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
    """Replay the scheduling policies on one synthetic LAN and trace, side by side with the
    optimum at the true rates."""
    _shared(sp, "--json")
    for flag, kind, metavar, text in SIMULATE_OPTIONS:
        default_from = partial(from_simulator, flag[2:].replace("-", "_"))
        sp.option(flag, type=kind, metavar=metavar, default_from=default_from, help=text)
    sp.option(
        "--policies", metavar="a,b", more_help=policy_help, help="comma separated (default: all)"
    )
    sp.option(
        "--workers", type=int, default=os.cpu_count() or 1, metavar="N", help="policies at once"
    )


# name: (help, the function adding its options, whose docstring describes it)
COMMANDS: dict[str, tuple[str, Callable[[OneLineParser], None]]] = {
    "crawl": ("run more crawl rounds", _crawl),
    "search": ("search the media index", _search),
    "sql": ("read-only SQL over the tables", _sql),
    "status": ("what the last round did", _status),
    "check": ("verify the live version and the search index", _check),
    "serve": ("the search page for the LAN", _serve),
    "watch": ("keep SMB change notifications as hints", _watch),
    "demo": ("crawl a demo LAN of real tagged media", _demo),
    "simulate": ("compare the scheduling policies on a synthetic LAN", _simulate),
}


def parser(argv: Sequence[str] = ()) -> OneLineParser:
    """The command line; a subcommand's `command` names the function that runs it. Given the
    arguments it will parse, only the command they name gets its options (adding every
    command's costs a cold `sharecrawl search` 8 ms); help and a mistyped command, the whole."""
    named = next((a for a in argv if a[:1] != "-"), None)  # --verbose, the one global, has no value
    p = OneLineParser(
        prog="sharecrawl",
        epilog=EXIT_STATUSES,
        description=(
            "A fresh, searchable index of the audio and video files that the hosts of a LAN "
            "share over SMB. `sharecrawl COMMAND --help` explains a command and its options."
        ),
    )
    verbose = "also show the libraries' log lines (SMB connects and the like), for debugging"
    p.add_argument("--verbose", action="store_true", help=verbose)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (short, add_options) in COMMANDS.items():
        description = " ".join((add_options.__doc__ or "").split())
        sp = sub.add_parser(name, help=short, description=description)
        if named not in COMMANDS or name == named:
            add_options(sp)
        # after the command too; unset there, the global flag's value stands
        sp.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS, help=verbose)
    return p

"""The pieces the `sharecrawl` parser is built of: the help formatter that reads defaults
from luigi.cfg only when help is shown (`LazyHelp`), the options shared by subcommands, and
the help texts of the runners, the policies, the exit statuses and the query syntax."""

from __future__ import annotations

import argparse
import re
import textwrap
from collections.abc import Callable

# mrjob's runners, as `crawl --runner` offers them; tests check these are
# pipeline.settings.RUNNERS, the values the setting accepts.
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


def setting_value(name: str) -> str:
    """The value of [sharecrawl] `name` that a command would use now."""
    from cli.inputs import setting

    value = setting(name)
    return "unset" if value is None else value or "none"


class LazyHelp(argparse.RawDescriptionHelpFormatter):
    """Help text with its default (from luigi.cfg for an option with `setting`) and a list
    made when shown (`more_help`). Lines in a help text stay lines."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        setting = getattr(action, "setting", None)
        if setting is not None:
            value = setting_value(setting).replace("%", "%%")
            text += f" (default: {value}, from [sharecrawl] {setting} in luigi.cfg)"
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


def option(
    parser: argparse.ArgumentParser,
    *flags: str,
    setting: str | None = None,
    more_help: Callable[[], str] | None = None,
    **kwargs: object,
) -> argparse.Action:
    action = parser.add_argument(*flags, **kwargs)  # type: ignore[arg-type]
    action.setting = setting  # type: ignore[attr-defined]
    action.more_help = more_help  # type: ignore[attr-defined]
    return action


def crawl_dir_option(sp: argparse.ArgumentParser) -> None:
    option(
        sp,
        "--crawl-dir",
        metavar="DIR",
        setting="crawl_dir",
        help="the crawl directory: crawldb versions, segments, the search index",
    )


def hosts_file_option(sp: argparse.ArgumentParser, help: str) -> None:
    option(sp, "--hosts-file", metavar="FILE", setting="hosts_file", help=help)


def rules_file_option(sp: argparse.ArgumentParser, help: str) -> None:
    option(sp, "--rules-file", metavar="FILE", setting="rules_file", help=help)

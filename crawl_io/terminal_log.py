"""Which log records reach the terminal: every one of ours (loggers `sharecrawl` and below),
and a dependency's from WARNING up. A dependency's INFO is its own debugging (smbprotocol
says a line per connect and disconnect, a dozen per SMB host); `--verbose` shows it. One rule
for every process of a command: the CLI sets it up, its workers (crawl_io.workers) again."""

from __future__ import annotations

import logging
import sys

OURS = "sharecrawl"
# smbprotocol logs a traceback when a connection's receive thread dies (a host that answers
# garbage), then raises the error in the caller
RECEIVE_LOGGER = "smbprotocol.connection"
_verbose = False


def ours_or_warning(record: logging.LogRecord) -> bool:
    """Does the record reach the terminal without --verbose?"""
    name = record.name
    if name == RECEIVE_LOGGER and record.exc_info:
        return False  # a receive thread's death: its caller gets the error and says it
    return record.levelno >= logging.WARNING or name == OURS or name.startswith(OURS + ".")


def warning_up(record: logging.LogRecord) -> bool:
    """`crawl --quiet`: our progress lines too are left out; warnings are for a person."""
    return record.levelno >= logging.WARNING and ours_or_warning(record)


def setup_logging(verbose: bool = False, quiet: bool = False) -> None:
    """Log lines to stderr, by the rule above (`verbose`: every INFO line; `quiet`: warnings
    and errors alone)."""
    global _verbose
    _verbose = verbose
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    for handler in logging.getLogger().handlers:
        handler.removeFilter(ours_or_warning)
        handler.removeFilter(warning_up)
        if quiet:
            handler.addFilter(warning_up)
        elif not verbose:
            handler.addFilter(ours_or_warning)
    logging.getLogger("mrjob").setLevel(logging.ERROR)  # it warns that no mrjob.conf exists


def verbose() -> bool:
    """Was this process's logging set up with --verbose (its workers follow)?"""
    return _verbose

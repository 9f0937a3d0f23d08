"""The console script's entry point (`sharecrawl.cli.main:main`, or `python -m sharecrawl`):
the parser, then the command's module imported when it runs, so a refused crawl answers at
once; failures become one line and their exit status (docs/DESIGN.md), signals 130 / 143
(crawl_io.processes). Log lines: crawl_io.terminal_log."""

from __future__ import annotations

import importlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from sharecrawl.crawl_io.processes import SIGNALS, stop_on_signals

if TYPE_CHECKING:
    import argparse


def command(name: str) -> Callable[[argparse.Namespace], int]:
    """The function that runs subcommand `name`, its module imported now."""
    reads = ("search", "sql", "status", "check")
    module = "crawl" if name in ("crawl", "demo") else "read" if name in reads else "services"
    return getattr(importlib.import_module(f"sharecrawl.cli.{module}"), f"cmd_{name}")


def error_status(error: BaseException) -> int | None:
    """Say a failure the user can act on in one line on stderr and return its exit status;
    None for any other. (An error class whose module was never imported was not raised.)"""

    def raised(module: str, name: str) -> bool:
        found = sys.modules.get(module)
        return found is not None and isinstance(error, getattr(found, name))

    status = None
    # bad input, and cli.inputs.UsageError
    if raised("sharecrawl.crawl_io.config_error", "ConfigError"):
        status = 2
    elif raised("sharecrawl.crawl_io.crawldb.lock", "LockError"):
        status = 75 if raised("sharecrawl.crawl_io.crawldb.lock", "CrawlLocked") else 1
    elif raised("sharecrawl.crawl_io.crawldb.layout", "CrawlDamaged"):
        status = 1
    elif raised("sharecrawl.pipeline.rounds", "RoundFailed"):  # its message says what failed
        print(f"sharecrawl: {error}", file=sys.stderr)
        return 1
    if status is not None:
        print(f"sharecrawl: error: {error}", file=sys.stderr)
        return status
    from sharecrawl.crawl_io.crawldb.disk_full import (  # small: no heavy import
        disk_full_line,
        is_disk_full,
    )

    if is_disk_full(error):  # a write before or after the rounds (the lock's record)
        print(f"sharecrawl: error: {disk_full_line(error)}", file=sys.stderr)
        return 1
    return None


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None:  # the process's own command (not a test's call): signals stop it
        stop_on_signals()
        # numpy's OpenBLAS starts a spinning thread per core as it loads (0.1 CPU s, which
        # a cold search waits for on busy cores); nothing here multiplies matrices
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        from sharecrawl.cli.parser import parser
        from sharecrawl.crawl_io.terminal_log import setup_logging

        args = parser(sys.argv[1:] if argv is None else argv).parse_args(argv)
        setup_logging(args.verbose, quiet=getattr(args, "quiet", False))
        return command(args.command)(args)
    except BrokenPipeError:  # `sharecrawl search ... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as e:
        status = error_status(e)
        if status is None:
            raise
        return status
    finally:
        if argv is None:  # its work is done: a signal now would only change its status
            for signum in SIGNALS:
                signal.signal(signum, signal.SIG_IGN)


if __name__ == "__main__":
    sys.exit(main())

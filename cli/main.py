"""The `sharecrawl` command: the console script's entry point (`cli.main:main`; `python -m
cli.main` works too).

Light on purpose: it imports argparse and the parser, and each command imports what it needs
when it runs (cli.crawl, cli.read, cli.services), so a refused crawl (another one holds the
lock) answers at once, and a Ctrl-C during start-up gets one line, never a traceback: the
handling below is in place before any heavy import. Every subcommand exits non-zero on
failure: 2 for bad input (nothing is written then), 1 for a failed round or query or a
damaged crawl directory (the line says to run `sharecrawl check --repair`), 75 when another
crawl holds the crawl directory's lock (nothing is written then either).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from cli.native import import_native

if TYPE_CHECKING:
    import argparse

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a process Ctrl-C stopped


def command(name: str) -> Callable[[argparse.Namespace], int]:
    """The function that runs subcommand `name`, its module imported now."""
    if name in ("search", "sql", "status", "check", "serve"):
        import_native()  # crawl and demo do it once they know no other crawl holds the lock
    if name in ("crawl", "demo"):
        from cli import crawl as commands
    elif name in ("search", "sql", "status", "check"):
        from cli import read as commands
    else:
        from cli import services as commands
    return getattr(commands, f"cmd_{name.replace('-', '_')}")


def _logging() -> None:
    import logging

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    for chatty in ("luigi", "luigi-interface"):  # their progress is ours to tell
        logging.getLogger(chatty).setLevel(logging.WARNING)
    logging.getLogger("mrjob").setLevel(logging.ERROR)  # it warns that no mrjob.conf exists


def _run(argv: list[str]) -> int:
    from cli.parser import parser

    args, rest = parser().parse_known_args(argv)
    if args.command == "simulate":
        args.rest = rest
    elif rest:
        parser().error(f"unrecognized arguments: {' '.join(rest)}")
    _logging()
    return command(args.command)(args)


def error_status(error: BaseException) -> int | None:
    """Say a failure the user can act on in one line on stderr and return its exit status;
    None for any other error. (An error class whose module was never imported cannot have
    been raised, so none is imported here just to be tested against.)"""

    def raised(module: str, name: str) -> bool:
        found = sys.modules.get(module)
        return found is not None and isinstance(error, getattr(found, name))

    status = None
    if raised("crawl_io.sources", "ConfigError"):  # bad input, and cli.inputs.UsageError
        status = 2
    elif raised("crawl_io.lock", "LockError"):
        status = 75 if raised("crawl_io.lock", "CrawlLocked") else 1
    elif raised("crawl_io.crawldir", "CrawlDamaged"):
        status = 1
    elif raised("pipeline.rounds", "RoundFailed"):  # its message says what failed
        print(f"sharecrawl: {error}", file=sys.stderr)
        return 1
    if status is not None:
        print(f"sharecrawl: error: {error}", file=sys.stderr)
        return status
    from crawl_io.disk_full import disk_full_line, is_disk_full  # small: no heavy import

    if is_disk_full(error):  # a write before or after the rounds (the lock's record)
        print(f"sharecrawl: error: {disk_full_line(error)}", file=sys.stderr)
        return 1
    return None


def _interrupted_query(error: Exception) -> bool:
    """DuckDB turns a Ctrl-C during a query into an error of its own: the interruption."""
    duckdb = sys.modules.get("duckdb")
    if duckdb is not None and isinstance(error, duckdb.InterruptException):
        return True
    return isinstance(error, RuntimeError) and str(error) == "Query interrupted"


def interrupted(error: KeyboardInterrupt) -> int:
    """One line for a command stopped by Ctrl-C (a crawl's says where its round stands)."""
    crawl = sys.modules.get("pipeline.interrupt")
    if crawl is not None and isinstance(error, crawl.Interrupted):
        return crawl.report(error)
    print("sharecrawl: interrupted", file=sys.stderr)
    return EXIT_INTERRUPTED


def _unraisable(unraisable: sys.UnraisableHookArgs) -> None:
    """A Ctrl-C whose exception Python could not raise where it landed (a weakref callback
    of the import machinery prints it as "Exception ignored" and drops it). A crawl's is
    recorded, and its watchdog ends the crawl with its line (pipeline.interrupt); any other
    command gets the signal again, from a thread, so that it lands in ordinary code."""
    error = unraisable.exc_value
    if not isinstance(error, KeyboardInterrupt):
        sys.__unraisablehook__(unraisable)
        return
    crawl = sys.modules.get("pipeline.interrupt")
    if crawl is not None and crawl.received() is not None:
        return
    import _thread
    import os
    import signal

    # _thread: a threading.Thread's start() waits for the thread, and the signal would land
    # in that wait, here in the hook, and be dropped again
    _thread.start_new_thread(os.kill, (os.getpid(), signal.SIGINT))


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    finally:
        if argv is None:  # the process's own command: its work is done, and a Ctrl-C now
            import signal  # would only turn the exit into a traceback

            signal.signal(signal.SIGINT, signal.SIG_IGN)


def _main(argv: Sequence[str] | None) -> int:
    sys.unraisablehook = _unraisable
    # multiprocessing's resource tracker (started with these options) frees what an
    # interrupted crawl's worker pool held, and would warn about each: not news to anyone.
    quiet_tracker = "ignore::UserWarning:multiprocessing.resource_tracker"
    if quiet_tracker not in sys.warnoptions:
        sys.warnoptions.append(quiet_tracker)
    try:
        return _run(list(sys.argv[1:] if argv is None else argv))
    except KeyboardInterrupt as e:
        return interrupted(e)
    except BrokenPipeError:  # `sharecrawl search ... | head`: the reader has what it wanted
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as e:
        if _interrupted_query(e):
            return interrupted(KeyboardInterrupt())
        status = error_status(e)
        if status is None:
            raise
        return status


if __name__ == "__main__":
    sys.exit(main())

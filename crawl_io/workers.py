"""The crawl's worker processes, forked by one fork server per crawl process that has imported
what every worker runs, so a worker is a cheap fork rather than a new interpreter.

Not plain fork: the crawl holds threads (Luigi, DuckDB, Arrow) whose locks a forked child may
wait on for ever (a DuckDB query in one does). Not a pool: each worker has a pipe of its own,
so one that dies (OOM killer, signal, native crash) is seen at once and takes only its work;
CPython 3.11's ProcessPoolExecutor with a fork server can miss a dead worker for ever, and a
shared queue's lock stays held by a worker killed mid-write.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import sys
import traceback
from collections.abc import Callable
from multiprocessing import forkserver, resource_tracker
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_ready
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from pathlib import Path

from sharecrawl.crawl_io.processes import children, exit_with_parent
from sharecrawl.crawl_io.terminal_log import setup_logging, verbose

# What the fork server imports once.
PRELOADED = [
    "sharecrawl.pipeline.fetch_workers",
    "sharecrawl.crawl_io.tags",
    "sharecrawl.crawl_io.smb",
    "mrjob.inline",  # the local runner's (jobs.runner)
    "sharecrawl.jobs.mr_listing",
    "sharecrawl.jobs.mr_prefix_stats",
]


def worker_context() -> multiprocessing.context.BaseContext:
    """The workers' start method, its server started (asynchronously: its imports overlap
    Inject and Generate). The server and its workers start with SIGINT blocked: a Ctrl-C
    reaches the process group and is this process's to handle (crawl_io.processes)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOADED)
    resource_tracker.ensure_running()  # first: it would unblock SIGINT after starting
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    return context


def server_pid() -> int | None:
    """The fork server's process id, once started: its children are the workers."""
    for pid in children(os.getpid()):
        try:
            if b"multiprocessing.forkserver" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except OSError:  # gone meanwhile
            continue
    return None


def start_worker(
    context: BaseContext, target: Callable[..., None], *args: object
) -> tuple[BaseProcess, Connection]:
    """A worker running `target(conn, *args)`, and this end of `conn`, its own pipe."""
    ours, theirs = context.Pipe()
    process = context.Process(target=_logged, args=(verbose(), target, theirs, *args))
    # multiprocessing re-runs the main script (as __mp_main__) in each worker, and Python 3.11
    # ignores a '__main__' preload: one that imports the pipeline costs a worker half a second
    main = sys.modules["__main__"]
    file, spec = getattr(main, "__file__", None), getattr(main, "__spec__", None)
    main.__spec__ = None
    if file is not None:
        del main.__file__
    try:
        process.start()
    finally:
        main.__spec__ = spec
        if file is not None:
            main.__file__ = file
    theirs.close()  # the worker's end is the worker's alone
    return process, ours


def _logged(verbose_log: bool, target: Callable[..., None], *args: object) -> None:
    """A worker: `target(*args)` under the log rule of the process that started it (a fork
    server's child has no logging set up)."""
    setup_logging(verbose_log)
    target(*args)


class WorkerDied(Exception):
    """A worker ended without answering: killed (OOM killer, a signal) or crashed."""

    def __init__(self, exitcode: int | None) -> None:
        self.exitcode = exitcode
        super().__init__(f"a worker process {ended(exitcode)}")


def ended(exitcode: int | None) -> str:
    """How a worker that gave no answer ended, in words: 'was killed by …' or 'ended …'."""
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name
        cause = "the kernel's out-of-memory killer, or " if name == "SIGKILL" else ""
        return f"was killed by {name} ({cause}a signal sent to it)"
    return f"ended with status {exitcode} and no answer"


def run_calls(calls: list[Callable[[], object]], processes: int) -> list[object]:
    """Run `calls` in `processes` workers and return their results in order. The first call
    that raises (or worker that dies: WorkerDied), or an interrupt, ends the others and is
    raised here."""
    results: list[object] = [None] * len(calls)
    if not calls:
        return results
    context = worker_context()
    waiting = list(reversed(list(enumerate(calls))))
    workers: dict[Connection, BaseProcess] = {}
    running: dict[Connection, int] = {}  # the index of the call each worker runs

    def give_next(conn: Connection) -> None:
        call = None
        if waiting:
            running[conn], call = waiting.pop()
        _send(conn, workers, call)

    try:
        for _ in range(min(max(1, processes), len(calls))):
            process, conn = start_worker(context, serve_calls)
            workers[conn] = process
            give_next(conn)
        while workers:
            for conn in wait_ready(list(workers)):
                try:
                    kind, *message = conn.recv()
                except (EOFError, OSError):  # the end of its pipe: the worker died
                    raise _died(conn, workers) from None
                if kind == "error":
                    error, trace = message
                    error.add_note(f"in the worker:\n{trace}")
                    raise error
                results[running.pop(conn)] = message[0]
                give_next(conn)
    except BaseException:
        stop_processes(list(workers.values()))
        raise
    finally:
        for conn in workers:
            conn.close()
    return results


def _send(conn: Connection, workers: dict[Connection, BaseProcess], call: object) -> None:
    """Give a worker its next call; None ends it (it has answered all of its calls)."""
    try:
        conn.send(call)
    except OSError:  # it died since its last answer
        if call is not None:
            raise _died(conn, workers) from None
    if call is None:
        conn.close()
        workers.pop(conn).join()


def _died(conn: Connection, workers: dict[Connection, BaseProcess]) -> WorkerDied:
    conn.close()
    process = workers.pop(conn)
    process.join()
    return WorkerDied(process.exitcode)


def serve_calls(conn: Connection) -> None:
    """A worker of run_calls: run the calls that come down `conn` until None, answering each
    ("result", value) or ("error", exception, traceback)."""
    exit_with_parent(conn.fileno())
    try:
        while (call := conn.recv()) is not None:
            try:
                # pickled whole before a byte is sent: a result that does not pickle is its error
                conn.send(("result", call()))
            except Exception as e:
                conn.send(("error", _picklable(e), traceback.format_exc()))
    finally:
        conn.close()


def _picklable(error: Exception) -> Exception:
    """`error`, or its repr in a plain Exception when it does not survive a pickle round trip."""
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return Exception(repr(error))
    return error


def stop_processes(processes: list[BaseProcess]) -> None:
    """SIGKILL worker processes; what they were doing is lost (a rerun does it again)."""
    for process in processes:
        process.kill()
    for process in processes:
        process.join()

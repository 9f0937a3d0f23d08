"""The crawl's worker processes: one fork server per crawl process, which has imported what
every worker runs (the fetcher, the update jobs' tasks), so that a worker starts as a cheap
fork of it rather than an interpreter importing pyarrow, numpy and mrjob anew.

A fork server, not fork: the crawl process holds threads (Luigi, DuckDB, Arrow) that fork
would copy without their owners, and a forked child that touches their locks waits for ever
(a DuckDB query in a forked child does). The server forks before any of those start.

Each worker has a pipe of its own (start_worker), not a pool's queues: a worker that dies (the
kernel's out-of-memory killer, a signal, a crash in native code) is seen at once as the end
of its pipe, and takes only its own work. A pool misses it: CPython 3.11's
ProcessPoolExecutor, with a fork server, starts a worker after waking the thread that watches
its workers, which may then wait without it for ever; a shared queue has a lock that a worker
killed in the middle of a write holds for ever.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing import forkserver, resource_tracker
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_ready
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from pathlib import Path

from crawl_io.processes import children, exit_with_parent

# What the fork server imports once.
PRELOADED = [
    "pipeline.fetch_workers",
    "crawl_io.tags",
    "crawl_io.smb",
    "mrjob.inline",  # the local runner's (jobs.runner)
    "jobs.mr_listing",
    "jobs.mr_prefix_stats",
]


def worker_context() -> multiprocessing.context.BaseContext:
    """The workers' start method, its server started (once per process).

    Starting it is asynchronous: called before a round's Inject, its imports overlap Inject
    and Generate. The server exits when this process does (multiprocessing's own pipe to it
    closes), and starts with SIGINT blocked, a mask its workers inherit: a Ctrl-C reaches
    the whole process group and is this process's to handle (crawl_io.processes ends the
    workers), not a traceback of theirs. multiprocessing starts its resource tracker so."""
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


@contextmanager
def main_module_hidden() -> Iterator[None]:
    """Start worker processes without re-running the main script in each of them.

    multiprocessing runs the parent's main script (as __mp_main__) in every forkserver
    child, and Python 3.11 ignores a '__main__' preload; a script that imports the whole
    pipeline costs each worker half a second. The workers need nothing from it: everything
    they run lives in the modules the server preloads."""
    main = sys.modules["__main__"]
    file, spec = getattr(main, "__file__", None), getattr(main, "__spec__", None)
    main.__spec__ = None
    if file is not None:
        del main.__file__
    try:
        yield
    finally:
        main.__spec__ = spec
        if file is not None:
            main.__file__ = file


def start_worker(
    context: BaseContext, target: Callable[..., None], *args: object
) -> tuple[BaseProcess, Connection]:
    """A worker process of the fork server running `target(conn, *args)`, and this end of
    `conn`, its pipe of its own: once the worker is gone, reading this end finds the end."""
    ours, theirs = context.Pipe()
    process = context.Process(target=target, args=(theirs, *args))
    with main_module_hidden():
        process.start()
    theirs.close()  # the worker's end is the worker's alone
    return process, ours


class WorkerDied(Exception):
    """A worker ended without answering: killed (the kernel's out-of-memory killer, a
    signal) or crashed in native code."""

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


def run_calls(
    calls: list[Callable[[], object]],
    processes: int,
    on_event: Callable[[object], None] | None = None,
) -> list[object]:
    """Run `calls` in workers of the fork server, `processes` at once, each worker with a
    pipe of its own (module docstring), and return what they returned, in their order. A
    call may send events while it runs (`report`): each comes to `on_event` here as it is
    sent. The first call that raises ends the others and its exception is raised here; a
    worker that dies ends them too, raising WorkerDied. An interrupt (KeyboardInterrupt)
    ends them at once."""
    results: list[object] = [None] * len(calls)
    if not calls:
        return results
    context = worker_context()
    waiting = list(reversed(list(enumerate(calls))))
    workers: dict[Connection, BaseProcess] = {}
    running: dict[Connection, int] = {}  # the index of the call each worker runs

    def give_next(conn: Connection) -> None:
        if waiting:
            running[conn], call = waiting.pop()
            _send(conn, workers, call)
        else:
            _send(conn, workers, None)

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
                if kind == "event":
                    if on_event is not None:
                        on_event(message[0])
                    continue
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


_reporting: Connection | None = None  # in a worker of run_calls: its pipe


def report(event: object) -> None:
    """Send `event` (picklable) from the call that runs in this worker to run_calls'
    `on_event`, now. Outside a worker of run_calls it goes nowhere."""
    if _reporting is not None:
        _reporting.send(("event", event))


def serve_calls(conn: Connection) -> None:
    """A worker of run_calls: run the calls that come down `conn`, one after the other,
    until None comes, answering each with ("result", what it returned), or ("error", the
    exception it raised, its traceback); ("event", ...) messages come before, as the call
    reports them. It exits once the crawl process is gone."""
    global _reporting
    exit_with_parent(conn.fileno())
    _reporting = conn
    try:
        while (call := conn.recv()) is not None:
            try:
                # pickled whole before a byte is sent: a result that does not pickle is an
                # error of its call, not half a message
                conn.send(("result", call()))
            except Exception as e:
                conn.send(("error", _picklable(e), traceback.format_exc()))
    finally:
        _reporting = None
        conn.close()


def _picklable(error: Exception) -> Exception:
    """`error`, or its repr in a plain Exception when it cannot cross a pipe (an exception
    whose __init__ takes other arguments than it passes on pickles, then fails to load)."""
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return Exception(repr(error))
    return error


def stop_processes(processes: list[BaseProcess]) -> None:
    """End worker processes now (SIGKILL); what they were doing is lost (a rerun fetches
    those hosts or runs that job again)."""
    for process in processes:
        process.kill()
    for process in processes:
        process.join()

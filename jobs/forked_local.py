"""mrjob's local runner, its Python tasks run in workers started by the crawl's fork server.

mrjob's local runner forks a pool of one process per core, and each worker then starts a new
interpreter for every task (`python job.py --mapper`), which imports pyarrow, numpy and mrjob
again: 0.4 s a task on these machines, most of a small job's time. Here the workers come
from the crawl's fork server (crawl_io.workers.run_calls), which has imported the jobs
already, each with a pipe of its own, and a worker runs the task itself, as the inline
runner does in its one process: the job class built from the task's arguments, its standard
input, output and error the task's files, in the task's working folder and environment.
The rest is mrjob's local runner unchanged: the splits, the sort, the working folders, the
counters, the output, tasks on every core, each in its own process (a task that crashes or
leaks cannot hurt the crawl).
A step of a command (not the job's own Python) still runs as the stock runner runs it.

Not forked from the crawl process itself, as the stock runner's pool is: that process holds
threads (DuckDB's, Arrow's) which a fork copies without their owners, and a task running a
DuckDB query there waits for ever.
"""

from __future__ import annotations

import io
import os
import sys
import traceback
from collections.abc import Callable
from functools import partial
from typing import IO, Any

from mrjob.job import MRJob
from mrjob.local import LocalMRJobRunner, _pickle_safe, _TaskFailedException
from mrjob.step import StepFailedException
from mrjob.util import save_current_environment, save_cwd, save_sys_std

from crawl_io.workers import WorkerDied, ended, run_calls


class ForkedLocalRunner(LocalMRJobRunner):
    """The local runner whose Python tasks run in workers started by the crawl's fork
    server (module docstring)."""

    alias = "local"

    def __init__(self, mrjob_cls: type[MRJob] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._mrjob_cls = mrjob_cls

    def _invoke_task_func(self, task_type: str, step_num: int, task_num: int) -> Callable:
        step = self._get_step(step_num)
        if self._mrjob_cls is None or step[task_type]["type"] != "script":
            return super()._invoke_task_func(task_type, step_num, task_num)
        return partial(
            _run_task_in_worker,
            self._mrjob_cls,
            task_type,
            step_num,
            task_num,
            self._args_for_task(step_num, task_type),
            self._num_steps(),
        )

    def _run_multiple(self, funcs: list[Callable], num_processes: int | None = None) -> None:
        # Workers with a pipe each (crawl_io.workers.run_calls) notice a worker killed in
        # the middle of a task (the kernel's out-of-memory killer, a signal), which the stock
        # runner's multiprocessing.Pool replaces while it waits for the task's result for
        # ever; the stock runner's task, a child of the worker, never met it.
        processes = self._opts["num_cores"] or os.cpu_count() or 1
        try:
            run_calls([partial(_pickle_safe, func) for func in funcs], processes)
        except WorkerDied as died:
            raise StepFailedException(
                reason=f"a task's process {ended(died.exitcode)}: "
                "see the system log, then run the round again"
            ) from None


def _run_task_in_worker(
    job_class: type[MRJob],
    task_type: str,
    step_num: int,
    task_num: int,
    args: list[str],
    num_steps: int,
    stdin: IO[bytes],
    stdout: IO[bytes],
    stderr: IO[bytes],
    wd: str,
    env: dict[str, str],
) -> None:
    """One task, in this worker (a fork of the crawl's fork server), as `python job.py
    <args>` would run it in `wd`: what it prints goes to its own output and error files."""
    out = io.TextIOWrapper(stdout, encoding="utf-8", write_through=True)
    err = io.TextIOWrapper(stderr, encoding="utf-8", errors="replace", write_through=True)
    try:
        with save_current_environment(), save_cwd(), save_sys_std():
            os.environ.update(env)
            os.chdir(wd)
            sys.stdout, sys.stderr = out, err
            try:
                job_class(args).sandbox(stdin=stdin, stdout=stdout, stderr=stderr).execute()
            except Exception as ex:
                # what the task's stderr would hold: mrjob reads the cause of failure from it
                traceback.print_exc(file=err)
                raise _TaskFailedException(
                    reason=repr(ex),
                    step_num=step_num,
                    num_steps=num_steps,
                    task_type=task_type,
                    task_num=task_num,
                ) from None
    finally:
        out.detach()  # the files are the caller's to close
        err.detach()

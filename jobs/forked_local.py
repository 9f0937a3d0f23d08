"""mrjob's local runner, its Python tasks run in workers started by the crawl's fork server.

mrjob's local runner forks a pool of one process per core, and each worker then starts a new
interpreter for every task (`python job.py --mapper`), which imports pyarrow, numpy and mrjob
again: 0.4 s a task on these machines, most of a small job's time. Here the pool's workers
come from the crawl's fork server (crawl_io.workers), which has imported the jobs already,
and a worker runs the task itself, as the inline runner does in its one process: the job
class built from the task's arguments, its standard input, output and error the task's
files, in the task's working folder and environment. The rest is mrjob's local runner
unchanged: the splits, the sort, the working folders, the counters, the output, tasks on
every core, each in its own process (a task that crashes or leaks cannot hurt the crawl).
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
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from functools import partial
from typing import IO, Any

from mrjob.job import MRJob
from mrjob.local import LocalMRJobRunner, _pickle_safe, _TaskFailedException
from mrjob.step import StepFailedException
from mrjob.util import save_current_environment, save_cwd, save_sys_std

from crawl_io.workers import main_module_hidden, stop_workers, worker_context


class ForkedLocalRunner(LocalMRJobRunner):
    """The local runner whose Python tasks run in its pool's workers, started by the
    crawl's fork server (module docstring)."""

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
        # A process pool that notices a worker killed in the middle of a task (the kernel's
        # out-of-memory killer, a signal): multiprocessing.Pool replaces such a worker and
        # waits for ever for the task's result, which the stock runner, whose task is a
        # child of the worker, never met.
        context = worker_context()
        pool = ProcessPoolExecutor(max_workers=self._opts["num_cores"], mp_context=context)
        try:
            with main_module_hidden():  # the pool starts its workers as tasks arrive
                results = [pool.submit(_pickle_safe, func) for func in funcs]
            for result in results:
                result.result()
        except BrokenProcessPool:
            stop_workers(pool)
            raise StepFailedException(reason=TASK_KILLED) from None
        except BaseException:
            stop_workers(pool)  # one task failed: the others stop
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


TASK_KILLED = (
    "a task's process was killed (by the kernel's out-of-memory killer, or a signal): "
    "see the system log, then run the round again"
)


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

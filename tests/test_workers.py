"""The crawl's worker processes (crawl_io.workers.run_calls): calls run in workers of the
fork server, each with a pipe of its own; a call that raises, or a worker that dies, ends
the others and is raised here. (A job's task killed: tests/test_jobs.py; a fetch worker
killed: tests/test_host_failures.py.)"""

from __future__ import annotations

import os
import signal
import time
from functools import partial
from pathlib import Path

import pytest

from sharecrawl.crawl_io.workers import WorkerDied, run_calls, server_pid
from tests.outcomes import outcomes_within


def children_of_the_fork_server() -> set[int]:
    pid = server_pid()
    if pid is None:
        return set()
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return {int(child) for child in text.split()}


def test_every_call_runs_in_a_worker_two_at_a_time(tmp_path: Path) -> None:
    files = [tmp_path / f"call-{i}" for i in range(7)]
    before = children_of_the_fork_server()
    run_calls([partial(Path.write_text, f, f.name) for f in files], processes=2)
    assert [f.read_text() for f in files] == [f.name for f in files]
    assert children_of_the_fork_server() <= before  # the workers ended with the calls


def test_a_call_that_raises_is_raised_here_with_the_workers_traceback() -> None:
    with pytest.raises(ValueError, match="invalid literal") as raised:
        run_calls([partial(int, "not a number")], processes=2)
    assert "Traceback" in "".join(raised.value.__notes__)


class NeedsTwoArguments(Exception):
    def __init__(self, what: str, why: str) -> None:
        super().__init__(f"{what}: {why}")  # pickles with one argument: loading it fails


def raise_needs_two_arguments() -> None:
    raise NeedsTwoArguments("a call", "fails")


def test_an_exception_that_cannot_cross_the_pipe_comes_as_its_repr() -> None:
    with pytest.raises(Exception, match=r"NeedsTwoArguments\('a call: fails'\)") as raised:
        run_calls([raise_needs_two_arguments], processes=1)
    assert type(raised.value) is Exception


def test_a_worker_that_dies_ends_the_others_and_says_how() -> None:
    """The worker of the second call exits without answering; the first call's worker,
    asleep for ten minutes, is ended rather than waited for (tests/outcomes.py)."""
    before = children_of_the_fork_server()
    calls = [partial(time.sleep, 600), partial(os._exit, 3)]
    [outcome] = outcomes_within(lambda: run_calls(calls, processes=2), 1) or [None]
    assert isinstance(outcome, WorkerDied) and outcome.exitcode == 3, outcome
    assert "a worker process ended with status 3 and no answer" in str(outcome)
    assert children_of_the_fork_server() <= before


def test_a_worker_killed_after_another_started_is_seen_every_time() -> None:
    """CPython 3.11's ProcessPoolExecutor, with a fork server, could start the second worker
    after its watching thread looked for workers, and wait for ever for the killed one's
    answer: about one run in thirty on a loaded machine. Thirty runs, SIGKILL (as the
    out-of-memory killer sends), in a thread of their own (tests/outcomes.py)."""
    kill = [partial(time.sleep, 0), partial(_kill_self, signal.SIGKILL)]
    outcomes = outcomes_within(lambda: run_calls(kill, processes=2), 30)
    assert len(outcomes) == 30, f"run {len(outcomes) + 1} still waits after 120 s"
    assert all(isinstance(e, WorkerDied) and e.exitcode == -signal.SIGKILL for e in outcomes)
    assert "was killed by SIGKILL (the kernel's out-of-memory killer" in str(outcomes[0])


def _kill_self(signum: int) -> None:
    os.kill(os.getpid(), signum)


def square(n: int) -> int:
    return n * n


def test_results_come_back_in_the_calls_order() -> None:
    calls = [partial(square, n) for n in range(6)]
    assert run_calls(calls, processes=2) == [0, 1, 4, 9, 16, 25]
    assert run_calls(calls, processes=1) == [0, 1, 4, 9, 16, 25]


def return_a_lock() -> object:
    import threading

    return threading.Lock()


def test_a_result_that_cannot_cross_the_pipe_is_its_calls_error() -> None:
    """Raised as the call's error, not as a worker that died half way through a message."""
    with pytest.raises(TypeError, match="pickle") as raised:
        run_calls([return_a_lock, partial(square, 2)], processes=1)
    assert "Traceback" in "".join(raised.value.__notes__)

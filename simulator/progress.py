"""Progress bars on stderr for long runs (the simulator, the benchmarks): rich's bars when
stderr is a terminal, nothing at all when it is not, so pipes, files and cron mails get only
the results."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")


class Bars:
    """A set of progress bars; every method is a no-op when disabled.

    with Bars() as bars:
        task = bars.add("optimal", total=7.5)
        bars.update(task, completed=3.2, detail="day 3.2")
    """

    def __init__(self, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._rich: Any = None

    def __enter__(self) -> Bars:
        if self.enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._rich = Progress(
                TextColumn("{task.description:<20}"),
                BarColumn(),
                TextColumn("{task.fields[detail]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
            )
            self._rich.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._rich is not None:
            self._rich.stop()
            self._rich = None

    def add(self, description: str, total: float | None = None, detail: str = "") -> int:
        """A new bar; total None shows activity without a known end."""
        if self._rich is None:
            return -1
        return self._rich.add_task(description, total=total, detail=detail)

    def update(
        self,
        task: int,
        *,
        completed: float | None = None,
        advance: float | None = None,
        detail: str | None = None,
    ) -> None:
        if self._rich is None:
            return
        fields = {} if detail is None else {"detail": detail}
        self._rich.update(task, completed=completed, advance=advance, **fields)

    def finish(self, task: int, detail: str | None = None) -> None:
        """Fill the bar (its total becomes what it has done when it had none)."""
        if self._rich is None:
            return
        t = self._rich.tasks[self._rich.task_ids.index(task)]
        total = t.total if t.total is not None else max(t.completed, 1)
        fields = {} if detail is None else {"detail": detail}
        self._rich.update(task, total=total, completed=total, **fields)


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Iterate over items with one bar on stderr (when it is a terminal)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with Bars() as bars:
        task = bars.add(description, total=total)
        for item in items:
            yield item
            bars.update(task, advance=1)


@contextmanager
def step(description: str) -> Iterator[None]:
    """One long step of a script: a bar with its elapsed time on stderr while it runs (when
    stderr is a terminal). Not around code that shows its own bars (a crawl round)."""
    with Bars() as bars:
        task = bars.add(description, total=None)
        yield
        bars.finish(task)

"""Progress on stderr for the benchmarks' long steps: rich's display when stderr is a
terminal, nothing when it is not, so pipes, files and cron mails get only the results."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.progress import track as rich_track

T = TypeVar("T")


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Iterate over items with one bar on stderr (when it is a terminal)."""
    console = Console(stderr=True)
    yield from rich_track(
        items, description, total=total, console=console, disable=not sys.stderr.isatty()
    )


@contextmanager
def step(description: str) -> Iterator[None]:
    """One long step: its elapsed time on stderr while it runs (when stderr is a terminal)."""
    with Progress(
        SpinnerColumn(),
        TextColumn(description),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        disable=not sys.stderr.isatty(),
    ):
        yield

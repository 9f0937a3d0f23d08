"""Calls that might hang, made in a thread of their own, so that a hang fails a test rather
than stall the suite."""

from __future__ import annotations

import threading
from collections.abc import Callable


def outcomes_within(
    call: Callable[[], object], times: int, timeout_s: float = 120
) -> list[BaseException | None]:
    """Make `call` `times` times, one after the other, and return what each raised (None:
    nothing); after `timeout_s`, only the outcomes of the calls that had ended."""
    outcomes: list[BaseException | None] = []

    def calls() -> None:
        for _ in range(times):
            try:
                call()
                outcomes.append(None)
            except BaseException as e:  # handed to the test's thread
                outcomes.append(e)

    thread = threading.Thread(target=calls, daemon=True)
    thread.start()
    thread.join(timeout=timeout_s)
    return list(outcomes)

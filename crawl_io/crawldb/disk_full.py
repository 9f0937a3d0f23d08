"""Writes refused for want of space: how to tell them from other failures, and the one line
that says what to do (a round stopped by a full disk goes on when run again)."""

from __future__ import annotations

import errno
import os
import tempfile

# No space left on the device; the user's quota (EDQUOT) is the same to the operator.
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
# DuckDB and Arrow put the system's words for these in their messages, not the number.
_FULL_WORDS = tuple(os.strerror(number) for number in sorted(FULL_ERRNOS))


def is_disk_full(error: BaseException | None) -> bool:
    """Whether `error`, or one it was raised from, is a write refused for want of space."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in FULL_ERRNOS:
            return True
        try:  # asked from a logging filter too, where nothing may raise
            text = str(error)
        except Exception:
            text = ""
        if any(words in text for words in _FULL_WORDS):
            return True
        error = error.__cause__ or error.__context__
    return False


def disk_full_line(
    error: BaseException, crawl_dir: str | None = None, then: str = "run the command again"
) -> str:
    """What to do about `error` (is_disk_full), in one line: free space, then `then`."""
    if isinstance(error, OSError) and error.strerror:  # not "[Errno 28]" before the words
        text = error.strerror + (f": {error.filename}" if error.filename else "")
    else:
        text = str(error)
    lines = text.strip().splitlines() or [type(error).__name__]
    # after months of rounds, old versions and segments are most of a crawl directory
    where = (
        "the crawl directory"
        if crawl_dir is None
        else f"the crawl directory ({os.path.abspath(crawl_dir)}; its versions and segments "
        "older than the live round may go, by hand or by keep_rounds: docs/crawl-dir.md)"
    )
    return (
        f"a disk is full ({lines[0][:500]}): free space where {where} or the temporary "
        f"folder ({tempfile.gettempdir()}) lives, then {then}"
    )

"""Loaded by every Python process of a crawl that a test starts with this folder first on
PYTHONPATH (the crawl process, its fork server and its fetch workers): it makes the process
another machine (SHARECRAWL_TEST_MACHINE, the name socket.gethostname gives), and holds a
host's fetchlog part before its rename into place while the file SHARECRAWL_TEST_HOLD
exists, so that a test can kill or interrupt a crawl at the moment its temporary file is
there."""

from __future__ import annotations

import os
import socket
import time

_machine = os.environ.get("SHARECRAWL_TEST_MACHINE")
_hold = os.environ.get("SHARECRAWL_TEST_HOLD")

if _machine:
    socket.gethostname = lambda: _machine  # type: ignore[assignment]

if _hold:
    _replace = os.replace

    def _held_replace(src: str | os.PathLike, dst: str | os.PathLike, **kwargs: object) -> None:
        parent = os.path.basename(os.path.dirname(os.fspath(dst)))
        while parent == "fetchlog" and os.path.exists(_hold):  # type: ignore[arg-type]
            time.sleep(0.05)
        _replace(src, dst, **kwargs)  # type: ignore[arg-type]

    os.replace = _held_replace  # type: ignore[assignment]

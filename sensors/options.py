"""What `sharecrawl watch` is told: the crawl directory, the hosts and the watcher's timings."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sharecrawl.crawl_io.sources import HostURL


@dataclass
class WatchOptions:
    crawl_dir: Path
    hosts: list[HostURL]
    rules_file: str | None = None
    seconds: float | None = None  # stop after this long (cron); None: until a signal
    timeout_s: float = 10.0  # per SMB call
    liveness_timeout_s: float = 2.0
    max_backoff_s: float = 300.0
    keepalive_s: float = 60.0
    keep_days: float = 7.0
    flush_s: float = 0.25  # a hint waits at most this long before it is written
    heartbeat_s: float = 5.0
    connectors: int = 8
    crawl_args: list[str] | None = None  # --crawl: `crawl --hinted-only` with these arguments
    settle_s: float = 5.0  # --crawl: quiet this long after a hint before its round starts

"""When a round ran: `segments/rNNNNNN/round.json`, written when its Index is done (the run
that finished it: an interrupted round's rerun says its own start), read by `status`."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from datetime import UTC, datetime

from sharecrawl.crawl_io.crawldb.atomic import write_atomic
from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir

ROUND_TIMES = "round.json"


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")


def write_round_times(
    crawl: CrawlDir, round_: int, started: float, stages: Mapping[str, float]
) -> None:
    """Round `round_` ran from `started` (a time.time()) to now, its stages taking `stages`
    seconds (`round`: the whole)."""
    record = {
        "started": _iso(started),
        "finished": _iso(time.time()),
        "stage_seconds": {name: round(s, 3) for name, s in sorted(stages.items())},
    }
    write_atomic(crawl.segment_dir(round_) / ROUND_TIMES, json.dumps(record, indent=1) + "\n")


def read_round_times(crawl: CrawlDir, round_: int) -> dict:
    """`started`, `finished` (ISO 8601, UTC) and `stage_seconds` of a round; nulls for a round
    whose record is missing (a crawl killed after its Index, or a round of an older release)."""
    try:
        record = json.loads((crawl.segment_dir(round_) / ROUND_TIMES).read_text())
        return {k: record[k] for k in ("started", "finished", "stage_seconds")}
    except (OSError, ValueError, KeyError, TypeError):
        return {"started": None, "finished": None, "stage_seconds": None}

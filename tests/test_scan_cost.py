"""The scan cost of a partition (thesis §3.2.1) has one definition: the split's per-folder
costs, the estimate from a partition's listing and the one from its stored row agree."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from sharecrawl.crawl_io.schema import LISTING, PARTITIONS
from sharecrawl.jobs.bstar_split import partition_folders
from sharecrawl.jobs.scan_cost import (
    DEFAULT_MEDIA_PATH_BYTES,
    HostCost,
    Limits,
    listing_cost,
    listing_seconds,
    scan_seconds,
    scheduled_seconds,
    stored_cost,
)
from sharecrawl.jobs.subtree_hash import media_mask, summarize
from sharecrawl.pipeline.generate import partition_states

COST = HostCost(list_s_per_folder=0.5, tag_s_per_file=2.0)


def rows(paths: dict[str, bool]) -> pa.Table:
    """LISTING rows of one partition; `paths` maps a path to is_dir."""
    names = [p.rsplit("/", 1)[-1] for p in paths]
    n = len(paths)
    return pa.table(
        {
            "host": ["h"] * n,
            "share": ["s"] * n,
            "path": list(paths),
            "name": names,
            "is_dir": list(paths.values()),
            "size": [0 if d else 10 for d in paths.values()],
            "mtime": pa.array([0] * n, pa.timestamp("us", tz="UTC")),
            "partition_id": ["p"] * n,
        }
    ).cast(LISTING)


TREE = rows(
    {
        "a": True,
        "a/1.mp3": False,
        "a/2.flac": False,
        "a/cover.jpg": False,
        "a/b": True,
        "a/b/3.ogg": False,
        "c.txt": False,
        "d.mp4": False,
    }
)


def test_listing_cost_counts_every_folder_and_media_file() -> None:
    seconds, mem = listing_cost(TREE, COST)
    # root + 2 folders listed, 4 media files' tags read; the bytes of their paths
    assert seconds == pytest.approx(3 * 0.5 + 4 * 2.0)
    assert mem == len("a/1.mp3") + len("a/2.flac") + len("a/b/3.ogg") + len("d.mp4")
    assert seconds == scan_seconds(2, 4, COST)


def test_the_split_folder_costs_add_up_to_the_partition_cost() -> None:
    paths, own_s, own_b = partition_folders(TREE, "", COST)
    assert paths == ["", "a", "a/b"]
    seconds, mem = listing_cost(TREE, COST)
    assert own_s.sum() == pytest.approx(seconds)
    assert own_b.sum() == mem


def test_stored_estimate_equals_the_listing_estimate() -> None:
    summary = summarize(TREE)["p"]
    media = pc.and_(pc.invert(TREE["is_dir"]), media_mask(TREE["name"]))
    mem = pc.sum(pc.binary_length(pc.filter(TREE["path"], media))).as_py()
    row = {"n_folders": summary["n_folders"], "n_media": summary["n_media"], "mem_bytes": mem}
    assert stored_cost(row, COST) == listing_cost(TREE, COST)
    # without mem_bytes: a default per media file
    assert stored_cost({**row, "mem_bytes": None}, COST)[1] == 4 * DEFAULT_MEDIA_PATH_BYTES


def test_generate_budgets_the_stored_estimate_or_the_limit() -> None:
    assert listing_seconds(None, 0.5) == 0.5  # an empty partition: its root is listed
    assert scheduled_seconds(None, 90.0) == 90.0 and scheduled_seconds(3.0, 90.0) == 3.0
    partitions = pa.table(
        {
            "partition_id": ["x", "y"],
            "history": pa.array([None, None], PARTITIONS.field("history").type),
        }
    )
    part = {"host": "h", "last_scan": None, "rate_per_h": None}
    states = partition_states(
        partitions,
        [
            {**part, "partition_id": "x", "est_scan_s": 4.0},
            {**part, "partition_id": "y", "est_scan_s": None},
        ],
        {"h": True},
        Limits().max_seconds,
    )
    assert [s.cost_s for s in states] == [4.0, 90.0]

"""B*-subtrees in real rounds: a share too big for the limits is split into range
partitions; the next round finds every one of them unchanged; a change costs one partition."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.conftest import LAN


@pytest.fixture
def small_limits(luigi_cfg: Callable[[str], None]) -> None:
    # about four folders' listing per partition at the default 15 ms per folder
    luigi_cfg("[sharecrawl]\npartition_max_seconds = 0.06\n")


def build(lan: LAN) -> None:
    for i in range(24):
        for t in range(2):
            lan.media(
                "alpha",
                f"music/Album {i:02d}/track{t:02d}.mp3",
                artist=f"Band {i}",
                title=f"Song {i} {t}",
            )
    lan.media("alpha", "music/loose.mp3", artist="Loose", title="Single")
    lan.write_hosts("alpha")


def test_big_share_is_split_and_stays_stable(lan: LAN, run_json, small_limits: None) -> None:
    build(lan)
    lan.crawl()
    parts = run_json(
        lan,
        "sql",
        "SELECT partition_id, root, lo, hi, parent_id, n_files "
        "FROM partitions ORDER BY lo NULLS FIRST",
    )
    assert len(parts) > 3
    root = parts[0]
    assert (root["root"], root["lo"], root["hi"]) == ("", None, None)
    assert all(p["parent_id"] == root["partition_id"] for p in parts[1:])
    # every file and folder in exactly one partition, and the partition knows it
    orphans = run_json(
        lan, "sql", "SELECT count(*) AS n FROM files f ANTI JOIN partitions p USING (partition_id)"
    )
    assert orphans[0]["n"] == 0
    counted = run_json(lan, "sql", "SELECT sum(n_files) AS n FROM partitions")[0]["n"]
    assert counted == 49

    lan.crawl()  # nothing changed: every partition, old and new, is found unchanged
    status = run_json(lan, "status")
    assert status["partitions"]["scanned"] == len(parts)
    assert status["partitions"]["unchanged"] == len(parts)
    assert status["tags_read"] == 0

    lan.media("alpha", "music/Album 07/bonus.mp3", artist="Band 7", title="Bonus")
    lan.tick(lan.host("alpha") / "music/Album 07")
    lan.crawl()
    status = run_json(lan, "status")
    assert status["partitions"]["changed"] == 1 and status["tags_read"] == 1
    assert [r["title"] for r in run_json(lan, "search", "bonus")] == ["Bonus"]
    assert len(run_json(lan, "sql", "SELECT * FROM partitions")) == len(parts)

"""Metrics for monitoring: `serve`'s `/metrics` and `/healthz`, and the `metrics.prom` every
round writes (docs/crawl-dir.md), each checked by Prometheus' own `promtool`, as a scrape or
node_exporter's textfile collector would read them."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import urllib.request
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import LAN
from tests.test_web_lan import Server


def promtool_check(text: str) -> None:
    """`promtool check metrics` passes on `text`: no error and no lint warning."""
    if shutil.which("promtool") is None:
        pytest.skip("promtool is not installed (make test installs Debian's prometheus)")
    done = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_promtool_finds_a_broken_exposition() -> None:
    """The check can fail: a counter without _total and a sample with no value."""
    if shutil.which("promtool") is None:
        pytest.skip("promtool is not installed (make test installs Debian's prometheus)")
    done = subprocess.run(
        ["promtool", "check", "metrics"],
        input="# HELP x_requests requests\n# TYPE x_requests counter\nx_requests 1\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert 'counter metrics should have "_total" suffix' in done.stdout + done.stderr


@pytest.fixture
def crawled(tmp_path: Path) -> LAN:
    lan = LAN(tmp_path)
    lan.media("alpha", "music/Madonna - Music.mp3", artist="Madonna", title="Music")
    lan.media("alpha", "music/Frozen.flac", "flac", artist="Madonna", title="Frozen")
    lan.write_hosts("alpha")
    lan.crawl()
    return lan


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_metrics_count_requests_and_streams(crawled: LAN, workers: str) -> None:
    server = Server(crawled.crawl_dir, "--workers", workers)
    try:
        status, results = server.api(q="music")
        assert status == 200
        link = results["results"][0]["best"]["link"]
        size = results["results"][0]["best"]["size"]
        with urllib.request.urlopen(server.url + link, timeout=30) as response:
            assert (response.status, len(response.read())) == (200, size)
        assert server.get("/copy/0000000000000000")[0] == 404
        assert server.get("/?q=madonna")[0] == 200
        assert server.get("/healthz")[:1] == (200,)
        text = server.get("/metrics")[2]
    finally:
        assert server.stop() == 0
    promtool_check(text)
    found = samples(text)
    assert found[("sharecrawl_http_requests_total", (("route", "/copy"), ("status", "200")))] == 1
    assert found[("sharecrawl_http_requests_total", (("route", "/copy"), ("status", "404")))] == 1
    assert found[("sharecrawl_http_requests_total", (("route", "/api/search"), ("status", "200")))]
    assert found[("sharecrawl_streamed_bytes_total", ())] == size
    assert found[("sharecrawl_streams_open", ())] == 0  # the download ended
    latency = ("sharecrawl_http_request_duration_seconds_count", (("route", "/"),))
    assert found[latency] == 1
    assert found[("sharecrawl_live_version", ())] == 1
    assert 0 <= found[("sharecrawl_live_version_age_seconds", ())] < 24 * 3600


def test_healthz_says_why_when_the_live_version_cannot_be_read(crawled: LAN) -> None:
    server = Server(crawled.crawl_dir)
    try:
        status, _, body = server.get("/healthz")
        assert (status, body) == (200, "ok: v000001\n")
        (crawled.crawl_dir / "crawldb" / "CURRENT").write_text("v0000zz\n")  # damaged
        status, _, body = server.get("/healthz")
    finally:
        server.stop()
    assert status == 503
    assert body.count("\n") == 1 and "sharecrawl check" in body and "--repair" in body


def test_a_metrics_folder_is_gone_after_serve(crawled: LAN, tmp_path: Path) -> None:
    """serve counts into a private folder of its own, removed when it stops."""
    before = set(Path(tempfile.gettempdir()).glob("sharecrawl-serve-metrics-*"))
    server = Server(crawled.crawl_dir, "--workers", "2")
    with urllib.request.urlopen(server.url + "/metrics", timeout=30) as response:
        assert response.status == 200
    during = set(Path(tempfile.gettempdir()).glob("sharecrawl-serve-metrics-*")) - before
    assert server.stop() == 0
    assert len(during) == 1 and not next(iter(during)).exists()


def test_every_round_writes_metrics_that_promtool_accepts(crawled: LAN) -> None:
    """Round 1 found two media files; round 2 listed the same entries and found nothing new."""
    text = (crawled.crawl_dir / "metrics.prom").read_text()
    promtool_check(text)
    first = samples(text)
    assert first[("sharecrawl_live_version", ())] == 1
    assert first[("sharecrawl_hosts", (("status", "ok"),))] == 1
    assert first[("sharecrawl_tags_read", ())] == 2
    assert first[("sharecrawl_partition_scans", (("outcome", "new"),))] == 1
    assert first[("sharecrawl_round_succeeded", ())] == 1
    stages = {dict(labels)["stage"] for (name, labels) in first if "stage_duration" in name}
    assert stages >= {"inject", "generate", "fetchshard", "update", "index"}
    crawled.crawl()
    second = samples((crawled.crawl_dir / "metrics.prom").read_text())
    assert second[("sharecrawl_live_version", ())] == 2
    assert second[("sharecrawl_partition_scans", (("outcome", "unchanged"),))] == 1
    assert second[("sharecrawl_tags_read", ())] == 0
    assert second[("sharecrawl_entries_listed", ())] == first[("sharecrawl_entries_listed", ())]
    parts = sum(1 for _ in (crawled.crawl_dir / "crawldb" / "v000002").rglob("*.parquet"))
    assert parts > 0 and second[("sharecrawl_crawldb_bytes", ())] > 0
    last = ("sharecrawl_last_success_timestamp_seconds", ())
    assert second[last] > first[last]


def test_a_round_no_host_answered_keeps_the_last_success(crawled: LAN) -> None:
    before = samples((crawled.crawl_dir / "metrics.prom").read_text())
    crawled.hosts_file.write_text("smb://127.0.0.1:9/music\n")  # discard: nothing listens
    assert crawled.cli("crawl", "--quiet") == 1
    after = samples((crawled.crawl_dir / "metrics.prom").read_text())
    assert after[("sharecrawl_round_succeeded", ())] == 0
    assert after[("sharecrawl_hosts", (("status", "refused"),))] == 1
    last = ("sharecrawl_last_success_timestamp_seconds", ())
    assert after[last] == before[last]


def test_status_says_when_the_round_ran_and_the_version_was_published(
    crawled: LAN, run_json: Callable[..., object]
) -> None:
    status = run_json(crawled, "status")
    assert isinstance(status, dict)
    started, finished, published = (
        datetime.fromisoformat(status[k]) for k in ("started", "finished", "published")
    )
    assert started <= published <= finished  # published by the round's Update, before Index
    assert finished - started < timedelta(hours=1)
    assert set(status["stage_seconds"]) >= {"inject", "generate", "update", "index", "round"}


def test_a_round_that_fails_says_so_and_keeps_the_rest(crawled: LAN) -> None:
    """A round whose Inject cannot write its segment fails (exit 1): the file says the last
    round did not succeed, and keeps the last success and what the last round that ended saw.
    (A crawl refused before its round, for a damaged crawl directory, writes nothing.)"""
    before = samples((crawled.crawl_dir / "metrics.prom").read_text())
    (crawled.crawl_dir / "segments" / "r000002").write_text("")  # a file, not a folder
    assert crawled.cli("crawl", "--quiet") == 1
    text = (crawled.crawl_dir / "metrics.prom").read_text()
    promtool_check(text)
    after = samples(text)
    assert after[("sharecrawl_round_succeeded", ())] == 0
    for kept in ("sharecrawl_last_success_timestamp_seconds", "sharecrawl_live_version"):
        assert after[(kept, ())] == before[(kept, ())]
    assert after[("sharecrawl_tags_read", ())] == 2
    finished = ("sharecrawl_round_finished_timestamp_seconds", ())
    assert after[finished] > before[finished]
    assert set(after) == set(before)  # every series stays

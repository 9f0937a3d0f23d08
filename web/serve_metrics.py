"""`/metrics` and `/healthz` of `sharecrawl serve` (docs/web.md): requests by route and status,
their latency, streams open and bytes streamed, counted by an ASGI wrapper round the app; the
live version and its age read at each scrape. With `serve --workers N` every worker counts into
files of one private folder (prometheus-client's multiprocess mode) and a scrape, whichever
worker answers it, sums them all."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sharecrawl.web.live import LiveIndex, Unavailable

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"  # prometheus-client reads it when first imported
ROUTES = ("/api/search", "/copy/", "/cover/", "/static/", "/metrics", "/healthz")
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


def start_counting() -> Path:
    """The folder every worker of this server counts into, set before prometheus-client is
    imported (here or in a forked worker); outside the crawl directory, which serve only reads."""
    folder = Path(tempfile.mkdtemp(prefix="sharecrawl-serve-metrics-"))
    os.environ[MULTIPROC_ENV] = str(folder)
    return folder


def stop_counting(folder: Path) -> None:
    os.environ.pop(MULTIPROC_ENV, None)
    shutil.rmtree(folder, ignore_errors=True)


def route_of(path: str) -> str:
    """A request's route as a label: a few values whatever the path (never an id or a name)."""
    if path == "/":
        return "/"
    return next((r.rstrip("/") for r in ROUTES if path.startswith(r) or path == r), "other")


class ServeMetrics:
    """The counters of one server process, and the two endpoints that read them."""

    def __init__(self, live: LiveIndex) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.live = live
        # one server process (an app made in a test): its own registry, not the files
        self.registry = None if MULTIPROC_ENV in os.environ else CollectorRegistry()
        self.requests = Counter(
            "sharecrawl_http_requests",
            "HTTP requests answered",
            ["route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "sharecrawl_http_request_duration_seconds",
            "From a request to the start of its answer",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.streams = Gauge(
            "sharecrawl_streams_open",
            "Copies being sent now",
            multiprocess_mode="livesum",
            registry=self.registry,
        )
        self.streamed = Counter(
            "sharecrawl_streamed_bytes", "Bytes of copies sent", registry=self.registry
        )

    def wrap(self, app: ASGIApp) -> ASGIApp:
        async def counted(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            route, started, status = route_of(scope["path"]), time.monotonic(), 500
            streaming = False

            async def send_counted(message: Message) -> None:
                nonlocal status, streaming
                if message["type"] == "http.response.start":
                    status = message["status"]
                    self.latency.labels(route=route).observe(time.monotonic() - started)
                    if route == "/copy" and status in (200, 206):
                        streaming = True
                        self.streams.inc()
                elif message["type"] == "http.response.body" and streaming:
                    self.streamed.inc(len(message.get("body", b"")))
                await send(message)

            try:
                await app(scope, receive, send_counted)
            finally:
                if streaming:
                    self.streams.dec()
                self.requests.labels(route=route, status=str(status)).inc()

        return counted

    def _version_lines(self) -> str:
        """The live version and its age, read now (the folder's time: when it was published)."""
        try:
            name = self.live.current_name()
            published = (self.live.crawl.crawldb / name).stat().st_mtime
        except (Unavailable, OSError):
            return ""
        return (
            "# HELP sharecrawl_live_version The live version's number\n"
            "# TYPE sharecrawl_live_version gauge\n"
            f"sharecrawl_live_version {int(name.lstrip('v'))}\n"
            "# HELP sharecrawl_live_version_age_seconds Since the live version was published\n"
            "# TYPE sharecrawl_live_version_age_seconds gauge\n"
            f"sharecrawl_live_version_age_seconds {max(0.0, time.time() - published):.3f}\n"
        )

    def metrics(self, request: Request) -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
        from prometheus_client.multiprocess import MultiProcessCollector

        registry = self.registry
        if registry is None:  # every worker's files
            registry = CollectorRegistry()
            MultiProcessCollector(registry)
        body = generate_latest(registry).decode() + self._version_lines()
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    def healthz(self, request: Request) -> Response:
        """200 while the live version can be read; 503 and the one line saying why otherwise."""
        try:
            with self.live.acquire() as file:
                return PlainTextResponse(f"ok: {file.version}\n")
        except Unavailable as e:
            return PlainTextResponse(f"{e}\n", 503)

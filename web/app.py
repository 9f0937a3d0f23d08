"""The ASGI app of `sharecrawl serve` (docs/web.md): the page (`/`, rendered on the server too),
`/api/search`, `/copy/{id}` (web/stream.py), `/cover/{id}` (web/covers.py) and static files,
every response with the security headers; read-only but for the covers' thumbnails."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import os
import threading
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import anyio.to_thread
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sharecrawl.crawl_io.crawldb.version_manifest import first_line
from sharecrawl.queries.index_store import IndexFile
from sharecrawl.web import pages
from sharecrawl.web.copy_source import Streams, StreamSettings
from sharecrawl.web.covers import Covers, cache_mb, cover_route
from sharecrawl.web.live import LiveIndex, Unavailable
from sharecrawl.web.serve_metrics import ServeMetrics
from sharecrawl.web.stream import copy_route, withhold_links

HERE = Path(__file__).resolve().parent
WORKER_THREADS = 4
log = logging.getLogger("sharecrawl.web")

SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        b"media-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; "
        b"frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
]


def loopback_host_only(app: ASGIApp) -> ASGIApp:
    """On a loopback address, answer only requests for a loopback Host: a page whose name an
    attacker points at 127.0.0.1 (DNS rebinding) gets 421, not the index."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not _loopback_host(scope):
            response = Response("This server answers only on its own address.\n", 421)
            await _secured(response)(scope, receive, send)
            return
        await app(scope, receive, send)

    return guarded


def _loopback_host(scope: Scope) -> bool:
    host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "")
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    name = name.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def security_headers(app: ASGIApp) -> ASGIApp:
    """Adds SECURITY_HEADERS to every HTTP response, and no-store to dynamic ones."""

    async def secured(scope: Scope, receive: Receive, send: Send) -> None:
        static = scope["type"] == "http" and scope["path"].startswith("/static/")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [*message.get("headers", []), *SECURITY_HEADERS]
                if not any(name == b"cache-control" for name, _ in headers):  # covers have theirs
                    headers.append((b"cache-control", b"no-cache" if static else b"no-store"))
                message["headers"] = headers
            await send(message)

        await app(scope, receive, send_with_headers)

    return secured


def _secured(response: Response) -> Response:
    """For the answers that bypass security_headers."""
    for name, value in SECURITY_HEADERS:
        response.headers[name.decode()] = value.decode()
    return response


def _json(payload: dict, status: int) -> Response:
    # as `sharecrawl search --json` prints: readable Unicode, str() for anything else
    body = json.dumps(payload, default=str, ensure_ascii=False)
    return Response(body, status, media_type="application/json")


def _warm_in_background(live: LiveIndex, file: IndexFile) -> None:
    if not file.enter():
        return

    def run() -> None:
        try:
            pages.warm(live, file)
        except Exception as e:  # a request will load it and say what failed, as a page
            log.warning(
                "sharecrawl: serve: loading version %s ahead of requests failed: %s",
                file.version,
                first_line(e),
            )
        finally:
            file.leave()

    threading.Thread(target=run, name=f"warm-{file.version}", daemon=True).start()


def create_app(
    crawl_dir: str | os.PathLike,
    *,
    loopback_only: bool = False,
    stream: StreamSettings | None = None,
) -> Starlette:
    """The app serving `crawl_dir`; `loopback_only` when it listens on a loopback address."""
    live = LiveIndex(crawl_dir)
    streams = Streams(stream or StreamSettings())
    metrics = ServeMetrics(live)
    live.on_open = lambda file: _warm_in_background(live, file)
    templates = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )

    def render(name: str, status: int, **context: object) -> HTMLResponse:
        return HTMLResponse(templates.get_template(name).render(**context), status)

    def failure(message: str, status: int, html: bool) -> Response:
        if html:
            return render("unavailable.html", status, message=message)
        return _json({"error": message}, status)

    def answer(query: Mapping[str, str], html: bool) -> Response:
        """The page (`html`) or /api/search's JSON for one query string, in a worker thread."""
        try:
            p = pages.parse_params(query)
            status, data = withhold_links(live, streams, *pages.run(live, p))
        except pages.BadRequest as e:
            if not html:
                return _json({"error": str(e)}, 400)
            p = pages.Params()
            status, data = 400, pages.error_payload(p, str(e))
        except Unavailable as e:
            return failure(str(e), 503, html)
        if not html:
            return _json(data, status)
        return render("index.html", status, p=p, data=data, size_default=pages.PAGE_SIZE)

    async def page(request: Request) -> Response:
        return await run_in_threadpool(answer, request.query_params, True)

    async def api_search(request: Request) -> Response:
        return await run_in_threadpool(answer, request.query_params, False)

    async def server_error(request: Request, exc: Exception) -> Response:
        # uvicorn logs the traceback; the browser gets one sentence and the usual headers
        message = "Something went wrong on the server; the error is in its log. Reload the page."
        return _secured(failure(message, 500, not request.url.path.startswith("/api/")))

    routes = [
        Route("/", page, methods=["GET", "HEAD"]),
        Route("/api/search", api_search, methods=["GET"]),
        Route("/copy/{id}", copy_route(live, streams), methods=["GET", "HEAD"]),
        Route("/cover/{id}", cover_route(Covers(live, streams, cache_mb())), methods=["GET"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        Route("/metrics", metrics.metrics, methods=["GET"]),
        Route("/healthz", metrics.healthz, methods=["GET", "HEAD"]),
    ]

    def look_once() -> None:
        with contextlib.suppress(Unavailable), live.acquire():
            pass  # opening the version starts loading it in the background

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # Requests are CPU work under one GIL: a few at a time finish sooner than forty
        # threads taking turns every few milliseconds (the default pool).
        anyio.to_thread.current_default_thread_limiter().total_tokens = WORKER_THREADS
        await anyio.to_thread.run_sync(look_once)  # starts loading the version now
        yield

    app = Starlette(routes=routes, exception_handlers={Exception: server_error}, lifespan=lifespan)
    app.add_middleware(security_headers)
    if loopback_only:
        app.add_middleware(loopback_host_only)
    app.add_middleware(metrics.wrap)  # outermost: every answer counted, a 421 too
    app.state.live = live
    app.state.streams = streams
    return app

"""`GET /copy/{id}` as HTTP (docs/web.md, "Streaming a copy"): one byte range (RFC 9110
§14; several, or a malformed one, get the whole file as §14.2 allows), validators from the
listing and the preconditions of §13 (web/conditions.py), `Content-Disposition` by RFC 6266,
the next block read while one is sent, and a send that makes no progress for
`stream_timeout_s` the stream's end."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from email.utils import format_datetime
from typing import Any
from urllib.parse import quote

import anyio
import anyio.lowlevel
import anyio.to_thread
from anyio.streams.memory import MemoryObjectSendStream
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Message, Receive, Scope, Send

from sharecrawl.crawl_io.checked import mtime_datetime
from sharecrawl.crawl_io.mediatypes import extension
from sharecrawl.crawl_io.sources import ConfigError, parse_host_url
from sharecrawl.queries.index_store import IndexFile
from sharecrawl.web.conditions import Unsatisfiable, evaluate, parse_range, range_applies
from sharecrawl.web.copy_source import (
    BLOCK,
    UNREACHABLE,
    Busy,
    Changed,
    Copy,
    NotStreamable,
    Reader,
    Streams,
    find,
)
from sharecrawl.web.live import LiveIndex, Unavailable

FIRST_CHUNK = 256 * 1024  # the first bytes sooner: a player starts on them
AHEAD = 1  # blocks read and waiting, besides the one being sent and the one being read
# A send's most bytes: a client that takes fewer in `stream_timeout_s` is taking none (uvicorn
# sends once the socket's buffer is down to 16 KiB of the last send)
SEND_PIECE = FIRST_CHUNK
# The refusals' sentences besides copy_source's: the page shows them beside the copy
STREAMS_OFF = "Streaming is off on this server (it was started with --no-stream)."
READ_FAILED = "The server failed to read this copy; the error is in its log."
log = logging.getLogger("sharecrawl.web")

CONTENT_TYPES = {
    **dict.fromkeys(("mp3", "mp2", "mp1"), "audio/mpeg"),
    "flac": "audio/flac",
    **dict.fromkeys(("ogg", "oga", "opus", "spx"), "audio/ogg"),
    **dict.fromkeys(("m4a", "m4b", "alac"), "audio/mp4"),
    "aac": "audio/aac",
    "wav": "audio/wav",
    **dict.fromkeys(("aiff", "aif", "aifc"), "audio/aiff"),
    "wma": "audio/x-ms-wma",
    **dict.fromkeys(("mp4", "m4v"), "video/mp4"),
    "webm": "video/webm",
    "ogv": "video/ogg",
    "mkv": "video/x-matroska",
    **dict.fromkeys(("avi", "divx"), "video/x-msvideo"),
    "wmv": "video/x-ms-wmv",
    "mov": "video/quicktime",
    **dict.fromkeys(("mpg", "mpeg", "vob"), "video/mpeg"),
    **dict.fromkeys(("ts", "m2ts"), "video/mp2t"),
    "flv": "video/x-flv",
    "3gp": "video/3gpp",
}


def content_disposition(kind: str, name: str) -> str:
    """RFC 6266: the name in UTF-8 (RFC 8187) and an ASCII fallback for old clients."""
    fallback = "".join(c if " " <= c <= "~" and c not in '"\\%' else "_" for c in name)
    encoded = quote(name, safe="", errors="surrogatepass")
    return f"{kind}; filename=\"{fallback}\"; filename*=UTF-8''{encoded}"


def _validators(copy: Copy) -> dict[str, str]:
    modified = mtime_datetime(copy.mtime_us).replace(microsecond=0)
    return {
        "etag": f'"{copy.size:x}-{copy.mtime_us:x}"',
        "last-modified": format_datetime(modified, usegmt=True),
    }


def _text(message: str, status: int, headers: dict[str, str] | None = None) -> Response:
    return Response(message + "\n", status, headers, media_type="text/plain")


def _pieces(message: Message) -> Iterator[Message]:
    """A body message as sends of at most SEND_PIECE bytes (any other message as it is)."""
    body = message.get("body", b"")
    if message["type"] != "http.response.body" or len(body) <= SEND_PIECE:
        yield message
        return
    more = message.get("more_body", False)
    for at in range(0, len(body), SEND_PIECE):
        end = at + SEND_PIECE
        yield {"type": message["type"], "body": body[at:end], "more_body": more or end < len(body)}


class _Stream(StreamingResponse):
    """Bytes `first`..`last` of an open file, the next block read while one is sent; the file
    is closed however the response ends (sent, client gone, read failed, or a send that made
    no progress for `send_timeout_s`: a client that takes no bytes must not hold a slot)."""

    def __init__(
        self,
        reader: Reader,
        span: tuple[int, int],
        name: str,
        close: Callable[[], None],
        threads: anyio.CapacityLimiter,
        send_timeout_s: float,
        *args: Any,
        **kw: Any,
    ) -> None:
        self._ahead, body = anyio.create_memory_object_stream[bytes](AHEAD)
        super().__init__(body, *args, **kw)
        self._reader, self._span, self._name = reader, span, name
        self._close, self._threads = close, threads
        self._send_timeout_s, self._sent = send_timeout_s, 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._read_ahead, self._ahead, tasks.cancel_scope)

                async def timed_send(message: Message) -> None:
                    # uvicorn's send waits while the socket's buffers are full: a client
                    # reading nothing waits it for ever. Each piece has the whole timeout, so
                    # a client that takes a block slowly is making progress, not stopped.
                    for piece in _pieces(message):
                        with anyio.move_on_after(self._send_timeout_s) as waited:
                            await send(piece)
                        if waited.cancelled_caught:
                            log.warning(
                                "Streaming %s stopped at byte %d: the client took no bytes "
                                "for %g s",
                                self._name,
                                self._span[0] + self._sent,
                                self._send_timeout_s,
                            )
                            tasks.cancel_scope.cancel()  # the response ends unfinished
                            await anyio.lowlevel.checkpoint()
                        self._sent += len(piece.get("body", b""))

                try:
                    await super().__call__(scope, receive, timed_send)
                except ClientDisconnect:
                    pass  # the client went away: nothing more to send
                finally:
                    tasks.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._close, limiter=self._threads)

    async def _read_ahead(
        self, ahead: MemoryObjectSendStream[bytes], stop: anyio.CancelScope
    ) -> None:
        (at, end), size = self._span, FIRST_CHUNK
        async with ahead:
            while at <= end:
                want = min(size, end + 1 - at)
                try:
                    args = (at, want, end + 1 - at - want)
                    data = await anyio.to_thread.run_sync(
                        self._reader.read, *args, limiter=self._threads
                    )
                except Exception as e:  # the host hung or went: end the response unfinished
                    data, why = b"", f"the host failed ({type(e).__name__})"
                else:
                    why = "the file is shorter than listed"
                if not data:
                    log.warning("Streaming %s stopped at byte %d: %s", self._name, at, why)
                    stop.cancel()  # a short body under its Content-Length would be wrong
                    return
                await ahead.send(data)
                at, size = at + len(data), BLOCK


def withhold_links(live: LiveIndex, streams: Streams, status: int, data: dict) -> tuple:
    """The payload with `link: null` for copies this server does not stream (--no-stream,
    or hosts crawled with credentials without --stream-authenticated), and the page's copies
    (those with a `why`) saying why."""
    settings = streams.settings
    if settings.enabled and settings.authenticated:
        return status, data
    withheld: dict[str, str] = {}
    if settings.enabled:

        def load(file: IndexFile) -> dict[str, str]:
            with file.cursor() as con:
                rows = con.execute("SELECT host, url FROM hosts").fetchall()
            return {h: why for h, url in rows if (why := _withheld(streams, url))}

        with live.acquire() as file:
            key = f"withheld-why:{settings.enabled}:{settings.authenticated}"
            withheld = file.cached(key, load)

    def walk(item: object) -> None:
        if isinstance(item, dict):
            why = STREAMS_OFF if not settings.enabled else withheld.get(item.get("host") or "")
            if item.get("link") and why:
                item["link"] = None
                if "why" in item:
                    item["why"] = why
            for value in item.values():
                walk(value)
        elif isinstance(item, list):
            for value in item:
                walk(value)

    walk(data)
    return status, data


def _withheld(streams: Streams, url: str | None) -> str | None:
    """Why this server does not stream the copies of the host with this URL, or None."""
    try:
        return UNREACHABLE if url is None else streams.withheld(parse_host_url(url))
    except ConfigError:
        return UNREACHABLE


def copy_route(live: LiveIndex, streams: Streams) -> Callable[[Request], Awaitable[Response]]:
    """The endpoint of `GET /copy/{id}` for this server's index and streams."""
    threads: list[anyio.CapacityLimiter] = []  # made on first use, inside the event loop

    def limiter() -> anyio.CapacityLimiter:
        if not threads:
            threads.append(anyio.CapacityLimiter(streams.settings.total + 1))
        return threads[0]

    def lookup(copy_id: str) -> Copy:
        with live.acquire() as file:
            return find(file, copy_id)

    async def endpoint(request: Request) -> Response:
        if not streams.settings.enabled:
            return _text(STREAMS_OFF, 404)
        try:
            copy = await anyio.to_thread.run_sync(lookup, request.path_params["id"])
        except (NotStreamable, Unavailable) as e:
            return _text(str(e), 404)
        withheld = streams.withheld(copy.host)
        if withheld:
            return _text(withheld, 404)
        headers = _validators(copy)
        modified = mtime_datetime(copy.mtime_us)
        decided = evaluate(request.headers, headers["etag"], modified, request.method)
        if decided == 304:
            return Response(status_code=304, headers=headers)
        if decided == 412:
            return _text("The copy is not the one the request's conditions name.", 412)
        kind = "attachment" if request.query_params.get("download") else "inline"
        headers["content-disposition"] = content_disposition(kind, copy.shown_name)
        headers["accept-ranges"] = "bytes"
        wanted = request.headers.get("range")
        etag, last_modified = headers["etag"], headers["last-modified"]
        if not range_applies(request.headers.get("if-range"), etag, last_modified):
            wanted = None  # the client's copy is of other bytes: send them all
        try:
            span = parse_range(wanted, copy.size) if wanted else None
        except Unsatisfiable:
            headers["content-range"] = f"bytes */{copy.size}"
            return _text("The range asked for is outside the file.", 416, headers)
        try:
            streams.take(copy.host.host)
        except Busy as e:
            return _text(str(e), 503, {"retry-after": "2"})
        try:
            reader = await anyio.to_thread.run_sync(streams.open, copy, limiter=limiter())
        except (NotStreamable, Changed) as e:
            streams.give_back(copy.host.host)
            return _text(str(e), 404 if isinstance(e, NotStreamable) else 409)
        except Exception:  # a bug or a library's surprise: the page says so in words
            streams.give_back(copy.host.host)
            log.exception("Opening %s/%s/%s failed", copy.host.host, copy.share, copy.path)
            return _text(READ_FAILED, 500)
        except BaseException:
            streams.give_back(copy.host.host)
            raise

        def close() -> None:
            try:
                reader.close()
            finally:
                streams.give_back(copy.host.host)

        start, end, status = 0, copy.size - 1, 200
        if span is not None:
            (start, end), status = span, 206
            headers["content-range"] = f"bytes {start}-{end}/{copy.size}"
        headers["content-length"] = str(end + 1 - start)
        media_type = CONTENT_TYPES.get(extension(copy.name), "application/octet-stream")
        if request.method == "HEAD":
            await anyio.to_thread.run_sync(close, limiter=limiter())
            return Response(status_code=status, headers=headers, media_type=media_type)
        name = f"{copy.host.host}/{copy.share}/{copy.path}"
        timeout_s = streams.settings.timeout_s
        args = (reader, (start, end), name, close, limiter(), timeout_s, status, headers)
        return _Stream(*args, media_type=media_type)

    return endpoint

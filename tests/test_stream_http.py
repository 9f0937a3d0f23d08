"""`/copy` and `/cover` as RFC 9110 asks (§13 preconditions, §14 ranges), in process: the app
(web/app.py) over a real crawl of a file:// host, called as uvicorn calls it (ASGI), on one
event loop of its own. Whatever a header says, the answer is one of a few statuses, never 500."""

from __future__ import annotations

import asyncio
import io
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from email.utils import format_datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from sharecrawl.queries.search_results import copy_id
from sharecrawl.web.app import create_app
from sharecrawl.web.conditions import parse_range
from tests.conftest import LAN

SIZE_PAD = 5000  # bytes added to the song: ranges land inside a file of a known size
ALLOWED = {200, 206, 304, 404, 409, 412, 416, 503}


class App:
    """The ASGI app on an event loop in a thread of its own (the app keeps loop-bound state)."""

    def __init__(self, crawl_dir: Path) -> None:
        self.app = create_app(crawl_dir, loopback_only=True)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def call(
        self, path: str, headers: list[tuple[bytes, bytes]], method: str = "GET"
    ) -> tuple[int, dict[str, str], bytes]:
        future = asyncio.run_coroutine_threadsafe(self._call(path, headers, method), self.loop)
        return future.result(timeout=120)

    async def _call(
        self, path: str, headers: list[tuple[bytes, bytes]], method: str
    ) -> tuple[int, dict[str, str], bytes]:
        target, _, query = path.partition("?")
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": target,
            "raw_path": target.encode(),
            "query_string": query.encode(),
            "root_path": "",
            "headers": [(b"host", b"127.0.0.1"), *headers],
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8080),
            "state": {},
        }
        messages: list[dict] = []
        done = asyncio.Event()

        async def receive() -> dict:
            await done.wait()  # the request has no body; the client leaves once answered
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            messages.append(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                done.set()

        await self.app(scope, receive, send)
        done.set()
        start = messages[0]
        found = {k.decode("latin-1"): v.decode("latin-1") for k, v in start["headers"]}
        body = b"".join(m.get("body", b"") for m in messages[1:])
        return start["status"], found, body

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)


@pytest.fixture(scope="module")
def http_lan(tmp_path_factory: pytest.TempPathFactory) -> LAN:
    lan = LAN(tmp_path_factory.mktemp("httplan"))
    song = lan.media("lab", "Album/01.mp3", artist="Header", title="Song")
    with song.open("ab") as f:
        f.write(bytes(range(256)) * (SIZE_PAD // 256))
    lan.tick(song)
    picture = io.BytesIO()
    Image.new("RGB", (300, 300), (0, 200, 0)).save(picture, "JPEG")
    (song.parent / "folder.jpg").write_bytes(picture.getvalue())
    lan.write_hosts("lab")
    lan.crawl()
    return lan


@pytest.fixture(scope="module")
def app(http_lan: LAN) -> Iterator[App]:
    served = App(http_lan.crawl_dir)
    yield served
    served.close()


COPY = f"/copy/{copy_id('lab', 'Album', '01.mp3')}"
COVER = f"/cover/{copy_id('lab', 'Album', '01.mp3')}"


def get(app: App, path: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    raw = [(k.replace("_", "-").encode(), v.encode("latin-1")) for k, v in headers.items()]
    return app.call(path, raw)


def test_if_none_match_compares_weakly_and_reads_lists(app: App) -> None:
    status, headers, body = get(app, COPY)
    assert status == 200 and len(body) == int(headers["content-length"])
    etag = headers["etag"]
    for matching in (etag, f"W/{etag}", f'"a", {etag}', f'W/"x",W/{etag} ', "*", " * "):
        assert get(app, COPY, if_none_match=matching)[0] == 304, matching
    for other in ('"a"', f'"a", W/"{etag}"', etag.strip('"'), f"{etag}, garbage", ""):
        assert get(app, COPY, if_none_match=other)[0] == 200, other


def test_if_modified_since_is_read_only_without_if_none_match(app: App) -> None:
    headers = get(app, COPY)[1]
    modified = headers["last-modified"]
    assert get(app, COPY, if_modified_since=modified)[0] == 304
    assert get(app, COPY, if_modified_since="Sat, 01 Jan 2000 00:00:00 GMT")[0] == 200
    assert get(app, COPY, if_modified_since="not a date")[0] == 200
    assert get(app, COPY, if_none_match='"other"', if_modified_since=modified)[0] == 200


def test_if_match_and_if_unmodified_since_give_412(app: App) -> None:
    headers = get(app, COPY)[1]
    etag = headers["etag"]
    assert get(app, COPY, if_match='"other"')[0] == 412
    assert get(app, COPY, if_match=f"W/{etag}")[0] == 412  # If-Match compares strongly
    assert get(app, COPY, if_match=etag)[0] == 200
    assert get(app, COPY, if_unmodified_since="Sat, 01 Jan 2000 00:00:00 GMT")[0] == 412
    assert get(app, COPY, if_unmodified_since=headers["last-modified"])[0] == 200


def test_if_range_takes_a_strong_etag_or_the_exact_date(app: App) -> None:
    status, headers, whole = get(app, COPY)
    etag, modified = headers["etag"], headers["last-modified"]
    for honoured in (etag, modified):
        status, _, body = get(app, COPY, range="bytes=0-9", if_range=honoured)
        assert (status, body) == (206, whole[:10]), honoured
    other_date = format_datetime(datetime(2001, 2, 3, tzinfo=UTC), usegmt=True)
    for refused in (f"W/{etag}", '"other"', other_date, "yesterday", "W/", '"'):
        status, _, body = get(app, COPY, range="bytes=0-9", if_range=refused)
        assert (status, body) == (200, whole), refused


def test_ranges_that_do_not_parse_are_ignored(app: App) -> None:
    status, headers, whole = get(app, COPY)
    size = len(whole)
    many = "9" * 4301  # past Python's int() limit of 4,300 digits
    for ignored in ("bytes=²-", "bytes=-²", "bytes=³-5", "bytes= - ", "bytes=1-2-3", "bytes"):
        status, _, body = get(app, COPY, range=ignored)
        assert (status, body) == (200, whole), ignored
    assert get(app, COPY, range=f"bytes={many}-")[0] == 416  # past the end
    status, headers, body = get(app, COPY, range=f"bytes=0-{many}")
    assert (status, headers["content-range"], body) == (206, f"bytes 0-{size - 1}/{size}", whole)
    status, _, body = get(app, COPY, range=f"bytes=-{many}")
    assert (status, body) == (206, whole)
    assert parse_range(f"bytes=00000000000000000000000000{size - 1}-", size) == (size - 1, size - 1)


def test_cover_if_none_match_compares_weakly(app: App) -> None:
    status, headers, _ = get(app, COVER)
    assert (status, headers["content-type"]) == (200, "image/jpeg")
    etag = headers["etag"]
    for matching in (etag, f"W/{etag}", f'"a", {etag}', "*"):
        assert get(app, COVER, if_none_match=matching)[0] == 304, matching
    assert get(app, COVER, if_none_match='"a"')[0] == 200


LATIN1 = st.characters(max_codepoint=255, exclude_characters="\r\n")
VALUES = st.one_of(
    st.text(LATIN1, max_size=40),
    st.builds(
        lambda a, b: f"bytes={a}-{b}",
        st.text("0123456789²¹ x,-", max_size=8),
        st.text("0123456789²¹ x,-", max_size=8),
    ),
    st.builds(
        lambda n, tail: "9" * n + tail, st.integers(0, 5000), st.sampled_from(["", "-", "-1"])
    ).map(lambda s: f"bytes={s}"),
    st.lists(st.sampled_from(['"a"', "W/", "*", ",", '"', " ", 'W/"x"']), max_size=6).map("".join),
    st.sampled_from(["Sat, 01 Jan 2000 00:00:00 GMT", "Fri, 31 Dec 9999 23:59:59 GMT", "0"]),
)
NAMES = st.sampled_from(
    ["range", "if-range", "if-none-match", "if-modified-since", "if-match", "if-unmodified-since"]
) | st.from_regex(r"[a-gi-z][a-z0-9-]{0,15}", fullmatch=True)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    path=st.sampled_from([COPY, COVER, f"{COPY}?download=1", "/copy/0123456789abcdef"]),
    method=st.sampled_from(["GET", "HEAD"]),
    headers=st.lists(st.tuples(NAMES, VALUES), max_size=5),
)
def test_whatever_the_headers_never_a_500(app: App, path: str, method: str, headers) -> None:
    raw = [(k.encode(), v.encode("latin-1")) for k, v in headers]
    if path.startswith("/cover/") and method == "HEAD":
        method = "GET"  # the route takes GET alone
    status, _, _ = app.call(path, raw, method)
    assert status in ALLOWED, (status, headers)

"""`GET /cover/{id}`: the cover of the work whose copy has this id as a small JPEG, made on first
view and kept in `<crawl_dir>/covers/` (docs/web.md, "Covers"); anything that goes wrong
answers the placeholder SVG with why in its `X-Reason` header, so a page never shows a broken
image."""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import io
import logging
import os
import threading
import warnings
from pathlib import Path

import anyio
import anyio.to_thread
import duckdb
import luigi.configuration
import mutagen
from mutagen.flac import Picture
from PIL import Image
from starlette.requests import Request
from starlette.responses import Response

from sharecrawl.crawl_io.crawldb.atomic import write_atomic
from sharecrawl.crawl_io.crawldb.host_parts import parse_part_file, table_parts
from sharecrawl.crawl_io.rangefile import RangeFile
from sharecrawl.queries.index_store import IndexFile
from sharecrawl.web.conditions import etag_matches
from sharecrawl.web.copy_source import Busy, Changed, Copy, NotStreamable, Reader, Streams, find
from sharecrawl.web.live import LiveIndex, Unavailable

SIDE = 240  # pixels, the longer side of a thumbnail (twice the page's 120 px, for sharp screens)
MAX_PICTURE = 12 * 1024 * 1024  # bytes of a picture file read
MAX_PIXELS = 40_000_000  # a bigger image is refused before it is decoded
COVER_NAMES = ("folder.jpg", "cover.jpg", "front.jpg", "poster.jpg")
CACHE_HEADERS = {"cache-control": "public, max-age=604800"}  # a week; the ETag names the bytes
PLACEHOLDER = (Path(__file__).parent / "static" / "cover.svg").read_bytes()
NO_PICTURE = "No picture is beside the file or in its tags."
MAKE_FAILED = "The server failed to make this cover; the error is in its log."
log = logging.getLogger("sharecrawl.web")
Image.MAX_IMAGE_PIXELS = MAX_PIXELS  # Pillow's decompression-bomb guard, tighter


class _Ranges:
    """A stream Reader as the Source crawl_io.rangefile reads from."""

    def __init__(self, reader: Reader) -> None:
        self.reader = reader

    def read(self, share: str, path: str, offset: int, length: int) -> bytes:
        return self.reader.read(offset, length)


def embedded_picture(reader: Reader, copy: Copy) -> bytes | None:
    """The front cover (or first picture) in a media file's tags, or None."""
    try:
        tagged = mutagen.File(RangeFile(_Ranges(reader), copy.share, copy.path, copy.size))
    except Exception:  # mutagen's many errors, the read cap: no picture from this file
        return None
    pictures = list(getattr(tagged, "pictures", []))  # FLAC
    tags = getattr(tagged, "tags", None)
    if hasattr(tags, "getall"):  # ID3
        pictures += tags.getall("APIC")
    elif tags is not None and "covr" in tags:  # MP4
        return bytes(tags["covr"][0]) if tags["covr"] else None
    elif tags is not None and "metadata_block_picture" in tags:  # Vorbis comments
        for block in tags["metadata_block_picture"]:
            try:
                pictures.append(Picture(base64.b64decode(block)))
            except Exception:  # a garbled block: look at the next
                continue
    pictures.sort(key=lambda p: getattr(p, "type", 0) != 3)  # the front cover first
    return pictures[0].data if pictures else None


def read_all(reader: Reader, size: int) -> bytes:
    data = bytearray()
    while len(data) < size and (chunk := reader.read(len(data), min(size - len(data), 1 << 20))):
        data += chunk
    return bytes(data)


def cache_mb() -> int:
    """luigi.cfg [sharecrawl] cover_cache_mb: the covers folder's cap."""
    from sharecrawl.pipeline import settings  # noqa: F401  (puts the repository's luigi.cfg first)

    return max(1, luigi.configuration.get_config().getint("sharecrawl", "cover_cache_mb", 64))


def thumbnail(data: bytes) -> bytes | None:
    """A JPEG of at most SIDE pixels a side, or None for what Pillow cannot or must not read."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:
                if image.width * image.height > MAX_PIXELS:
                    return None
                image.draft("RGB", (SIDE, SIDE))  # JPEG: decode at a fraction of the size
                image.thumbnail((SIDE, SIDE))
                out = io.BytesIO()
                image.convert("RGB").save(out, "JPEG", quality=82)
                return out.getvalue()
    except Exception:  # corrupt, truncated, a bomb, an unknown format: no cover
        return None


class Withheld(Exception):
    """The server does not read this copy's host (--no-stream, or crawled with credentials)."""


class Covers:
    """The thumbnails of one crawl directory, read through `streams`."""

    def __init__(self, live: LiveIndex, streams: Streams, cache_mb: int) -> None:
        self.live, self.streams = live, streams
        self.folder = live.crawl.root / "covers"
        self.cap = cache_mb * 1024 * 1024
        self._lock = threading.Lock()
        self._bytes: int | None = None  # the folder's size, counted once then kept up

    def _beside(self, file: IndexFile, copy: Copy) -> Copy | None:
        """A cover picture in the copy's folder, from the version's files rows."""
        folder = copy.path.rpartition("/")[0]
        version_dir = self.live.version_dir(file)
        parts = [
            str(p)
            for p in table_parts(version_dir, "files")
            if (parse_part_file(p.name) or ("",))[0] == copy.host.host
        ]
        if not parts:
            return None
        with duckdb.connect() as con:
            rows = con.execute(
                "SELECT path, size, epoch_us(mtime) FROM read_parquet(?) WHERE share = ? AND "
                "NOT is_dir AND size <= ? AND lower(path) IN (SELECT unnest(?::VARCHAR[]))",
                [
                    parts,
                    copy.share,
                    MAX_PICTURE,
                    [f"{folder}/{n}".lower() if folder else n for n in COVER_NAMES],
                ],
            ).fetchall()
        rows.sort(key=lambda r: COVER_NAMES.index(r[0].rpartition("/")[2].lower()))
        return Copy(copy.host, copy.share, rows[0][0], rows[0][1], rows[0][2]) if rows else None

    def _read(self, copy: Copy, whole: bool) -> bytes | None:
        """A picture file's bytes (whole) or the picture in a media file's tags."""
        self.streams.take(copy.host.host)
        try:
            with contextlib.closing(self.streams.open(copy)) as reader:
                return read_all(reader, copy.size) if whole else embedded_picture(reader, copy)
        finally:
            self.streams.give_back(copy.host.host)

    def _make(self, file: IndexFile, copy: Copy) -> bytes:
        beside = self._beside(file, copy)
        picture = None
        if beside is not None:
            with contextlib.suppress(Changed):  # gone since the crawl: try the tags
                picture = self._read(beside, True)
        if picture is None:
            picture = self._read(copy, False)
        return (thumbnail(picture) if picture else None) or b""

    def _store(self, path: Path, data: bytes) -> None:
        write_atomic(path, data)
        with self._lock:
            if self._bytes is None:
                self._bytes = sum(e.stat().st_size for e in os.scandir(self.folder))
            else:
                self._bytes += len(data)
            if self._bytes > self.cap:
                self._bytes = self._evict()

    def _evict(self) -> int:
        """Remove the oldest covers until the folder holds 90 % of its cap; its new size."""
        entries = sorted(
            (e.stat().st_mtime_ns, e.stat().st_size, e.path) for e in os.scandir(self.folder)
        )
        total = sum(size for _, size, _ in entries)
        for _, size, name in entries:
            if total <= self.cap * 0.9:
                break
            with contextlib.suppress(FileNotFoundError):  # another server process took it
                os.unlink(name)
            total -= size
        return total

    def get(self, copy_id: str) -> tuple[bytes, str] | None:
        """(JPEG, ETag) of the cover of the copy with this id, or None: no picture (the
        placeholder); Withheld when this server does not read the copy's host."""
        with self.live.acquire() as file:
            copy = find(file, copy_id)
            if why := self.streams.withheld(copy.host):
                raise Withheld(why)
            listing = f"{copy.host.host}\0{copy.share}\0{copy.path}\0{copy.size}\0{copy.mtime_us}"
            key = hashlib.sha256(listing.encode("utf-8", "surrogatepass")).hexdigest()[:32]
            path = self.folder / f"{key}.jpg"
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                data = self._make(file, copy)
                self._store(path, data)
        return (data, f'"{key}"') if data else None


def placeholder(why: str, headers: dict[str, str]) -> Response:
    """The placeholder SVG, saying why in a header (ASCII: a header holds Latin-1 only)."""
    reason = why.encode("ascii", "replace").decode()
    return Response(PLACEHOLDER, 200, headers | {"x-reason": reason}, "image/svg+xml")


def cover_route(covers: Covers):
    """The endpoint of `GET /cover/{id}`; reads run two at a time, beside the page's."""
    limiter = functools.cache(lambda: anyio.CapacityLimiter(2))  # made inside the event loop

    async def endpoint(request: Request) -> Response:
        try:
            found = await anyio.to_thread.run_sync(
                covers.get, request.path_params["id"], limiter=limiter()
            )
        except (NotStreamable, Unavailable, Changed, Busy, Withheld, OSError) as e:
            # no cover now, but maybe on the next look: cached briefly
            log.debug("sharecrawl: serve: no cover for %s: %s", request.path_params["id"], e)
            why = str(e) if not isinstance(e, OSError) else "The picture could not be read."
            return placeholder(why, {"cache-control": "no-cache"})
        except Exception:  # a bug or a library's surprise: still no broken image
            log.exception("sharecrawl: serve: making the cover of %s", request.path_params["id"])
            return placeholder(MAKE_FAILED, {"cache-control": "no-cache"})
        if found is None:
            return placeholder(NO_PICTURE, CACHE_HEADERS)
        data, etag = found
        headers = CACHE_HEADERS | {"etag": etag}
        if_none = request.headers.get("if-none-match")
        if if_none is not None and etag_matches(if_none, etag, weak=True):  # RFC 9110 §13.1.2
            return Response(status_code=304, headers=headers)
        return Response(data, 200, headers, "image/jpeg")

    return endpoint

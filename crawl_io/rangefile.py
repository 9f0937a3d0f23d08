"""A read-only, seekable file object over a source's byte ranges, with a small span cache.
Tags sit at a file's head and tail: a read near the head fetches an aligned block, a read into
the tail fetches all of it to the end, so a file costs one or two requests. No file costs more
than MAX_BYTES: a damaged header claiming a huge tag must not read a whole film."""

from __future__ import annotations

import io
from collections import OrderedDict

from sharecrawl.crawl_io.sources import Source, SourceError

BLOCK = 32 * 1024  # aligned blocks away from the tail
TAIL = 16 * 1024  # a read reaching into the last TAIL bytes fetches through to the end
MAX_SPANS = 16
MAX_BYTES = 16 * 1024 * 1024  # per file: the biggest tags (cover art) are a few MiB


class ReadLimitExceeded(OSError):
    """A reader asked for more than MAX_BYTES of one file."""


class RangeFile(io.RawIOBase):
    def __init__(self, source: Source, share: str, path: str, size: int) -> None:
        self._source, self._share, self._path, self._size = source, share, path, size
        self._pos = 0
        self._spans: OrderedDict[int, bytes] = OrderedDict()  # start offset -> bytes
        self.requests = 0
        self.bytes_read = 0
        self.error: SourceError | None = None  # the last source error, kept for the caller
        self.name = path  # mutagen shows it in messages

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        pos = base + offset
        if pos < 0:
            raise OSError("negative seek position")
        self._pos = pos
        return pos

    def _cached(self, pos: int) -> tuple[int, bytes] | None:
        for start, data in self._spans.items():
            if start <= pos < start + len(data):
                self._spans.move_to_end(start)
                return start, data
        return None

    def _fetch(self, pos: int, end: int) -> tuple[int, bytes]:
        """One request covering `pos`, chosen by the head/tail policy."""
        tail_start = max(0, self._size - TAIL)
        if end > tail_start:
            start, length = min(pos, tail_start), self._size - min(pos, tail_start)
        else:
            start = pos - pos % BLOCK
            # a big read (a tag with cover art) is one request, to a block boundary: what
            # follows a tag (the first audio frames) comes with it
            length = min(-(-(end - start) // BLOCK) * BLOCK, self._size - start)
        if self.bytes_read + length > MAX_BYTES:
            raise ReadLimitExceeded(f"read limit of {MAX_BYTES >> 20} MiB per file reached")
        try:
            data = self._source.read(self._share, self._path, start, length)
        except SourceError as e:
            self.error = e
            raise
        self.requests += 1
        self.bytes_read += len(data)
        self._spans[start] = data
        if len(self._spans) > MAX_SPANS:
            self._spans.popitem(last=False)
        return start, data

    def read(self, size: int | None = -1) -> bytes:
        end = self._size if size is None or size < 0 else min(self._size, self._pos + size)
        chunks = []
        while self._pos < end:
            start, data = self._cached(self._pos) or self._fetch(self._pos, end)
            piece = data[self._pos - start : end - start]
            if not piece:
                break  # the file is shorter than listed (it changed under us)
            chunks.append(piece)
            self._pos += len(piece)
        return b"".join(chunks)

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def readall(self) -> bytes:
        return self.read(-1)

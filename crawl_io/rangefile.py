"""A read-only, seekable file object over a source's byte ranges, with a small block cache.

Tag readers seek and read in small pieces; over SMB each piece would be a round trip, so
reads are served from a few cached blocks and counted (`requests`, `bytes_read`).
"""

from __future__ import annotations

import io
from collections import OrderedDict

from crawl_io.sources import Source, SourceError

BLOCK = 64 * 1024
MAX_BLOCKS = 16


class RangeFile(io.RawIOBase):
    def __init__(self, source: Source, share: str, path: str, size: int) -> None:
        self._source, self._share, self._path, self._size = source, share, path, size
        self._pos = 0
        self._blocks: OrderedDict[int, bytes] = OrderedDict()
        self.requests = 0
        self.bytes_read = 0
        self.error: SourceError | None = None  # the last source error, kept for the caller
        self.name = path  # mutagen shows it in messages

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        pos = base + offset
        if pos < 0:
            raise OSError("negative seek position")
        self._pos = pos
        return pos

    def _block(self, index: int) -> bytes:
        block = self._blocks.get(index)
        if block is None:
            offset = index * BLOCK
            try:
                block = self._source.read(self._share, self._path, offset, BLOCK)
            except SourceError as e:
                self.error = e
                raise
            self.requests += 1
            self.bytes_read += len(block)
            self._blocks[index] = block
            if len(self._blocks) > MAX_BLOCKS:
                self._blocks.popitem(last=False)
        else:
            self._blocks.move_to_end(index)
        return block

    def read(self, size: int = -1) -> bytes:
        end = self._size if size is None or size < 0 else min(self._size, self._pos + size)
        chunks = []
        while self._pos < end:
            index, within = divmod(self._pos, BLOCK)
            block = self._block(index)
            piece = block[within : within + (end - self._pos)]
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

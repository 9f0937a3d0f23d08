"""MP4 files (m4a, m4b, mp4, m4v): tags and stream by mutagen, plus what it does not tell: audio
or video by the tracks' handlers (ISO/IEC 14496-12 §8.4.3), a silent film's length from mvhd,
and a cut file whose moov runs past the end read from the atoms that are there (containers
shortened, the cut leaf dropped), which mutagen rejects."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import IO, Any

from mutagen.mp4 import MP4

from sharecrawl.crawl_io.sources import SourceError
from sharecrawl.crawl_io.tags.errors import NotThisFormat
from sharecrawl.crawl_io.tags.fields import fill_from_tags
from sharecrawl.crawl_io.tags.record import set_stream

CONTAINERS = frozenset(
    [b"moov", b"trak", b"mdia", b"minf", b"stbl", b"udta", b"meta", b"ilst", b"edts", b"dinf"]
)
SALVAGE_MAX = 4 << 20  # bytes of a cut moov atom read at most
VIDEO_HANDLERS = (b"vide",)
AUDIO_HANDLERS = (b"soun",)


def read_mp4(row: dict[str, Any], fileobj: IO[bytes], size: int) -> None:
    cut: Exception | None = None
    try:
        audio = MP4(fileobj)
        source = fileobj
    except SourceError:
        raise
    except Exception as e:
        source = io.BytesIO(_salvage(fileobj, size, e))
        audio = MP4(source)
        cut = e
    moov = _find(source, 0, source.seek(0, io.SEEK_END), b"moov")
    handlers = _handlers(source, moov) if moov else []
    if any(h in VIDEO_HANDLERS for h in handlers):
        row["kind"] = "video"
    elif any(h in AUDIO_HANDLERS for h in handlers):
        row["kind"] = "audio"
    info = audio.info
    length = info.length or (_movie_length(source, moov) if moov else None)
    set_stream(row, duration=length, samplerate=info.sample_rate, channels=info.channels)
    # some encoders state a bitrate of a few hundred bits/s (ALS): the file's own is truer
    stated = info.bitrate if info.bitrate >= 1000 else None
    set_stream(row, bitrate_bps=stated or (size * 8 / length if length else None))
    if audio.tags is not None:
        fill_from_tags(row, audio.tags)
    if cut is not None:
        raise cut  # the row keeps what was read; tag_error says the file is cut


def atoms(fileobj: IO[bytes], start: int, end: int) -> Iterator[tuple[bytes, int, int, int]]:
    """(type, offset, header length, size) of the atoms from `start` to `end`; a size past
    `end` is given as it is (the caller decides what a cut atom means)."""
    position = start
    while position + 8 <= end:
        fileobj.seek(position)
        header = fileobj.read(16)
        if len(header) < 8:
            return
        size, kind, header_length = int.from_bytes(header[:4], "big"), header[4:8], 8
        if size == 1 and len(header) == 16:
            size, header_length = int.from_bytes(header[8:16], "big"), 16
        elif size == 0:
            size = end - position  # to the end of the file
        if size < header_length:
            return
        yield kind, position, header_length, size
        position += size


def _find(fileobj: IO[bytes], start: int, end: int, kind: bytes) -> tuple[int, int, int] | None:
    for found, offset, header_length, size in atoms(fileobj, start, end):
        if found == kind:
            return offset, header_length, size
    return None


def _handlers(fileobj: IO[bytes], moov: tuple[int, int, int]) -> list[bytes]:
    offset, header_length, size = moov
    found = []
    for kind, trak, trak_header, trak_size in atoms(fileobj, offset + header_length, offset + size):
        if kind != b"trak":
            continue
        mdia = _find(fileobj, trak + trak_header, trak + trak_size, b"mdia")
        if mdia is None:
            continue
        hdlr = _find(fileobj, mdia[0] + mdia[1], mdia[0] + mdia[2], b"hdlr")
        if hdlr is not None:
            fileobj.seek(hdlr[0] + hdlr[1] + 8)  # version, flags, pre_defined
            found.append(fileobj.read(4))
    return found


def _movie_length(fileobj: IO[bytes], moov: tuple[int, int, int]) -> float | None:
    mvhd = _find(fileobj, moov[0] + moov[1], moov[0] + moov[2], b"mvhd")
    if mvhd is None:
        return None
    fileobj.seek(mvhd[0] + mvhd[1])
    data = fileobj.read(32)
    if data[:1] == b"\x01":  # 64-bit times
        scale, duration = int.from_bytes(data[20:24], "big"), int.from_bytes(data[24:32], "big")
    else:
        scale, duration = int.from_bytes(data[12:16], "big"), int.from_bytes(data[16:20], "big")
    return duration / scale if scale else None


def _salvage(fileobj: IO[bytes], size: int, error: Exception) -> bytes:
    """ftyp and a moov atom rebuilt from the part of it that the file holds."""
    moov = _find(fileobj, 0, size, b"moov")
    if moov is None or moov[0] + moov[2] <= size:
        raise error  # not a cut moov: nothing to salvage
    offset, header_length, _ = moov
    fileobj.seek(offset + header_length)
    body = fileobj.read(max(0, min(size - offset - header_length, SALVAGE_MAX)))
    fileobj.seek(0)
    ftyp = fileobj.read(offset) if offset <= 64 else b""
    rebuilt = _clip(body)
    if not rebuilt:
        raise NotThisFormat("nothing readable in the cut moov atom") from error
    return ftyp + _atom(b"moov", rebuilt)


def _clip(data: bytes) -> bytes:
    """The atoms in `data` that are whole, and its cut containers shortened to their whole
    children."""
    out = bytearray()
    for kind, position, header_length, size in atoms(io.BytesIO(data), 0, len(data)):
        if position + size <= len(data):
            out += data[position : position + size]
        elif kind in CONTAINERS:
            body = data[position + header_length :]
            # meta carries version and flags before its children (but not in QuickTime files)
            prefix = body[:4] if kind == b"meta" and body[8:12] == b"hdlr" else b""
            out += _atom(kind, prefix + _clip(body[len(prefix) :]))
    return bytes(out)


def _atom(kind: bytes, body: bytes) -> bytes:
    return (len(body) + 8).to_bytes(4, "big") + kind + body

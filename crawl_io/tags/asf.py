"""ASF files (wma, wmv, asf), read from their header object (ASF specification 1.20, §3).
Parsed here because mutagen takes the last stream's properties whatever its type and orders a
field's values by object type: here the audio stream gives rate, channels and bitrate, a video
stream makes a video, and a field's first stored value wins."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator
from typing import IO, Any

from sharecrawl.crawl_io.tags.errors import NotThisFormat, Truncated
from sharecrawl.crawl_io.tags.fields import ASF_KEYS, fill_from_pairs
from sharecrawl.crawl_io.tags.record import set_stream


def _guid(text: str) -> bytes:
    return uuid.UUID(text).bytes_le


HEADER = _guid("75B22630-668E-11CF-A6D9-00AA0062CE6C")
FILE_PROPERTIES = _guid("8CABDCA1-A947-11CF-8EE4-00C00C205365")
STREAM_PROPERTIES = _guid("B7DC0791-A9B7-11CF-8EE6-00C00C205365")
CONTENT_DESCRIPTION = _guid("75B22633-668E-11CF-A6D9-00AA0062CE6C")
EXTENDED_CONTENT_DESCRIPTION = _guid("D2D0A440-E307-11D2-97F0-00A0C95EA850")
HEADER_EXTENSION = _guid("5FBF03B5-A92E-11CF-8EE3-00C00C205365")
METADATA = _guid("C5F8CBEA-5BAF-4877-8467-AA8C44FA4CCA")
METADATA_LIBRARY = _guid("44231C94-9498-49D1-A141-1D134E457054")
AUDIO_STREAM = _guid("F8699E40-5B4D-11CF-A8FD-00805F5C442B")
VIDEO_STREAM = _guid("BC19EFC0-5B4D-11CF-A8FD-00805F5C442B")
HEADER_MAX = 16 << 20  # header bytes read at most (pictures live in it)
CONTENT_DESCRIPTION_NAMES = ("Title", "Author", "Copyright", "Description", "Rating")


def read_asf(row: dict[str, Any], fileobj: IO[bytes], size: int) -> None:
    fileobj.seek(0)
    head = fileobj.read(30)
    if len(head) < 30 or head[:16] != HEADER:
        raise NotThisFormat("not an ASF file")
    header_size = int.from_bytes(head[16:24], "little")
    body = fileobj.read(max(0, min(header_size, size, HEADER_MAX) - 30))
    values: list[tuple[str, Any]] = []
    video = False
    audio: tuple[int, ...] | None = None
    duration = None
    for guid, data in objects(body):
        if guid == FILE_PROPERTIES and len(data) >= 64:
            play, _send_duration, preroll = struct.unpack_from("<3Q", data, 40)
            duration = max(0.0, play / 1e7 - preroll / 1000)  # 100-ns units, preroll in ms
        elif guid == STREAM_PROPERTIES and len(data) >= 66:
            if data[:16] == VIDEO_STREAM:
                video = True
            elif data[:16] == AUDIO_STREAM and audio is None:
                # WAVEFORMATEX: format tag, channels, rate, bytes per second
                audio = struct.unpack_from("<HHII", data, 54)
        elif guid in DESCRIPTIONS:
            values += DESCRIPTIONS[guid](data)
    fill_from_pairs(row, ASF_KEYS, values)
    if audio is not None or video:
        row["kind"] = "video" if video else "audio"
        row["format"] = "wmv" if video else "wma"
    set_stream(row, duration=duration)
    if audio is not None:
        _tag, channels, rate, byte_rate = audio
        set_stream(row, channels=channels, samplerate=rate, bitrate_bps=byte_rate * 8)
    if duration:
        set_stream(row, bitrate_bps=size * 8 / duration)  # no audio stream states one
    if header_size > size:
        raise Truncated("ASF file ends inside its header")


def objects(data: bytes, position: int = 0, nested: bool = False) -> Iterator[tuple[bytes, bytes]]:
    """(GUID, payload) of the objects in `data`, header extension objects in their place."""
    while position + 24 <= len(data):
        guid = data[position : position + 16]
        size = int.from_bytes(data[position + 16 : position + 24], "little")
        if size < 24 or position + size > len(data):
            return  # damaged, or cut short: an object cut short is not read
        payload = data[position + 24 : position + size]
        if guid == HEADER_EXTENSION and not nested:  # it holds objects, but no extension
            yield from objects(payload, 22, nested=True)  # after a GUID, a word and a size
        else:
            yield guid, payload
        position += size


def _content_description(data: bytes) -> list[tuple[str, Any]]:
    lengths = [int.from_bytes(data[i : i + 2], "little") for i in range(0, 10, 2)]
    values, position = [], 10
    for name, length in zip(CONTENT_DESCRIPTION_NAMES, lengths, strict=True):
        text = _utf16(data[position : position + length])
        position += length
        if text:
            values.append((name, text))
    return values


def _extended_content_description(data: bytes) -> list[tuple[str, Any]]:
    values = []
    count, position = int.from_bytes(data[0:2], "little"), 2
    for _ in range(count):
        name_length = int.from_bytes(data[position : position + 2], "little")
        name = _utf16(data[position + 2 : position + 2 + name_length])
        position += 2 + name_length
        value_type = int.from_bytes(data[position : position + 2], "little")
        value_length = int.from_bytes(data[position + 2 : position + 4], "little")
        raw = data[position + 4 : position + 4 + value_length]
        position += 4 + value_length
        values.append((name, _value(value_type, raw)))
    return values


def _metadata(data: bytes) -> list[tuple[str, Any]]:
    values = []
    count, position = int.from_bytes(data[0:2], "little"), 2
    for _ in range(count):
        name_length = int.from_bytes(data[position + 4 : position + 6], "little")
        value_type = int.from_bytes(data[position + 6 : position + 8], "little")
        value_length = int.from_bytes(data[position + 8 : position + 12], "little")
        position += 12
        name = _utf16(data[position : position + name_length])
        raw = data[position + name_length : position + name_length + value_length]
        position += name_length + value_length
        values.append((name, _value(value_type, raw)))
    return values


def _value(value_type: int, raw: bytes) -> Any:
    """Text and numbers; None for byte arrays, GUIDs and booleans (no column wants them)."""
    if value_type == 0:
        return _utf16(raw)
    if value_type in (3, 4, 5):  # DWORD, QWORD, WORD
        return int.from_bytes(raw, "little")
    return None


def _utf16(raw: bytes) -> str:
    return raw[: len(raw) & ~1].decode("utf-16-le", "replace").rstrip("\x00")


# The objects that hold tags, and their parsers.
DESCRIPTIONS = {
    CONTENT_DESCRIPTION: _content_description,
    EXTENDED_CONTENT_DESCRIPTION: _extended_content_description,
    METADATA: _metadata,
    METADATA_LIBRARY: _metadata,
}

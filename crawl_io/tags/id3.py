"""ID3 tags wherever they are (mp3, a FLAC head, WAV and AIFF chunks), decoded by mutagen, with
what it would lose kept: a tag cut mid-way is read to its last whole frame, and a text frame
that does not decode as declared (Latin marked UTF-8) is decoded with replacement characters,
as tinytag does. Layout: ID3v2.2-2.4 (id3.org, "ID3 tag version 2.x", §3 and §4) and ID3v1."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import IO, Any

from mutagen.id3 import ID3, ParseID3v1

from sharecrawl.crawl_io.sources import SourceError
from sharecrawl.crawl_io.tags.fields import ID3_KEYS, fill_fields, fill_from_tags

ID3_MAX = 16 << 20  # a tag's bytes read at most (RangeFile stops there too)
# ID3v2.2's three-letter ids of the frames we read, as their v2.3/v2.4 ids
V22_IDS = dict(
    pair.split("=")
    for pair in "TT2=TIT2 TP1=TPE1 TAL=TALB TP2=TPE2 TRK=TRCK TPA=TPOS TYE=TDRC TOR=TORY".split()
)
WANTED = frozenset(key for keys in ID3_KEYS.values() for key in keys) - {"TCON"}
ENCODINGS = {0: "latin-1", 1: "utf-16", 2: "utf-16-be", 3: "utf-8"}


def id3_end(fileobj: IO[bytes]) -> int:
    """Where the audio starts: after every ID3v2 tag at the head (some writers stack them)."""
    position = 0
    while True:
        fileobj.seek(position)
        header = fileobj.read(10)
        if len(header) < 10 or header[:3] != b"ID3":
            return position
        position += 10 + synchsafe(header[6:10])
        if header[5] & 0x10:
            position += 10  # a footer


def head_tag(fileobj: IO[bytes]) -> bytes:
    """The bytes of the ID3v2 tag at the head of a file (as far as the file holds them)."""
    fileobj.seek(0)
    header = fileobj.read(10)
    if len(header) < 10 or header[:3] != b"ID3":
        return b""
    return header + fileobj.read(min(synchsafe(header[6:10]), ID3_MAX))


def fill_from_id3(row: dict[str, Any], tag: bytes) -> None:
    """Fill empty columns from the bytes of an ID3v2 tag, whole or cut."""
    tag = whole_frames(tag)
    try:
        fill_from_tags(row, ID3(io.BytesIO(tag)))
    except Exception:  # a damaged tag: the frames it holds may still read below
        pass
    fill_from_dropped_frames(row, tag)


def fill_from_file_id3(row: dict[str, Any], fileobj: IO[bytes], size: int) -> None:
    """Fill empty columns from a file's ID3v2 tag at the head (cut or whole), then from an
    ID3v1 tag at its tail: for files mutagen's MP3 reader rejects."""
    tag = head_tag(fileobj)
    if tag:
        fill_from_id3(row, tag)
    fileobj.seek(max(0, size - 128))
    tail = fileobj.read(128)
    try:
        frames = ParseID3v1(tail) if len(tail) == 128 else None
    except SourceError:
        raise
    except Exception:  # not an ID3v1 tag after all
        frames = None
    if frames:
        v1 = ID3()
        for frame in frames.values():
            v1.add(frame)
        fill_from_tags(row, v1)


def fill_from_dropped_frames(row: dict[str, Any], tag: bytes) -> None:
    """Fill empty columns from text frames decoded with replacement characters."""
    if any(row[field] is None for field in ID3_KEYS):
        found: dict[str, list[str]] = {}
        for frame_id, flags, data in frames(tag):
            texts = _decode_text(_frame_payload(tag[3], flags, data))
            if frame_id in WANTED and texts:
                found.setdefault(frame_id, texts)
        fill_fields(row, ID3_KEYS, lambda key: found.get(key, []))


def frames(tag: bytes) -> Iterator[tuple[str, int, bytes]]:
    """(id in v2.3/v2.4 terms, flags, data) of the whole frames of an ID3v2 tag's bytes."""
    version, body = _body(tag)
    if version is None:
        return
    id_length, size_end, header_length = (3, 6, 6) if version == 2 else (4, 8, 10)
    position = 0
    if tag[5] & 0x40 and version >= 3:  # an extended header
        size = int.from_bytes(body[:4], "big")
        position = synchsafe(body[:4]) if version == 4 else size + 4
    while position + header_length <= len(body):
        frame_id = body[position : position + id_length].decode("latin-1")
        raw_size = body[position + id_length : position + size_end]
        size = synchsafe(raw_size) if version == 4 else int.from_bytes(raw_size, "big")
        end = position + header_length + size
        if not frame_id.strip("\0") or size <= 0 or end > len(body):
            return  # padding, garbage, or a frame the cut ran through
        flags = body[position + 9] if version >= 3 else 0
        yield V22_IDS.get(frame_id, frame_id), flags, body[position + header_length : end]
        position = end


def whole_frames(tag: bytes) -> bytes:
    """The tag itself if the file holds it whole, else a tag of its whole frames only (so a
    frame cut short is never read as a shorter value)."""
    version, _ = _body(tag)
    if version is None or len(tag) >= 10 + synchsafe(tag[6:10]):
        return tag
    header_length = 6 if version == 2 else 10
    kept = bytearray()
    for frame_id, flags, data in frames(tag):
        if version == 2:
            raw_id = next((k for k, v in V22_IDS.items() if v == frame_id), frame_id)
            header = raw_id.encode("latin-1") + len(data).to_bytes(3, "big")
        else:
            size = _to_synchsafe(len(data)) if version == 4 else len(data).to_bytes(4, "big")
            header = frame_id.encode("latin-1") + size + bytes([0, flags])
        assert len(header) == header_length
        kept += header + data
    # flags: the unsynchronisation was undone in _body; no extended header is kept
    return tag[:5] + bytes([tag[5] & ~0xC0 & 0xFF]) + _to_synchsafe(len(kept)) + bytes(kept)


def _body(tag: bytes) -> tuple[int | None, bytes]:
    if len(tag) < 10 or tag[:3] != b"ID3" or tag[3] not in (2, 3, 4):
        return None, b""
    body = tag[10 : 10 + synchsafe(tag[6:10])]
    if tag[5] & 0x80 and tag[3] < 4:
        body = body.replace(b"\xff\x00", b"\xff")  # the whole tag was unsynchronised
    return tag[3], body


def _frame_payload(version: int, flags: int, data: bytes) -> bytes:
    """A frame's data as its text, or b"" when compressed or encrypted."""
    if version == 3:
        return b"" if flags & 0xC0 else data
    if version == 4:
        if flags & 0x0C:
            return b""
        if flags & 0x01:
            data = data[4:]  # a data length indicator
        if flags & 0x02:
            data = data.replace(b"\xff\x00", b"\xff")
    return data


def _decode_text(data: bytes) -> list[str]:
    if not data or data[0] not in ENCODINGS:
        return []
    encoding, raw = ENCODINGS[data[0]], data[1:]
    if encoding.startswith("utf-16"):
        raw = raw[: len(raw) & ~1]
    text = raw.decode(encoding, "replace") if raw else ""
    return [t for t in text.split("\x00") if t.strip()]


def synchsafe(raw: bytes) -> int:
    value = 0
    for byte in raw:
        value = (value << 7) | (byte & 0x7F)
    return value


def _to_synchsafe(value: int) -> bytes:
    return bytes((value >> shift) & 0x7F for shift in (21, 14, 7, 0))

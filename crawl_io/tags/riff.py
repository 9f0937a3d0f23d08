"""WAV (RIFF) and AIFF (IFF) files, read chunk by chunk (EA IFF 85; Microsoft/IBM RIFF spec
1991 §3; Apple AIFF 1.3 and AIFF-C): mutagen times a compressed WAV as PCM, reads no RIFF INFO
or AIFF NAME/AUTH tags and rejects AIFF sample rates it dislikes. The format chunk gives the
stream, `fact` a compressed WAV's length; only the ID3 chunk goes to mutagen, native tags
fill its gaps."""

from __future__ import annotations

import io
import struct
from collections.abc import Iterator
from typing import IO, Any, Literal

from sharecrawl.crawl_io.tags.errors import NotThisFormat, Truncated
from sharecrawl.crawl_io.tags.fields import fill_from_pairs, key_table
from sharecrawl.crawl_io.tags.id3 import ID3_MAX, fill_from_id3
from sharecrawl.crawl_io.tags.record import set_stream

INFO_MAX = 1 << 16  # bytes of a tag chunk read at most (text tags are short)
PCM_FORMATS = (1, 3)  # integer PCM, IEEE float: the data chunk's size gives the length
STREAMING_SIZES = (0, 0xFFFFFFFF)  # written by recorders that could not seek back
EXTENSIBLE = 0xFFFE  # the real format tag is in the sub-format GUID
# AIFF-C compression types that are plain samples: bits x channels x rate is the bitrate
AIFC_UNCOMPRESSED = (b"NONE", b"sowt", b"twos", b"raw ", b"fl32", b"fl64", b"in24", b"in32")

# RIFF INFO ids (what Windows and many rippers write into wav files)
RIFF_INFO_KEYS = key_table(
    "artist=IART; title=INAM; album=IPRD; year=ICRD; genre=IGNR; track=ITRK,IPRT"
)
AIFF_TEXT_KEYS = {"artist": ("AUTH",), "title": ("NAME",)}


def chunks(
    fileobj: IO[bytes], start: int, end: int, byteorder: Literal["little", "big"]
) -> Iterator[tuple[bytes, int, int]]:
    """(id, data offset, data size as the header says) of the chunks from `start`."""
    position = start
    while position + 8 <= end:
        fileobj.seek(position)
        header = fileobj.read(8)
        if len(header) < 8:
            return
        chunk_id, size = header[:4], int.from_bytes(header[4:8], byteorder)
        if not chunk_id.strip(b"\0"):
            return  # zeros: the rest is padding or garbage
        yield chunk_id, position + 8, size
        position += 8 + size + (size & 1)


def read_wav(row: dict[str, Any], fileobj: IO[bytes], size: int) -> None:
    fmt = fact = b""
    data_size: int | None = None
    cut = False
    info: list[tuple[str, str]] = []
    for chunk_id, offset, length in chunks(fileobj, 12, size, "little"):
        if chunk_id == b"fmt " and not fmt:
            fmt = fileobj.read(min(length, 64))
        elif chunk_id == b"fact" and not fact:
            fact = fileobj.read(4)
        elif chunk_id == b"data" and data_size is None:
            data_size = min(length, size - offset)  # a cut file holds less than it says
            cut = length > size - offset and length not in STREAMING_SIZES
        elif chunk_id in (b"id3 ", b"ID3 "):
            fill_from_id3(row, fileobj.read(min(length, ID3_MAX)))
        elif chunk_id == b"LIST":
            list_type = fileobj.read(4)
            if list_type == b"INFO":
                info += _info_items(fileobj.read(max(0, min(length - 4, INFO_MAX))))
    fill_from_pairs(row, RIFF_INFO_KEYS, info)
    if len(fmt) < 16:
        raise NotThisFormat("no format chunk in the wav file")
    format_tag, channels, rate, byte_rate, block_align = struct.unpack_from("<HHIIH", fmt)
    if format_tag == EXTENSIBLE and len(fmt) >= 26:
        format_tag = int.from_bytes(fmt[24:26], "little")
    duration = None
    if rate and len(fact) == 4 and format_tag not in PCM_FORMATS:
        duration = int.from_bytes(fact, "little") / rate  # samples per channel
    elif rate and block_align and data_size is not None:
        duration = data_size // block_align / rate
    elif byte_rate and data_size is not None:
        duration = data_size / byte_rate
    set_stream(row, duration=duration, samplerate=rate, channels=channels)
    if duration and data_size:
        set_stream(row, bitrate_bps=data_size * 8 / duration)
    elif format_tag in PCM_FORMATS:
        set_stream(row, bitrate_bps=byte_rate * 8)
    if cut or data_size is None:
        raise Truncated("the wav file ends inside or before its data chunk")


def _info_items(data: bytes) -> list[tuple[str, str]]:
    items = []
    for item_id, offset, length in chunks(io.BytesIO(data), 0, len(data), "little"):
        if offset + length > len(data):
            break  # an item cut short is not read as a shorter value
        raw = data[offset : offset + length].split(b"\0", 1)[0]
        if raw:
            items.append((item_id.decode("latin-1"), _text(raw)))
    return items


def read_aiff(row: dict[str, Any], fileobj: IO[bytes], size: int) -> None:
    fileobj.seek(8)
    compressed = fileobj.read(4) == b"AIFC"
    comm = b""
    sound_size: int | None = None
    cut = False
    texts: list[tuple[str, str]] = []
    for chunk_id, offset, length in chunks(fileobj, 12, size, "big"):
        if chunk_id == b"COMM" and not comm:
            comm = fileobj.read(min(length, 64))
        elif chunk_id == b"SSND" and sound_size is None:
            sound_size = max(0, min(length, size - offset) - 8)  # after offset and block size
            cut = length > size - offset and length not in STREAMING_SIZES
        elif chunk_id == b"ID3 ":
            fill_from_id3(row, fileobj.read(min(length, ID3_MAX)))
        elif chunk_id in (b"NAME", b"AUTH") and length <= INFO_MAX:
            raw = fileobj.read(length)
            if len(raw) == length:  # a text cut short is not read as a shorter one
                texts.append((chunk_id.decode(), _text(raw.split(b"\0", 1)[0])))
    fill_from_pairs(row, AIFF_TEXT_KEYS, texts)
    if len(comm) < 18:
        raise NotThisFormat("no COMM chunk in the AIFF file")
    channels, frames, bits = struct.unpack_from(">HIH", comm)
    rate = extended_float(comm[8:18])
    compression = comm[18:22] if compressed else b"NONE"
    duration = frames / rate if rate else None
    set_stream(row, duration=duration, samplerate=round(rate) if rate else None, channels=channels)
    if compression in AIFC_UNCOMPRESSED and rate:
        set_stream(row, bitrate_bps=channels * bits * rate)
    elif duration and sound_size:
        set_stream(row, bitrate_bps=sound_size * 8 / duration)
    if cut or sound_size is None:
        raise Truncated("the AIFF file ends inside or before its sound data")


def extended_float(data: bytes) -> float | None:
    """An 80-bit IEEE 754 extended number (AIFF's sample rate); None if not a finite one."""
    if len(data) < 10:
        return None
    exponent = int.from_bytes(data[0:2], "big") & 0x7FFF
    mantissa = int.from_bytes(data[2:10], "big")
    if exponent == 0x7FFF or data[0] & 0x80:
        return None
    try:
        return mantissa * 2.0 ** (exponent - 16383 - 63)
    except OverflowError:
        return None


def _text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")

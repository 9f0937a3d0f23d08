"""FLAC files, read by their metadata block headers (FLAC format, "METADATA_BLOCK"): mutagen
reads every block whole (cover art) and rejects a file for a damaged block it does not need.
Only the first STREAMINFO and the VORBIS_COMMENT are read; an ID3v2 tag in front of the
stream (EAC wrote one) fills the Vorbis comment's gaps."""

from __future__ import annotations

from typing import IO, Any

from sharecrawl.crawl_io.tags.errors import NotThisFormat, Truncated
from sharecrawl.crawl_io.tags.fields import fill_from_vorbis_pairs
from sharecrawl.crawl_io.tags.id3 import fill_from_id3, head_tag, id3_end
from sharecrawl.crawl_io.tags.ogg import comments
from sharecrawl.crawl_io.tags.record import set_stream

STREAMINFO, VORBIS_COMMENT, INVALID = 0, 4, 127
COMMENT_MAX = 1 << 20  # comment bytes read at most; the fields we want come early
COMMENT_MIN = 4096


def read_flac(row: dict[str, Any], fileobj: IO[bytes], size: int) -> None:
    start = id3_end(fileobj)
    fileobj.seek(start)
    if fileobj.read(4) != b"fLaC":
        raise NotThisFormat("not a FLAC file: no fLaC marker")
    streaminfo, comment, audio_start, cut = _metadata(fileobj, start + 4, size)
    if comment is not None:
        fill_from_vorbis_pairs(row, comments(comment))
    if start > 0:
        fill_from_id3(row, head_tag(fileobj))
    if streaminfo is None or len(streaminfo) < 18:
        raise Truncated("FLAC file ends before its STREAMINFO block")
    # 18 bytes hold what we need; the 16-byte MD5 after them may be missing
    rate = int.from_bytes(streaminfo[10:13], "big") >> 4
    channels = ((streaminfo[12] >> 1) & 7) + 1
    total = int.from_bytes(streaminfo[13:18], "big") & 0xFFFFFFFFF
    duration = total / rate if rate else None
    set_stream(row, duration=duration, samplerate=rate, channels=channels)
    if duration:
        set_stream(row, bitrate_bps=max(0, size - audio_start) * 8 / duration)
    if cut:
        raise Truncated("FLAC file ends inside its metadata blocks")


def _metadata(
    fileobj: IO[bytes], position: int, size: int
) -> tuple[bytes | None, bytes | None, int, bool]:
    """(the first STREAMINFO, the first VORBIS_COMMENT, where the audio frames start, whether
    the file ends inside a block), walking block headers from `position`."""
    streaminfo = comment = None
    while True:
        fileobj.seek(position)
        header = fileobj.read(4)
        if len(header) < 4:
            return streaminfo, comment, position, True
        is_last, block_type = header[0] & 0x80, header[0] & 0x7F
        length = int.from_bytes(header[1:4], "big")
        if block_type == INVALID:
            return streaminfo, comment, position, False
        if block_type == STREAMINFO and streaminfo is None:
            streaminfo = fileobj.read(min(length, 34))
        elif block_type == VORBIS_COMMENT and comment is None:
            # the comment structure measures itself: read past a block size that is too small
            comment = fileobj.read(min(max(length, COMMENT_MIN), COMMENT_MAX))
        position += 4 + length
        if position > size:
            return streaminfo, comment, size, True
        if is_last:
            return streaminfo, comment, position, False

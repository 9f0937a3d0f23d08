"""MPEG audio (mp3, mp2, mp1): ID3 tags by mutagen, the length from frame headers as ffprobe and
tinytag report it (mutagen subtracts LAME's delay and padding, and without Xing/VBRI takes the
first frame's bitrate): the Xing or VBRI frame count times samples per frame, else the frames
walked in the bytes read, exact at the end of the audio, otherwise extended at their mean
bitrate. Frame layout: ISO/IEC 11172-3 and 13818-3 §2.4.2.3."""

from __future__ import annotations

from dataclasses import dataclass
from typing import IO, Any

from mutagen.id3 import ID3
from mutagen.mp3 import MP3, HeaderNotFoundError

from sharecrawl.crawl_io.rangefile import BLOCK
from sharecrawl.crawl_io.sources import SourceError
from sharecrawl.crawl_io.tags.errors import NotThisFormat, Truncated
from sharecrawl.crawl_io.tags.fields import ID3_KEYS, fill_from_tags
from sharecrawl.crawl_io.tags.id3 import (
    fill_from_dropped_frames,
    fill_from_file_id3,
    head_tag,
    id3_end,
)
from sharecrawl.crawl_io.tags.record import set_stream

SAMPLE_RATES = {1.0: (44100, 48000, 32000), 2.0: (22050, 24000, 16000), 2.5: (11025, 12000, 8000)}
_V1 = {
    1: (32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448),
    2: (32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384),
    3: (32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
}
_V2 = {
    1: (32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256),
    2: (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
_V2[3] = _V2[2]
KBPS = {1.0: _V1, 2.0: _V2, 2.5: _V2}
MONO = 3
WALK_MIN = 4096  # bytes of frames walked at least, even when the read block ends sooner
CUT_SLACK = 1024  # encoders that count a tag or two into the Xing byte count


@dataclass(frozen=True)
class Frame:
    version: float  # 1, 2 or 2.5
    layer: int
    bitrate: int  # bits per second
    sample_rate: int
    padding: int
    mode: int

    @property
    def samples(self) -> int:
        if self.layer == 1:
            return 384
        return 576 if self.layer == 3 and self.version != 1.0 else 1152

    @property
    def size(self) -> int:
        slot = 4 if self.layer == 1 else 1
        return (self.samples // 8 * self.bitrate // self.sample_rate // slot + self.padding) * slot

    @property
    def channels(self) -> int:
        return 1 if self.mode == MONO else 2


def parse_frame(header: bytes) -> Frame | None:
    """The frame a 4-byte header describes; None for anything else (free format too)."""
    if len(header) < 4 or header[0] != 0xFF or header[1] & 0xE0 != 0xE0:
        return None
    version = (2.5, None, 2.0, 1.0)[(header[1] >> 3) & 3]
    layer = 4 - ((header[1] >> 1) & 3)
    bitrate_index, rate_index = header[2] >> 4, (header[2] >> 2) & 3
    if version is None or layer == 4 or bitrate_index in (0, 15) or rate_index == 3:
        return None
    return Frame(
        version=version,
        layer=layer,
        bitrate=KBPS[version][layer][bitrate_index - 1] * 1000,
        sample_rate=SAMPLE_RATES[version][rate_index],
        padding=(header[2] >> 1) & 1,
        mode=header[3] >> 6,
    )


@dataclass(frozen=True)
class Stream:
    first: Frame
    duration: float
    bitrate: float  # bits per second
    cut: bool = False  # the header counts more bytes than the whole file holds


def read_mpeg(row: dict[str, Any], fileobj: IO[bytes], size: int) -> None:
    """mutagen's ID3 tags and our frame count; a damaged or cut tag gives what precedes it."""
    audio = None
    tag_error: Exception | None = None
    try:
        audio = MP3(fileobj)
    except SourceError:
        raise  # the network failed, not the file
    except HeaderNotFoundError:
        pass  # one frame, or frames mutagen cannot sync to: ours may still find them
    except Exception as e:  # a damaged or cut ID3 tag
        tag_error = e
    if audio is not None and isinstance(audio.tags, ID3):
        fill_from_tags(row, audio.tags)
        fill_from_dropped_frames(row, head_tag(fileobj))
    else:
        fill_from_file_id3(row, fileobj, size)  # a cut tag, or one with no audio after it
    start = audio.info.frame_offset if audio is not None else id3_end(fileobj)
    stream = measure(fileobj, start, audio_end(fileobj, size), exact_start=audio is not None)
    if stream is not None:
        first = stream.first
        set_stream(row, duration=stream.duration, bitrate_bps=stream.bitrate)
        set_stream(row, samplerate=first.sample_rate, channels=first.channels)
        row["format"] = {1: "mp1", 2: "mp2"}.get(first.layer, "mp3")
    elif audio is not None:
        info = audio.info
        set_stream(row, duration=info.length, bitrate_bps=info.bitrate)
        set_stream(row, samplerate=info.sample_rate, channels=info.channels)
        row["format"] = {1: "mp1", 2: "mp2"}.get(info.layer, "mp3")
    if tag_error is not None:
        raise tag_error
    if stream is not None and stream.cut:
        raise Truncated("the file is shorter than its Xing/VBRI header says")
    if stream is None and audio is None:
        if any(row[field] is not None for field in ID3_KEYS):
            row["tag_error"] = f"no audio frames in {row['format'] or 'mp3'} file"
            return
        raise NotThisFormat("no MPEG audio frames found")


def measure(fileobj: IO[bytes], start: int, end: int, *, exact_start: bool) -> Stream | None:
    """The stream whose first frame is at `start` (or, not `exact_start`, the first run of
    frames in the bytes after it): length from a Xing/VBRI header or from a frame walk."""
    window_end = min(end, max(start + WALK_MIN, (start // BLOCK + 1) * BLOCK))
    fileobj.seek(start)
    data = fileobj.read(max(0, window_end - start))
    offset = 0 if exact_start else _first_run(data, end - start)
    if offset is None:
        return None
    first = parse_frame(data[offset : offset + 4])
    if first is None:
        return None
    frames, nbytes = _vbr_header(data[offset:], first)
    if frames:
        duration = frames * first.samples / first.sample_rate
        audio_bytes = (nbytes or end - start - offset) - first.size
        cut = nbytes > end + CUT_SLACK  # a stream cannot be bigger than its whole file
        return Stream(first, duration, max(0, audio_bytes) * 8 / duration, cut)
    walked, walked_bytes, reached_end = _walk(data, offset, end - start)
    if walked == 0:
        return None
    walked_s = walked * first.samples / first.sample_rate
    bitrate = walked_bytes * 8 / walked_s  # bytes over time: the right mean for VBR frames
    if reached_end:
        return Stream(first, walked_s, bitrate)
    return Stream(first, (end - start - offset) * 8 / bitrate, bitrate)


def _vbr_header(frame: bytes, first: Frame) -> tuple[int, int]:
    """(frames, bytes) from a Xing/Info or VBRI header in the first frame; zeros if none."""
    if first.layer == 3:
        stereo = first.mode != MONO
        side_info = (32 if stereo else 17) if first.version == 1.0 else (17 if stereo else 9)
        xing = frame[4 + side_info : 4 + side_info + 16]
        if xing[:4] in (b"Xing", b"Info"):
            flags = int.from_bytes(xing[4:8], "big")
            fields = [int.from_bytes(xing[i : i + 4], "big") for i in (8, 12)]
            frames = fields.pop(0) if flags & 1 else 0
            nbytes = fields.pop(0) if flags & 2 else 0
            return frames, nbytes
        if frame[36:40] == b"VBRI":
            return int.from_bytes(frame[50:54], "big"), int.from_bytes(frame[46:50], "big")
    return 0, 0


def _walk(data: bytes, offset: int, audio_size: int) -> tuple[int, int, bool]:
    """(frames, their bytes, whether it reached the end of the audio) walked from `offset`."""
    frames = nbytes = 0
    while offset + 4 <= len(data):
        frame = parse_frame(data[offset : offset + 4])
        if frame is None or frame.size < 4:
            break
        frames += 1
        nbytes += frame.size
        offset += frame.size
    return frames, nbytes, offset >= audio_size


def _first_run(data: bytes, audio_size: int) -> int | None:
    """Where the first frame is whose successor also parses, or that ends the audio."""
    position = data.find(b"\xff")
    while 0 <= position < len(data) - 3:
        frame = parse_frame(data[position : position + 4])
        if frame is not None and frame.size >= 4:
            after = position + frame.size
            if after == audio_size or parse_frame(data[after : after + 4]) is not None:
                return position
        position = data.find(b"\xff", position + 1)
    return None


def audio_end(fileobj: IO[bytes], size: int) -> int:
    """Where the audio ends: before an ID3v1 tag and an APEv2 tag at the tail."""
    end = size
    fileobj.seek(max(0, size - 160))
    tail = fileobj.read(160)
    if size >= 128 and tail[-128:-125] == b"TAG":
        end -= 128
        tail = tail[:-128]
    if len(tail) >= 32 and tail[-32:-24] == b"APETAGEX":
        end -= int.from_bytes(tail[-20:-16], "little")
        if tail[-9] & 0x80:  # the tag has a header too
            end -= 32
    return max(0, end)

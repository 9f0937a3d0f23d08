"""Ogg files (Vorbis, Opus, FLAC, Speex; Theora beside them), read from their first and last
pages only (RFC 3533 §6): mutagen reads a multiplexed file whole to find its last page and
wants every header packet whole. The head's first packets give codec, rate and comments; each
stream's last granule position gives its length, the longest stream the file's."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from sharecrawl.crawl_io.rangefile import BLOCK, TAIL
from sharecrawl.crawl_io.tags.errors import NotThisFormat, Truncated
from sharecrawl.crawl_io.tags.fields import fill_from_vorbis_pairs
from sharecrawl.crawl_io.tags.record import set_stream

HEAD_MAX = 256 * 1024  # header packets read at most (comments with a cover picture)
TAIL_MAX = 64 * 1024  # a page is at most 65 307 bytes
HEADER_PACKETS = 3  # Vorbis and Theora have three header packets, the others fewer
AUDIO_FORMATS = {"vorbis": "ogg", "opus": "opus", "flac": "flac", "speex": "spx"}
VIDEO_MAGIC = (b"OVP80", b"\x80daala", b"BBCD\x00", b"\x01video")  # VP8, Daala, Dirac, OGM
VIDEO_CODECS = ("theora", "video")
CODEC_MAGIC = (
    (b"\x01vorbis", "vorbis"),
    (b"OpusHead", "opus"),
    (b"\x7fFLAC", "flac"),
    (b"Speex   ", "speex"),
    (b"\x80theora", "theora"),
    *((magic, "video") for magic in VIDEO_MAGIC),
)


@dataclass
class Stream:
    codec: str
    packets: list[bytes] = field(default_factory=list)  # the first few, whole or cut
    partial: bytes = b""  # a packet continued on the next page
    last_granule: int = -1

    @property
    def first(self) -> bytes:
        return self.packets[0] if self.packets else self.partial


@dataclass(frozen=True)
class Page:
    offset: int
    end: int
    cut: bool  # the data ends inside the page
    flags: int
    granule: int
    serial: int
    segments: bytes  # the lacing values
    body: bytes


def pages(data: bytes, start: int = 0) -> Iterator[Page]:
    """The pages in `data`, from the first capture pattern at or after `start`; a page cut
    by the end of `data` comes last with the body that is there."""
    offset = data.find(b"OggS", start)
    while offset >= 0 and offset + 27 <= len(data):
        n_segments = data[offset + 26]
        if data[offset + 4] != 0 or offset + 27 + n_segments > len(data):
            offset = data.find(b"OggS", offset + 1)  # not a page after all
            continue
        segments = data[offset + 27 : offset + 27 + n_segments]
        body_start = offset + 27 + n_segments
        end = body_start + sum(segments)
        yield Page(
            offset=offset,
            end=end,
            cut=end > len(data),
            flags=data[offset + 5],
            granule=int.from_bytes(data[offset + 6 : offset + 14], "little", signed=True),
            serial=int.from_bytes(data[offset + 14 : offset + 18], "little"),
            segments=segments,
            body=data[body_start:end],
        )
        offset = end if data[end : end + 4] == b"OggS" else data.find(b"OggS", end)


def read_ogg(row: dict[str, Any], fileobj: IO[bytes], size: int) -> None:
    fileobj.seek(0)
    head = fileobj.read(min(size, BLOCK))
    streams = _header_packets(head)
    if not streams:
        raise NotThisFormat("no Ogg stream found")
    main = next((s for s in streams.values() if s.codec in AUDIO_FORMATS), None)
    if main is not None and len(main.packets) < 2 and size > len(head):
        fileobj.seek(0)  # comments longer than the first block: read once more, further
        streams = _header_packets(fileobj.read(min(size, HEAD_MAX)))
        main = next(s for s in streams.values() if s.codec in AUDIO_FORMATS)
    video = next((s for s in streams.values() if s.codec in VIDEO_CODECS), None)
    if main is None and video is None:
        raise NotThisFormat("no audio or video stream in the Ogg file")
    cut = _last_granules(fileobj, size, streams)
    row["kind"] = "video" if video is not None else "audio"
    row["format"] = "ogv" if video is not None or main is None else AUDIO_FORMATS[main.codec]
    durations = [d for d in (_duration(s) for s in streams.values()) if d is not None]
    duration = max(durations) if durations else None
    if main is not None:
        rate, channels, nominal = _audio_params(main)
        set_stream(row, samplerate=rate, channels=channels, bitrate_bps=nominal or None)
        fill_from_vorbis_pairs(row, comments(_comment_packet(main)))
    if video is not None:
        fill_from_vorbis_pairs(row, comments(_comment_packet(video)))
    set_stream(row, duration=duration)
    if duration:
        set_stream(row, bitrate_bps=size * 8 / duration)
    if cut:
        raise Truncated("the Ogg file ends inside a page")


def _header_packets(data: bytes) -> dict[int, Stream]:
    """Streams by serial, from their beginning-of-stream pages, with their first packets."""
    streams: dict[int, Stream] = {}
    for page in pages(data):
        if page.flags & 2 and page.serial not in streams:
            streams[page.serial] = Stream(_codec(page.body))
        stream = streams.get(page.serial)
        if stream is None:
            continue
        if stream.last_granule < page.granule and not page.cut:
            stream.last_granule = page.granule
        if len(stream.packets) >= HEADER_PACKETS:
            continue
        position = 0
        for lacing in page.segments:
            stream.partial += page.body[position : position + lacing]
            position += lacing
            if lacing < 255:
                stream.packets.append(stream.partial)
                stream.partial = b""
                if len(stream.packets) >= HEADER_PACKETS:
                    break
    return streams


def _codec(first_packet: bytes) -> str:
    for magic, codec in CODEC_MAGIC:
        if first_packet.startswith(magic):
            return codec
    return "other"  # Skeleton, Kate subtitles and the like


def _last_granules(fileobj: IO[bytes], size: int, streams: dict[int, Stream]) -> bool:
    """Each stream's last granule position from the pages in the file's tail; True when the
    file ends inside a page (it is cut)."""
    cut = False
    for window in (TAIL, TAIL_MAX):
        start = max(0, size - window)
        fileobj.seek(start)
        for page in pages(fileobj.read(size - start)):
            cut = page.cut
            stream = streams.get(page.serial)
            if stream is not None and page.granule >= 0 and not page.cut:
                stream.last_granule = max(stream.last_granule, page.granule)
        timed = [s for s in streams.values() if s.codec != "other"]
        if start == 0 or all(s.last_granule > 0 for s in timed):
            break
    return cut


def _duration(stream: Stream) -> float | None:
    first, granule = stream.first, stream.last_granule
    if granule < 0:
        return None
    if stream.codec == "theora" and len(first) >= 42:
        numerator, denominator = struct.unpack_from(">II", first, 22)
        shift = (int.from_bytes(first[40:42], "big") >> 5) & 0x1F
        frames = (granule >> shift) + (granule & ((1 << shift) - 1))
        return frames * denominator / numerator if numerator else None
    if stream.codec == "opus" and len(first) >= 12:
        pre_skip = int.from_bytes(first[10:12], "little")
        return max(0, granule - pre_skip) / 48000
    rate = _audio_params(stream)[0] if stream.codec in AUDIO_FORMATS else 0
    return granule / rate if rate else None


def _audio_params(stream: Stream) -> tuple[int, int, int]:
    """(sample rate, channels, nominal bitrate in bits/s or 0) from the first packet."""
    first = stream.first
    if stream.codec == "vorbis" and len(first) >= 28:
        channels, rate, _maximum, nominal = struct.unpack_from("<BIii", first, 11)
        return rate, channels, max(0, nominal)
    if stream.codec == "opus" and len(first) >= 10:
        return 48000, first[9], 0  # Opus always decodes at 48 kHz (RFC 7845 §5.1)
    if stream.codec == "flac" and len(first) >= 30:
        info = int.from_bytes(first[27:35].ljust(8, b"\0"), "big")
        return info >> 44, ((info >> 41) & 7) + 1, 0
    if stream.codec == "speex" and len(first) >= 56:
        rate = int.from_bytes(first[36:40], "little")
        channels, bitrate = struct.unpack_from("<Ii", first, 48)
        return rate, channels, max(0, bitrate)
    return 0, 0, 0


def _comment_packet(stream: Stream) -> bytes:
    """The Vorbis comment structure of a stream, without its codec's packet prefix."""
    candidates = [*stream.packets[1:], stream.partial]
    if stream.codec == "flac":  # metadata blocks follow: the comment is block type 4
        for packet in candidates:
            if packet and packet[0] & 0x7F == 4:
                return packet[4:]
        return b""
    prefix = {"vorbis": b"\x03vorbis", "opus": b"OpusTags", "theora": b"\x81theora"}
    packet = candidates[0] if candidates else b""
    expected = prefix.get(stream.codec, b"")
    return packet[len(expected) :] if packet.startswith(expected) else b""


def comments(data: bytes) -> list[tuple[str, str]]:
    """(key, value) pairs of a Vorbis comment structure, as far as `data` holds them."""
    pairs: list[tuple[str, str]] = []
    if len(data) < 8:
        return pairs
    position = 4 + int.from_bytes(data[:4], "little")  # past the vendor string
    n_comments = int.from_bytes(data[position : position + 4], "little")
    position += 4
    for _ in range(n_comments):
        if position + 4 > len(data):
            break  # the count is bigger than what is there
        length = int.from_bytes(data[position : position + 4], "little")
        position += 4
        raw = data[position : position + length]
        if len(raw) < length:
            break  # cut here (a cover picture, usually last, ran past what was read)
        position += length
        key, equals, value = raw.decode("utf-8", "replace").partition("=")
        if equals:
            pairs.append((key, value))
    return pairs

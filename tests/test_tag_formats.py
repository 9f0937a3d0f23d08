"""Tag reading of each container family on files built byte by byte after their formats'
layouts (MPEG frames, WAV/AIFF chunks, Ogg pages, MP4 atoms, FLAC blocks, ASF objects):
lengths from the stream's own headers, tags kept from cut files, kind from the content, and
the read budget over a source."""

from __future__ import annotations

import io
import shutil
import struct
from pathlib import Path

import pytest
from mutagen.flac import FLAC, Picture
from mutagen.id3 import APIC, ID3, TIT2
from mutagen.mp4 import MP4, MP4Cover
from mutagen.ogg import OggPage

from sharecrawl.crawl_io import rangefile
from sharecrawl.crawl_io.filesource import FileSource
from sharecrawl.crawl_io.mediatypes import media_kind
from sharecrawl.crawl_io.rangefile import RangeFile
from sharecrawl.crawl_io.sources import parse_host_url
from sharecrawl.crawl_io.tags import asf, read_tags
from tests.media import make_media, template_path

# ---------------------------------------------------------------- building files

LAYER_BITS = {1: 0b11, 2: 0b10, 3: 0b01}
VERSION_BITS = {1.0: 0b11, 2.0: 0b10, 2.5: 0b00}


def mpeg_frame(version: float, layer: int, bitrate_index: int, rate_index: int, size: int) -> bytes:
    """One MPEG audio frame: a header (no CRC, mono) and `size` bytes in all."""
    b1 = 0xE0 | VERSION_BITS[version] << 3 | LAYER_BITS[layer] << 1 | 1
    header = bytes([0xFF, b1, bitrate_index << 4 | rate_index << 2, 0b11 << 6])
    return header + bytes(size - 4)


def read_bytes(data: bytes, name: str) -> dict:
    return read_tags(io.BytesIO(data), name)


def through_source(tmp_path: Path, name: str, data: bytes) -> tuple[dict, RangeFile]:
    (tmp_path / "host" / "share").mkdir(parents=True, exist_ok=True)
    (tmp_path / "host" / "share" / name).write_bytes(data)
    source = FileSource(parse_host_url((tmp_path / "host").as_uri()))
    with source:
        fileobj = RangeFile(source, "share", name, len(data))
        return read_tags(fileobj, name), fileobj


# ---------------------------------------------------------------- MPEG audio


def test_mpeg2_xing_length_is_its_frames_not_less_the_encoder_delay() -> None:
    """MPEG-2 layer 3, 16 kHz, 32 kbps (144-byte frames): a Xing frame counting the 24 audio
    frames after it (and all 25 frames' bytes, as LAME writes it) and a LAME tag with delay
    and padding. The length is 24 x 576 samples, as ffprobe and tinytag say, not the
    gapless 0.76 s mutagen computes."""
    xing = b"Xing" + struct.pack(">III", 3, 24, 25 * 144)
    lame = b"LAME3.100" + bytes(12) + bytes([0x24, 0x03, 0xE8])  # delay 576, padding 1000
    first = bytearray(mpeg_frame(2.0, 3, 4, 2, 144))
    first[13 : 13 + len(xing) + len(lame)] = xing + lame  # after mono MPEG-2 side info
    data = bytes(first) + mpeg_frame(2.0, 3, 4, 2, 144) * 24
    row = read_bytes(data, "vbr.mp3")
    assert row["tag_error"] is None
    assert row["duration_s"] == pytest.approx(24 * 576 / 16000)
    assert (row["samplerate"], row["channels"], row["format"]) == (16000, 1, "mp3")
    assert row["bitrate_kbps"] == 32


def test_layer_1_without_a_header_is_timed_by_its_frames(tmp_path: Path) -> None:
    """MPEG-1 layer 1 at 44.1 kHz, 224 kbps: 240-byte frames of 384 samples, after an ID3v2
    tag; a .mp1 file is media for every stage."""
    path = tmp_path / "x.mp1"
    path.write_bytes(mpeg_frame(1.0, 1, 7, 0, 240) * 10)
    tags = ID3()
    tags.add(TIT2(encoding=3, text=["Layer one"]))
    tags.save(path)
    row = read_bytes(path.read_bytes(), path.name)
    assert (row["format"], row["title"], row["tag_error"]) == ("mp1", "Layer one", None)
    assert row["duration_s"] == pytest.approx(10 * 384 / 44100)
    assert media_kind("x.mp1") == "audio"


def test_vbr_without_a_header_is_timed_at_its_mean_bitrate(tmp_path: Path) -> None:
    """MPEG-1 layer 3, 44.1 kHz, frames of 32 and 64 kbps (104 and 208 bytes) alternating,
    600 KB: the frames walked in the first block give the mean, not the first frame's."""
    pair = mpeg_frame(1.0, 3, 1, 0, 104) + mpeg_frame(1.0, 3, 5, 0, 208)
    data = pair * 2000
    row, fileobj = through_source(tmp_path, "vbr.mp3", data)
    assert row["duration_s"] == pytest.approx(4000 * 1152 / 44100, rel=0.01)
    assert row["bitrate_kbps"] == 48
    assert fileobj.requests <= 2 and fileobj.bytes_read < 64 * 1024


def test_a_single_frame_after_a_tag_is_audio() -> None:
    data = b"ID3\x03\x00\x00\x00\x00\x00\x00" + mpeg_frame(1.0, 3, 9, 0, 417)
    row = read_bytes(data, "one.mp3")
    assert row["tag_error"] is None
    assert row["duration_s"] == pytest.approx(1152 / 44100)


def test_a_text_frame_not_in_its_declared_encoding_is_kept() -> None:
    """A TIT2 frame marked UTF-8 holding a stray Latin-1 byte: mutagen drops the frame; we
    keep the text with a replacement character."""
    frames = b""
    for frame_id, text in ((b"TIT2", b"\x03\xffran d\xc3\xada"), (b"TPE1", b"\x03Paso")):
        frames += frame_id + len(text).to_bytes(4, "big") + b"\x00\x00" + text
    tag = b"ID3\x04\x00\x00" + len(frames).to_bytes(4, "big") + frames
    row = read_bytes(tag + mpeg_frame(1.0, 3, 9, 0, 417) * 3, "x.mp3")
    assert (row["title"], row["artist"]) == ("\ufffdran día", "Paso")


# ---------------------------------------------------------------- WAV and AIFF


def wav(fmt: bytes, data_size: int, fact: int | None = None) -> bytes:
    chunks = b"fmt " + len(fmt).to_bytes(4, "little") + fmt
    if fact is not None:
        chunks += b"fact" + (4).to_bytes(4, "little") + fact.to_bytes(4, "little")
    chunks += b"data" + data_size.to_bytes(4, "little") + bytes(data_size)
    return b"RIFF" + (len(chunks) + 4).to_bytes(4, "little") + b"WAVE" + chunks


def test_compressed_wav_is_timed_by_its_fact_chunk() -> None:
    """IMA ADPCM, 8 kHz mono: 20 blocks of 256 bytes, 505 samples each (RIFF's fact chunk);
    timed as PCM it would last 0.16 s."""
    fmt = struct.pack("<HHIIHHHH", 0x11, 1, 8000, 4055, 256, 4, 2, 505)
    row = read_bytes(wav(fmt, 20 * 256, fact=20 * 505), "adpcm.wav")
    assert row["tag_error"] is None
    assert row["duration_s"] == pytest.approx(20 * 505 / 8000)
    assert row["bitrate_kbps"] == round(20 * 256 * 8 / (20 * 505 / 8000) / 1000)


def test_mu_law_wav_without_fact_is_timed_by_its_blocks() -> None:
    fmt = struct.pack("<HHIIHH", 7, 1, 8000, 8000, 1, 8)
    row = read_bytes(wav(fmt, 8000), "ulaw.wav")
    assert (row["duration_s"], row["bitrate_kbps"]) == (1.0, 64)


def test_aiff_name_and_author_chunks_fill_what_id3_lacks(tmp_path: Path) -> None:
    whole = make_media(tmp_path / "x.aiff", "aiff", title="From ID3").read_bytes()
    chunks = b""
    for chunk_id, text in ((b"NAME", b"From NAME"), (b"AUTH", b"Author")):
        chunks += chunk_id + len(text).to_bytes(4, "big") + text + b"\0" * (len(text) & 1)
    data = bytearray(whole + chunks)
    data[4:8] = (len(data) - 8).to_bytes(4, "big")
    row = read_bytes(bytes(data), "x.aiff")
    assert (row["title"], row["artist"], row["tag_error"]) == ("From ID3", "Author", None)


# ---------------------------------------------------------------- Ogg


def ogg_page(
    serial: int, sequence: int, granule: int, packets: list[bytes], bos: bool = False
) -> bytes:
    page = OggPage()
    page.serial, page.sequence, page.position, page.packets = serial, sequence, granule, packets
    page.first = bos
    return page.write()


def test_a_film_in_ogg_lasts_as_long_as_its_longest_stream(tmp_path: Path) -> None:
    """Theora (25 fps, granule shift 6) and Vorbis (8 kHz) pages interleaved for 1 s, then
    Vorbis alone to 30 s, 2 MB in all: the film lasts 30 s, read from head and tail."""
    theora_id = b"\x80theora\x03\x02\x01" + bytes(12) + struct.pack(">II", 25, 1) + bytes(10)
    theora_id += b"\x00\xc0"  # quality 0, granule shift 6
    vorbis_id = b"\x01vorbis" + struct.pack("<IBIiiiBB", 0, 1, 8000, 0, 16000, 0, 0xB8, 1)
    comment = b"\x03vorbis" + struct.pack("<I", 4) + b"test" + struct.pack("<I", 1)
    comment += struct.pack("<I", 14) + b"ARTIST=Kino\x00\x00\x00"[:14] + b"\x01"
    data = ogg_page(1, 0, 0, [theora_id], bos=True) + ogg_page(2, 0, 0, [vorbis_id], bos=True)
    data += ogg_page(1, 1, 0, [b"\x81theora" + bytes(8), b"\x82theora"])
    data += ogg_page(2, 1, 0, [comment, b"\x05vorbis"])
    for second in range(1, 31):
        if second == 1:
            data += ogg_page(1, 2, 25 << 6, [bytes(3000)])
        data += ogg_page(2, second + 1, second * 8000, [bytes(65000)])
    row, fileobj = through_source(tmp_path, "film.ogv", data)
    assert (row["kind"], row["format"]) == ("video", "ogv")
    assert row["duration_s"] == pytest.approx(30.0)
    assert (row["samplerate"], row["channels"], row["bitrate_kbps"]) == (8000, 1, 16)
    assert row["artist"] == "Kino"
    assert fileobj.requests <= 3 and fileobj.bytes_read < 200_000 < len(data) // 8


# ---------------------------------------------------------------- MP4


def test_a_cut_m4a_keeps_the_tags_its_header_holds(tmp_path: Path) -> None:
    """An interrupted download cut inside the cover picture (the last item of the tags)."""
    path = make_media(tmp_path / "song.m4a", "m4a", artist="Кино", title="Группа крови")
    audio = MP4(path)
    audio["covr"] = [MP4Cover(b"\xff\xd8" + bytes(300_000))]
    audio.save()
    data = path.read_bytes()
    cut = data[: data.index(b"covr") + 100_000]
    row = read_bytes(cut, "song.m4a")
    assert (row["artist"], row["title"]) == ("Кино", "Группа крови")
    assert row["tag_error"] == "truncated m4a file"
    assert row["duration_s"] == pytest.approx(1.0, abs=0.1)


def test_mp4_kind_comes_from_its_tracks(tmp_path: Path) -> None:
    sound_only = tmp_path / "tone.mp4"
    shutil.copyfile(template_path("m4a"), sound_only)
    row = read_bytes(sound_only.read_bytes(), "tone.mp4")
    assert (row["kind"], row["format"], row["series"]) == ("audio", "mp4", None)
    film = read_bytes(template_path("mp4").read_bytes(), "clip.m4a")
    assert (film["kind"], film["format"]) == ("video", "m4a")


# ---------------------------------------------------------------- FLAC


def test_flac_skips_a_picture_before_its_comment(tmp_path: Path) -> None:
    """A 2 MB cover picture stored before the Vorbis comment is skipped, not read."""
    path = make_media(tmp_path / "x.flac", "flac", artist="A", title="T")
    audio = FLAC(path)
    picture = Picture()
    picture.data = bytes(2_000_000)
    audio.add_picture(picture)
    audio.metadata_blocks.sort(key=lambda block: {0: 0, 6: 1}.get(block.code, 2))
    audio.save()
    data = path.read_bytes()
    assert data.index(b"\x00" * 1000) < data.index(b"artist=")  # the picture comes first
    row, fileobj = through_source(tmp_path, "x.flac", data)
    assert (row["artist"], row["title"], row["tag_error"]) == ("A", "T", None)
    assert fileobj.bytes_read < 128 * 1024 and fileobj.requests <= 3


def test_flac_with_a_zeroed_second_streaminfo_and_a_short_first(tmp_path: Path) -> None:
    data = template_path("flac").read_bytes()
    streaminfo = data[8:42]
    short = b"\x00\x00\x00\x12" + streaminfo[:18]  # 18 bytes hold rate, channels, samples
    zeroed = b"\x00\x00\x00\x22" + bytes(34)
    row = read_bytes(b"fLaC" + short + zeroed + data[42:], "x.flac")
    whole = read_bytes(data, "x.flac")
    assert row["duration_s"] == whole["duration_s"] > 0.5
    assert row["samplerate"] == whole["samplerate"]


# ---------------------------------------------------------------- ASF


def asf_object(guid: bytes, payload: bytes) -> bytes:
    return guid + (len(payload) + 24).to_bytes(8, "little") + payload


def utf16(text: str) -> bytes:
    return (text + "\0").encode("utf-16-le")


def asf_file(objects: list[bytes]) -> bytes:
    body = b"".join(objects)
    header = (
        asf.HEADER + (len(body) + 30).to_bytes(8, "little") + len(objects).to_bytes(4, "little")
    )
    return header + b"\x01\x02" + body + bytes(100)


def test_asf_values_in_stored_order_and_kind_from_streams() -> None:
    author = utf16("Content description")
    cdo = struct.pack("<5H", 0, len(author), 0, 0, 0) + author
    name, value = utf16("Author"), utf16("Metadata library")
    record = struct.pack("<HHHHI", 0, 0, len(name), 0, len(value)) + name + value
    library = asf_object(asf.METADATA_LIBRARY, struct.pack("<H", 1) + record)
    extension = asf_object(
        asf.HEADER_EXTENSION, bytes(18) + len(library).to_bytes(4, "little") + library
    )
    audio = asf.AUDIO_STREAM + bytes(38) + struct.pack("<HHIIHH", 0x161, 2, 44100, 16000, 0, 16)
    video = asf.VIDEO_STREAM + bytes(38) + struct.pack("<HHIIHH", 0, 7, 99, 99, 0, 0)
    props = bytes(40) + (10**8).to_bytes(8, "little") + bytes(8) + (0).to_bytes(8, "little")
    common = [asf_object(asf.FILE_PROPERTIES, props + bytes(40)), extension]
    song = read_bytes(
        asf_file(
            [
                *common,
                asf_object(asf.STREAM_PROPERTIES, audio),
                asf_object(asf.CONTENT_DESCRIPTION, cdo),
            ]
        ),
        "x.wma",
    )
    assert song["artist"] == "Metadata library"  # the header extension is stored first
    assert (song["kind"], song["format"], song["duration_s"]) == ("audio", "wma", 10.0)
    assert (song["channels"], song["samplerate"], song["bitrate_kbps"]) == (2, 44100, 128)
    film = read_bytes(
        asf_file(
            [
                *common,
                asf_object(asf.STREAM_PROPERTIES, audio),
                asf_object(asf.STREAM_PROPERTIES, video),
            ]
        ),
        "x.wma",
    )
    assert (film["kind"], film["format"], film["channels"]) == ("video", "wmv", 2)


# ---------------------------------------------------------------- the read budget


def test_a_big_tag_is_one_request_and_a_huge_one_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 3 MB mp3 with 400 KB of cover art in its ID3 tag: the head block, the rest of the
    tag with the first frames after it, and the tail (ID3v1): three requests, not fifteen."""
    path = make_media(tmp_path / "x.mp3", "mp3", title="Cover")
    audio = ID3(path)
    audio.add(APIC(encoding=3, mime="image/jpeg", type=3, desc="", data=bytes(400_000)))
    audio.save(path)
    frames = mpeg_frame(2.0, 3, 4, 0, 104)  # MPEG-2 layer 3, 22.05 kHz, 32 kbps
    data = path.read_bytes() + frames * 25_000
    row, fileobj = through_source(tmp_path, "x.mp3", data)
    assert row["title"] == "Cover" and row["tag_error"] is None
    assert fileobj.requests <= 3 and fileobj.bytes_read < 520_000
    monkeypatch.setattr(rangefile, "MAX_BYTES", 256 * 1024)
    row, fileobj = through_source(tmp_path, "x.mp3", data)
    assert row["tag_error"] == "tags of this mp3 file are past the read limit"
    assert fileobj.bytes_read <= 256 * 1024

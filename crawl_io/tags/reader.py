"""`read_tags`: which reader a file gets (by its first bytes, else its extension, else
mutagen's sniffing), and the row it gives, never an exception."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import IO, Any

import mutagen

from sharecrawl.crawl_io.mediatypes import extension
from sharecrawl.crawl_io.sources import SourceError
from sharecrawl.crawl_io.tags.asf import HEADER as ASF_HEADER
from sharecrawl.crawl_io.tags.asf import read_asf
from sharecrawl.crawl_io.tags.audio_names import fill_from_audio_name
from sharecrawl.crawl_io.tags.errors import NotThisFormat, describe_error, short
from sharecrawl.crawl_io.tags.fields import fill_from_tags
from sharecrawl.crawl_io.tags.flac import read_flac
from sharecrawl.crawl_io.tags.mp4 import read_mp4
from sharecrawl.crawl_io.tags.mpeg import read_mpeg
from sharecrawl.crawl_io.tags.ogg import read_ogg
from sharecrawl.crawl_io.tags.record import empty_row, finite, set_stream
from sharecrawl.crawl_io.tags.riff import read_aiff, read_wav
from sharecrawl.crawl_io.tags.video_names import fill_from_video_name

Reader = Callable[[dict[str, Any], IO[bytes], int], None]

READERS_BY_EXTENSION: dict[str, Reader] = {
    **dict.fromkeys(("mp3", "mp2", "mp1"), read_mpeg),
    "flac": read_flac,
    **dict.fromkeys(("ogg", "oga", "opus", "spx", "ogv"), read_ogg),
    **dict.fromkeys(("m4a", "m4b", "mp4", "m4v", "alac"), read_mp4),
    **dict.fromkeys(("wma", "wmv", "asf"), read_asf),
    **dict.fromkeys(("aiff", "aif", "aifc"), read_aiff),
    "wav": read_wav,
}
# The format a reader's files have when the reader does not say.
READER_FORMATS: dict[Reader, str] = {read_flac: "flac", read_wav: "wav", read_aiff: "aiff"}

# Format names by mutagen class, for files only mutagen's sniffing recognised.
CLASS_FORMATS = dict(
    pair.split("=")
    for pair in (
        "MP3=mp3 FLAC=flac OggVorbis=ogg OggOpus=opus OggFLAC=flac OggSpeex=spx OggTheora=ogv "
        "AIFF=aiff WAVE=wav AAC=aac AC3=ac3 WavPack=wv MonkeysAudio=ape Musepack=mpc "
        "TrueAudio=tta OptimFROG=ofr DSF=dsf DSDIFF=dff TAK=tak SMF=mid"
    ).split()
)
VIDEO_FORMATS = ("mp4", "m4v", "wmv", "ogv")
# Fields a reader fills only when the file is what it took it for.
FOUND_FIELDS = ("artist", "title", "album", "duration_s", "samplerate", "channels")


def read_tags(fileobj: IO[bytes], name: str) -> dict[str, Any]:
    """The media columns (kind … tag_error) of one file; `name` gives the extension and, for videos,
    what guessit parses. Never raises: a failure sets `tag_error`, fields read before it stay."""
    row = empty_row(name)
    try:
        _read_container(row, fileobj, name)
    except Exception as e:  # one broken file must never stop a round
        row["tag_error"] = describe_error(e, row["format"])
    if row["artist"] is not None or row["title"] is not None:
        row["tag_source"] = "tags"
    if row["kind"] == "video":
        try:
            fill_from_video_name(row, name)
        except Exception as e:  # guessit on a strange name: keep what the tags gave
            row["tag_error"] = row["tag_error"] or f"video name not parsed: {short(e)}"
    elif row["kind"] == "audio" and fill_from_audio_name(row, name):
        row["tag_source"] = "name"
    return row


def _read_container(row: dict[str, Any], fileobj: IO[bytes], name: str) -> None:
    size = fileobj.seek(0, os.SEEK_END)
    fileobj.seek(0)
    if size == 0:
        row["tag_error"] = "empty file"
        return
    ext = extension(name.rsplit("/", 1)[-1])
    reader = reader_by_magic(fileobj)
    if reader is not None:  # the content says what it is: its reader's error is the answer
        _run(reader, row, fileobj, size, ext)
        return
    reader = READERS_BY_EXTENSION.get(ext)
    if reader is None:
        if not _read_other(row, fileobj) and row["kind"] is None:
            row["tag_error"] = "not a recognised media file"
        return  # a container we have no reader for (mkv, avi…): the name is all we have
    attempt = dict(row)
    try:
        _run(reader, attempt, fileobj, size, ext)
    except SourceError:
        raise  # the network failed, not the file: sniffing would fail the same way
    except Exception as error:
        # Misnamed files are common on shares; mutagen picks a reader from the header.
        other = dict(row)
        try:
            found = _read_other(other, fileobj)
        except Exception:
            found = False
        row.update(other if found else attempt)
        if not found:
            raise error from None
        return
    row.update(attempt)


def _run(reader: Reader, row: dict[str, Any], fileobj: IO[bytes], size: int, ext: str) -> None:
    """Run one reader; kind and format come from what it found (an audio kind unless it
    says otherwise), or stay as the name gave them when it found nothing."""
    named = dict(row)
    if reader in READER_FORMATS:
        row["format"] = READER_FORMATS[reader]
    elif reader is read_mp4 and ext not in ("m4a", "m4b", "mp4", "m4v"):
        row["format"] = None  # set below from what the file holds
    fileobj.seek(0)
    try:
        reader(row, fileobj, size)
    except Exception:
        if not any(row[f] is not None for f in FOUND_FIELDS):
            row["kind"], row["format"] = named["kind"], named["format"]
            raise
        _settle_kind(reader, row)
        raise
    _settle_kind(reader, row)


def _settle_kind(reader: Reader, row: dict[str, Any]) -> None:
    row["kind"] = row["kind"] or "audio"
    if reader is read_mp4 and row["format"] is None:
        row["format"] = "mp4" if row["kind"] == "video" else "m4a"


def reader_by_magic(fileobj: IO[bytes]) -> Reader | None:
    """The reader a file's first bytes call for; None when they do not say (an ID3 tag)."""
    fileobj.seek(0)
    header = fileobj.read(64)
    if header.startswith(b"fLaC"):
        return read_flac
    if header.startswith(b"OggS"):
        return read_ogg
    if header.startswith(b"RIFF") and header[8:12] == b"WAVE":
        return read_wav
    if header.startswith(b"FORM") and header[8:12] in (b"AIFF", b"AIFC"):
        return read_aiff
    if header[4:8] == b"ftyp":
        return read_mp4
    if header.startswith(ASF_HEADER):
        return read_asf
    return None


def _read_other(row: dict[str, Any], fileobj: IO[bytes]) -> bool:
    """Any format mutagen knows by its header (AAC, WavPack, Musepack …); False if none."""
    fileobj.seek(0)
    try:
        audio = mutagen.File(fileobj)
    except SourceError:
        raise
    except Exception as e:
        raise NotThisFormat(f"not a recognised media file: {short(e)}") from e
    if audio is None:
        return False
    cls = type(audio).__name__
    row["format"] = CLASS_FORMATS.get(cls, row["format"] or cls.lower())
    if row["kind"] is None or cls in CLASS_FORMATS:
        row["kind"] = "video" if row["format"] in VIDEO_FORMATS else "audio"
    info = audio.info
    length = finite(getattr(info, "length", None))
    set_stream(row, duration=length, bitrate_bps=getattr(info, "bitrate", None))
    set_stream(row, samplerate=getattr(info, "sample_rate", None))
    set_stream(row, channels=getattr(info, "channels", None))
    if audio.tags is not None:
        fill_from_tags(row, audio.tags)
    return True

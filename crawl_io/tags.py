"""Audio and video tags with mutagen: one dict of `media` columns per file, never an exception.

`read_tags` is given a seekable file object (often a RangeFile over SMB) and reads only what
mutagen asks for: headers, tag blocks and, for some formats, the last page or frame. A file
that cannot be read still yields the fields found so far and a short `tag_error`.

`write_tagged` makes tagged media files from the small templates in `templates/`, for the
demo LAN and the tests.
"""

from __future__ import annotations

import io
import math
import os
import re
import shutil
import struct
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import mutagen
from mutagen.aiff import AIFF
from mutagen.apev2 import APEv2
from mutagen.asf import ASF, ASFTags
from mutagen.flac import FLAC
from mutagen.id3 import (
    ID3,
    TALB,
    TCON,
    TDRC,
    TIT2,
    TPE1,
    TPE2,
    TPOS,
    TRCK,
    ID3NoHeaderError,
)
from mutagen.mp3 import MP3, HeaderNotFoundError
from mutagen.mp4 import MP4, MP4Tags
from mutagen.oggopus import OggOpus
from mutagen.oggvorbis import OggVorbis
from mutagen.wave import WAVE

from crawl_io.mediatypes import extension, media_kind
from crawl_io.sources import SourceError

# The media-describing columns of crawl_io.schema.MEDIA, in its order.
TAG_COLUMNS = (
    "kind",
    "format",
    "artist",
    "title",
    "album",
    "albumartist",
    "track",
    "disc",
    "year",
    "genre",
    "duration_s",
    "bitrate_kbps",
    "samplerate",
    "channels",
    "series",
    "season",
    "episode",
    "tag_error",
)
TEXT_FIELDS = ("artist", "title", "album", "albumartist", "genre")
INT_FIELDS = ("track", "disc", "year", "season", "episode")
INT32_MAX = 2**31 - 1

# The reader tried first for an extension; mutagen's own sniffing is the fallback.
LOADERS: dict[str, Callable[..., Any]] = {
    "mp3": MP3,
    "mp2": MP3,
    "mp1": MP3,
    "flac": FLAC,
    "ogg": OggVorbis,
    "oga": OggVorbis,
    "opus": OggOpus,
    "m4a": MP4,
    "m4b": MP4,
    "mp4": MP4,
    "m4v": MP4,
    "alac": MP4,
    "wma": ASF,
    "wmv": ASF,
    "asf": ASF,
    "aiff": AIFF,
    "aif": AIFF,
    "aifc": AIFF,
    "wav": WAVE,
}

# Format names by extension, for files no reader recognised.
EXTENSION_FORMATS = {"oga": "ogg", "aif": "aiff", "aifc": "aiff", "m4b": "m4a", "alac": "m4a"}

# Format names by mutagen class, for files a reader recognised (whatever their extension).
CLASS_FORMATS = {
    "FLAC": "flac",
    "OggVorbis": "ogg",
    "OggOpus": "opus",
    "OggFLAC": "flac",
    "OggSpeex": "spx",
    "OggTheora": "ogv",
    "AIFF": "aiff",
    "WAVE": "wav",
    "AAC": "aac",
    "AC3": "ac3",
    "WavPack": "wv",
    "MonkeysAudio": "ape",
    "Musepack": "mpc",
    "TrueAudio": "tta",
    "OptimFROG": "ofr",
    "DSF": "dsf",
    "DSDIFF": "dff",
    "TAK": "tak",
    "SMF": "mid",
}

ASF_KEYS = {
    "artist": ("Author",),
    "title": ("Title",),
    "album": ("WM/AlbumTitle",),
    "albumartist": ("WM/AlbumArtist",),
    "track": ("WM/TrackNumber",),
    "disc": ("WM/PartOfSet",),
    "year": ("WM/Year", "WM/OriginalReleaseYear"),
    "genre": ("WM/Genre",),
}
MP4_KEYS = {
    "artist": ("\xa9ART",),
    "title": ("\xa9nam",),
    "album": ("\xa9alb",),
    "albumartist": ("aART",),
    "track": ("trkn",),
    "disc": ("disk",),
    "year": ("\xa9day",),
    "genre": ("\xa9gen",),
    "series": ("tvsh",),
    "season": ("tvsn",),
    "episode": ("tves",),
}
ID3_KEYS = {
    "artist": ("TPE1",),
    "title": ("TIT2",),
    "album": ("TALB",),
    "albumartist": ("TPE2",),
    "track": ("TRCK",),
    "disc": ("TPOS",),
    "year": ("TDRC", "TORY", "TDOR"),
    "genre": ("TCON",),
}
VORBIS_KEYS = {
    "artist": ("artist",),
    "title": ("title",),
    "album": ("album",),
    "albumartist": ("albumartist", "album artist", "album_artist"),
    "track": ("tracknumber", "track"),
    "disc": ("discnumber", "disc"),
    "year": ("date", "year", "originaldate"),
    "genre": ("genre",),
}
APE_KEYS = {
    "artist": ("Artist",),
    "title": ("Title",),
    "album": ("Album",),
    "albumartist": ("Album Artist", "AlbumArtist"),
    "track": ("Track",),
    "disc": ("Disc",),
    "year": ("Year",),
    "genre": ("Genre",),
}


def empty_row(name: str) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(TAG_COLUMNS)
    row["kind"] = media_kind(name)
    ext = extension(name.rsplit("/", 1)[-1])
    row["format"] = EXTENSION_FORMATS.get(ext, ext) if row["kind"] else None
    return row


def read_tags(fileobj: IO[bytes], name: str) -> dict[str, Any]:
    """The media columns (kind … tag_error) of one file; `name` gives extension and, for
    videos, the name guessit parses. Never raises: a failure sets `tag_error`."""
    row = empty_row(name)
    try:
        _read_container(row, fileobj, name)
    except Exception as e:  # one broken file must never stop a round
        row["tag_error"] = describe_error(e, row["format"])
    if row["kind"] == "video":
        try:
            fill_from_video_name(row, name)
        except Exception as e:  # guessit on a strange name: keep what the tags gave
            row["tag_error"] = row["tag_error"] or f"video name not parsed: {_short(e)}"
    return row


def _read_container(row: dict[str, Any], fileobj: IO[bytes], name: str) -> None:
    size = fileobj.seek(0, os.SEEK_END)
    fileobj.seek(0)
    if size == 0:
        row["tag_error"] = "empty file"
        return
    ext = extension(name.rsplit("/", 1)[-1])
    loader = loader_by_magic(fileobj.read(64)) or LOADERS.get(ext)
    fileobj.seek(0)
    audio = None
    first_error: Exception | None = None
    if loader is not None:
        try:
            audio = loader(fileobj)
        except SourceError:
            raise  # the network failed, not the file: sniffing would fail the same way
        except Exception as e:
            first_error = e
    if audio is None:
        # Misnamed files are common on shares; mutagen picks a reader from the header.
        try:
            fileobj.seek(0)
            audio = mutagen.File(fileobj, filename=name)
        except SourceError:
            raise
        except Exception as e:
            first_error = first_error or e
    if audio is None:
        if first_error is not None:
            if _salvage_id3(row, fileobj) and isinstance(first_error, HeaderNotFoundError):
                row["tag_error"] = f"no audio frames in {row['format'] or 'media'} file"
                return
            raise first_error
        if loader is None and row["kind"] is None:
            row["tag_error"] = "not a recognised media file"
        return  # a container mutagen has no reader for (mkv, avi…): the name is all we have
    _fill_from_audio(row, audio, ext, size)
    if isinstance(audio, WAVE) and any(row[f] is None for f in RIFF_INFO_FIELDS.values()):
        try:
            _fill_from_riff_info(row, fileobj, size)
        except SourceError:
            raise
        except Exception:  # a damaged INFO chunk: the audio and ID3 fields stand
            pass


def loader_by_magic(header: bytes) -> Callable[..., Any] | None:
    """The reader a file's first bytes call for: a FLAC file named .mp3 is read as FLAC (the
    MP3 reader would find false frame syncs in it). None when the header does not say."""
    if header.startswith(b"fLaC"):
        return FLAC
    if header.startswith(b"OggS"):
        return OggOpus if b"OpusHead" in header else OggVorbis if b"\x01vorbis" in header else None
    if header.startswith(b"RIFF") and header[8:12] == b"WAVE":
        return WAVE
    if header.startswith(b"FORM") and header[8:12] in (b"AIFF", b"AIFC"):
        return AIFF
    if header[4:8] == b"ftyp":
        return MP4
    if header.startswith(ASF_HEADER_GUID):
        return ASF
    return None


ASF_HEADER_GUID = bytes.fromhex("3026b2758e66cf11a6d900aa0062ce6c")


def _salvage_id3(row: dict[str, Any], fileobj: IO[bytes]) -> bool:
    """A truncated mp3 (an interrupted download) or one with no audio frames often still has
    a readable ID3 tag: read it as if the missing end of the tag were padding."""
    try:
        fileobj.seek(0)
        _fill_from_tags(row, ID3(ZeroPadded(fileobj)))
    except Exception:  # nothing to salvage; the caller reports the first error
        return False
    return any(row[field] is not None for field in ID3_KEYS)


class ZeroPadded(io.RawIOBase):
    """A read-only view of a file that answers short reads at its end with zero bytes (ID3
    padding), so a tag cut off mid-way yields the frames before the cut."""

    MAX_PAD = 1 << 20

    def __init__(self, inner: IO[bytes]) -> None:
        self._inner = inner

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._inner.seek(offset, whence)

    def tell(self) -> int:
        return self._inner.tell()

    def read(self, size: int | None = -1) -> bytes:
        data = self._inner.read(size)
        if size is not None and len(data) < size <= self.MAX_PAD:
            data += bytes(size - len(data))
        return data


def _fill_from_audio(row: dict[str, Any], audio: Any, ext: str, size: int) -> None:
    row["format"] = format_name(audio, ext, row["kind"])
    if row["kind"] is None:
        row["kind"] = "video" if row["format"] in ("mp4", "m4v", "wmv", "ogv") else "audio"
    info = audio.info
    length = _finite(getattr(info, "length", None))
    row["duration_s"] = length
    row["samplerate"] = _count(getattr(info, "sample_rate", None))
    if row["samplerate"] is None and row["format"] == "opus":
        row["samplerate"] = 48000  # Opus always decodes at 48 kHz; mutagen states none
    row["channels"] = _count(getattr(info, "channels", None))
    bitrate = _finite(getattr(info, "bitrate", None))
    if not bitrate and length:
        bitrate = size * 8 / length  # Opus and some Ogg/MP4 files state none
    row["bitrate_kbps"] = _count(round(bitrate / 1000)) if bitrate else None
    if audio.tags is not None:
        _fill_from_tags(row, audio.tags)


# RIFF INFO ids (what Windows and many rippers write into wav files; mutagen reads only ID3)
RIFF_INFO_FIELDS = {
    b"IART": "artist",
    b"INAM": "title",
    b"IPRD": "album",
    b"ICRD": "year",
    b"IGNR": "genre",
    b"ITRK": "track",
    b"IPRT": "track",
}


def _fill_from_riff_info(row: dict[str, Any], fileobj: IO[bytes], size: int) -> None:
    """Fill missing fields from the wav's LIST/INFO chunk, reading only that chunk."""
    position = 12
    while position + 8 <= size:
        fileobj.seek(position)
        header = fileobj.read(12)
        if len(header) < 8:
            return
        chunk_id, chunk_size = header[:4], int.from_bytes(header[4:8], "little")
        if chunk_id == b"LIST" and header[8:12] == b"INFO":
            _parse_info(row, fileobj.read(min(chunk_size - 4, 1 << 16)))
            return
        position += 8 + chunk_size + (chunk_size & 1)


def _parse_info(row: dict[str, Any], data: bytes) -> None:
    offset = 0
    while offset + 8 <= len(data):
        item_id = data[offset : offset + 4]
        length = int.from_bytes(data[offset + 4 : offset + 8], "little")
        raw = data[offset + 8 : offset + 8 + length].split(b"\0", 1)[0]
        field = RIFF_INFO_FIELDS.get(item_id)
        if field and row[field] is None and raw:
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                text = raw.decode("latin-1")
            row[field] = _convert(field, text)
        offset += 8 + length + (length & 1)


def format_name(audio: Any, ext: str, kind: str | None) -> str:
    cls = type(audio).__name__
    if cls in ("MP3", "EasyMP3"):
        layer = getattr(audio.info, "layer", 3)
        return {1: "mp1", 2: "mp2"}.get(layer, "mp3")
    if cls in ("MP4", "EasyMP4"):
        if ext in ("m4a", "m4b", "mp4", "m4v"):
            return ext
        return "mp4" if kind == "video" else "m4a"
    if cls == "ASF":
        return "wmv" if ext == "wmv" or kind == "video" else "wma"
    return CLASS_FORMATS.get(cls, ext or cls.lower())


def _fill_from_tags(row: dict[str, Any], tags: Any) -> None:
    if isinstance(tags, ID3):
        keys, get = ID3_KEYS, _id3_values
    elif isinstance(tags, MP4Tags):
        keys, get = MP4_KEYS, _mp4_values
    elif isinstance(tags, ASFTags):
        keys, get = ASF_KEYS, _asf_values
    elif isinstance(tags, APEv2):
        keys, get = APE_KEYS, _ape_values
    elif hasattr(tags, "as_dict") or hasattr(tags, "vendor"):  # Vorbis comments
        keys, get = VORBIS_KEYS, _vorbis_values
    else:
        return
    for field, names in keys.items():
        if row.get(field) is not None:
            continue
        for key in names:
            values = [v for v in get(tags, key) if v not in (None, "")]
            if not values:
                continue
            value = _convert(field, values[0])
            if value is not None:
                row[field] = value
                break


def _id3_values(tags: ID3, key: str) -> list[Any]:
    frame = tags.get(key)
    if frame is None:
        return []
    if key == "TCON":
        return list(frame.genres)  # resolves ID3v1 numeric genres: '(13)' -> 'Pop'
    return [str(v) for v in frame.text]


def _mp4_values(tags: MP4Tags, key: str) -> list[Any]:
    values = tags.get(key) or []
    if key in ("trkn", "disk"):
        return [v[0] if isinstance(v, tuple) else v for v in values]
    return list(values)


def _asf_values(tags: ASFTags, key: str) -> list[Any]:
    return [getattr(v, "value", v) for v in tags.get(key, [])]


def _ape_values(tags: APEv2, key: str) -> list[Any]:
    value = tags.get(key)
    return [] if value is None else [str(value)]


def _vorbis_values(tags: Any, key: str) -> list[Any]:
    return list(tags.get(key) or [])


def _convert(field: str, value: Any) -> Any:
    if field in TEXT_FIELDS or field == "series":
        text = str(value).replace("\x00", " ").strip()
        return text or None
    if field == "year":
        return parse_year(value)
    return parse_int(value)


def parse_int(value: Any) -> int | None:
    """Leading number: '3/12' -> 3, ' 07' -> 7; None when there is none or it is absurd."""
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        match = re.match(r"\s*(\d+)", str(value))
        if match is None:
            return None
        number = int(match.group(1))
    return number if 0 <= number <= INT32_MAX else None


def parse_year(value: Any) -> int | None:
    """The first four-digit year in a date: '2004-05-01' -> 2004, '2008.05.25' -> 2008."""
    match = re.search(r"(?<!\d)(\d{4})(?!\d)", str(value))
    if match is None:
        return None
    year = int(match.group(1))
    return year if year > 0 else None


def fill_from_video_name(row: dict[str, Any], name: str) -> None:
    """Series, season, episode, year and title from a video's name where tags lack them."""
    from guessit import guessit  # loads its rule engine only when a video is seen

    base = name.rsplit("/", 1)[-1]
    guesses = [guessit(base)]
    if base != name:  # folders ('Lost/Season 6/01.mp4') may tell what the name does not
        guesses.append(guessit(name))
    for guess in guesses:
        episode = guess.get("type") == "episode"
        found = {
            "series": _first(guess.get("title")) if episode else None,
            "title": _first(guess.get("episode_title" if episode else "title")),
            "season": _first(guess.get("season")),
            "episode": _first(guess.get("episode")),
            "year": _first(guess.get("year")),
        }
        for field, value in found.items():
            if row[field] is None and value is not None:
                row[field] = _convert(field, value)


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, list) and value else value


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number >= 0 else None


def _count(value: Any) -> int | None:
    """A positive whole number from stream info, else None."""
    return (parse_int(value) or None) if value is not None else None


def _short(e: BaseException, limit: int = 100) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


NOT_THIS_FORMAT = re.compile(
    r"not a|no header|can't sync|cannot sync|no .*(stream|frame|header|chunk) found|"
    r"not .*file|unknown|no appropriate|expected|invalid .*header|header .*invalid|"
    r"has no|missing|header size",
    re.IGNORECASE,
)
TRUNCATED = re.compile(
    r"truncat|eof|end of file|too short|not enough data|short read|file said \d+ bytes",
    re.IGNORECASE,
)


def describe_error(e: BaseException, fmt: str | None) -> str:
    """One short, clear message for a failed read."""
    what = f"{fmt} file" if fmt else "media file"
    chain = _causes(e)
    if any(isinstance(c, SourceError) for c in chain):
        return f"read failed: {_short(next(c for c in chain if isinstance(c, SourceError)))}"
    os_errors = [c for c in chain if isinstance(c, OSError) and c.errno is not None]
    if os_errors:
        return f"read failed: {_short(os_errors[0])}"
    # mutagen reports a read past the end as a bare OSError() (no errno) or struct/EOF error
    if any(
        isinstance(c, EOFError | struct.error)
        or (isinstance(c, OSError) and c.errno is None and not str(c))
        or TRUNCATED.search(str(c))
        for c in chain
    ):
        return f"truncated {what}"
    if any(isinstance(c, ID3NoHeaderError) or NOT_THIS_FORMAT.search(str(c)) for c in chain):
        return f"not a recognised {what}"
    if isinstance(e, mutagen.MutagenError):
        return f"damaged {what}: {_short(e)}"
    return f"damaged {what}: {type(e).__name__}: {_short(e)}"


def _causes(e: BaseException) -> list[BaseException]:
    """The exception and those it was raised from, innermost last."""
    chain: list[BaseException] = []
    current: BaseException | None = e
    while current is not None and current not in chain and len(chain) < 8:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


# ---------------------------------------------------------------- templates and writing

TEMPLATES_DIR = Path(__file__).with_name("templates")
TEMPLATES = {
    "mp3": "tone.mp3",  # 32 kbps mono
    "mp3-320": "tone-320k.mp3",  # 320 kbps stereo: a better copy of the same song
    "flac": "tone.flac",
    "ogg": "tone.ogg",
    "opus": "tone.opus",
    "m4a": "tone.m4a",
    "wma": "tone.wma",
    "wav": "tone.wav",
    "aiff": "tone.aiff",
    "mp4": "clip.mp4",  # H.264 + AAC video
}
WRITABLE_TAGS = ("artist", "title", "album", "albumartist", "track", "disc", "year", "genre")


def template_path(template_format: str) -> Path:
    try:
        return TEMPLATES_DIR / TEMPLATES[template_format]
    except KeyError:
        raise ValueError(
            f"no template for {template_format!r}; known: {', '.join(TEMPLATES)}"
        ) from None


def write_tagged(template_format: str, dest: Path, tags: dict[str, Any]) -> None:
    """Copy the template of `template_format` to `dest` and write `tags` (artist, title,
    album, albumartist, track, disc, year, genre; mp4 also series, season, episode)."""
    unknown = set(tags) - set(WRITABLE_TAGS) - {"series", "season", "episode"}
    if unknown:
        raise ValueError(f"cannot write tags {sorted(unknown)}")
    source = template_path(template_format)
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, dest)
    values = {k: v for k, v in tags.items() if v is not None and v != ""}
    suffix = source.suffix
    if suffix == ".mp3":
        _write_id3(dest, values, None)
    elif suffix in (".aiff", ".wav"):
        _write_id3(dest, values, AIFF if suffix == ".aiff" else WAVE)
    elif suffix in (".flac", ".ogg", ".opus"):
        _write_vorbis(dest, values, {".flac": FLAC, ".ogg": OggVorbis, ".opus": OggOpus}[suffix])
    elif suffix in (".m4a", ".mp4"):
        _write_mp4(dest, values)
    elif suffix == ".wma":
        _write_asf(dest, values)


def _write_id3(dest: Path, values: dict[str, Any], container: Callable[..., Any] | None) -> None:
    frames = {
        "artist": TPE1,
        "title": TIT2,
        "album": TALB,
        "albumartist": TPE2,
        "track": TRCK,
        "disc": TPOS,
        "year": TDRC,
        "genre": TCON,
    }
    if container is None:
        tags = ID3()
    else:
        audio = container(dest)
        if audio.tags is None:
            audio.add_tags()
        tags = audio.tags
    for field, value in values.items():
        if field in frames:
            tags.add(frames[field](encoding=3, text=[str(value)]))
    if container is None:
        tags.save(dest)
    else:
        audio.save()


def _write_vorbis(dest: Path, values: dict[str, Any], container: Callable[..., Any]) -> None:
    audio = container(dest)
    if audio.tags is None:
        audio.add_tags()
    names = {"track": "tracknumber", "disc": "discnumber", "year": "date"}
    for field, value in values.items():
        if field in WRITABLE_TAGS:
            audio[names.get(field, field)] = [str(value)]
    audio.save()


def _write_mp4(dest: Path, values: dict[str, Any]) -> None:
    audio = MP4(dest)
    if audio.tags is None:
        audio.add_tags()
    text_keys = {
        "artist": "\xa9ART",
        "title": "\xa9nam",
        "album": "\xa9alb",
        "albumartist": "aART",
        "year": "\xa9day",
        "genre": "\xa9gen",
        "series": "tvsh",
    }
    for field, value in values.items():
        if field in text_keys:
            audio[text_keys[field]] = [str(value)]
        elif field in ("track", "disc"):
            audio["trkn" if field == "track" else "disk"] = [(int(value), 0)]
        elif field in ("season", "episode"):
            audio["tvsn" if field == "season" else "tves"] = [int(value)]
    audio.save()


def _write_asf(dest: Path, values: dict[str, Any]) -> None:
    audio = ASF(dest)
    for field, value in values.items():
        if field in ASF_KEYS:
            audio[ASF_KEYS[field][0]] = [str(value)]
    audio.save()

"""Cover pictures for the demo's albums and films, drawn by Pillow: a diagonal gradient of two
colours and the title's initials, all taken from the title, so one seed builds the same LAN
byte for byte (and the search page has real covers to show)."""

from __future__ import annotations

import base64
import colorsys
import hashlib
import io
import re
from pathlib import Path

from mutagen.flac import Picture
from mutagen.id3 import APIC, ID3
from mutagen.mp4 import MP4, MP4Cover
from mutagen.oggvorbis import OggVorbis
from PIL import Image, ImageChops, ImageDraw, ImageFont

from sharecrawl.queries.text import transliterate

ALBUM_SIZE = (300, 300)  # pixels; the page's thumbnails are 240 (web/covers.py)
POSTER_SIZE = (200, 300)  # a film poster's 2:3


def initials(title: str) -> str:
    """'OK Computer' -> 'OC', 'Группа крови' -> 'GK': the first letters of the first two
    words, Cyrillic in Latin (Pillow's own font has no Cyrillic letters)."""
    words = re.findall(r"[^\W_]+", title)[:2]
    return "".join(transliterate(w[0].lower()).capitalize() for w in words) or "?"


Colour = tuple[int, int, int]


def _rgb(hue: float, saturation: float, value: float) -> Colour:
    red, green, blue = colorsys.hsv_to_rgb(hue % 1, saturation, value)
    return round(red * 255), round(green * 255), round(blue * 255)


def _colours(title: str) -> tuple[Colour, Colour]:
    """A light and a dark colour of neighbouring hues, from the title's hash."""
    digest = hashlib.sha256(title.encode()).digest()
    hue = digest[0] / 255
    return _rgb(hue, 0.45 + digest[1] / 1020, 0.92), _rgb(hue + 0.08 + digest[2] / 2550, 0.75, 0.42)


def cover_jpeg(title: str, size: tuple[int, int] = ALBUM_SIZE) -> bytes:
    """A JPEG of a few KB: top left to bottom right from a light to a dark colour of the
    title's, its initials in white in the middle."""
    light, dark = _colours(title)
    down = Image.linear_gradient("L").resize(size)
    across = down.transpose(Image.Transpose.ROTATE_90).resize(size)
    mask = ImageChops.add(down, across, scale=2)  # (x + y) / 2: the diagonal
    image = Image.composite(Image.new("RGB", size, dark), Image.new("RGB", size, light), mask)
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=min(size) * 0.4)
    centre = (size[0] / 2, size[1] / 2)
    draw.text((centre[0] + 3, centre[1] + 3), initials(title), fill=dark, font=font, anchor="mm")
    draw.text(centre, initials(title), fill="white", font=font, anchor="mm")
    out = io.BytesIO()
    image.save(out, "JPEG", quality=85, optimize=True)
    return out.getvalue()


def embed_cover(path: Path, jpeg: bytes) -> None:
    """Put `jpeg` in a media file's tags as its front cover, where taggers put it: an ID3
    APIC frame (mp3), MP4 `covr` (mp4, m4a), a Vorbis METADATA_BLOCK_PICTURE (ogg)."""
    if path.suffix == ".mp3":
        tags = ID3(path)
        tags.add(APIC(encoding=3, mime="image/jpeg", type=3, desc="", data=jpeg))
        tags.save(path)
    elif path.suffix in (".mp4", ".m4a"):
        mp4 = MP4(path)
        mp4["covr"] = [MP4Cover(jpeg, MP4Cover.FORMAT_JPEG)]
        mp4.save()
    elif path.suffix == ".ogg":
        picture = Picture()
        picture.type, picture.mime, picture.data = 3, "image/jpeg", jpeg
        ogg = OggVorbis(path)
        ogg["metadata_block_picture"] = [base64.b64encode(picture.write()).decode("ascii")]
        ogg.save()
    else:
        raise ValueError(f"no cover can be put in {path.name}")

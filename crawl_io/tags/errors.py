"""One short, clear `tag_error` for a failed read, whatever raised it."""

from __future__ import annotations

import re
import struct

import mutagen
from mutagen.id3 import ID3NoHeaderError

from sharecrawl.crawl_io.rangefile import ReadLimitExceeded
from sharecrawl.crawl_io.sources import SourceError


class NotThisFormat(ValueError):
    """Our own parsers' word for 'these bytes are not that format'."""


class Truncated(EOFError):
    """Our own parsers' word for 'the file ends inside a structure'."""


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


def short(e: BaseException, limit: int = 100) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe_error(e: BaseException, fmt: str | None) -> str:
    """One short, clear message for a failed read."""
    what = f"{fmt} file" if fmt else "media file"
    chain = causes(e)
    if any(isinstance(c, SourceError) for c in chain):
        return f"read failed: {short(next(c for c in chain if isinstance(c, SourceError)))}"
    if any(isinstance(c, ReadLimitExceeded) for c in chain):
        return f"tags of this {what} are past the read limit"
    os_errors = [c for c in chain if isinstance(c, OSError) and c.errno is not None]
    if os_errors:
        return f"read failed: {short(os_errors[0])}"
    # mutagen reports a read past the end as a bare OSError() (no errno) or struct/EOF error
    if any(
        isinstance(c, EOFError | struct.error)
        or (isinstance(c, OSError) and c.errno is None and not str(c))
        or TRUNCATED.search(str(c))
        for c in chain
    ):
        return f"truncated {what}"
    if any(
        isinstance(c, ID3NoHeaderError | NotThisFormat) or NOT_THIS_FORMAT.search(str(c))
        for c in chain
    ):
        return f"not a recognised {what}"
    if isinstance(e, mutagen.MutagenError):
        return f"damaged {what}: {short(e)}"
    return f"damaged {what}: {type(e).__name__}: {short(e)}"


def causes(e: BaseException) -> list[BaseException]:
    """The exception and those it was raised from, innermost last."""
    chain: list[BaseException] = []
    current: BaseException | None = e
    while current is not None and current not in chain and len(chain) < 8:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain

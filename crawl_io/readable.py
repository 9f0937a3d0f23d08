"""URLs, paths and counts as people read them in text output. A URL is shown as an IRI (RFC 3987
§3.2): percent-encoded UTF-8 and IDN labels decoded, except what would break the line or
deceive (controls, line separators, bidi overrides, invisible format characters, edge spaces);
`%` stays `%25` and an in-name `/` `%2F`, so the IRI names one file. Plain text from a share
is escaped the same way with backslash escapes (`\\x1b`), since it is no URL."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from functools import partial
from urllib.parse import quote

# The zero-width (non-)joiner belong inside words (Persian, Indic scripts, emoji); every other
# format character (category Cf: bidi overrides, zero-width space, BOM...) hides or reorders.
_JOINERS = {"\u200c", "\u200d"}
_ESCAPE_RUN = re.compile(r"(?:%[0-9A-Fa-f]{2})+")
_EDGE_SPACES = re.compile(r"\A +| +\Z")
_percent = partial(quote, safe="")


def unsafe(char: str) -> bool:
    """Would `char` break the line or deceive the reader if shown as it is?"""
    category = unicodedata.category(char)
    if category in ("Cc", "Zl", "Zp", "Cs", "Co", "Cn"):
        return True
    return category == "Cf" and char not in _JOINERS


def _escape_ends(name: str, escape: Callable[[str], str]) -> str:
    """Spaces at either end of a name are invisible: escape them."""
    return _EDGE_SPACES.sub(lambda m: escape(" ") * len(m[0]), name)


def _backslash(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def readable_text(text: str | None) -> str:
    """`text` (a message, an error from a host) safe to print on one line: unsafe
    characters as backslash escapes."""
    if text is None:
        return ""
    return "".join(_backslash(c) if unsafe(c) else c for c in text)


def readable_path(path: str | None) -> str:
    """A path ('host/share/folder/name') as readable_text, and spaces at the ends of each
    name escaped too."""
    shown = readable_text(path)
    return "/".join(_escape_ends(part, _backslash) for part in shown.split("/"))


def _decoded(char: str) -> str:
    """A character of a decoded escape run as the IRI shows it."""
    if "\udc80" <= char <= "\udcff":  # a byte that is no UTF-8: keep it encoded
        return f"%{ord(char) - 0xDC00:02X}"
    return _percent(char) if char in "%/" or unsafe(char) else char


def _decode_run(run: re.Match[str]) -> str:
    raw = bytes.fromhex(run.group(0).replace("%", ""))
    return "".join(map(_decoded, raw.decode("utf-8", errors="surrogateescape")))


def _iri_segment(segment: str) -> str:
    """One path segment of a URL as an IRI segment."""
    shown = "".join(_percent(c) if unsafe(c) else c for c in _ESCAPE_RUN.sub(_decode_run, segment))
    return _escape_ends(shown, _percent)


def _iri_host(authority: str) -> str:
    """user@host:port with IDN labels (xn--...) shown in Unicode when they decode."""
    user, at, hostport = authority.rpartition("@")
    host, colon, port = hostport, "", ""
    if not hostport.startswith("[") and hostport.count(":") == 1:
        host, colon, port = hostport.partition(":")
    labels = []
    for label in host.split("."):
        if label.lower().startswith("xn--"):
            try:
                decoded = label.encode("ascii").decode("idna")
            except UnicodeError:
                decoded = label
            label = decoded if not any(unsafe(c) for c in decoded) else label
        labels.append(label)
    return f"{user}{at}{'.'.join(labels)}{colon}{port}"


def readable_url(url: str | None) -> str:
    """A percent-encoded URL as an IRI for people (see the module's docstring)."""
    if not url:
        return ""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return readable_text(url)
    authority, slash, path = rest.partition("/")
    segments = [_iri_segment(s) for s in path.split("/")] if slash else []
    host = _iri_host(authority)
    return f"{scheme}://{host}{slash}{'/'.join(segments)}"


def plural(n: int, word: str, many: str | None = None) -> str:
    """'1 partition', '2 partitions', '0 copies' (`many`: an irregular plural)."""
    return f"{n} {word if n == 1 else many or word + 's'}"


def human_bytes(size: float | None) -> str:
    """A size for people: '512 B', '23.6 KB', '3.3 MB' (binary units, as file managers)."""
    if size is None:
        return "?"
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if abs(value) < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TB"

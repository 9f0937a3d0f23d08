"""What a host says, checked: listing entries made storable (docs/DESIGN.md, Sources: a
host's listing is anyone's to shape, and no entry may fail its round), and the shares named.
`clamped` is a pure function of the entry, so an entry clamped alike each round hashes the same."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from contextlib import suppress
from datetime import UTC, datetime, timedelta

from sharecrawl.crawl_io.sources import (
    Entry,
    HostUnreachable,
    HostURL,
    NotFound,
    Source,
    SourceError,
    SourceTimeout,
)

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MIN_MTIME_US = (datetime.min.replace(tzinfo=UTC) - EPOCH) // timedelta(microseconds=1)
MAX_MTIME_US = (datetime.max.replace(tzinfo=UTC) - EPOCH) // timedelta(microseconds=1)
MAX_SIZE = 2**50  # 1 PiB: beyond any LAN disk; keeps sums of sizes far inside int64
_ODD_NAMES = frozenset(("", ".", ".."))  # no path segment of their own
# the escape character itself, '/', NUL and lone surrogates (not UTF-8)
_UNSAFE = re.compile("[\\\\/\x00\ud800-\udfff]")
_ESCAPE = re.compile(r"\\(?:\\|x[0-9a-f]{2}|u[0-9a-f]{4})")  # what safe_name writes


class ShareNotFound(SourceError):
    """A share the hosts file names is not on the host (a typo, a share renamed)."""

    reason, host_status = "share not found", "share_not_found"


def mtime_datetime(mtime_us: int) -> datetime:
    """A clamped entry's time as a datetime, exactly (a float would round year 9999 up)."""
    return EPOCH + timedelta(microseconds=mtime_us)


def _bounded(value: object, low: int, high: int) -> int:
    try:
        return min(max(int(value), low), high)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        return 0  # NaN, None, infinity: no value


def _escaped(char: str) -> str:
    code = ord(char)
    if char == "\\":
        return "\\\\"
    if code < 0x80:  # '/', NUL
        return f"\\x{code:02x}"
    if 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8, as surrogateescape holds it
        return f"\\x{code - 0xDC00:02x}"
    return f"\\u{code:04x}"  # an unpaired UTF-16 unit of an SMB name


def _unescaped(escape: re.Match[str]) -> str:
    text = escape[0]
    if text == "\\\\":
        return "\\"
    code = int(text[2:], 16)
    return chr(code if text[1] == "u" or code < 0x80 else 0xDC00 + code)


def safe_name(name: str) -> str:
    """`name` unchanged, or marked so that UTF-8 can hold it and it is one path segment; one
    stored name for one host name (docs/DESIGN.md, Sources): a backslash is doubled."""
    if name in _ODD_NAMES:
        return f"\\{name}"  # never a path segment of its own, nor an escape's result
    if _UNSAFE.search(name) is None:
        return name
    return _UNSAFE.sub(lambda m: _escaped(m[0]), name)


def name_on_host(stored: str) -> str:
    """The host's name that `safe_name` stored as `stored` (its inverse): what to open."""
    if "\\" not in stored:
        return stored
    if stored in ("\\", "\\.", "\\.."):
        return stored[1:]
    return _ESCAPE.sub(_unescaped, stored)


def stored_path(path: str) -> str:
    """A host's '/'-separated path as stored, name by name."""
    return "/".join(map(safe_name, path.split("/"))) if path else ""


def path_on_host(path: str) -> str:
    """A stored path as the host names it, name by name (stored_path's inverse)."""
    return "/".join(map(name_on_host, path.split("/"))) if "\\" in path else path


def clamped(entry: Entry) -> Entry:
    """`entry` itself when every value is storable, else a copy with them clamped or marked."""
    name, is_dir, size, mtime = entry
    try:
        if (
            type(size) is int
            and type(mtime) is int
            and type(is_dir) is bool
            and 0 <= size <= MAX_SIZE
            and MIN_MTIME_US <= mtime <= MAX_MTIME_US
            and name not in _ODD_NAMES
            and _UNSAFE.search(name) is None
        ):
            return entry
    except TypeError:
        pass
    return Entry(
        safe_name(str(name)),
        bool(is_dir),
        _bounded(size, 0, MAX_SIZE),
        _bounded(mtime, MIN_MTIME_US, MAX_MTIME_US),
    )


def storable(entries: list[Entry]) -> bool:
    """Is `clamped` the identity on every entry (is_dir typed by the source)? Column-wise, as
    it runs for every entry of the LAN each round."""
    if not entries:
        return True
    names, _, sizes, mtimes = zip(*entries, strict=True)
    try:
        joined = "\n".join(names)
        joined.encode()  # lone surrogates do not encode
        return (
            "/" not in joined
            and "\0" not in joined
            and "\\" not in joined
            and _ODD_NAMES.isdisjoint(names)
            and type(sum(sizes) + sum(mtimes)) is int  # a float, NaN, is none
            and 0 <= min(sizes)
            and max(sizes) <= MAX_SIZE
            and MIN_MTIME_US <= min(mtimes)
            and max(mtimes) <= MAX_MTIME_US
        )
    except (UnicodeEncodeError, TypeError):  # TypeError: None
        return False


class CheckedSource:
    """A source whose listings are clamped, marked names mapped back to the host's for later
    calls (`name_on_host`); `changed`: (share, path) of each entry clamped or marked
    (fetchlog.n_clamped); a share in `named` (the hosts file's) that the host lacks raises
    ShareNotFound."""

    def __init__(self, source: Source, named: Collection[str] = ()) -> None:
        self._source = source
        self._named = set(named)
        self.host: HostURL = source.host
        self.changed: set[tuple[str, str]] = set()

    def shares(self) -> list[str]:
        return sorted(map(safe_name, self._source.shares()))

    def listdir(self, share: str, path: str) -> list[Entry]:
        real_share, real_path = name_on_host(share), path_on_host(path)
        try:
            entries = self._source.listdir(real_share, real_path)
        except NotFound:
            if share in self._named:
                self._check_share(real_share, real_path)
            raise
        if storable(entries):
            return entries
        out = list(map(clamped, entries))
        prefix = f"{path}/" if path else ""
        for entry, checked in zip(entries, out, strict=True):
            if entry is not checked:
                self.changed.add((share, prefix + checked.name))
        out.sort()
        return out

    def _check_share(self, share: str, path: str) -> None:
        """Raise ShareNotFound when `share` is not on the host (`path` is not found in it)."""
        if path:
            with suppress(NotFound):
                self._source.listdir(share, "")
                return  # only the folder is gone
        try:
            have = ", ".join(map(safe_name, self._source.shares())) or "none"
        except (HostUnreachable, SourceTimeout):
            raise
        except SourceError:
            have = "they could not be listed"
        raise ShareNotFound(
            f"{self.host.host}: share {share!r} is not on the host (its shares: {have})"
        )

    @property
    def expect(self) -> Callable[[str, list[str]], None] | None:
        """The source's read-ahead (SMBSource.expect), names mapped; None: it has none."""
        expect = getattr(self._source, "expect", None)
        if expect is None:
            return None

        def ahead(share: str, paths: list[str]) -> None:
            # a share the host lacks fails its first read-ahead: its listing says so (listdir)
            with suppress(NotFound):
                expect(name_on_host(share), [path_on_host(p) for p in paths])

        return ahead

    def read(self, share: str, path: str, offset: int, length: int) -> bytes:
        return self._source.read(name_on_host(share), path_on_host(path), offset, length)

    def close(self) -> None:
        self._source.close()

"""HTTP conditional and range requests of `/copy` and `/cover` (RFC 9110 §13, §14), read from
whatever a client sends: a header that does not parse is ignored as the RFC says, never an
error."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

# entity-tag = [ "W/" ] DQUOTE *etagc DQUOTE, in a comma-separated list (RFC 9110 §8.8.3)
ETAG = re.compile(r'\s*(W/)?("[\x21\x23-\x7e\x80-\xff]*")\s*(?:,|$)')
DIGITS = re.compile(r"[0-9]+")  # ASCII only: int() also reads "²" and "٣" (and fails on some)
HUGE = 2**64  # a number longer than any file's size: what a longer one means


class Unsatisfiable(Exception):
    pass


def _tags(header: str) -> list[tuple[bool, str]] | None:
    """(weak, opaque tag) of each entity-tag of a list; None when the list does not parse."""
    found, at = [], 0
    while at < len(header):
        match = ETAG.match(header, at)
        if match is None or match.end() == at:
            return None
        found.append((bool(match[1]), match[2]))
        at = match.end()
    return found


def _date(value: str) -> datetime | None:
    """An HTTP-date (RFC 9110 §5.6.7), or None for anything else."""
    try:
        parsed = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if parsed is None:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def etag_matches(header: str, etag: str, weak: bool) -> bool:
    """Does an If-Match or If-None-Match list name `etag` (weak or strong comparison)?"""
    if header.strip() == "*":
        return True  # the copy exists: the handler found it
    tags = _tags(header)
    return tags is not None and any(t == etag and (weak or not w) for w, t in tags)


def _seconds(moment: datetime) -> datetime:
    return moment.replace(microsecond=0)


def evaluate(
    headers: Mapping[str, str], etag: str, modified: datetime, method: str = "GET"
) -> int | None:
    """304 or 412 as the preconditions of RFC 9110 §13.2.2 decide, in its order; None to go
    on. `etag` is strong ("..."), `modified` the Last-Modified time."""
    if_match = headers.get("if-match")
    if if_match is not None:
        if not etag_matches(if_match, etag, weak=False):
            return 412
    else:
        since = headers.get("if-unmodified-since")
        date = _date(since) if since is not None else None
        if date is not None and _seconds(modified) > date:
            return 412
    if_none = headers.get("if-none-match")
    if if_none is not None:
        if etag_matches(if_none, etag, weak=True):
            return 304 if method in ("GET", "HEAD") else 412
        return None
    since = headers.get("if-modified-since")
    if method in ("GET", "HEAD") and since is not None:
        date = _date(since)
        if date is not None and _seconds(modified) <= date:
            return 304
    return None


def range_applies(if_range: str | None, etag: str, last_modified: str) -> bool:
    """Is a Range header to be honoured, given If-Range (RFC 9110 §13.1.5): its entity-tag
    equal by strong comparison, or its date exactly the Last-Modified one; anything else
    (a weak tag, another date, a date that does not parse) means the whole file."""
    if if_range is None:
        return True
    value = if_range.strip()
    if value.startswith(('"', "W/")):
        return value == etag  # a weak tag never matches strongly
    date, ours = _date(value), _date(last_modified)
    return date is not None and date == ours


def _number(digits: str) -> int:
    """A range's number; past 19 digits (and Python's limit of 4,300 for int()) larger than
    any file."""
    significant = digits.lstrip("0")
    return int(significant or "0") if len(significant) <= 19 else HUGE


def parse_range(header: str, size: int) -> tuple[int, int] | None:
    """The one byte range (first, last) a Range header asks of `size` bytes (RFC 9110 §14.1.2);
    None to send the whole file (a malformed header, several ranges, another unit: §14.2);
    Unsatisfiable for 416."""
    unit, _, spec = header.partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first, dash, last = spec.strip().partition("-")
    if not dash or not (first or last):
        return None
    if (first and not DIGITS.fullmatch(first)) or (last and not DIGITS.fullmatch(last)):
        return None
    if not first:  # the last n bytes
        n = _number(last)
        if n == 0 or size == 0:
            raise Unsatisfiable
        return max(0, size - n), size - 1
    start = _number(first)
    if last and _number(last) < start:
        return None  # invalid: ignored
    if start >= size:
        raise Unsatisfiable
    return start, min(_number(last), size - 1) if last else size - 1

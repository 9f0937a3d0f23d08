"""The search query language as composable pieces joined by AND (after beets' dbcore): text
pieces give words for the postings, filter pieces a condition over the works' in-memory
columns; an unknown field is searched as text. The query text never reaches SQL."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from sharecrawl.queries import text


class QueryError(ValueError):
    """A malformed query; the message is meant for the user."""


# Index fields and their BM25F weights (tags above names); a field's bit in the postings'
# `fields` mask follows this order.
FIELD_WEIGHTS: dict[str, float] = dict(
    artist=3.0, title=3.0, album=2.0, albumartist=1.5, genre=1.5, series=3.0, folder=0.7, name=1.0
)
FIELD_BITS: dict[str, int] = {field: 1 << i for i, field in enumerate(FIELD_WEIGHTS)}
ALL_FIELDS = sum(FIELD_BITS.values())

# What a field name typed in a query searches.
TEXT_FIELDS: dict[str, int] = {
    "artist": FIELD_BITS["artist"] | FIELD_BITS["albumartist"],
    **{f: FIELD_BITS[f] for f in ("albumartist", "title", "album", "genre", "series", "name")},
    "folder": FIELD_BITS["folder"],
    "path": FIELD_BITS["folder"] | FIELD_BITS["name"],
}
NUMERIC_FIELDS = ("year", "season", "episode")
KINDS = ("audio", "video")
COPY_FIELDS = ("host", "format")  # values of a work's copies: a work has several
FIELD_NAMES = (*TEXT_FIELDS, *NUMERIC_FIELDS, "kind", *COPY_FIELDS)


class WorkColumns(Protocol):
    """In-memory columns of the works, one entry per work: numeric fields as float64 with
    NaN for NULL (so comparisons with NULL are false, as in SQL), `kind` as 1 + its index
    in KINDS (0 for any other kind); and which works have a copy with a given value."""

    def __getitem__(self, name: str) -> np.ndarray: ...

    def having(self, field: str, value: str) -> np.ndarray:
        """Per work: has it a (shown) copy whose `field` (COPY_FIELDS) is `value`, casefolded?"""
        ...


class Query:
    """One piece of a query. Text pieces yield words; filter pieces select works."""

    is_filter = False

    def words(self) -> list[tuple[tuple[str, ...], int]]:
        """Per query word: (terms it may match, mask of fields it may match in)."""
        return []

    def select(self, works: WorkColumns, rows: np.ndarray) -> np.ndarray | None:
        """Which of works `rows` pass this piece: a boolean mask, or None (all)."""
        return None


@dataclass(frozen=True)
class TextQuery(Query):
    """Words to find, in any field or in the fields of `mask`."""

    value: str
    mask: int = ALL_FIELDS

    def words(self) -> list[tuple[tuple[str, ...], int]]:
        found = [(forms, self.mask) for forms in text.query_words(self.value)]
        if not found and self.mask != ALL_FIELDS:
            return [((), self.mask)]  # a field demanded with nothing findable: no match
        return found


@dataclass(frozen=True)
class NumericQuery(Query):
    """year:1999, year:2000..2005, season:6.., episode:..3"""

    field: str
    low: int | None
    high: int | None
    is_filter = True

    @classmethod
    def parse(cls, field: str, value: str) -> NumericQuery:
        if field not in NUMERIC_FIELDS:
            raise QueryError(f"{field}: is not a numeric field")
        low_text, sep, high_text = value.partition("..")
        if not sep:
            number = cls._number(field, value)
            return cls(field, number, number)
        low = cls._number(field, low_text) if low_text else None
        high = cls._number(field, high_text) if high_text else None
        if low is None and high is None:
            raise QueryError(f"{field}: give a number or a range like {field}:2000..2005")
        if low is not None and high is not None and low > high:
            raise QueryError(
                f"{field}: the range {value} is empty (the low end comes first: "
                f"{field}:{high}..{low})"
            )
        return cls(field, low, high)

    @staticmethod
    def _number(field: str, value: str) -> int:
        if not re.fullmatch(r"\d{1,9}", value):
            raise QueryError(
                f"{field}: {value!r} is not a number (use {field}:2000 or {field}:2000..2005)"
            )
        return int(value)

    def select(self, works: WorkColumns, rows: np.ndarray) -> np.ndarray | None:
        values = works[self.field][rows]
        keep = np.ones(len(values), dtype=bool) if self.low is None else values >= self.low
        if self.high is not None:
            keep &= values <= self.high
        return keep  # NaN (NULL) compares false either way


# Episode codes as file names and people write them: S01E02, s1e2, 1x02 (not 4x4, a title).
EPISODE_CODE = re.compile(r"s(\d{1,3})e(\d{1,4})|(\d{1,2})x(\d{2,3})", re.I)


@dataclass(frozen=True)
class EpisodeQuery(Query):
    """An episode code typed as a word: season and episode, both."""

    season: int
    episode: int
    is_filter = True

    @classmethod
    def parse(cls, word: str) -> EpisodeQuery | None:
        match = EPISODE_CODE.fullmatch(word)
        if match is None:
            return None
        season, episode = (int(g) for g in match.groups() if g is not None)
        return cls(season, episode)

    def select(self, works: WorkColumns, rows: np.ndarray) -> np.ndarray | None:
        return (works["season"][rows] == self.season) & (works["episode"][rows] == self.episode)


@dataclass(frozen=True)
class KindQuery(Query):
    kind: str
    is_filter = True

    @classmethod
    def parse(cls, value: str) -> KindQuery:
        kind = value.casefold()
        if kind not in KINDS:
            raise QueryError(f"kind: {value!r} is not one of {', '.join(KINDS)}")
        return cls(kind)

    def select(self, works: WorkColumns, rows: np.ndarray) -> np.ndarray | None:
        return works["kind"][rows] == KINDS.index(self.kind) + 1


@dataclass(frozen=True)
class CopyQuery(Query):
    """host:lab-2, format:flac: works with a copy on that host or in that format (a copy
    shown: on a host online now, unless the search shows every host)."""

    field: str
    value: str
    is_filter = True

    @classmethod
    def parse(cls, field: str, value: str) -> CopyQuery:
        if not value:
            example = "flac" if field == "format" else "lab-2"
            raise QueryError(f"{field}: needs a value, e.g. {field}:{example}")
        return cls(field, value.casefold())

    def select(self, works: WorkColumns, rows: np.ndarray) -> np.ndarray | None:
        return works.having(self.field, self.value)[rows]


@dataclass(frozen=True)
class AndQuery(Query):
    """All parts must hold: every word must match, every filter must pass."""

    parts: list[Query] = field(default_factory=list)
    unknown: tuple[str, ...] = ()  # field names the language does not know (searched as text)

    def words(self) -> list[tuple[tuple[str, ...], int]]:
        return [word for part in self.parts for word in part.words()]

    def select(self, works: WorkColumns, rows: np.ndarray) -> np.ndarray | None:
        masks = [m for part in self.parts if (m := part.select(works, rows)) is not None]
        return np.logical_and.reduce(masks) if masks else None

    def has_filters(self) -> bool:
        return any(part.is_filter for part in self.parts)

    def is_empty(self) -> bool:
        """True when nothing in the query can be searched for (only punctuation)."""
        return not self.words() and not self.has_filters()

    def unknown_warning(self) -> str | None:
        """One line naming the unknown field names and the known ones, or None."""
        if not self.unknown:
            return None
        names = ", ".join(f"{name}:" for name in self.unknown)
        return f"unknown field {names} searched as text; the fields are {', '.join(FIELD_NAMES)}"


_PART_RE = re.compile(r'(?:(?P<field>[A-Za-z]+):)?(?:"(?P<quoted>[^"]*)"?|(?P<bare>\S*))')


def parse_part(field_name: str | None, value: str) -> Query:
    """One `field:value` or bare value; unknown field names are just text."""
    if field_name is None:
        return EpisodeQuery.parse(value) or TextQuery(value)
    name = field_name.casefold()
    if name in TEXT_FIELDS:
        if not value.strip():
            raise QueryError(f"{name}: needs a word to search for, e.g. {name}:madonna")
        return TextQuery(value, TEXT_FIELDS[name])
    if name in NUMERIC_FIELDS:
        return NumericQuery.parse(name, value.strip())
    if name == "kind":
        return KindQuery.parse(value.strip())
    if name in COPY_FIELDS:
        return CopyQuery.parse(name, value.strip())
    return TextQuery(f"{field_name}:{value}")


def parse_query(query: str) -> AndQuery:
    """Parse a query string into its parts; raises QueryError for malformed field values."""
    if not query or not query.strip():
        raise QueryError("empty query: give words to search for, e.g. 'madonna music'")
    parts: list[Query] = []
    unknown: list[str] = []
    for match in _PART_RE.finditer(query):
        if not match.group():  # whitespace: the pattern matches any other character
            continue
        name, quoted, bare = match.group("field", "quoted", "bare")
        value = bare if quoted is None else quoted
        if name is not None and name.casefold() not in FIELD_NAMES:
            unknown.append(name)
        parts.append(parse_part(name, value))
    return AndQuery(parts, tuple(dict.fromkeys(unknown)))

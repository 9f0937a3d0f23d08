"""The search query language, as small composable pieces (in the style of beets' dbcore).

A query string is a list of parts joined by AND:

    madonna music                 free words, matched in any field
    artist:madonna title:"frozen" words restricted to fields (quotes keep words together)
    year:2000..2005  year:1999    numeric fields: a value or a range (open ends allowed)
    season:6  episode:3..         likewise for video works
    kind:video                    audio or video

Each piece knows what it contributes: text pieces give terms to look up in the postings,
filter pieces give a SQL condition on the `works` table with its parameters, and the same
condition evaluated over in-memory columns of the works (what queries.search uses). The
query text only ever travels as parameters or values, never as SQL.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from queries import text


class QueryError(ValueError):
    """A malformed query; the message is meant for the user."""


# Index fields: bit in the postings' `fields` mask, and BM25F weight (tags above names).
FIELD_BITS: dict[str, int] = {
    "artist": 1,
    "title": 2,
    "album": 4,
    "albumartist": 8,
    "genre": 16,
    "series": 32,
    "folder": 64,
    "name": 128,
}
FIELD_WEIGHTS: dict[str, float] = {
    "artist": 3.0,
    "title": 3.0,
    "album": 2.0,
    "albumartist": 1.5,
    "genre": 1.5,
    "series": 3.0,
    "folder": 0.7,
    "name": 1.0,
}
ALL_FIELDS = sum(FIELD_BITS.values())

# What a field name typed in a query searches.
TEXT_FIELDS: dict[str, int] = {
    "artist": FIELD_BITS["artist"] | FIELD_BITS["albumartist"],
    "albumartist": FIELD_BITS["albumartist"],
    "title": FIELD_BITS["title"],
    "album": FIELD_BITS["album"],
    "genre": FIELD_BITS["genre"],
    "series": FIELD_BITS["series"],
    "name": FIELD_BITS["name"],
    "folder": FIELD_BITS["folder"],
    "path": FIELD_BITS["folder"] | FIELD_BITS["name"],
}
NUMERIC_FIELDS = ("year", "season", "episode")
KINDS = ("audio", "video")

# In-memory columns of the works, one entry per work: numeric fields as float64 with NaN for
# NULL (so comparisons with NULL are false, as in SQL), `kind` as 1 + its index in KINDS
# (0 for any other kind).
WorkColumns = Mapping[str, np.ndarray]


def kind_code(kind: str) -> int:
    """The code of `kind` in WorkColumns['kind']."""
    return KINDS.index(kind) + 1 if kind in KINDS else 0


class Query:
    """One piece of a query. Text pieces yield words; filter pieces yield SQL conditions."""

    def words(self) -> list[tuple[tuple[str, ...], int]]:
        """Per query word: (terms it may match, mask of fields it may match in)."""
        return []

    def is_empty(self) -> bool:
        return False

    def clause(self) -> tuple[str | None, list[object]]:
        """A condition on the `works` table (alias w) and its parameters, or None."""
        return None, []

    def select(self, works: WorkColumns, rows: np.ndarray) -> np.ndarray | None:
        """The same condition as clause() over works `rows`: a boolean mask, or None."""
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

    def is_empty(self) -> bool:
        return not text.query_words(self.value)


@dataclass(frozen=True)
class NumericQuery(Query):
    """year:1999, year:2000..2005, season:6.., episode:..3"""

    field: str
    low: int | None
    high: int | None

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
        return cls(field, low, high)

    @staticmethod
    def _number(field: str, value: str) -> int:
        if not re.fullmatch(r"\d{1,9}", value):
            raise QueryError(
                f"{field}: {value!r} is not a number (use {field}:2000 or {field}:2000..2005)"
            )
        return int(value)

    def clause(self) -> tuple[str | None, list[object]]:
        # The column name comes from NUMERIC_FIELDS, never from the query text.
        column = f"w.{self.field}"
        if self.low is not None and self.high is not None:
            return f"{column} BETWEEN ? AND ?", [self.low, self.high]
        if self.low is not None:
            return f"{column} >= ?", [self.low]
        return f"{column} <= ?", [self.high]

    def select(self, works: WorkColumns, rows: np.ndarray) -> np.ndarray | None:
        values = works[self.field][rows]
        keep = np.ones(len(values), dtype=bool) if self.low is None else values >= self.low
        if self.high is not None:
            keep &= values <= self.high
        return keep  # NaN (NULL) compares false either way


@dataclass(frozen=True)
class KindQuery(Query):
    kind: str

    @classmethod
    def parse(cls, value: str) -> KindQuery:
        kind = value.casefold()
        if kind not in KINDS:
            raise QueryError(f"kind: {value!r} is not one of {', '.join(KINDS)}")
        return cls(kind)

    def clause(self) -> tuple[str | None, list[object]]:
        return "w.kind = ?", [self.kind]

    def select(self, works: WorkColumns, rows: np.ndarray) -> np.ndarray | None:
        return works["kind"][rows] == kind_code(self.kind)


@dataclass(frozen=True)
class AndQuery(Query):
    """All parts must hold: every word must match, every filter must pass."""

    parts: list[Query] = field(default_factory=list)

    def words(self) -> list[tuple[tuple[str, ...], int]]:
        return [word for part in self.parts for word in part.words()]

    def clause(self) -> tuple[str | None, list[object]]:
        conditions: list[str] = []
        params: list[object] = []
        for part in self.parts:
            condition, part_params = part.clause()
            if condition:
                conditions.append(f"({condition})")
                params.extend(part_params)
        return (" AND ".join(conditions) or None), params

    def select(self, works: WorkColumns, rows: np.ndarray) -> np.ndarray | None:
        keep = None
        for part in self.parts:
            part_keep = part.select(works, rows)
            if part_keep is not None:
                keep = part_keep if keep is None else keep & part_keep
        return keep

    def has_filters(self) -> bool:
        return self.clause()[0] is not None

    def is_empty(self) -> bool:
        """True when nothing in the query can be searched for (only punctuation)."""
        return not self.words() and not self.has_filters()


_PART_RE = re.compile(r'(?:(?P<field>[A-Za-z]+):)?(?:"(?P<quoted>[^"]*)"?|(?P<bare>\S*))')


def parse_part(field_name: str | None, value: str) -> Query:
    """One `field:value` or bare value; unknown field names are just text."""
    if field_name is None:
        return TextQuery(value)
    name = field_name.casefold()
    if name in TEXT_FIELDS:
        if not value.strip():
            raise QueryError(f"{name}: needs a word to search for, e.g. {name}:madonna")
        return TextQuery(value, TEXT_FIELDS[name])
    if name in NUMERIC_FIELDS:
        return NumericQuery.parse(name, value.strip())
    if name == "kind":
        return KindQuery.parse(value.strip())
    return UnknownFieldQuery(f"{field_name}:{value}", field=field_name)


def parse_query(query: str) -> AndQuery:
    """Parse a query string into its parts; raises QueryError for malformed field values."""
    if not query or not query.strip():
        raise QueryError("empty query: give words to search for, e.g. 'madonna music'")
    parts: list[Query] = []
    position = 0
    while position < len(query):
        if query[position].isspace():
            position += 1
            continue
        match = _PART_RE.match(query, position)
        assert match is not None  # the pattern can match the empty string
        if match.end() == position:  # a lone character the pattern skipped
            position += 1
            continue
        value = match.group("quoted")
        if value is None:
            value = match.group("bare") or ""
        parts.append(parse_part(match.group("field"), value))
        position = match.end()
    return AndQuery(parts)


@dataclass(frozen=True)
class UnknownFieldQuery(TextQuery):
    """`foo:bar` where foo is no field: searched as the plain words, and named by
    unknown_fields() so that the user can be told."""

    field: str = ""


def field_names() -> list[str]:
    """Every field name a query may use, in the order help lists them."""
    return [*TEXT_FIELDS, *NUMERIC_FIELDS, "kind"]


def unknown_fields(query: str) -> list[str]:
    """The `name:` prefixes in `query` that name no field (they are searched as words)."""
    try:
        parts = parse_query(query).parts
    except QueryError:
        return []
    return list(dict.fromkeys(p.field for p in parts if isinstance(p, UnknownFieldQuery)))

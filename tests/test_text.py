"""Normalisation, transliteration, stemming and the query language."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sharecrawl.queries import text
from sharecrawl.queries.querylang import (
    ALL_FIELDS,
    FIELD_BITS,
    CopyQuery,
    KindQuery,
    NumericQuery,
    QueryError,
    TextQuery,
    parse_query,
)


class Works:
    """Four works' columns as the search holds them (querylang.WorkColumns)."""

    columns: ClassVar[dict[str, np.ndarray]] = {
        "year": np.array([1999.0, 2001.0, 2005.0, np.nan]),
        "season": np.array([np.nan, 6.0, 6.0, 2.0]),
        "episode": np.array([np.nan, 1.0, 3.0, 1.0]),
        "kind": np.array([1, 2, 2, 2]),  # audio, video, video, video
    }
    copies: ClassVar[dict[tuple[str, str], list[int]]] = {
        ("host", "lab-2"): [0, 3],
        ("format", "flac"): [0],
    }

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def having(self, field: str, value: str) -> np.ndarray:
        mask = np.zeros(4, dtype=bool)
        mask[self.copies.get((field, value), [])] = True
        return mask


def selected(query: str) -> list[int]:
    keep = parse_query(query).select(Works(), np.arange(4))
    return list(range(4)) if keep is None else np.flatnonzero(keep).tolist()


def test_words_casefold_and_split_letters_from_digits() -> None:
    assert text.words("Track01 - HELLO_World") == ["track", "01", "hello", "world"]
    assert text.words(None) == [] and text.words("") == []


def test_accents_are_stripped_and_cyrillic_transliterated() -> None:
    assert text.normalised("Beyoncé Knowles") == "beyonce knowles"
    assert text.normalised("Мадонна") == "madonna"
    assert text.normalised("Мумий Тролль") == "mumiy troll"
    assert text.normalised("Ёлка, Щука, Юла") == "elka shchuka yula"
    assert text.transliterate("жёлтый") == "zheltyy"


def test_terms_hold_surface_stem_and_loose_forms() -> None:
    assert text.terms("Songs") == ["songs", "song"]
    assert "pesn" in text.terms("Песни") and "pesn" in text.terms("песня")
    assert "holidey" in text.terms("Холидей")  # loose: kh -> h
    assert text.loose("mumiy") == text.loose("mumii") == text.loose("mumij") == "mumy"


def test_short_numbers_and_single_letters_are_not_indexed() -> None:
    assert text.terms("01 a 1999 up") == ["1999", "up"]


def test_query_words_give_the_same_terms_as_the_index() -> None:
    for word in ("Мадонна", "madonna", "Songs", "Холидей"):
        [forms] = text.query_words(word)
        assert set(forms) <= set(text.terms(word))
    assert text.query_words("мадонна")[0][0] == text.query_words("Madonna")[0][0]


@pytest.mark.parametrize(
    ("name", "generic"),
    [
        ("track01", True),
        ("01", True),
        ("Запись 3", True),
        ("CD1 Track 05", True),
        ("01 - Holiday", False),
        ("Frozen", False),
    ],
)
def test_generic_names(name: str, generic: bool) -> None:
    assert text.is_generic_name(name) is generic


@given(st.text(max_size=60))
def test_any_text_tokenises_without_error(value: str) -> None:
    for term in text.terms(value):
        assert term and term == term.strip()
    text.normalised(value)
    text.query_words(value)


@pytest.mark.parametrize(
    ("name", "joined"),
    [
        ("Spider-Man", ["spiderman"]),
        ("Jay\u2010Z \u2011 Don\u2019t", ["jayz", "dont"]),
        ("B.O.S.E. - Live", ["bose"]),
        ("the.matrix.1999", []),
        ("Ночные Снайперы - Рок-н-ролл", ["рокнролл"]),
        ("plain name 01", []),
        ("", []),
    ],
)
def test_compounds_are_joined_runs(name: str, joined: list[str]) -> None:
    assert text.compounds(name) == joined


@given(st.text(alphabet=st.sampled_from("aZé.-\u2010\u2011'\u2019 ё1_"), max_size=30))
def test_names_without_a_joiner_are_spared_the_searches(value: str) -> None:
    # what compounds finds, searched for in every name, joiner or not
    folded = text.unicodedata.normalize("NFC", value.casefold())
    runs = text._COMPOUND_RE.findall(folded) + text._INITIALS_RE.findall(folded)
    assert text.compounds(value) == [text._JOINERS_RE.sub("", run) for run in runs]


def test_parse_free_words_and_fields() -> None:
    query = parse_query('madonna artist:"Mumiy Troll" year:2000..2005 kind:Video season:6')
    assert query.parts[0] == TextQuery("madonna")
    assert query.parts[1] == TextQuery(
        "Mumiy Troll", FIELD_BITS["artist"] | FIELD_BITS["albumartist"]
    )
    assert query.parts[2] == NumericQuery("year", 2000, 2005)
    assert query.parts[3] == KindQuery("video")
    assert query.parts[4] == NumericQuery("season", 6, 6)
    assert query.words()[0] == (("madonna",), ALL_FIELDS)
    assert selected("year:2000..2005 kind:Video season:6") == [1, 2]


def test_open_ranges_and_nulls() -> None:
    assert selected("year:2000..") == [1, 2]
    assert selected("year:..1999") == [0]  # a work without a year is in no range
    assert selected("episode:..1 kind:video") == [1, 3]


def test_host_and_format_are_fields() -> None:
    query = parse_query("madonna host:LAB-2 format:FLAC")
    assert query.parts[1:] == [CopyQuery("host", "lab-2"), CopyQuery("format", "flac")]
    assert query.has_filters() and query.unknown == ()
    assert selected("host:lab-2") == [0, 3]
    assert selected("host:lab-2 format:flac") == [0]
    assert selected("host:nowhere") == []
    with pytest.raises(QueryError, match="needs a value"):
        parse_query("host:")


def test_sql_and_quotes_stay_values() -> None:
    query = parse_query("'; DROP TABLE works; -- \" \\")
    assert not query.has_filters()
    assert [forms[0] for forms, _ in query.words()] == ["drop", "table", "works"]
    unknown = parse_query("foo:bar Genre:rock bah:x foo:baz")
    assert unknown.parts[0] == TextQuery("foo:bar")
    assert unknown.unknown == ("foo", "bah")  # noted once each, in order


@pytest.mark.parametrize(
    "query",
    [
        "year:abc",
        "year:..",
        "year:1999..x",
        "year:-5",
        "kind:picture",
        "season:six",
        "artist:",
        "",
        "  ",
    ],
)
def test_malformed_queries(query: str) -> None:
    with pytest.raises(QueryError):
        parse_query(query)


def test_punctuation_only_is_an_empty_query() -> None:
    assert parse_query('" \\ ;').is_empty()
    assert not parse_query("kind:video").is_empty()
    # a field asked for with nothing findable matches nothing rather than everything
    assert parse_query('artist:"!!"').words() == [
        ((), FIELD_BITS["artist"] | FIELD_BITS["albumartist"])
    ]

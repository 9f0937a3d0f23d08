"""Search that forgives: punctuation, case and accents fold, adjacent words join, and a
word of five letters or more finds the terms one edit from it, ranked below exact matches;
unknown fields are noted, malformed queries get one clear message."""

from __future__ import annotations

from pathlib import Path

import pytest

from sharecrawl.queries.fuzzy import MAX_WORD, deletion_keys, fuzzy_word, one_edit
from sharecrawl.queries.index import build_index
from sharecrawl.queries.querylang import QueryError, parse_query
from sharecrawl.queries.search import search
from tests.test_search import media, write_version

ROWS = [
    media("alpha", "Music/BOSE/Dancing.mp3", artist="B.O.S.E.", title="Dancing"),
    media("alpha", "Video/Spider-Man (2002).mkv", title="Spider-Man", year=2002),
    media("alpha", "Music/Beyonce/Halo.mp3", artist="Beyoncé", title="Halo"),
    media("alpha", "Music/Bjork/Hyperballad.mp3", artist="Björk", title="Hyperballad"),
    media("alpha", "Music/Metallica/One.mp3", artist="Metallica", title="One"),
    media("beta", "Music/Metallica/Battery.flac", artist="Metallica", title="Battery"),
    # an exact match for the typo: it must rank above every fuzzy one
    media("beta", "Music/Metalica Tribute/Fuel.mp3", artist="Metalica", title="Fuel"),
    media("alpha", "Music/Royksopp/Eple.mp3", artist="Røyksopp", title="Eple"),
    media("alpha", "Music/Madonna/Frozen.mp3", artist="Madonna", title="Frozen"),
    media("alpha", "Music/Mumiy Troll/Utekay.mp3", artist="Мумий Тролль", title="Утекай"),
]
HOSTS = [("alpha", "smb://alpha", True), ("beta", "smb://beta", True)]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("forgiving")
    out = root / "index" / "search.duckdb"
    build_index(write_version(root, ROWS, hosts=HOSTS), out)
    return out


def titles(index: Path, query: str) -> list[str | None]:
    return [r["title"] for r in search(index, query)]


@pytest.mark.parametrize("query", ["bose", "b.o.s.e", "B.O.S.E.", "BOSE", "b.o.s.e."])
def test_initials_fold(index: Path, query: str) -> None:
    assert titles(index, query) == ["Dancing"]


@pytest.mark.parametrize("query", ["spiderman", "spider man", "spider-man", "Spider-Man"])
def test_hyphenated_names_meet_their_joined_and_split_forms(index: Path, query: str) -> None:
    assert titles(index, query) == ["Spider-Man"]


@pytest.mark.parametrize(
    ("query", "title"),
    [
        ("beyonce", "Halo"),
        ("BEYONCÉ", "Halo"),
        ("bjork", "Hyperballad"),
        ("björk", "Hyperballad"),
        ("royksopp", "Eple"),
        ("мадонна", "Frozen"),
        ("mumiy troll", "Утекай"),
    ],
)
def test_accents_and_scripts_fold(index: Path, query: str, title: str) -> None:
    assert titles(index, query) == [title]


def test_one_typo_finds_the_word_ranked_below_exact_matches(index: Path) -> None:
    # 'metalica' is itself an artist here: that exact match comes first, then the works
    # one edit away ('metallica'), each with a lower score
    results = search(index, "metalica")
    assert [r["title"] for r in results[:1]] == ["Fuel"]
    assert {r["title"] for r in results[1:]} == {"One", "Battery"}
    assert all(results[0]["score"] > r["score"] for r in results[1:])
    # a letter dropped, added, replaced or two swapped: each finds Metallica
    for typo in ("metallca", "metalllica", "metellica", "mteallica"):
        assert {"One", "Battery"} <= set(titles(index, typo)), typo
    assert titles(index, "madona") == ["Frozen"]
    assert titles(index, "madonnna") == ["Frozen"]


def test_short_words_and_two_edits_do_not_match(index: Path) -> None:
    assert titles(index, "halp") == []  # four letters: exact only
    assert titles(index, "metalicca") == ["Fuel"]  # one edit from the tribute only
    assert titles(index, "mtalicca") == []  # two edits from everything


def test_long_words_match_exactly_only(index: Path) -> None:
    """A word's deletion keys cost the square of its length: long ones get none."""
    assert fuzzy_word("m" * MAX_WORD) and not fuzzy_word("m" * (MAX_WORD + 1))
    assert titles(index, "metallica" * 50) == []
    assert titles(index, " ".join(["metallica"] * 60)) != []


def test_a_typo_with_another_exact_word_still_matches_both(index: Path) -> None:
    assert titles(index, "metallica batery") == ["Battery"]


def test_one_edit_is_exactly_one() -> None:
    assert one_edit("metalica", "metallica") and one_edit("metallica", "metalica")
    assert one_edit("metallica", "metellica") and one_edit("metallica", "mteallica")
    assert not one_edit("metallica", "metallica")
    assert not one_edit("metallica", "mtallicaa") and not one_edit("abcde", "badce")
    # two words one edit apart share a deletion key
    for a, b in [("metalica", "metallica"), ("metellica", "metallica"), ("abcde", "bacde")]:
        assert deletion_keys(a) & deletion_keys(b)


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("year:abc", "is not a number"),
        ("year:2005..1990", "range"),
        ("kind:film", "not one of"),
        ("host:", "needs a value"),
    ],
)
def test_malformed_queries_say_what_is_wrong(index: Path, query: str, message: str) -> None:
    with pytest.raises(QueryError, match=message) as caught:
        search(index, query)
    assert "\n" not in str(caught.value)


def test_unknown_fields_are_searched_as_text_and_named(index: Path) -> None:
    query = parse_query("colour:red madonna")
    assert query.unknown == ("colour",)
    warning = query.unknown_warning()
    assert warning is not None and "colour" in warning and "artist" in warning
    assert "\n" not in warning
    assert parse_query("artist:madonna").unknown_warning() is None
    assert titles(index, "bjork:hyperballad") == ["Hyperballad"]  # still text

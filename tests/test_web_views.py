"""The page model's pure parts: query editing for facets, series grouping, copy links."""

from __future__ import annotations

import pytest

from sharecrawl.queries.querylang import CopyQuery, TextQuery, parse_query
from sharecrawl.web.facets import field_value, with_field
from sharecrawl.web.pages import BadRequest, parse_params
from sharecrawl.web.views import blocks, copy_row, headline, quality


@pytest.mark.parametrize(
    ("query", "field", "value", "expected"),
    [
        ("madonna", "kind", "video", "madonna kind:video"),
        ("madonna kind:audio", "kind", "video", "madonna kind:video"),
        ("madonna KIND:audio x", "kind", None, "madonna x"),
        ('a host:"lab 3" b', "host", None, "a b"),
        ("a", "album", "Ray of Light", 'a album:"Ray of Light"'),
        ("a", "album", 'say "hi"', 'a album:"say hi"'),  # a quote cannot be inside quotes
        ("year:1990..1999 x", "year", "2000..2009", "x year:2000..2009"),
        ("nokind:audio", "kind", "video", "nokind:audio kind:video"),  # another word
    ],
)
def test_with_field_sets_replaces_and_removes(query, field, value, expected) -> None:
    assert with_field(query, field, value) == expected
    if value is not None:
        assert field_value(expected, field) == value.replace('"', "")


def test_facet_links_read_back_as_query_fields() -> None:
    """What a facet adds to the query, the query language reads as that field."""
    query = with_field(with_field("frozen", "host", "lab 3"), "format", "FLAC")
    assert query == 'frozen host:"lab 3" format:FLAC'
    assert parse_query(query).parts == [
        TextQuery("frozen"),
        CopyQuery("host", "lab 3"),
        CopyQuery("format", "flac"),
    ]


def work(work_id: int, **fields: object) -> dict:
    return {"work_id": work_id, "copies": 1, "online_copies": 1, "hosts": 1} | fields


def test_episodes_gather_under_their_series_where_the_first_stands() -> None:
    works = [
        work(1, series="Lost", season=2, episode=1, kind="video"),
        work(2, title="Frozen", artist="Madonna", kind="audio"),
        work(3, series="lost", season=1, episode=5, kind="video"),
        work(4, series="Lost", season=1, episode=2, kind="video"),
    ]
    out = blocks(works, lambda w, in_series=False: {"id": w["work_id"], "in": in_series})
    assert [b["type"] for b in out] == ["series", "work"]
    seasons = out[0]["seasons"]
    assert [s["label"] for s in seasons] == ["Season 1", "Season 2"]
    assert [[e["id"] for e in s["episodes"]] for s in seasons] == [[4, 3], [1]]
    assert all(e["in"] for s in seasons for e in s["episodes"])


def test_headlines() -> None:
    assert headline(work(1, series="Lost", season=6, episode=3, title="What Kate Does")) == (
        "S06E03 · What Kate Does",
        "Lost",
    )
    assert headline(work(1, title="Music", artist="Madonna", album="Music", year=2000)) == (
        "Music",
        "Madonna · Music · 2000",
    )
    assert quality({"format": "mkv", "resolution": 1080, "bitrate_kbps": 5000}) == "MKV · 1080p"
    assert quality({"format": "flac", "bitrate_kbps": 900}) == "FLAC · 900 kbps"


def test_copy_links_are_encoded_and_only_smb_or_file() -> None:
    hosts = {
        "nas": ("smb://guest@nas:4455", True, "NAS"),
        "odd": ("javascript:alert(1)//", True, "odd"),
    }
    row = {"host": "nas", "share": "Кино", "path": "a b/#1?.mkv", "online": True, "size": 1}
    made = copy_row(row, hosts, best=False)
    assert made["href"] == "smb://guest@nas:4455/%D0%9A%D0%B8%D0%BD%D0%BE/a%20b/%231%3F.mkv"
    assert made["iri"] == "smb://guest@nas:4455/Кино/a b/#1?.mkv"
    assert made["unc"] == "\\\\nas\\Кино\\a b\\#1?.mkv" and made["host_name"] == "NAS"
    assert copy_row(row | {"host": "odd"}, hosts, best=False)["href"] is None


@pytest.mark.parametrize(
    "params",
    [{"q": "a" * 501}, {"size": "0"}, {"size": "-1"}, {"page": "x"}, {"page": "51", "size": "20"}],
)
def test_parameters_out_of_bounds_are_refused(params) -> None:
    with pytest.raises(BadRequest):
        parse_params(params)


def test_parameters_in_bounds() -> None:
    p = parse_params({"q": "  madonna   music ", "page": "2", "size": "50", "offline": "1"})
    assert (p.q, p.page, p.size, p.offline) == ("madonna music", 2, 50, True)
    assert parse_params({"q": "x", "offline": "0"}).offline is False

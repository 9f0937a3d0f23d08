"""Search index and ranked search over a small crawldb version written as real Parquet."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sharecrawl.crawl_io import schema
from sharecrawl.crawl_io.readable import readable_url
from sharecrawl.queries.index import build_index
from sharecrawl.queries.index_store import index_version
from sharecrawl.queries.querylang import parse_query
from sharecrawl.queries.search import QueryError, _word_postings, format_results, search
from sharecrawl.queries.search_results import copy_url, episodes_gathered

NOW = datetime(2024, 5, 1, tzinfo=UTC)

HOSTS = [
    ("alpha", "smb://alpha", True),
    ("beta", "smb://beta", True),
    ("gamma", "smb://gamma", True),
    ("delta", "smb://delta", False),
    ("local", "file:///srv/lan/local", True),
]


def media(host: str, path: str, **tags: object) -> dict:
    """One media row; kind and format follow the extension unless given."""
    ext = path.rsplit(".", 1)[-1].lower()
    row = {name: None for name in schema.MEDIA.names}
    row.update(
        host=host,
        share="share",
        path=path,
        size=5_000_000,
        mtime=NOW,
        kind="video" if ext in ("mkv", "avi", "mp4") else "audio",
        format=ext,
        partition_id="p",
        tagged_at=NOW,
    )
    row.update(tags)
    return row


MEDIA_ROWS = [
    # One work, three hosts, two qualities, an ID3-tagged file with a meaningless name.
    media(
        "alpha",
        "Music/misc/song_01.mp3",
        artist="Madonna",
        title="Music",
        album="Music",
        year=2000,
        bitrate_kbps=128,
        size=4_000_000,
    ),
    media(
        "beta",
        "incoming/song_01.flac",
        artist="MADONNA",
        title="Music",
        album="Music",
        year=2000,
        bitrate_kbps=900,
        size=30_000_000,
    ),
    media(
        "gamma",
        "Music/song_01.mp3",
        artist="Madonna",
        title="Music ",
        album="Music",
        year=2000,
        bitrate_kbps=128,
        size=4_000_000,
    ),
    # Lossless copy on an offline host must not be "best" while an online copy exists.
    media(
        "delta",
        "Music/Madonna/Frozen.flac",
        artist="Madonna",
        title="Frozen",
        album="Ray of Light",
        year=1998,
        bitrate_kbps=1000,
        size=40_000_000,
    ),
    media(
        "alpha",
        "Music/Madonna/Frozen.mp3",
        artist="Madonna",
        title="Frozen",
        album="Ray of Light",
        year=1998,
        bitrate_kbps=192,
    ),
    media(
        "alpha",
        "Music/Madonna/Hung Up.mp3",
        artist="Madonna",
        title="Hung Up",
        album="Confessions on a Dance Floor",
        year=2005,
        bitrate_kbps=320,
    ),
    media(
        "beta",
        "Music/Andrew Lloyd Webber/The Music of the Night.mp3",
        artist="Andrew Lloyd Webber",
        title="The Music of the Night",
        year=1986,
    ),
    media(
        "gamma",
        "Музыка/Мумий Тролль/Владивосток 2000.mp3",
        artist="Мумий Тролль",
        title="Владивосток 2000",
        album="Морская",
        year=1997,
        bitrate_kbps=256,
    ),
    media(
        "local",
        "Музыка/Мадонна/Мадонна - Холидей.mp3",
        artist="Мадонна",
        title="Холидей",
        year=1983,
        bitrate_kbps=160,
    ),
    # Only on an offline host.
    media(
        "delta",
        "Music/Secret Band/Hidden Track.mp3",
        artist="Secret Band",
        title="Hidden Track",
        year=2010,
    ),
    # Generic untagged names: same name in two albums are two works.
    media("alpha", "Music/Album A/track01.mp3"),
    media("beta", "Backup/Album A/track01.mp3"),
    media("gamma", "Music/Album B/track01.mp3"),
    # A series: parsed fields given by the crawler, and one name left for guessit.
    media("alpha", "Video/Lost/Season 6/Lost.S06E01.720p.mkv", series="Lost", season=6, episode=1),
    media(
        "beta",
        "Video/Lost/Lost.S06E03.720p.mkv",
        series="Lost",
        season=6,
        episode=3,
        size=700_000_000,
    ),
    media(
        "gamma", "TV/Lost.S06E03.1080p.mkv", series="Lost", season=6, episode=3, size=1_400_000_000
    ),
    media("alpha", "Video/Lost/Season 6/Lost.S06E02.720p.mkv", series="Lost", season=6, episode=2),
    media("alpha", "Video/Lost/Lost.S05E10.720p.HDTV.mkv"),
    # A film named only by its file name.
    media("beta", "Films/The Matrix (1999) 1080p.mkv"),
    # Names with quotes and SQL in them are just text too.
    media(
        "alpha",
        "Music/Bobby Tables/Robert'); DROP TABLE works;--.mp3",
        artist='Bobby "Tables"',
        title="Robert'); DROP TABLE works;--",
    ),
]


def write_version(root: Path, rows: list[dict], hosts=HOSTS, name: str = "v000003") -> Path:
    version = root / "crawldb" / name
    (version / "media").mkdir(parents=True)
    (version / "files").mkdir()
    host_rows = [
        {n: None for n in schema.HOSTS.names} | {"host": h, "url": u, "online": on}
        for h, u, on in hosts
    ]
    pq.write_table(pa.Table.from_pylist(host_rows, schema.HOSTS), version / "hosts.parquet")
    pq.write_table(schema.PARTITIONS.empty_table(), version / "partitions.parquet")
    pq.write_table(schema.PREFIX_STATS.empty_table(), version / "prefix_stats.parquet")
    pq.write_table(schema.FILES.empty_table(), version / "files" / "part-0.parquet")
    half = len(rows) // 2  # two part files, as the crawler writes them
    for i, part in enumerate((rows[:half], rows[half:])):
        table = pa.Table.from_pylist(part, schema.MEDIA)
        pq.write_table(table, version / "media" / f"part-{i}.parquet")
    return version


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("crawl")
    version = write_version(root, MEDIA_ROWS)
    out = root / "index" / "search.duckdb"
    build_index(version, out)
    return out


def titles(results: list[dict]) -> list[str | None]:
    return [r["title"] for r in results]


def test_madonna_music_is_one_work_ranked_first(index: Path) -> None:
    results = search(index, "madonna music")
    first = results[0]
    assert (first["artist"].casefold(), first["title"].strip()) == ("madonna", "Music")
    assert first["copies"] == 3 and first["hosts"] == 3 and first["online_copies"] == 3
    assert first["best"]["format"] == "flac" and first["best"]["host"] == "beta"
    assert first["best"]["online"] is True
    assert first["best"]["url"] == "smb://beta/share/incoming/song_01.flac"
    assert sum(1 for r in results if r["title"] and r["title"].strip() == "Music") == 1
    assert first["score"] > results[1]["score"]
    expected_keys = {
        "rank",
        "score",
        "kind",
        "artist",
        "title",
        "album",
        "year",
        "series",
        "season",
        "episode",
        "copies",
        "hosts",
        "online_copies",
        "best",
    }
    assert expected_keys <= first.keys()
    assert {"url", "host", "path", "format", "bitrate_kbps", "size", "online"} <= set(first["best"])


def test_best_copy_prefers_online_over_quality(index: Path) -> None:
    [frozen] = search(index, "madonna frozen")
    assert frozen["copies"] == 2 and frozen["online_copies"] == 1
    assert frozen["best"]["host"] == "alpha" and frozen["best"]["format"] == "mp3"


def test_cyrillic_and_latin_meet(index: Path) -> None:
    madonna = search(index, "мадонна", limit=50)
    assert {"Music", "Frozen", "Холидей"} <= {(r["title"] or "").strip() for r in madonna}
    latin = search(index, "madonna holidey")
    assert titles(latin)[:1] == ["Холидей"]
    assert latin[0]["best"]["iri"] == (
        "file:///srv/lan/local/share/Музыка/Мадонна/Мадонна - Холидей.mp3"
    )
    assert latin[0]["best"]["url"].startswith("file:///srv/lan/local/share/%D0%9C%D1%83")
    for query in ("mumiy troll", "Мумий Тролль", "МУМИЙ тролля", "vladivostok"):
        assert titles(search(index, query))[:1] == ["Владивосток 2000"], query


def test_stems_match_other_forms(index: Path) -> None:
    assert titles(search(index, "hung ups")) == ["Hung Up"]  # english stem 'up'
    assert titles(search(index, "морской")) == ["Владивосток 2000"]  # album 'Морская'
    assert titles(search(index, "mumij")) == ["Владивосток 2000"]  # loose spelling


def test_latest_gives_the_newest_episode_first(index: Path) -> None:
    results = search(index, "lost", latest=True)
    episodes = [(r["season"], r["episode"]) for r in results if r["series"]]
    assert episodes[0] == (6, 3)
    assert episodes == sorted(episodes, reverse=True)
    assert (5, 10) in episodes  # parsed from the name by guessit
    assert results[0]["copies"] == 2 and results[0]["best"]["resolution"] == 1080
    assert results[0]["best"]["host"] == "gamma"


def test_series_and_season_fields(index: Path) -> None:
    results = search(index, "series:lost season:6")
    assert sorted(r["episode"] for r in results) == [1, 2, 3]
    assert search(index, "series:lost season:6 episode:2")[0]["episode"] == 2
    assert search(index, "series:lost season:7") == []


def test_offline_works_hidden_unless_all_hosts(index: Path) -> None:
    assert search(index, "secret band hidden") == []
    [shown] = search(index, "secret band hidden", all_hosts=True)
    assert shown["online_copies"] == 0 and shown["best"]["online"] is False
    assert "all offline" in format_results([shown])


def test_field_queries_and_year_ranges(index: Path) -> None:
    assert set(titles(search(index, "artist:madonna year:2000..2005"))) == {"Music", "Hung Up"}
    assert set(titles(search(index, "madonna year:..1999"))) == {"Frozen", "Холидей"}
    assert set(titles(search(index, "madonna year:2005.."))) == {"Hung Up"}
    assert titles(search(index, "artist:music")) == []  # 'music' is no artist
    assert "The Music of the Night" in titles(search(index, "title:music"))
    assert titles(search(index, "album:light")) == ["Frozen"]
    assert titles(search(index, 'title:"hung up"')) == ["Hung Up"]
    films = search(index, "kind:video year:1999")
    assert [(r["title"], r["year"]) for r in films] == [("The Matrix", 1999)]
    assert all(r["kind"] == "audio" for r in search(index, "kind:audio", limit=100))


def test_works_matching_every_word_come_before_partial_matches(index: Path) -> None:
    # 'xyzzy' is nowhere: the works matching the other words are still found
    assert titles(search(index, "frozen xyzzy")) == ["Frozen"]
    # but a field-restricted word is a must
    assert search(index, "frozen artist:xyzzy") == []
    # the most words matched counts among the works shown: not the hidden offline one
    assert titles(search(index, "secret band frozen")) == ["Frozen"]
    assert titles(search(index, "secret band frozen", all_hosts=True)) == ["Hidden Track"]
    # and among the works passing the filters: Frozen (1998) is filtered out here
    assert set(titles(search(index, "madonna frozen year:2000.."))) == {"Music", "Hung Up"}


def test_generic_names_group_by_folder(index: Path) -> None:
    results = search(index, "track01", limit=10)
    by_copies = sorted(r["copies"] for r in results)
    assert by_copies == [1, 2]  # Album A on two hosts; Album B is another work


@pytest.mark.parametrize(
    "query", ["year:abc", "year:..", "year:1999..x", "kind:picture", "season:six", "   ", ""]
)
def test_malformed_queries_raise_query_error(index: Path, query: str) -> None:
    with pytest.raises(QueryError):
        search(index, query)


def test_quotes_and_sql_in_a_query_are_just_text(index: Path) -> None:
    for query in (
        "'; DROP TABLE works; --",
        '"',
        "\\",
        "' OR 1=1 --",
        'artist:"\\" title:\'',
        "robert'); drop table works;--",
        "madonna \" ' \\ ;",
    ):
        search(index, query)  # no exception
    bobby = search(index, "robert'); drop table works;--")
    assert bobby and bobby[0]["artist"] == 'Bobby "Tables"'
    with duckdb.connect(str(index), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM works").fetchone()[0] > 10
    assert search(index, "madonna music")[0]["copies"] == 3


def test_index_records_its_version_and_is_replaced_atomically(tmp_path: Path) -> None:
    out = tmp_path / "index" / "search.duckdb"
    assert index_version(out) is None
    first = write_version(tmp_path, MEDIA_ROWS[:3], name="v000001")
    build_index(first, out)
    assert index_version(out) == "v000001"
    assert search(out, "madonna")[0]["copies"] == 3
    second = write_version(tmp_path, MEDIA_ROWS, name="v000002")
    build_index(second, out)
    assert index_version(out) == "v000002"
    assert search(out, "frozen")[0]["title"] == "Frozen"  # the reader saw the new file
    # no temporary file left; the arrays file beside it (queries.search_file)
    assert sorted(p.name for p in out.parent.iterdir()) == ["search.arrays", "search.duckdb"]
    with duckdb.connect(str(out), read_only=True) as con:
        tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    assert {
        "works",
        "copies",
        "terms",
        "postings",
        "term_keys",
        "strings",
        "words",
        "hosts",
        "meta",
    } == tables


def test_empty_version_gives_an_empty_index(tmp_path: Path) -> None:
    version = tmp_path / "crawldb" / "v000000"
    version.mkdir(parents=True)
    out = tmp_path / "search.duckdb"
    build_index(version, out)
    assert search(out, "anything") == []
    assert format_results([]) == "no results"


def test_missing_index_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no search index"):
        search(tmp_path / "nope.duckdb", "madonna")


def test_copy_urls() -> None:
    assert copy_url("smb://nas", "nas", "Music & Co", "a b/#1.mp3") == (
        "smb://nas/Music%20%26%20Co/a%20b/%231.mp3"
    )
    assert copy_url(None, "nas", "s", "x.mp3") == "smb://nas/s/x.mp3"
    assert copy_url("file:///srv/x/", "x", "s", "p.mp3") == "file:///srv/x/s/p.mp3"
    # hosts.url of a file:// host escapes only %XX, '?', '#': the folder is 'a#b 1'
    assert copy_url("file:///srv/a%23b 1", "x", "s", "#1.mp3") == "file:///srv/a%23b%201/s/%231.mp3"


NAMES = ["A song #1.mp3", "what?.mp3", "100%.mp3", "50%41.mp3", "Песня 2.mp3"]


def test_copy_urls_of_odd_names_round_trip(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`search --json` and the search page (web.views, the /api/search `view`) give each
    copy a percent-encoded url whose path unquotes back to the file's own."""
    from sharecrawl.web.views import copy_row
    from tests.conftest import LAN

    lan = LAN(tmp_path)
    for i, name in enumerate(NAMES):
        lan.media("pc-1", f"music/Музыка & co #2/{name}", artist="Odd", title=f"odd{i}")
    lan.write_hosts("pc-1")
    lan.crawl()
    capsys.readouterr()
    assert lan.cli("search", "--json", "--limit", "9", "artist:odd") == 0
    results = json.loads(capsys.readouterr().out)
    files = {str(p) for p in lan.host("pc-1").rglob("*.mp3")}
    assert len(results) == len(NAMES) == len(files)
    for result in results:
        best = result["best"]
        url = best["url"]
        assert url.startswith("file:///") and not set(" #?Пп") & set(url), url
        parts = urlsplit(url)
        assert parts.query == parts.fragment == ""
        assert unquote(parts.path) in files
        assert unquote(parts.path).endswith("/Музыка & co #2/" + best["path"].split("/")[-1])
        assert readable_url(url) == best["iri"] and "Музыка & co #2" in best["iri"]
        hosts = {best["host"]: (url[: url.index("/" + quote(best["share"]))], True, "nas")}
        row = {"host": best["host"], "share": best["share"], "path": best["path"]}
        web = copy_row(row | {"online": True, "size": 1}, hosts, best=True)
        assert web["href"] == url


def test_format_results_lines(index: Path) -> None:
    lines = format_results(search(index, "madonna music", limit=1)).splitlines()
    assert lines[0].startswith("  1. Madonna — Music (Music, 2000)")
    assert "3 copies on 3 hosts, 3 online" in lines[0]
    assert "flac" in lines[1] and "smb://beta/share/incoming/song_01.flac" in lines[1]


REFERENCE_SQL = """
    WITH n AS (SELECT count(*) AS n_works FROM works),
    hits AS (
        SELECT p.work_id, q.position,
               (p.weight::DOUBLE * ln(1 + (n.n_works - t.df + 0.5) / (t.df + 0.5)))::FLOAT
                   AS impact
        FROM postings p JOIN terms t USING (term_id) JOIN query_terms q ON q.term = t.term
        CROSS JOIN n
        WHERE p.work_id IN (SELECT work_id FROM works WHERE online_copies > 0)
    ),
    per_word AS (SELECT work_id, position, max(impact) AS s FROM hits GROUP BY ALL),
    scored AS (
        SELECT work_id, sum(s) + any_value(w.prior) AS score, count(*) AS matched
        FROM per_word JOIN works w USING (work_id) GROUP BY work_id
    )
    SELECT work_id, score FROM scored
    WHERE matched = (SELECT max(matched) FROM scored)
    ORDER BY score DESC, work_id LIMIT 20
"""


@pytest.mark.parametrize(
    "query", ["madonna", "madonna music", "lost", "мадонна", "track01", "music night", "up"]
)
def test_ranking_equals_bm25_sums_in_sql(index: Path, query: str) -> None:
    """The in-memory ranking gives what the definition, written in SQL, gives: the sum per
    work of each query word's best impact (weight times idf), plus the copies prior."""
    from sharecrawl.queries.text import query_words

    terms = [
        (position, term) for position, forms in enumerate(query_words(query)) for term in forms
    ]
    table = pa.table({"position": [p for p, _ in terms], "term": [t for _, t in terms]})
    with duckdb.connect(str(index), read_only=True) as con:
        con.register("query_terms", table)
        expected = con.execute(REFERENCE_SQL).fetchall()
    results = search(index, query)
    # the exact matches first; then, if they do not fill the page, works one typo away
    exact = [(r["work_id"], r["score"]) for r in results[: len(expected)]]
    assert exact == [(work_id, round(score, 4)) for work_id, score in expected]
    assert not {r["work_id"] for r in results[len(expected) :]} & {w for w, _ in expected}


def test_filters_only_lists_most_copied_first(index: Path) -> None:
    results = search(index, "kind:audio", limit=100)
    copies = [r["copies"] for r in results]
    assert copies == sorted(copies, reverse=True) and all(r["score"] == 0 for r in results)
    assert not any(r["online_copies"] == 0 for r in results)
    assert len(search(index, "kind:audio", limit=100, all_hosts=True)) == len(results) + 1


def test_a_fresh_process_searches_like_a_warm_one(index: Path) -> None:
    """The first search of a process looks its display rows up in SQL; later ones use the
    copy kept in memory: both give the same results."""
    import json
    import subprocess
    import sys

    code = (
        "import json, sys; from sharecrawl.queries.search import search; "
        "print(json.dumps(search(sys.argv[1], 'madonna', limit=5)))"
    )
    root = Path(__file__).resolve().parents[1]
    cold = subprocess.run(
        [sys.executable, "-c", code, str(index)],
        check=True,
        capture_output=True,
        text=True,
        cwd=root,
    )
    search(index, "madonna")  # make sure this process holds the display rows
    assert json.loads(cold.stdout) == search(index, "madonna", limit=5)


def test_video_names_guessed_in_a_child_process(tmp_path: Path, monkeypatch) -> None:
    import sharecrawl.queries.video_guess

    monkeypatch.setattr(sharecrawl.queries.video_guess, "GUESS_IN_BACKGROUND", 1)
    out = tmp_path / "search.duckdb"
    build_index(write_version(tmp_path, MEDIA_ROWS), out)
    episodes = [(r["season"], r["episode"]) for r in search(out, "lost", latest=True)]
    assert (5, 10) in episodes
    assert search(out, "matrix kind:video")[0]["year"] == 1999


@pytest.mark.parametrize("code", ["s06e02", "S06E02", "S6E2", "6x02", "lost s06e02"])
def test_an_episode_code_means_that_season_and_episode(index: Path, code: str) -> None:
    [result] = search(index, code)
    assert (result["series"], result["season"], result["episode"]) == ("Lost", 6, 2)


def test_an_episode_code_and_words_rank_that_episode_alone() -> None:
    parsed = parse_query("breaking bad 1x02 4x4")
    assert [type(p).__name__ for p in parsed.parts] == [
        "TextQuery",
        "TextQuery",
        "EpisodeQuery",
        "TextQuery",  # 4x4: a title, not season 4 episode 4
    ]


def test_the_terminal_lists_a_series_in_season_and_episode_order(index: Path) -> None:
    results = search(index, "lost")
    episodes = [(r["season"], r["episode"]) for r in episodes_gathered(results) if r["series"]]
    assert episodes == [(5, 10), (6, 1), (6, 2), (6, 3)]
    lines = format_results(episodes_gathered(results)).splitlines()[::2]
    assert [line.split(".")[0].strip() for line in lines] == ["1", "2", "3", "4"]


@pytest.mark.parametrize("n_works", [10, 1000])  # over every work, and sorted (few postings)
def test_a_words_terms_give_each_work_once_with_its_best_impact(n_works: int) -> None:
    found = {
        "frozen": (np.array([5, 2], np.int32), np.array([0.5, 0.25], np.float32), np.uint8([1, 1])),
        "froze": (
            np.array([2, 9], np.int32),
            np.array([0.75, 0.125], np.float32),
            np.uint8([1, 2]),
        ),
    }
    rows, impacts = _word_postings(n_works, found, ("frozen", "froze", "absent"), None)
    assert rows.tolist() == [2, 5, 9] and impacts.tolist() == [0.75, 0.5, 0.125]
    rows, impacts = _word_postings(n_works, found, ("frozen", "froze"), 1)  # field bit 1 alone
    assert rows.tolist() == [2, 5] and impacts.tolist() == [0.75, 0.5]

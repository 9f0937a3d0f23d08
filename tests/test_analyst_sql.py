"""The SQL examples of docs/analysts.md, each run with `sharecrawl sql` on a small crawl."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import LAN

DOC = Path(__file__).resolve().parents[1] / "docs" / "analysts.md"
README = DOC.parents[1] / "README.md"


def doc_queries() -> dict[str, str]:
    """Name (the `-- ` line opening a ```sql block) -> query."""
    blocks = re.findall(r"```sql\n(.*?)```", DOC.read_text(), re.S)
    return {b.splitlines()[0].removeprefix("-- ").strip(): b for b in blocks}


@pytest.fixture(scope="module")
def crawled(tmp_path_factory: pytest.TempPathFactory) -> LAN:
    """pc-1: two albums and a big media-free tree; pc-2: a copy of one album and a video."""
    lan = LAN(tmp_path_factory.mktemp("lan"))
    for i in range(3):
        for host in ("pc-1", "pc-2"):  # the same album on both hosts: a duplicate folder
            lan.media(host, f"music/Abba/Gold/{i:02d}.mp3", artist="ABBA", title=f"t{i}")
        lan.media("pc-1", f"music/Queen/Hits/{i:02d}.flac", "flac", artist="Queen")
    lan.media("pc-2", "video/clip.mp4", "mp4")
    src = lan.host("pc-1") / "music" / "src"
    for i in range(30):
        (src / f"m{i % 3}").mkdir(parents=True, exist_ok=True)
        (src / f"m{i % 3}" / f"f{i}.c").write_text("int x;\n")
    lan.write_hosts("pc-1", "pc-2")
    lan.crawl()
    return lan


@pytest.fixture
def sql(crawled: LAN, run_json: Callable[..., object]) -> Callable[[str], list[dict]]:
    queries = doc_queries()
    return lambda name: run_json(crawled, "sql", queries[name])  # type: ignore[return-value]


def test_every_block_is_named_and_tested() -> None:
    tested = {
        "largest media folders",
        "largest media subtrees",
        "hosts by media bytes",
        "formats by host",
        "duplicate folders",
        "folders without media",
        "changes by folder",
    }
    assert set(doc_queries()) == tested


def test_largest_media_folders(sql: Callable[[str], list[dict]]) -> None:
    rows = sql("largest media folders")
    folders = {(r["host"], r["share"], r["folder"]): r["n_media"] for r in rows}
    assert folders == {
        ("pc-1", "music", "Abba/Gold"): 3,
        ("pc-1", "music", "Queen/Hits"): 3,
        ("pc-2", "music", "Abba/Gold"): 3,
        ("pc-2", "video", ""): 1,
    }
    assert [r["media_bytes"] for r in rows] == sorted(
        (r["media_bytes"] for r in rows), reverse=True
    )


def test_largest_media_subtrees(sql: Callable[[str], list[dict]]) -> None:
    rows = sql("largest media subtrees")
    assert {(r["host"], r["prefix"]) for r in rows} == {
        ("pc-1", "Abba"),
        ("pc-1", "Queen"),
        ("pc-2", "Abba"),
    }
    assert all(r["n_media"] == 3 for r in rows)


def test_hosts_by_media_bytes(sql: Callable[[str], list[dict]]) -> None:
    rows = sql("hosts by media bytes")
    by_host = {r["host"]: r for r in rows}
    assert by_host["pc-1"]["n_media"] == 6 and by_host["pc-1"]["video"] == 0
    assert by_host["pc-2"]["audio"] == 3 and by_host["pc-2"]["video"] == 1
    assert all(r["online"] for r in rows)
    assert rows[0]["media_bytes"] >= rows[1]["media_bytes"]


def test_formats_by_host(sql: Callable[[str], list[dict]]) -> None:
    rows = sql("formats by host")
    assert {(r["host"], r["format"], r["n_media"]) for r in rows} == {
        ("pc-1", "mp3", 3),
        ("pc-1", "flac", 3),
        ("pc-2", "mp3", 3),
        ("pc-2", "mp4", 1),
    }


def test_duplicate_folders(sql: Callable[[str], list[dict]]) -> None:
    rows = sql("duplicate folders")
    assert rows, "the Abba album is on both hosts"
    gold = next(r for r in rows if "Abba/Gold" in str(r["copies"]))
    assert gold["n_hosts"] == 2 and gold["n_files"] == 3
    assert gold["redundant_bytes"] == gold["bytes"] > 0


def test_folders_without_media(sql: Callable[[str], list[dict]]) -> None:
    rows = sql("folders without media")
    assert rows[0]["prefix"] == "src" and rows[0]["entries"] == 33
    assert all(r["prefix"].startswith("src") for r in rows)


def test_changes_by_folder(sql: Callable[[str], list[dict]]) -> None:
    rows = sql("changes by folder")  # the first round: everything is new
    new = {(r["host"], r["prefix"]): r["n_new"] for r in rows}
    assert new[("pc-1", "src")] == 30 and new[("pc-2", "Abba")] == 3


def test_readme_queries_run(crawled: LAN, run_json: Callable[..., object]) -> None:
    """The README's examples are short forms of the ones above; each must run and find rows."""
    blocks = re.findall(r"```sql\n(.*?)```", README.read_text(), re.S)
    queries = [q for b in blocks for q in b.split(";") if q.strip(" \n")]
    assert len(queries) == 1
    for query in queries:
        assert run_json(crawled, "sql", query), query


def test_text_output_is_a_row_a_line_whatever_a_share_names_or_tags(
    lan: LAN, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file name and tags holding a newline, a tab and terminal escapes come out of
    `sql`'s text output escaped (\\x0a, \\x09, \\x1b): one line per row, tabs only between
    values, nothing a terminal would obey; `--json` keeps the values as they are."""
    name = "evil\nname\t\x1b[31m.mp3"
    tags = {"artist": "Evil\x1b]0;pwned\x07Artist", "title": "Red\tTitle\nSecond line"}
    lan.media("pc-1", f"music/{name}", **tags)
    lan.write_hosts("pc-1")
    lan.crawl()
    query = "SELECT path, artist, title FROM media"
    capsys.readouterr()
    assert lan.cli("sql", query) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "path\tartist\ttitle",
        "evil\\x0aname\\x09\\x1b[31m.mp3\tEvil\\x1b]0;pwned\\x07Artist"
        "\tRed\\x09Title\\x0aSecond line",
    ]
    assert lan.cli("sql", "--json", query) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row == {"path": name, **tags}

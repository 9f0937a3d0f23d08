"""The SQL examples of docs/analysts.md, each run with `sharecrawl sql` on a small crawl (the
history's on a crawl of three rounds), and its Python blocks, which read the tables without
sharecrawl, each run as a script beside that crawl."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
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


def doc_scripts() -> dict[str, str]:
    """Name (the `# ` line opening a ```python block) -> script."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    return {b.splitlines()[0].removeprefix("# ").strip(): b for b in blocks}


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
        *HISTORY,
    }
    assert set(doc_queries()) == tested
    assert set(doc_scripts()) == {f"the live version with {lib}" for lib in LIBRARIES}


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


HISTORY = (
    "new this week",
    "gone this month and from where",
    "media bytes by week",
    "hosts online by day",
    "busiest hosts by changes",
)
LIBRARIES = ("duckdb", "pyarrow", "polars")


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> LAN:
    """Round 1: pc-1 an album of three, pc-2 a song and a video. Round 2: pc-1 a song added and
    one retagged, pc-2's song deleted. Round 3: pc-2 switched off."""
    lan = LAN(tmp_path_factory.mktemp("history"))
    for i in range(3):
        lan.media("pc-1", f"music/Abba/{i:02d}.mp3", artist="ABBA", title=f"t{i}")
    lan.media("pc-2", "music/x.mp3", artist="Kino", title="Kukushka")
    lan.media("pc-2", "video/clip.mp4", "mp4")
    lan.write_hosts("pc-1", "pc-2")
    lan.crawl()
    lan.media("pc-1", "music/Abba/03.mp3", artist="ABBA", title="t3")
    lan.media("pc-1", "music/Abba/00.mp3", artist="ABBA", title="t0 (live)")
    (lan.host("pc-2") / "music" / "x.mp3").unlink()
    lan.crawl()
    lan.host("pc-2").rename(lan.root / "pc-2-away")
    lan.crawl()
    return lan


@pytest.fixture
def history_sql(history: LAN, run_json: Callable[..., object]) -> Callable[[str], list[dict]]:
    queries = doc_queries()
    return lambda name: run_json(history, "sql", queries[name])  # type: ignore[return-value]


def test_new_this_week(history_sql: Callable[[str], list[dict]]) -> None:
    rows = history_sql("new this week")
    assert [(r["host"], r["share"], r["path"]) for r in rows][:1] == [
        ("pc-1", "music", "Abba/03.mp3")
    ]
    assert len(rows) == 6  # the first round's five, and round 2's one


def test_gone_this_month_and_from_where(history: LAN, history_sql, run_json) -> None:
    rows = history_sql("gone this month and from where")
    [size] = run_json(
        history, "sql", "--at", "v000001", "SELECT size FROM media WHERE path = 'x.mp3'"
    )
    assert rows == [
        {
            "host": "pc-2",
            "share": "music",
            "n_deleted": 1,
            "bytes": size["size"],
            "some_paths": ["x.mp3"],
        }
    ]


def test_media_bytes_by_week(history: LAN, history_sql, run_json) -> None:
    rows = history_sql("media bytes by week")
    [now] = run_json(
        history, "sql", "SELECT count(*) AS media, sum(size) AS media_bytes FROM media"
    )
    assert rows[-1]["media"] == now["media"] == 5  # pc-2 switched off keeps its video
    assert rows[-1]["media_bytes"] == now["media_bytes"]


def test_hosts_online_by_day(history_sql: Callable[[str], list[dict]]) -> None:
    rows = history_sql("hosts online by day")  # two days, should the rounds span midnight
    assert min(r["least"] for r in rows) == 1 and max(r["most"] for r in rows) == 2
    assert {r["hosts"] for r in rows} == {2}


def test_busiest_hosts_by_changes(history_sql: Callable[[str], list[dict]]) -> None:
    rows = [tuple(r.values()) for r in history_sql("busiest hosts by changes")]
    assert rows == [("pc-1", 2, 1, 0, 1), ("pc-2", 1, 0, 1, 0)]


@pytest.mark.parametrize("library", LIBRARIES)
def test_reading_without_sharecrawl(history: LAN, library: str, run_json) -> None:
    """Each script reads the live version as docs/analysts.md shows, from the crawl's parent
    folder, in a Python that has the library (polars is a test extra: skipped without it).
    Three rounds were kept: the scripts print each host's media bytes of the live version
    (CURRENT, v000003), not the first's."""
    if importlib.util.find_spec(library) is None:
        pytest.skip(f"{library} is not installed here (setup.cfg's test extra has it)")
    script = doc_scripts()[f"the live version with {library}"]
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=history.root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert (history.crawl_dir / "crawldb" / "CURRENT").read_text().strip() == "v000003"
    by_host = "SELECT host, sum(size) AS b FROM media GROUP BY host ORDER BY host"
    live = [(r["host"], r["b"]) for r in run_json(history, "sql", by_host)]
    first = [(r["host"], r["b"]) for r in run_json(history, "sql", "--at", "v000001", by_host)]
    assert [h for h, _ in live] == ["pc-1", "pc-2"]
    for (host, b), (_, b1) in zip(live, first, strict=True):
        assert b != b1  # pc-1 gained a song and a retag, pc-2 lost one
        assert host in done.stdout and str(b) in done.stdout and str(b1) not in done.stdout

"""`sql` and `search` over a damaged crawl dir: a truncated, garbled or missing Parquet part
is left out with one line naming it while every other part and table still answers; a
damaged search index or CURRENT gets one line saying what to do, exit 1, never a traceback.
Nothing is ever written to the crawl dir."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sharecrawl.queries.views as views_module
from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir
from sharecrawl.crawl_io.schema import FILES, PARTITIONS
from sharecrawl.queries.part_damage import damages
from sharecrawl.queries.views import CrawlViews, run_sql
from tests.conftest import LAN


@pytest.fixture(scope="module")
def crawled(tmp_path_factory: pytest.TempPathFactory) -> LAN:
    """Three hosts, two rounds (two fetchlog parts), a search index."""
    lan = LAN(tmp_path_factory.mktemp("lan"))
    for host in ("pc-1", "pc-2", "pc-3"):
        for i in range(4):
            lan.media(host, f"music/{host}/{i:02d}.mp3", artist=f"Band {host}", title=f"t{i}")
    lan.write_hosts("pc-1", "pc-2", "pc-3")
    lan.crawl(rounds=2)
    return lan


@pytest.fixture
def lan(crawled: LAN, tmp_path: Path) -> LAN:
    """A copy of the crawled LAN's crawl dir, to damage."""
    copy = LAN(tmp_path)
    shutil.copytree(crawled.crawl_dir, copy.crawl_dir)
    return copy


def version(lan: LAN) -> Path:
    return lan.crawl_dir / "crawldb" / "v000002"


def snapshot(root: Path) -> dict[str, str]:
    return {
        str(p): hashlib.md5(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(root.rglob("*"))
    }


@pytest.fixture
def run(lan: LAN, capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """Run a CLI command on the damaged copy; return (status, stdout, stderr lines joined)."""

    def run_cli(*args: str) -> tuple[int, str, str]:
        before = snapshot(lan.crawl_dir)
        capsys.readouterr()
        status = lan.cli(*args)
        out, err = capsys.readouterr()
        assert "Traceback" not in err
        assert snapshot(lan.crawl_dir) == before, "a reader wrote to the crawl dir"
        return status, out, err

    return run_cli


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def garble_footer(path: Path) -> None:
    data = bytearray(path.read_bytes())
    for i in range(len(data) - 120, len(data) - 8):  # the footer's metadata, not its magic
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


def garble_pages(path: Path, column: str) -> None:
    """Flip the bytes of one column's pages; the footer stays whole."""
    meta = pq.read_metadata(path)
    data = bytearray(path.read_bytes())
    for g in range(meta.num_row_groups):
        chunk = next(
            c
            for i in range(meta.num_columns)
            if (c := meta.row_group(g).column(i)).path_in_schema == column
        )
        start = chunk.dictionary_page_offset or chunk.data_page_offset
        for i in range(start, start + chunk.total_compressed_size):
            data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("sharecrawl: warning: ")]


def hosts_of(run: Callable, table: str) -> dict[str, int]:
    status, out, err = run(
        "sql", "--json", f"SELECT host, count(*) AS n FROM {table} GROUP BY host ORDER BY host"
    )
    assert status == 0, err
    return {r["host"]: r["n"] for r in json.loads(out)}


@pytest.mark.parametrize("damage", [truncate, garble_footer, lambda p: p.write_bytes(b"")])
def test_a_damaged_part_is_left_out_and_named(lan: LAN, run: Callable, damage) -> None:
    assert hosts_of(run, "files") == {"pc-1": 5, "pc-2": 5, "pc-3": 5}
    damage(version(lan) / "files" / "pc-2.parquet")
    status, out, err = run("sql", "SELECT host, count(*) FROM files GROUP BY ALL ORDER BY 1")
    assert status == 0 and out.splitlines()[1:] == ["pc-1\t5", "pc-3\t5"]
    assert len(warnings(err)) == 1 == len(err.splitlines())
    assert "crawldb/v000002/files/pc-2.parquet" in err and "left out" in err
    status, out, err = run("sql", "SELECT count(*) FROM media")  # a query not reading files
    assert status == 0 and out.splitlines()[1:] == ["12"] and err == ""


def test_garbled_pages_are_found_by_the_query_and_left_out(lan: LAN, run: Callable) -> None:
    garble_pages(version(lan) / "media" / "pc-1.parquet", "title")
    status, out, err = run("sql", "--json", "SELECT host, title FROM media ORDER BY ALL")
    assert status == 0, err
    assert "crawldb/v000002/media/pc-1.parquet" in err and len(warnings(err)) == 1
    assert "pc-1" not in out and out.count('"pc-2"') == 4 and out.count('"pc-3"') == 4


@pytest.mark.parametrize("names_the_file", [True, False])
def test_an_error_leaves_out_only_parts_that_do_not_read(lan: LAN, names_the_file: bool) -> None:
    """DuckDB does not always name the file it failed on: then every part of the tables the
    query reads is read in full, and only those that fail are left out."""
    bad = (version(lan) / "media" / "pc-3.parquet").resolve()
    garble_pages(bad, "title")
    warned: list[str] = []
    views = CrawlViews(CrawlDir(lan.crawl_dir), 2, warned.append)
    try:
        assert bad in views.parts["media"] and not warned  # its footer is whole
        text = f'Failed to read file "{bad}": ZSTD' if names_the_file else "Variable-length int"
        assert views.leave_out(duckdb.InvalidInputException(text), frozenset({"media"}))
        assert len(warned) == 1 and "media/pc-3.parquet" in warned[0]
        assert len(views.parts["media"]) == 2 and bad not in views.parts["media"]
        assert views.con.execute("SELECT count(title) FROM media").fetchone() == (8,)
        assert not views.leave_out(duckdb.InvalidInputException(text), frozenset({"media"}))
        assert not views.leave_out(duckdb.BinderException(text), frozenset({"media"}))
    finally:
        views.close()


def test_a_deleted_table_is_an_empty_view_of_its_schema(lan: LAN, run: Callable) -> None:
    (version(lan) / "partitions.parquet").unlink()
    status, out, err = run("sql", "--json", "SELECT count(*) AS n FROM partitions")
    assert status == 0 and out.strip() == '[{"n": 0}]'
    assert "crawldb/v000002/partitions.parquet: missing" in err and len(warnings(err)) == 1
    status, out, _ = run("sql", "DESCRIBE partitions")
    assert [line.split("\t")[0] for line in out.splitlines()[1:]] == PARTITIONS.names
    assert hosts_of(run, "media") == {"pc-1": 4, "pc-2": 4, "pc-3": 4}


def test_every_part_damaged_gives_an_empty_view(lan: LAN, run: Callable) -> None:
    for part in (version(lan) / "files").glob("*.parquet"):
        truncate(part)
    status, out, err = run("sql", "DESCRIBE files")
    assert status == 0 and len(warnings(err)) == 3
    assert [line.split("\t")[0] for line in out.splitlines()[1:]] == FILES.names
    assert hosts_of(run, "files") == {}


def test_a_one_part_table_with_garbled_pages_is_empty(lan: LAN, run: Callable) -> None:
    garble_pages(version(lan) / "hosts.parquet", "host")
    status, out, err = run("sql", "SELECT host FROM hosts")
    assert status == 0 and out.splitlines() == ["host"]
    assert len(warnings(err)) == 1 and "crawldb/v000002/hosts.parquet" in err
    assert hosts_of(run, "media") == {"pc-1": 4, "pc-2": 4, "pc-3": 4}


def test_a_part_of_another_table_is_left_out(lan: LAN, run: Callable) -> None:
    shutil.copy(version(lan) / "hosts.parquet", version(lan) / "files" / "pc-9.parquet")
    status, _, err = run("sql", "SELECT count(*) FROM files")
    assert status == 0 and "files/pc-9.parquet: no column" in err
    assert hosts_of(run, "files") == {"pc-1": 5, "pc-2": 5, "pc-3": 5}


def set_manifest_size(lan: LAN, rel: str) -> None:
    """Make the version's manifest state the size part `rel` has now."""
    manifest = version(lan) / "MANIFEST.json"
    record = json.loads(manifest.read_text())
    record["parts"][rel][0] = (version(lan) / rel).stat().st_size  # an entry: [size, ...]
    manifest.write_text(json.dumps(record))


def test_parts_the_manifest_vouches_for_are_read_by_the_query_alone(
    lan: LAN, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A part listed in the manifest with the size it has is not read before the query; one
    of another size is (its footer and columns), and still answers when it reads."""
    checked: list[str] = []
    real = views_module.damages

    def spy(con: duckdb.DuckDBPyConnection, parts: list[Path], schema: pa.Schema) -> list:
        checked.extend(p.name for p in parts)
        return real(con, parts, schema)

    monkeypatch.setattr(views_module, "damages", spy)
    crawl = CrawlDir(lan.crawl_dir)
    sql = "SELECT host, count(*) FROM files GROUP BY ALL ORDER BY 1"
    assert run_sql(crawl, sql, pytest.fail)[1] == [("pc-1", 5), ("pc-2", 5), ("pc-3", 5)]
    assert checked == []
    part = version(lan) / "files" / "pc-2.parquet"
    pq.write_table(pq.read_table(part), part, compression="none")  # the same rows, resized
    assert run_sql(crawl, sql, pytest.fail)[1] == [("pc-1", 5), ("pc-2", 5), ("pc-3", 5)]
    assert checked == ["pc-2.parquet"]


def test_a_first_part_whose_footer_does_not_read(lan: LAN, run: Callable) -> None:
    """DuckDB reads the first part's footer to define the view: when that fails, every part
    is checked, and only the damaged one is left out."""
    garble_footer(version(lan) / "files" / "pc-1.parquet")  # the size the manifest says
    status, out, err = run("sql", "SELECT host, count(*) FROM files GROUP BY ALL ORDER BY 1")
    assert status == 0 and out.splitlines()[1:] == ["pc-2\t5", "pc-3\t5"]
    assert len(warnings(err)) == 1 == len(err.splitlines())
    assert "crawldb/v000002/files/pc-1.parquet: unreadable Parquet" in err


def test_a_view_bound_to_another_tables_columns_is_checked(lan: LAN, run: Callable) -> None:
    """A part the manifest vouches for that is not its table's (the manifest made to say its
    size) gives the view other columns: every part is then checked, and it is left out."""
    shutil.copy(version(lan) / "hosts.parquet", version(lan) / "files" / "pc-1.parquet")
    set_manifest_size(lan, "files/pc-1.parquet")
    status, out, err = run("sql", "SELECT host, count(*) FROM files GROUP BY ALL ORDER BY 1")
    assert status == 0 and out.splitlines()[1:] == ["pc-2\t5", "pc-3\t5"]
    assert len(warnings(err)) == 1 and "files/pc-1.parquet: no column" in err


def test_only_top_level_columns_make_a_part_of_a_table(tmp_path: Path) -> None:
    """A column nested in another (a list's element, a struct's field) named like a column
    of the table does not make a part of it; one part's columns are not another's."""
    nested = tmp_path / "nested.parquet"
    pq.write_table(
        pa.table({"tags": [["host"]], "info": [{"host": "x", "size": [1]}], "path": ["p"]}),
        nested,
    )
    flat = tmp_path / "flat.parquet"
    pq.write_table(pa.table({"host": ["x"], "size": [1]}), flat)
    wanted = pa.schema([("host", pa.string()), ("size", pa.int64())])
    with duckdb.connect() as con:
        found = damages(con, [nested, flat], wanted)
    assert found == ["no column host, size: not a part of this table", None]


def test_a_damaged_fetchlog_part_is_left_out(lan: LAN, run: Callable) -> None:
    garble_footer(lan.crawl_dir / "segments" / "r000001" / "fetchlog.parquet")
    status, out, err = run("sql", "SELECT DISTINCT round FROM fetchlog")
    assert status == 0 and out.splitlines()[1:] == ["2"]
    assert "segments/r000001/fetchlog.parquet" in err


def test_a_query_naming_a_part_does_not_get_it_left_out(lan: LAN, run: Callable) -> None:
    """An error the query makes itself, even one that names a part, is the query's."""
    part = (version(lan) / "files" / "pc-1.parquet").resolve()
    status, _, err = run("sql", f"SELECT error('Failed to read file \"{part}\"') FROM files")
    assert status == 1 and not warnings(err)
    status, _, err = run("sql", "SELECT no_such_column FROM files")
    assert status == 1 and not warnings(err)
    assert hosts_of(run, "files") == {"pc-1": 5, "pc-2": 5, "pc-3": 5}


def garble_index(path: Path) -> None:
    data = bytearray(path.read_bytes())
    for i in range(0, len(data), 97):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


INDEX_DAMAGE = {
    "garbled": garble_index,
    "truncated": lambda p: p.write_bytes(p.read_bytes()[:20_000]),
    "empty": lambda p: p.write_bytes(b""),
    "zeros": lambda p: p.write_bytes(bytes(p.stat().st_size)),
    "missing": Path.unlink,
}


@pytest.mark.parametrize("how", INDEX_DAMAGE)
def test_a_damaged_search_index(lan: LAN, run: Callable, how: str) -> None:
    assert run("search", "band")[0] == 0
    INDEX_DAMAGE[how](lan.crawl_dir / "index" / "search.duckdb")
    status, out, err = run("search", "band")
    assert status == 1 and out == "" and len(err.splitlines()) == 1
    assert err.startswith("sharecrawl: error: ") and "`sharecrawl crawl`" in err
    status, out, err = run("sql", "SELECT count(*) AS n FROM media")
    assert status == 0 and out.splitlines()[1:] == ["12"] and err == ""  # no index read
    status, out, err = run("sql", "SELECT (SELECT count(*) FROM media), count(*) FROM hosts")
    assert status == 0 and out.splitlines()[1:] == ["12\t3"] and err == ""
    status, _, err = run("sql", "SELECT count(*) FROM works")
    assert status == 1 and "works" in err
    if how != "missing":
        assert "damaged search index" in err and "`sharecrawl crawl`" in err


CURRENT_DAMAGE = {
    "empty": b"",
    "garbled": b"vXYZ\n",
    "binary": bytes(range(256)),
    "another version": b"v000009\n",
}


@pytest.mark.parametrize("how", CURRENT_DAMAGE)
@pytest.mark.parametrize("command", [("sql", "SELECT 1"), ("search", "band")])
def test_a_damaged_current(lan: LAN, run: Callable, how: str, command: tuple[str, str]) -> None:
    (lan.crawl_dir / "crawldb" / "CURRENT").write_bytes(CURRENT_DAMAGE[how])
    status, out, err = run(*command)
    assert status == 1 and out == "" and len(err.splitlines()) == 1
    assert "crawldb/CURRENT" in err
    assert f"sharecrawl check --crawl-dir {lan.crawl_dir} --repair" in err

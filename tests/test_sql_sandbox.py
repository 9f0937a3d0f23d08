"""`sharecrawl sql` as an attacker would use it: only reads over the crawl's views run.

Every statement that writes, reads a file outside the live version, loads code or changes a
setting is refused with exit 2 and one line, and leaves every file as it was (the crawl dir,
sentinel files beside it, the working directory). Each of the sandbox's layers is also tried
alone: the statement check without a connection, the locked connection without the check.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir
from sharecrawl.queries.sandbox import SQLError, SQLRefused, checked_statement
from sharecrawl.queries.views import CrawlViews
from tests.conftest import LAN

SECRET = "TOPSECRET-4f1c"


@pytest.fixture(scope="module")
def crawled(tmp_path_factory: pytest.TempPathFactory) -> LAN:
    """Two rounds over two hosts (so v000001 is an old version and v000002 is live), and
    files outside the crawl dir that hold a secret in every format DuckDB reads."""
    lan = LAN(tmp_path_factory.mktemp("lan"))
    for i in range(3):
        lan.media("pc-1", f"music/Abba/Gold/{i:02d}.mp3", artist="ABBA", title=f"t{i}")
    lan.media("pc-2", "music/Queen/01.flac", "flac", artist="Queen", title="Innuendo")
    lan.media("pc-2", "video/clip.mp4", "mp4")
    lan.write_hosts("pc-1", "pc-2")
    lan.crawl()
    lan.media("pc-2", "music/Queen/02.flac", "flac", artist="Queen", title="Headlong")
    lan.crawl()
    (lan.root / "secret.txt").write_text(f"{SECRET}\n")
    (lan.root / "secret.csv").write_text(f"word\n{SECRET}\n")
    (lan.root / "secret.json").write_text(json.dumps([{"word": SECRET}]))
    duckdb.sql(f"COPY (SELECT '{SECRET}' AS word) TO '{lan.root / 'secret.parquet'}'")
    with duckdb.connect(str(lan.root / "secret.duckdb")) as con:
        con.execute(f"CREATE TABLE s AS SELECT '{SECRET}' AS word")
    assert (lan.crawl_dir / "crawldb" / "CURRENT").read_text().strip() == "v000002"
    return lan


def snapshot(*roots: Path) -> dict[str, str]:
    """Every file under the roots with a hash of its bytes (and every folder)."""
    seen = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                seen[str(path)] = hashlib.md5(path.read_bytes()).hexdigest()
            else:
                seen[str(path)] = "dir"
    return seen


def sql_temp_dirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("sharecrawl-sql-*")}


@pytest.fixture
def run(
    crawled: LAN,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Iterator[Callable[..., tuple[int, str, str]]]:
    """Run `sharecrawl sql` (from an empty working directory) and return (status, out, err);
    after the test, no file anywhere near has changed and no temp folder is left behind."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("SHARECRAWL_SMB_PASSWORD", SECRET)  # must never reach a result
    (tmp_path / "tmp").mkdir()  # this test's own temp folder: other runs share /tmp
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # sql_temp_dirs' here
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))  # the command's
    before = snapshot(crawled.root, cwd)
    temps = sql_temp_dirs()

    def run_sql(query: str, *options: str) -> tuple[int, str, str]:
        capsys.readouterr()
        if "\x00" in query:  # no argv holds a NUL: such a statement comes on stdin
            status = crawled.cli("sql", *options, stdin=query)
        else:
            status = crawled.cli("sql", *options, "--", query)
        out, err = capsys.readouterr()
        return status, out, err

    yield run_sql
    assert snapshot(crawled.root, cwd) == before
    assert sql_temp_dirs() == temps


def fill(template: str, lan: LAN) -> str:
    live = lan.crawl_dir / "crawldb" / "v000002"
    return template.format(
        secret=lan.root / "secret.txt",
        csv=lan.root / "secret.csv",
        json=lan.root / "secret.json",
        parquet=lan.root / "secret.parquet",
        duckdb=lan.root / "secret.duckdb",
        root=lan.root,
        out=lan.root / "out.csv",
        current=lan.crawl_dir / "crawldb" / "CURRENT",
        live=live,
        old_part=lan.crawl_dir / "crawldb" / "v000001" / "files" / "pc-1.parquet",
        listing=lan.crawl_dir / "segments" / "r000002" / "listing",
        index=lan.crawl_dir / "index" / "search.duckdb",
    )


# Statements that write, read other files, load code or change settings: refused, exit 2.
REFUSED = [
    # files outside the live version, by every reader DuckDB has
    "SELECT * FROM read_text('{secret}')",
    "SELECT * FROM read_blob('{secret}')",
    "SELECT * FROM read_csv('{csv}')",
    "SELECT * FROM read_csv_auto('{csv}')",
    "SELECT * FROM read_json('{json}')",
    "SELECT * FROM read_json_objects('{json}')",
    "SELECT * FROM read_ndjson_objects('{json}')",
    "SELECT * FROM read_parquet('{parquet}')",
    "SELECT * FROM parquet_scan('{parquet}')",
    "SELECT * FROM read_parquet('{old_part}')",
    "SELECT * FROM read_parquet('{live}/../v000001/files/pc-1.parquet')",
    "SELECT * FROM read_parquet('{listing}/*.parquet')",
    "SELECT * FROM read_text('{current}')",
    "SELECT * FROM read_blob('{index}')",
    "SELECT * FROM read_text('/etc/passwd')",
    "SELECT * FROM read_text('/proc/self/environ')",
    "SELECT * FROM glob('{root}/*')",
    "SELECT * FROM glob('/etc/*')",
    "SELECT * FROM parquet_metadata('/etc/passwd')",
    "SELECT * FROM parquet_metadata('{parquet}')",
    "SELECT * FROM parquet_schema('{parquet}')",
    "SELECT * FROM parquet_file_metadata('{parquet}')",
    "SELECT * FROM parquet_kv_metadata('{parquet}')",
    "SELECT * FROM sniff_csv('{csv}')",
    "SELECT * FROM '{csv}'",
    "SELECT * FROM '{parquet}'",
    "FROM '/etc/passwd'",
    "SELECT * FROM read_duckdb('{duckdb}')",
    # writes
    "COPY (SELECT 1) TO '{out}'",
    "COPY media TO '{out}'",
    "COPY (SELECT 42) TO '{current}'",
    "COPY files FROM '{csv}'",
    "EXPORT DATABASE '{root}/export'",
    "IMPORT DATABASE '{root}'",
    "EXPLAIN ANALYZE COPY (SELECT 42) TO '{current}'",
    "EXPLAIN ANALYZE SELECT 1",
    "EXPLAIN COPY (SELECT 1) TO '{out}'",
    "ATTACH '{duckdb}' AS stolen",
    "ATTACH '{root}/new.duckdb' AS fresh",
    "DETACH search_index",
    "USE search_index",
    "CREATE TABLE t AS SELECT 1",
    "CREATE VIEW v AS SELECT 1",
    "CREATE MACRO m(x) AS x",
    "CREATE SECRET s (TYPE s3, KEY_ID 'k', SECRET 'v')",
    "INSERT INTO files SELECT * FROM files",
    "UPDATE files SET size = 0",
    "DELETE FROM files",
    "DROP VIEW files",
    "ALTER VIEW files RENAME TO f",
    "CHECKPOINT",
    "VACUUM",
    "BEGIN TRANSACTION",
    "PREPARE p AS SELECT 1",
    "EXECUTE p",
    # code and settings
    "INSTALL httpfs",
    "FORCE INSTALL httpfs",
    "LOAD httpfs",
    "LOAD '{root}/evil.duckdb_extension'",
    "SET enable_external_access = true",
    "SET lock_configuration = false",
    "RESET lock_configuration",
    "SET allowed_directories = ['/']",
    "SET temp_directory = '{root}'",
    "SET profiling_output = '{out}'",
    "SET VARIABLE p = '{secret}'",
    "PRAGMA enable_profiling",
    "PRAGMA memory_limit = '1GB'",
    "CALL checkpoint()",
    "CALL enable_logging()",
    "CALL pragma_version()",
    # more than one statement
    "SELECT 1; SELECT 2",
    "SELECT 1; COPY (SELECT 1) TO '{out}'",
    "SELECT count(*) FROM media; DROP VIEW files",
    # environment
    "SELECT getenv('SHARECRAWL_SMB_PASSWORD')",
]

# Obfuscated forms: case, comments, whitespace, nesting, built paths, hidden writes.
FUZZED = [
    "copy (select 1) to '{out}'",
    "CoPy (SeLeCt 1) tO '{out}'",
    "/* only a comment */ COPY (SELECT 1) TO '{out}'",
    "-- a comment\nCOPY (SELECT 1) TO '{out}'",
    "SELECT 1 /* ; */ ; COPY (SELECT 1) TO '{out}'",
    "SELECT 1 -- trailing\n; COPY (SELECT 1) TO '{out}'",
    "SELECT 1;;COPY (SELECT 1) TO '{out}'",
    "\t\n  COPY\n(SELECT 1)\tTO\n'{out}'  ",
    "EXPLAIN /* x */ ANALYZE COPY (SELECT 42) TO '{out}'",
    "explain\tanalyse select 1",
    "EXPLAIN (ANALYZE) SELECT 1",
    "EXPLAIN (FORMAT json, ANALYZE false) SELECT 1",
    "EXPLAIN (FORMAT ')') COPY (SELECT 1) TO '{out}'",
    'EXPLAIN ("analyze") SELECT 1',
    'EXPLAIN ("ANALYZE" true) SELECT 1',
    'explain\n( /* x */ "AnAlYzE"\t) select 1',
    'EXPLAIN (FORMAT json, "analyze" 1) SELECT 1',
    "EXPLAIN (FORMAT no_output) SELECT 1",
    "EXPLAIN SELECT * FROM read_text('{secret}')",
    "SELECT * FROM ReAd_TeXt('{secret}')",
    "SELECT * FROM \"read_text\"('{secret}')",
    "SELECT * FROM main.read_text('{secret}')",
    "SELECT * FROM system.main.read_text('{secret}')",
    "SELECT * FROM read_text($${secret}$$)",
    "SELECT * FROM read_text(['{secret}', '{csv}'])",
    "FROM read_text('{secret}') SELECT content",
    "SELECT (SELECT content FROM read_text('{secret}'))",
    "SELECT * FROM media WHERE title IN (SELECT content FROM read_text('{secret}'))",
    "SELECT * FROM media WHERE EXISTS (FROM read_text('{secret}'))",
    "SELECT * FROM media, read_text('{secret}')",
    "SELECT * FROM media JOIN read_text('{secret}') ON true",
    "WITH s AS (SELECT * FROM read_text('{secret}')) SELECT * FROM s",
    "WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s, read_text('{secret}') "
    "WHERE n < 2) SELECT * FROM s",
    "FROM media, LATERAL read_text(path)",
    "SELECT * FROM media ORDER BY (SELECT count(*) FROM read_blob('{secret}'))",
    "SELECT 1 FROM media LIMIT (SELECT count(*) FROM read_text('{secret}'))",
    "SELECT * FROM read_text(U&'\\002fetc\\002fpasswd')",
    "SELECT * FROM duckdb_logs_parsed('QueryLog')",
    "SELECT * FROM read_text('/et' || 'c/passwd')",
    "SELECT * FROM read_text(concat('{root}', '/secret', '.txt'))",
    "SELECT * FROM read_csv('{root}/*.csv')",
    "SELECT * FROM read_csv('{root}/**')",
    "SELECT * FROM glob('/**')",
    "SELECT * FROM glob('{live}/../../*')",
    'SELECT * FROM "{csv}"',
    "SELECT * FROM 'https://example.com/x.csv'",
    "DESCRIBE '{csv}'",
    "SUMMARIZE '{csv}'",
    "SHOW '{csv}'",
    "SELECT * FROM query('SELECT * FROM read_text(''{secret}'')')",
    "SELECT * FROM query_table('{csv}')",
    "WITH x AS (COPY (SELECT 1) TO '{out}') SELECT 1",
    "WITH x AS (COPY (SELECT 42) TO '{current}') SELECT * FROM media",
    "SELECT (WITH y AS (COPY (SELECT 1) TO '{out}') SELECT 1)",
    "SUMMARIZE (WITH x AS (COPY (SELECT 1) TO '{out}') SELECT 1)",
    "EXPLAIN WITH x AS (COPY (SELECT 1) TO '{out}') SELECT 1",
    "WITH x AS (INSERT INTO files SELECT * FROM files RETURNING *) SELECT * FROM x",
    "WITH x AS (DELETE FROM files RETURNING *) SELECT count(*) FROM x",
    "WITH x AS (UPDATE files SET size = 0 RETURNING *) SELECT count(*) FROM x",
    "SELECT * FROM enable_profiling(save_location := '{out}')",
    "SELECT * FROM force_checkpoint()",
    "SELECT * FROM checkpoint()",
    "SELECT * FROM arrow_scan(1, 2, 3)",
    "SELECT * FROM json_execute_serialized_sql(json_serialize_sql('SELECT 1'))",
    "SELECT json_serialize_plan('SELECT * FROM read_text(''{secret}'')')",
    "SELECT * FROM duckdb_secrets()",
    "SELECT * FROM which_secret('s3://bucket/x', 's3')",
    "SELECT write_log('x')",
    "PIVOT media ON format",
    "\u00a0COPY (SELECT 1) TO '{out}'",
    "COPY\u2003(SELECT 1) TO '{out}'",
    "SELECT\u00a0*\u00a0FROM\u00a0read_text('{secret}')",
    "SELECT 1\x00; COPY (SELECT 1) TO '{out}'",
]

# Forms DuckDB does not parse or bind: they fail (exit 1) and do nothing.
FAILING = [
    "CO\u200bPY (SELECT 1) TO '{out}'",
    "ＣＯＰＹ (SELECT 1) TO '{out}'",
    "SELECT * FROM read_/**/text('{secret}')",
    "SELECT 1 FROM (COPY (SELECT 1) TO '{out}')",
]


def assert_refused(status: int, out: str, err: str) -> None:
    assert status == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sharecrawl: sql: refused: "), err
    assert SECRET not in out + err


@pytest.mark.parametrize("template", REFUSED)
def test_statement_is_refused(crawled: LAN, run: Callable, template: str) -> None:
    assert_refused(*run(fill(template, crawled)))


@pytest.mark.parametrize("template", FUZZED)
def test_obfuscated_statement_is_refused(crawled: LAN, run: Callable, template: str) -> None:
    assert_refused(*run(fill(template, crawled)))


@pytest.mark.parametrize("template", FAILING)
def test_failing_statement_does_nothing(crawled: LAN, run: Callable, template: str) -> None:
    status, out, err = run(fill(template, crawled))
    assert status == 1 and err.startswith("sharecrawl: sql: ") and "refused" not in err
    assert SECRET not in out + err


def test_the_lists_are_long_enough() -> None:
    assert len(REFUSED) >= 40 and len(FUZZED) >= 40


@pytest.mark.parametrize("template", REFUSED + FUZZED)
def test_the_statement_check_alone_refuses(crawled: LAN, template: str) -> None:
    """Without any connection: the first layer refuses every one of them by itself."""
    with pytest.raises(SQLRefused):
        checked_statement(fill(template, crawled))


LOCK_ONLY = [  # what the lock must stop should the statement check ever let it through
    "COPY (SELECT 1) TO '{out}'",
    "COPY (SELECT 42) TO '{current}'",
    "EXPLAIN ANALYZE COPY (SELECT 42) TO '{current}'",
    "WITH x AS (COPY (SELECT 1) TO '{out}') SELECT 1",
    "EXPORT DATABASE '{root}/export'",
    "ATTACH '{duckdb}' AS stolen",
    "ATTACH '{root}/new.duckdb' AS fresh",
    "INSTALL httpfs",
    "LOAD '{root}/evil.duckdb_extension'",
    "SET enable_external_access = true",
    "SET lock_configuration = false",
    "RESET allowed_directories",
    "SET allowed_directories = ['/']",
    "SET temp_directory = '{root}'",
    "PRAGMA enable_profiling",
    "SELECT * FROM enable_profiling(save_location := '{out}')",
    "SELECT * FROM read_text('{secret}')",
    "SELECT * FROM read_blob('{current}')",
    "SELECT * FROM read_csv('{csv}')",
    "SELECT * FROM read_json('{json}')",
    "SELECT * FROM read_parquet('{parquet}')",
    "SELECT * FROM read_parquet('{old_part}')",
    "SELECT * FROM read_parquet('{live}/../v000001/files/pc-1.parquet')",
    "SELECT * FROM read_parquet('{listing}/*.parquet')",
    "SELECT * FROM '{csv}'",
    "SELECT * FROM parquet_metadata('{parquet}')",
    "SELECT * FROM glob('{root}/*')",
    "SELECT * FROM glob('{live}0/*')",  # a sibling whose name starts like the live version
    "SELECT * FROM query('SELECT * FROM read_text(''{secret}'')')",
    "SELECT * FROM duckdb_secrets()",
]


def test_the_lock_alone_refuses(crawled: LAN, tmp_path: Path, monkeypatch) -> None:
    """The statement check bypassed: DuckDB's own lock stops every one, the views work."""
    monkeypatch.chdir(tmp_path)
    before = snapshot(crawled.root, tmp_path)
    crawl = CrawlDir(crawled.crawl_dir)
    views = CrawlViews(crawl, 2, lambda line: pytest.fail(line))
    try:
        for template in LOCK_ONLY:
            with pytest.raises(duckdb.Error) as caught:
                views.con.execute(fill(template, crawled)).fetchall()
            message = str(caught.value)
            assert isinstance(caught.value, duckdb.PermissionException) or (
                "locked" in message or "disabled" in message
            ), (template, message)
        assert views.con.execute("SELECT count(*) FROM media").fetchone() == (6,)
        assert views.con.execute("SELECT count(*) FROM works").fetchone()[0] >= 4
        rounds = views.con.execute("SELECT DISTINCT round FROM fetchlog ORDER BY 1").fetchall()
        assert rounds == [(1,), (2,)]
    finally:
        views.close()
    assert snapshot(crawled.root, tmp_path) == before


def test_no_setting_holds_the_password(run: Callable) -> None:
    status, out, _ = run("SELECT name, value FROM duckdb_settings()", "--json")
    assert status == 0 and SECRET not in out
    assert {"enable_external_access": "false", "lock_configuration": "true"}.items() <= {
        r["name"]: r["value"] for r in json.loads(out)
    }.items()


ALLOWED = {
    "SELECT count(*) AS n FROM media": [{"n": 6}],
    "WITH q AS (SELECT * FROM media WHERE artist = 'Queen') SELECT count(*) AS n FROM q": [
        {"n": 2}
    ],
    "select host, count(*) as n from media group by host order by host": [
        {"host": "pc-1", "n": 3},
        {"host": "pc-2", "n": 3},
    ],
    "FROM hosts SELECT host ORDER BY host": [{"host": "pc-1"}, {"host": "pc-2"}],
    "VALUES (1, 'a')": [{"col0": 1, "col1": "a"}],
    "SELECT count(*) AS n FROM range(5)": [{"n": 5}],
    "/* a comment first */ SELECT count(*) AS n FROM files WHERE NOT is_dir": [{"n": 6}],
    "SELECT title FROM works WHERE artist = 'Queen' ORDER BY title": [
        {"title": "Headlong"},
        {"title": "Innuendo"},
    ],
}


@pytest.mark.parametrize("query", ALLOWED)
def test_read_statements_run(run: Callable, query: str) -> None:
    status, out, err = run(query, "--json")
    assert status == 0, err
    assert json.loads(out) == ALLOWED[query]


def test_describe_show_summarize_explain(run: Callable) -> None:
    status, out, _ = run("DESCRIBE media", "--json")
    assert status == 0
    assert [r["column_name"] for r in json.loads(out)][:4] == ["host", "share", "path", "size"]
    status, out, _ = run("SHOW TABLES", "--json")
    names = {r["name"] for r in json.loads(out)}
    assert {
        "files",
        "media",
        "hosts",
        "partitions",
        "prefix_stats",
        "fetchlog",
        "folders",
        "duplicate_folders",
        "works",
        "copies",
    } <= names
    status, out, _ = run("SUMMARIZE media", "--json")
    summary = {r["column_name"]: r for r in json.loads(out)}
    assert status == 0 and summary["host"]["count"] == 6
    status, out, _ = run("EXPLAIN SELECT * FROM files", "--json")
    assert status == 0 and "READ_PARQUET" in out.upper()
    status, out, _ = run("EXPLAIN (FORMAT json) SELECT count(*) FROM media", "--json")
    assert status == 0 and json.loads(out)[0]["explain_key"] == "physical_plan"
    status, out, _ = run("EXPLAIN (SELECT host FROM hosts) UNION (SELECT host FROM media)")
    assert status == 0 and "physical_plan" in out
    status, out, _ = run("EXPLAIN (\"format\" 'JSON') SELECT count(*) FROM media", "--json")
    assert status == 0 and json.loads(out)[0]["explain_key"] == "physical_plan"


ALL_VIEWS = {"files", "media", "hosts", "partitions", "prefix_stats", "fetchlog", "folders"} | {
    "duplicate_folders",
    "hints",
    "works",
    "copies",
    "changes",
    "versions",
}


@pytest.mark.parametrize(
    "query, defined",
    [
        ("SELECT count(*) FROM media", {"media"}),
        ("SELECT count(*) FROM duplicate_folders", {"duplicate_folders", "folders"}),
        ("SELECT (SELECT count(*) FROM works), count(*) FROM hosts", {"works", "copies", "hosts"}),
        ("EXPLAIN SELECT * FROM copies", {"works", "copies"}),  # the index's, together
        # a name that is not a view (a CTE, a typo, the catalog) or a table function: all
        ("WITH m AS (SELECT * FROM media) SELECT count(*) FROM m", ALL_VIEWS),
        ("SELECT count(*) FROM media, range(1)", ALL_VIEWS),
        ("SELECT count(*) FROM information_schema.tables", ALL_VIEWS),
        ("SHOW TABLES", ALL_VIEWS),
    ],
)
def test_a_query_naming_views_gets_only_those(crawled: LAN, query: str, defined: set[str]) -> None:
    """A query that names only views gets only those defined (each costs a listing of its
    parts and a footer); one naming anything else, or calling a table function such as
    duckdb_views(), gets them all."""
    statement = checked_statement(query)
    crawl = CrawlDir(crawled.crawl_dir)
    views = CrawlViews(crawl, 2, pytest.fail, statement.tables, only_reads=not statement.functions)
    try:
        names = views.con.execute(
            "SELECT view_name FROM duckdb_views() WHERE NOT internal"
        ).fetchall()
        assert {n for (n,) in names if not n.startswith("_")} == defined  # _: empty tables
        views.con.execute(statement.query).fetchall()
    finally:
        views.close()


def test_views_listed_by_a_table_function_are_all_there(run: Callable) -> None:
    status, out, err = run(
        "SELECT v.view_name FROM duckdb_views() v, hosts h WHERE NOT v.internal "
        "GROUP BY ALL ORDER BY 1",
        "--json",
    )
    assert status == 0, err
    names = {r["view_name"] for r in json.loads(out)}
    assert {n for n in names if not n.startswith("_")} == ALL_VIEWS  # _: tables registered
    status, _, err = run("SELECT count(*) FROM medias")
    assert status == 1 and "media" in err  # a typo: every view defined, DuckDB's hint


def test_a_failing_query_exits_1(run: Callable) -> None:
    status, _, err = run("SELECT no_such_column FROM media")
    assert status == 1 and "no_such_column" in err and "refused" not in err
    status, _, err = run("SELEC 1")
    assert status == 1 and err.startswith("sharecrawl: sql: ")


# --output: the CLI writes the result, whole, outside the crawl dir.

RESULT_SQL = (
    "SELECT host, path, size, [size, 1] AS pair FROM media WHERE artist = 'ABBA' ORDER BY path"
)


def expected_rows(run: Callable) -> list[dict]:
    status, out, _ = run(RESULT_SQL, "--json")
    assert status == 0
    rows = json.loads(out)
    assert len(rows) == 3
    return rows


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    path = tmp_path / "results"
    path.mkdir()
    return path


def test_output_csv(run: Callable, out_dir: Path) -> None:
    rows = expected_rows(run)
    target = out_dir / "abba.csv"
    status, out, err = run(RESULT_SQL, "--output", str(target))
    assert status == 0 and out == "" and "3 rows" in err
    table = pacsv.read_csv(target).to_pylist()
    assert [(r["host"], r["path"], r["size"]) for r in table] == [
        (r["host"], r["path"], r["size"]) for r in rows
    ]
    assert table[0]["pair"] == f"[{rows[0]['size']}, 1]"
    assert sorted(os.listdir(out_dir)) == ["abba.csv"]  # no temporary file left


def test_output_parquet(run: Callable, out_dir: Path) -> None:
    rows = expected_rows(run)
    target = out_dir / "abba.PARQUET"
    assert run(RESULT_SQL, "--output", str(target))[0] == 0
    table = pq.read_table(target).to_pylist()
    assert [r["path"] for r in table] == [r["path"] for r in rows]
    assert [r["pair"] for r in table] == [r["pair"] for r in rows]


def test_output_json_is_what_json_prints(run: Callable, out_dir: Path) -> None:
    rows = expected_rows(run)
    target = out_dir / "abba.json"
    target.write_text("an older result, replaced whole")
    assert run(RESULT_SQL, "--output", str(target))[0] == 0
    assert json.loads(target.read_text()) == rows
    assert sorted(os.listdir(out_dir)) == ["abba.json"]


@pytest.mark.parametrize(
    "name", ["abba.txt", "abba", "abba.csv.gz", "abba.duckdb", "missing/abba.csv", "."]
)
def test_output_refused(run: Callable, out_dir: Path, name: str) -> None:
    status, out, err = run(RESULT_SQL, "--output", str(out_dir / name))
    assert status == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith("sharecrawl: error: --output")
    assert os.listdir(out_dir) == []


def test_output_inside_the_crawl_dir_is_refused(crawled: LAN, run: Callable, out_dir: Path) -> None:
    crawl = crawled.crawl_dir
    for target in (crawl / "r.csv", crawl / "crawldb" / "v.json", crawl / "index" / "i.parquet"):
        status, _, err = run(RESULT_SQL, "--output", str(target))
        assert status == 2 and "inside the crawl directory" in err
    link = out_dir / "into-crawl.csv"
    link.symlink_to(crawled.crawl_dir / "result.csv")
    status, _, err = run(RESULT_SQL, "--output", str(link))
    assert status == 2 and "inside the crawl directory" in err
    link.unlink()


def test_refused_query_writes_no_output(crawled: LAN, run: Callable, out_dir: Path) -> None:
    target = out_dir / "x.csv"
    assert_refused(
        *run(fill("SELECT * FROM read_text('{secret}')", crawled), "--output", str(target))
    )
    assert not target.exists()
    status, _, _ = run("SELECT nope FROM media", "--output", str(target))
    assert status == 1 and not target.exists()


def test_one_statement_check_is_pure() -> None:
    """The check parses only: a refused statement is never run, an allowed one is returned
    as it was given, and a typo is a failure, not a refusal."""
    assert checked_statement("SELECT 1;").query.strip(" ;") == "SELECT 1"
    assert checked_statement("SELECT * FROM media m JOIN hosts USING (host)").tables == {
        "media",
        "hosts",
    }
    assert checked_statement("SELECT * FROM duckdb_views(), range(2)").functions == {
        "duckdb_views",
        "range",
    }
    with pytest.raises(SQLError) as caught:
        checked_statement("SELEC 1")
    assert not isinstance(caught.value, SQLRefused)
    with pytest.raises(SQLError, match="no SQL"):
        checked_statement("-- nothing here")

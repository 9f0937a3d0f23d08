"""DuckDB views over the live crawldb version, for analysts' SQL.

Views: files, media, hosts, partitions, prefix_stats, fetchlog (every round's), folders and
duplicate_folders (the same content on two hosts or more), works and copies (from the search
index, when it exists). Analysts' SQL is read-only: only
SELECT and EXPLAIN statements run.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

from crawl_io.crawldir import PER_HOST_TABLES, CrawlDir
from crawl_io.hints import HINTS, HintsStore
from crawl_io.schema import FETCHLOG, TABLES
from jobs.subtree_hash import duplicate_folders_sql

READ_ONLY = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}


class SQLError(ValueError):
    """The analyst's SQL was refused or failed; the message says why."""


def _quote(path: object) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def _view(con: duckdb.DuckDBPyConnection, name: str, parts: list, schema: pa.Schema) -> None:
    if parts:
        files = ", ".join(_quote(p) for p in parts)
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet([{files}])")
    else:
        con.register(f"_{name}_empty", schema.empty_table())
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM _{name}_empty")


def connect(crawl: CrawlDir) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    version = crawl.current()
    for name, schema in TABLES.items():
        if name == "fetchlog":
            parts = sorted(crawl.segments.glob("r*/fetchlog.parquet"))
            parts = [p for p in parts if int(p.parent.name[1:]) <= version]
            _view(con, name, parts, FETCHLOG)
            continue
        path = crawl.table_path(version, name)
        parts = sorted(path.glob("*.parquet")) if name in PER_HOST_TABLES else [path]
        _view(con, name, [p for p in parts if p.exists()], schema)
    con.execute(f"CREATE VIEW duplicate_folders AS {duplicate_folders_sql('folders')}")
    _view(con, "hints", HintsStore(crawl.root).readable_parts(), HINTS)  # `sharecrawl watch`
    if crawl.index.exists():
        con.execute(f"ATTACH {_quote(crawl.index)} AS search_index (READ_ONLY)")
        tables = {r[0] for r in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = 'search_index'"
        ).fetchall()}  # fmt: skip
        for name in ("works", "copies"):
            if name in tables:
                con.execute(f"CREATE VIEW {name} AS SELECT * FROM search_index.{name}")
    return con


def run_sql(crawl: CrawlDir, sql: str) -> tuple[list[str], list[tuple]]:
    """Run an analyst's read-only SQL; return column names and rows."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as e:
        raise SQLError(str(e)) from None
    if not statements:
        raise SQLError("no SQL statement given")
    for statement in statements:
        if statement.type not in READ_ONLY:
            raise SQLError(f"only SELECT queries are allowed, not {statement.type.name}")
    con = connect(crawl)
    try:
        result = None
        for statement in statements:
            result = con.execute(statement)
        assert result is not None
        columns = [d[0] for d in result.description or ()]
        return columns, result.fetchall()
    except duckdb.Error as e:
        raise SQLError(str(e)) from None
    finally:
        con.close()

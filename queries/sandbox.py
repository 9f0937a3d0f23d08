"""The analysts' SQL sandbox, three layers: the statement (one SELECT-type, or EXPLAIN without
ANALYZE); its parse tree (read nodes only, as a CTE may hide COPY or INSERT; allow-listed
table functions; no table named like a file); the connection (files limited to the version
and fetchlogs, no extensions or replacement scans, configuration locked)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import duckdb

from sharecrawl.crawl_io.crawldb.version_manifest import first_line
from sharecrawl.crawl_io.duck import cursor


class SQLError(ValueError):
    """The analyst's SQL ran and failed (a typo, a missing column); the message says why."""


class SQLRefused(SQLError):
    """The analyst's SQL is not a read over the crawl's views; the message says why."""


ALLOWED_USE = "only SELECT/WITH, EXPLAIN, DESCRIBE, SHOW and SUMMARIZE over the views run"

# Query nodes that only read: a COPY, INSERT, UPDATE or DELETE node inside a SELECT is refused.
READ_NODES = frozenset({"SELECT_NODE", "SET_OPERATION_NODE", "RECURSIVE_CTE_NODE", "CTE_NODE"})

# Table functions that compute rows or describe the catalog; all else (file readers, query(),
# scans of Python memory, what a newer DuckDB adds) is refused.
TABLE_FUNCTIONS = frozenset(
    """
    range generate_series unnest repeat repeat_row json_each json_tree histogram histogram_values
    summary pg_timezone_names icu_calendar_names duckdb_columns duckdb_constraints duckdb_databases
    duckdb_dependencies duckdb_functions duckdb_indexes duckdb_keywords duckdb_schemas
    duckdb_sequences duckdb_settings duckdb_tables duckdb_types duckdb_views pragma_table_info
    pragma_show pragma_version pragma_platform pragma_database_size pragma_storage_info
    pragma_collations
    """.split()
)

# Scalar functions that take SQL text, write somewhere or read the environment (the shell's).
SCALAR_FUNCTIONS_REFUSED = frozenset({"json_serialize_plan", "write_log", "getenv"})

_ANALYZE = ("ANALYZE", "ANALYSE")
# EXPLAIN's formats that show the plan (DuckDB's others print nothing or its internals).
EXPLAIN_FORMATS = frozenset({"text", "json", "html", "graphviz", "yaml", "mermaid"})
Token = tuple[int, str, duckdb.token_type]  # offset, text, kind


class Statement(NamedTuple):
    """An allowed statement (an EXPLAIN rebuilt), the tables, views and CTEs it names, and the
    table functions it calls."""

    query: str
    tables: frozenset[str]
    functions: frozenset[str] = frozenset()


def checked_statement(sql: str) -> Statement:
    """The one statement of `sql`, if allowed (else SQLRefused) and it parses (else SQLError)."""
    statements = _parse(sql)
    if not statements:
        raise SQLError("no SQL statement given")
    if len(statements) > 1:
        raise SQLRefused(f"{len(statements)} statements given, one at a time: {ALLOWED_USE}")
    statement = statements[0]
    query = statement.query
    if statement.type == duckdb.StatementType.EXPLAIN:
        explained, query = _explained(query)
        tables, functions = _check_read(explained)
    elif statement.type == duckdb.StatementType.SELECT:
        tables, functions = _check_read(query)
    elif statement.type == duckdb.StatementType.MULTI:  # PIVOT without IN (...) creates a type
        raise SQLRefused(f"PIVOT needs its values listed (ON col IN (...)): {ALLOWED_USE}")
    else:
        raise SQLRefused(f"{statement.type.name} statements are not allowed: {ALLOWED_USE}")
    return Statement(query, tables, functions)


def _parse(sql: str) -> list[duckdb.Statement]:
    try:
        return duckdb.extract_statements(sql)
    except duckdb.Error as e:
        raise SQLError(first_line(e)) from None


def _explained(query: str) -> tuple[str, str]:
    """(the statement an EXPLAIN shows, `EXPLAIN (FORMAT f) <statement>` to run instead): the
    analyst's options never reach DuckDB, so no spelling of ANALYZE can."""
    tokens = _tokens(query)
    if not tokens or tokens[0][1].upper() != "EXPLAIN":
        raise SQLRefused(f"an EXPLAIN that does not start with EXPLAIN: {ALLOWED_USE}")
    if len(tokens) < 2:
        raise SQLError("EXPLAIN of nothing")
    if tokens[1][1].strip('"').upper() in _ANALYZE:
        raise SQLRefused(f"EXPLAIN ANALYZE runs its statement and is not allowed: {ALLOWED_USE}")
    fmt, inner = "text", None
    if tokens[1][1].startswith("("):  # EXPLAIN (FORMAT json) stmt, or EXPLAIN (SELECT 1)
        end = _closing(tokens, 1)
        with contextlib.suppress(SQLError):  # what follows does not parse: a query's own ()
            inner = _parse(query[tokens[end][0] :]) if end < len(tokens) else None
        if inner is not None:
            fmt = _explain_format(tokens[2 : end - 1])
    if inner is None:
        inner = _parse(query[tokens[1][0] :])
    if len(inner) != 1 or inner[0].type != duckdb.StatementType.SELECT:
        kind = inner[0].type.name if len(inner) == 1 else f"{len(inner)} statements"
        raise SQLRefused(f"EXPLAIN of {kind} is not allowed: {ALLOWED_USE}")
    return inner[0].query, f"EXPLAIN (FORMAT {fmt}) {inner[0].query}"


def _closing(tokens: list[Token], i: int) -> int:
    """The index after the ')' that closes the '(' of tokens[i]."""
    depth = 0
    while i < len(tokens):
        _, text, kind = tokens[i]
        if kind == duckdb.token_type.operator:  # not a ')' inside a string
            depth += text.count("(") - text.count(")")
        i += 1
        if depth <= 0:
            break
    return i


def _explain_format(options: list[Token]) -> str:
    """The format EXPLAIN's option list names (quoted or not: "Format" 'json'), and that alone."""
    words = [text.strip("\"'").lower() for _, text, _ in options]
    if len(words) != 2 or words[0] != "format" or words[1] not in EXPLAIN_FORMATS:
        shown = " ".join(text for _, text, _ in options)
        raise SQLRefused(
            f"EXPLAIN ({shown}): the only option is FORMAT {'|'.join(sorted(EXPLAIN_FORMATS))}"
            f" (ANALYZE runs its statement): {ALLOWED_USE}"
        )
    return words[1]


def _tokens(query: str) -> list[Token]:
    """(offset, text, kind) of each token but comments, by DuckDB's own tokenizer."""
    raw = duckdb.tokenize(query)
    ends = [offset for offset, _ in raw[1:]] + [len(query)]
    return [
        (offset, query[offset:end].strip(), kind)
        for (offset, kind), end in zip(raw, ends, strict=True)
        if kind != duckdb.token_type.comment
    ]


def _check_read(query: str) -> tuple[frozenset[str], frozenset[str]]:
    """The tables a SELECT names and the table functions it calls; SQLRefused should its parse
    tree write, read files or call what it must not."""
    try:
        with cursor() as con:
            serialized = con.execute("SELECT json_serialize_sql(?::VARCHAR)", [query]).fetchone()
    except duckdb.Error as e:  # out of memory, say: a failure, not a traceback
        raise SQLError(first_line(e)) from None
    tree = json.loads(serialized[0] if serialized else "{}")
    if tree.get("error") or "statements" not in tree:
        raise SQLRefused(f"{tree.get('error_message', 'not a plain query')}: {ALLOWED_USE}")
    tables, functions = set(), set()
    for node in _dicts(tree["statements"]):
        kind = node.get("type")
        if isinstance(kind, str) and kind.endswith("_NODE") and kind not in READ_NODES:
            raise SQLRefused(
                f"{kind.removesuffix('_QUERY_NODE')} inside a query is not allowed: {ALLOWED_USE}"
            )
        if "info_type" in node:
            raise SQLRefused(f"{node['info_type']} inside a query is not allowed: {ALLOWED_USE}")
        if kind == "TABLE_FUNCTION":
            name = str(node.get("function", {}).get("function_name", "")).lower()
            if name not in TABLE_FUNCTIONS:
                raise SQLRefused(f"table function {name}() is not allowed: query the views")
            functions.add(name)
        elif "function_name" in node:
            name = str(node["function_name"]).lower()
            if name in SCALAR_FUNCTIONS_REFUSED:
                raise SQLRefused(f"function {name}() is not allowed: query the views")
        table = node.get("table_name")
        if isinstance(table, str) and any(c in table for c in "/\\:.*?"):
            raise SQLRefused(f"{table!r} names a file, not a view: query the views")
        if isinstance(table, str):
            tables.add(table.lower())
    return frozenset(tables), frozenset(functions)


def _dicts(tree: object) -> Iterator[dict]:
    stack = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


class Limits(NamedTuple):
    """What one statement may take: seconds (0: no end), DuckDB's memory_limit and
    max_temp_directory_size ('2GiB'; None: DuckDB's defaults)."""

    timeout_s: float = 0
    memory: str | None = None
    temp: str | None = None


NO_LIMITS = Limits()


def lock(
    con: duckdb.DuckDBPyConnection,
    directories: list[Path],
    paths: list[Path],
    temp_dir: Path,
    limits: Limits = NO_LIMITS,
) -> None:
    """Close `con` to every file but `directories` (and below) and `paths`, bound it by `limits`
    and lock its configuration, once the views are defined."""

    def literal(items: list[str]) -> str:
        return "[" + ", ".join(quote(i) for i in items) + "]"

    dirs = [str(d).rstrip("/") + "/" for d in directories]  # v000012/ must not allow v0000120
    sizes = [("memory_limit", limits.memory), ("max_temp_directory_size", limits.temp)]
    for setting in (
        *(f"SET {name} = {quote(size)}" for name, size in sizes if size),
        f"SET temp_directory = {quote(str(temp_dir))}",  # spills go here, not to ./.tmp
        f"SET allowed_directories = {literal(dirs)}",
        f"SET allowed_paths = {literal([str(p) for p in paths])}",
        "SET enable_external_access = false",
        "SET autoinstall_known_extensions = false",
        "SET autoload_known_extensions = false",
        "SET python_enable_replacements = false",  # no scans of the caller's variables
        "SET lock_configuration = true",
    ):
        con.execute(setting)


def quote(text: str) -> str:
    """A SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def refusal(error: duckdb.Error) -> SQLRefused | None:
    """The refusal DuckDB's lock made, if this error is one."""
    message = first_line(error)
    if isinstance(error, duckdb.PermissionException) or "configuration has been locked" in message:
        return SQLRefused(f"{message} ({ALLOWED_USE})")
    return None

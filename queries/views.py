"""DuckDB views over a kept crawldb version (the live one unless `sql --at`) for analysts' SQL,
in queries.sandbox, with the crawl's history up to it (`changes`, `versions`, `fetchlog`; the
search index's `works` and `copies` are the live version's alone). A damaged part takes no
query down: parts the manifest does not vouch for have their footers read when
the views are defined; a part that does not read is left out with one warning (a failed query
runs again without it), and a table with no readable part is an empty view of its schema."""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import duckdb
import pyarrow as pa

from sharecrawl.crawl_io.crawldb.crawldir import PER_HOST_TABLES, CrawlDir
from sharecrawl.crawl_io.crawldb.fetchlogs import fetchlog_parts
from sharecrawl.crawl_io.crawldb.hints import HINTS, HintsStore
from sharecrawl.crawl_io.crawldb.history import change_parts
from sharecrawl.crawl_io.crawldb.host_parts import table_parts
from sharecrawl.crawl_io.crawldb.versions import versions_table
from sharecrawl.crawl_io.schema import CHANGES, COLUMNS_ADDED, TABLES
from sharecrawl.jobs.subtree_hash import duplicate_folders_sql
from sharecrawl.queries.part_damage import (
    absent,
    damages,
    page_damages,
    reason,
    vouched_by_manifest,
)
from sharecrawl.queries.sandbox import (
    NO_LIMITS,
    Limits,
    SQLError,
    SQLRefused,
    checked_statement,
    lock,
    quote,
    refusal,
)

__all__ = ["CrawlViews", "SQLError", "SQLRefused", "run_sql"]

Warn = Callable[[str], None]
T = TypeVar("T")
Fetch = Callable[[duckdb.DuckDBPyConnection, str], T]
# Errors of the query itself (or of its size), never of a damaged part.
_QUERY_ERRORS = tuple(
    getattr(duckdb, f"{kind}Exception")
    for kind in "Parser Binder Catalog Conversion OutOfRange TypeMismatch NotImplemented "
    "OutOfMemory Interrupt".split()
)
_VIEW_SOURCES = {"duplicate_folders": "folders"}  # views over another view
# The crawldb's tables, its history and the hints `sharecrawl watch` keeps beside them.
VIEW_TABLES = {**TABLES, "hints": HINTS, "changes": CHANGES}
INDEX_VIEWS = frozenset({"works", "copies"})  # the search index's, when it exists
RECORDS_LOST = {"changes": "`check --repair` sets it aside: its round's changes are lost"}
COMPUTED_VIEWS = frozenset({"versions"})  # crawl_io.crawldb.versions, from the manifests
VIEW_NAMES = frozenset(VIEW_TABLES) | frozenset(_VIEW_SOURCES) | INDEX_VIEWS | COMPUTED_VIEWS


def _required(name: str) -> pa.Schema:
    """The columns every part of table `name` has (older parts lack COLUMNS_ADDED's)."""
    schema = VIEW_TABLES[name]
    added = COLUMNS_ADDED.get(name, ())
    return pa.schema([f for f in schema if f.name not in added])


def _sources(tables: frozenset[str]) -> frozenset[str]:
    """The tables whose parts a query naming `tables` reads."""
    return frozenset(_VIEW_SOURCES.get(t, t) for t in tables)


class CrawlViews:
    """The views of the live version on a sandboxed in-memory connection (its own database:
    the lock must not reach the process's shared one). Close it when done."""

    def __init__(
        self,
        crawl: CrawlDir,
        version: int,
        warn: Warn,
        reads: frozenset[str] | None = None,
        only_reads: bool = False,
        limits: Limits = NO_LIMITS,
    ) -> None:
        """`reads`: the tables and views a query reads, whose parts are checked now (None: all);
        `only_reads`: define only those (and what they are over)."""
        self.crawl = crawl
        self.warn = warn
        self.version_dir = crawl.version_dir(version).resolve()
        self.parts: dict[str, list[Path]] = {}
        self._temp = Path(tempfile.mkdtemp(prefix="sharecrawl-sql-"))
        self.con = duckdb.connect()
        # parts never change in place: footers read to check them serve every query after
        self.con.execute("SET parquet_metadata_cache = true")
        named = bool(reads and reads <= VIEW_NAMES)
        try:
            self._define(
                version,
                None if reads is None else _sources(reads),
                (reads | _sources(reads)) if only_reads and named else VIEW_NAMES,
                limits,
            )
        except BaseException:
            self.close()
            raise

    def _define(
        self,
        version: int,
        checked: frozenset[str] | None,
        defined: frozenset[str],
        limits: Limits,
    ) -> None:
        # each finished round's, up to the live version (a later round is unpublished)
        segments = self.crawl.segments.resolve()
        fetchlogs = fetchlog_parts(segments, version) if "fetchlog" in defined else []
        hints = HintsStore(self.crawl.root).parts() if "hints" in defined else []
        hints = [p.resolve() for p in hints]
        crawldb = self.crawl.crawldb
        changes = (
            [p.resolve() for p in change_parts(crawldb, version)] if "changes" in defined else []
        )
        vouched = vouched_by_manifest(self.version_dir)
        for name in [n for n in VIEW_TABLES if n in defined]:
            if name == "fetchlog":
                parts = fetchlogs
            elif name == "hints":
                parts = hints
            elif name == "changes":
                parts = changes
            elif name in PER_HOST_TABLES:
                parts = table_parts(self.version_dir, name)
            else:
                parts = [self.version_dir / f"{name}.parquet"]
            self._table(name, parts, checked is None or name in checked, vouched)
        if "duplicate_folders" in defined:
            self.con.execute(f"CREATE VIEW duplicate_folders AS {duplicate_folders_sql('folders')}")
        if "versions" in defined:
            self.con.register("_versions", versions_table(self.crawl, version, self.warn))
            self.con.execute("CREATE VIEW versions AS SELECT * FROM _versions")
        if defined & INDEX_VIEWS and version == self.crawl.current():  # the live one's
            self._attach_index()
        lock(self.con, [self.version_dir], fetchlogs + hints + changes, self._temp, limits)

    def _table(
        self, name: str, parts: list[Path], check: bool, vouched: Callable[[Path], bool]
    ) -> None:
        """Define the view of table `name` over those of `parts` that read: checked, the footers
        of parts the manifest does not vouch for (all, should DuckDB fail); else, existence."""
        schema = _required(name)
        if check:
            suspects = [p for p in parts if not vouched(p)]
            why = dict(zip(suspects, damages(self.con, suspects, schema), strict=True))
        else:
            why = {p: "missing" for p in parts if not p.exists()}
        self.parts[name] = [p for p in parts if why.get(p) is None]
        try:
            self._create(name, self.parts[name])
            whole = not check or absent(self._columns(name), schema) is None
        except duckdb.Error:
            whole = False
        if not whole:
            kept = self.parts[name]
            why.update(zip(kept, damages(self.con, kept, schema), strict=True))
            self.parts[name] = [p for p in parts if why.get(p) is None]
        for part in parts:
            if why.get(part) is not None:
                self._report(name, part, why[part])
        if not whole:
            self._view(name)

    def _columns(self, name: str) -> set[str]:
        """The columns of view `name` from the catalog (binding it again would cost more)."""
        found = self.con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE database_name = "
            "current_database() AND schema_name = 'main' AND table_name = ?",
            [name],
        ).fetchall()
        return {column for (column,) in found}

    def _view(self, name: str) -> None:
        """(Re)define view `name` over its parts, else (said once) an empty view."""
        try:
            self._create(name, self.parts[name])
        except duckdb.Error as e:
            self.warn(
                f"{name}: its parts do not read ({reason(e)}); the view is empty "
                "(`sharecrawl check` lists every problem)"
            )
            self.parts[name] = []
            self._create(name, [])

    def _create(self, name: str, parts: list[Path]) -> None:
        added = COLUMNS_ADDED.get(name, ())
        if parts:  # parts with and without the columns added later: matched by name
            files = ", ".join(quote(str(p)) for p in parts)
            source = f"read_parquet([{files}]{', union_by_name = true' if added else ''})"
        else:  # no readable part: an empty view with the table's columns
            self.con.register(f"_{name}_empty", VIEW_TABLES[name].empty_table())
            source = f"_{name}_empty"
        self.con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM {source}")
        missing = [c for c in added if parts and c not in self._columns(name)]
        if missing:  # no part has them yet: nulls
            fields = [VIEW_TABLES[name].field(c) for c in missing]
            self.con.register(
                f"_{name}_added", pa.table([pa.nulls(1, f.type) for f in fields], pa.schema(fields))
            )
            self.con.execute(
                f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM {source}, _{name}_added"
            )

    def _report(self, name: str, part: Path, why: str) -> None:
        root = self.crawl.root.resolve()
        shown = part.relative_to(root) if part.is_relative_to(root) else part
        # a history part is written once, by its round: no later round writes it again
        after = RECORDS_LOST.get(name, "the next round re-reads what it held")
        self.warn(
            f"{shown}: {why}; left out of the views (`sharecrawl check` lists every "
            f"problem, {after})"
        )

    def _attach_index(self) -> None:
        index = self.crawl.index
        if not index.exists():
            return
        try:
            self.con.execute(f"ATTACH {quote(str(index.resolve()))} AS search_index (READ_ONLY)")
            found = self.con.execute(
                "SELECT table_name FROM duckdb_tables() WHERE database_name = 'search_index'"
            ).fetchall()
            for name in sorted(INDEX_VIEWS & {table for (table,) in found}):
                self.con.execute(f"SELECT * FROM search_index.{name} LIMIT 0")
                self.con.execute(f"CREATE VIEW {name} AS SELECT * FROM search_index.{name}")
        except duckdb.Error as e:
            self.warn(
                f"{index}: damaged search index ({reason(e)}); works "
                "and copies are left out until the next round rebuilds it "
                "(`sharecrawl crawl`)"
            )

    def leave_out(self, error: duckdb.Error, tables: frozenset[str]) -> bool:
        """Leave out (saying so) the parts whose pages do not read, of those `error` names, else
        of every part the query reads, unless the error is the query's; True if any was."""
        if isinstance(error, _QUERY_ERRORS):
            return False
        message = str(error)
        named = {n: [p for p in parts if str(p) in message] for n, parts in self.parts.items()}
        if not any(named.values()):
            read = _sources(tables) & set(self.parts)
            named = {n: list(self.parts[n]) for n in (read or self.parts)}
        left_out = False
        for name, suspects in named.items():
            damaged = [
                (p, why)
                for p, why in zip(suspects, page_damages(suspects), strict=True)
                if why is not None
            ]
            for part, why in damaged:
                self.parts[name].remove(part)
                self._report(name, part, why)
            if damaged:
                self._view(name)
                left_out = True
        return left_out

    def close(self) -> None:
        self.con.close()
        shutil.rmtree(self._temp, ignore_errors=True)


def query(
    crawl: CrawlDir, version: int, sql: str, fetch: Fetch[T], warn: Warn, limits: Limits = NO_LIMITS
) -> T:
    """Run an analyst's SQL in the sandbox, returning `fetch(connection, checked statement)`.
    Raises SQLRefused for what the sandbox does not run, SQLError for a failure or `limits`."""
    statement = checked_statement(sql)  # refused before a view is defined
    if statement.tables & INDEX_VIEWS and version != crawl.current():
        raise SQLRefused(
            "works and copies are the live version's search index: over an older version "
            "(sql --at) query media and files"
        )
    try:
        views = CrawlViews(crawl, version, warn, statement.tables, not statement.functions, limits)
    except (duckdb.Error, OSError) as e:  # a folder it may not read, say
        raise SQLError(f"cannot read the crawl's tables: {reason(e)}") from None
    # DuckDB has no statement timeout: a timer interrupts the connection (public API)
    timer = threading.Timer(limits.timeout_s, views.con.interrupt)
    if limits.timeout_s:
        timer.start()
    try:
        while True:
            try:
                return fetch(views.con, statement.query)
            except duckdb.Error as e:
                refused = refusal(e)
                if refused is not None:
                    raise refused from None
                if isinstance(e, duckdb.InterruptException | duckdb.OutOfMemoryException):
                    raise SQLError(_past_limits(e, limits)) from None
                if not views.leave_out(e, statement.tables):  # run again without the damage
                    raise SQLError(str(e).strip()) from None
    finally:
        timer.cancel()
        views.close()


def _past_limits(error: duckdb.Error, limits: Limits) -> str:
    """One line for a statement stopped at its time or memory limit."""
    if isinstance(error, duckdb.InterruptException):
        return (
            f"the statement ran longer than {limits.timeout_s:g} s and was stopped "
            "(sql --timeout, or sql_timeout_s in luigi.cfg)"
        )
    return (
        f"the statement needs more than {limits.memory or 'the default'} of memory and "
        f"{limits.temp or 'the default'} of temporary files ({reason(error)}): "
        "sql --memory-limit, or sql_memory_limit and sql_temp_limit in luigi.cfg"
    )


def rows(con: duckdb.DuckDBPyConnection, statement: str) -> tuple[list[str], list[tuple]]:
    """A Fetch: column names and rows as Python values."""
    result = con.execute(statement)
    return [d[0] for d in result.description or ()], result.fetchall()


def arrow(con: duckdb.DuckDBPyConnection, statement: str) -> pa.Table:
    """A Fetch: the result as an Arrow table."""
    return con.sql(statement).to_arrow_table()


def run_sql(
    crawl: CrawlDir, sql: str, warn: Warn = lambda line: None
) -> tuple[list[str], list[tuple]]:
    """Run an analyst's read-only SQL; return column names and rows."""
    return query(crawl, crawl.current(), sql, rows, warn)

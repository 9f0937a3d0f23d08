"""One in-memory DuckDB per process, and cursors on it.

Opening a DuckDB database costs about 17 ms (a new database and its thread pool); a cursor on
an open one costs microseconds. Update merges each host's rows and the jobs aggregate each
part with a query, a thousand of them a round on a big LAN, so they take cursors. A cursor's
registered tables are its own: two cursors never see each other's names.
"""

from __future__ import annotations

import duckdb

_database: duckdb.DuckDBPyConnection | None = None


def cursor() -> duckdb.DuckDBPyConnection:
    """A connection to this process's in-memory database; close it when done."""
    global _database
    if _database is None:
        _database = duckdb.connect()
    return _database.cursor()

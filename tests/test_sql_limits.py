"""`sharecrawl sql`'s limits: a statement past its time, memory or spilled files is stopped
with one line and exit 1, and leaves nothing behind; a bad limit is bad input (exit 2)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from sharecrawl.crawl_io.duck import cursor
from sharecrawl.queries.sandbox import SQLError, checked_statement
from tests import test_sql_sandbox as sandbox

RUNAWAY = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r"
# string_agg builds one value in memory: it cannot spill
BIG_VALUE = "SELECT length(string_agg(range::VARCHAR, ',')) FROM range(10000000)"
# DISTINCT over ten million strings spills to the temporary folder when memory is short
SPILLS = "SELECT count(*) FROM (SELECT DISTINCT range::VARCHAR || 'x' FROM range(10000000))"


# the sandbox's fixtures: its crawl dir, and `run`, `sharecrawl sql` after which no file
# near it has changed and no statement's temporary folder is left
crawled, run = sandbox.crawled, sandbox.run


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sharecrawl: sql: "), err
    return lines[0]


def test_a_runaway_statement_stops_at_its_timeout(run: Callable) -> None:
    status, out, err = run(RUNAWAY, "--timeout", "1")
    assert status == 1 and out == ""
    assert one_line(err) == (
        "sharecrawl: sql: the statement ran longer than 1 s and was stopped "
        "(sql --timeout, or sql_timeout_s in luigi.cfg)"
    )


def test_the_timeout_comes_from_luigi_cfg(run: Callable, luigi_cfg: Callable) -> None:
    luigi_cfg("[sharecrawl]\nsql_timeout_s = 0.5\n")
    status, _, err = run(RUNAWAY, "--output", "unused.csv")
    assert status == 1 and "ran longer than 0.5 s" in one_line(err)
    assert not Path("unused.csv").exists()


def test_a_statement_past_its_memory_stops(run: Callable) -> None:
    status, out, err = run(BIG_VALUE, "--memory-limit", "16MiB")
    assert status == 1 and out == ""
    line = one_line(err)
    assert "needs more than 16MiB of memory and 10GiB of temporary files" in line
    assert "Out of Memory Error" in line


def test_spilled_files_are_capped(run: Callable, luigi_cfg: Callable) -> None:
    luigi_cfg("[sharecrawl]\nsql_memory_limit = 16MiB\nsql_temp_limit = 1MiB\n")
    status, _, err = run(SPILLS)
    assert status == 1
    assert "needs more than 16MiB of memory and 1MiB of temporary files" in one_line(err)


def test_limits_are_set_and_a_query_within_them_runs(run: Callable) -> None:
    query = (
        "SELECT name, value FROM duckdb_settings() WHERE name IN "
        "('memory_limit', 'max_temp_directory_size') ORDER BY name"
    )
    status, out, _ = run(query, "--json", "--memory-limit", "64MiB", "--timeout", "60")
    assert status == 0
    assert json.loads(out) == [
        {"name": "max_temp_directory_size", "value": "10.0 GiB"},
        {"name": "memory_limit", "value": "64.0 MiB"},
    ]
    status, out, _ = run("SELECT value FROM duckdb_settings() WHERE name = 'memory_limit'")
    quarter = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 4 / 2**30
    shown = out.splitlines()[1]  # DuckDB shows it in GiB ("3.8 GiB")
    assert status == 0 and abs(float(shown.split()[0]) - quarter) < 0.1, (shown, quarter)


@pytest.mark.parametrize(
    ("options", "config", "message"),
    [
        (["--memory-limit", "lots"], "", "--memory-limit must be a size such as 512MiB"),
        (["--timeout", "-1"], "", "--timeout must be at least 0"),
        ([], "sql_temp_limit = big\n", "[sharecrawl] sql_temp_limit must be a size"),
        ([], "sql_timeout_s = soon\n", "[sharecrawl] sql_timeout_s must be a number"),
    ],
)
def test_a_bad_limit_is_bad_input(
    run: Callable, luigi_cfg: Callable, options: list[str], config: str, message: str
) -> None:
    luigi_cfg(f"[sharecrawl]\n{config}")
    status, out, err = run("SELECT 1", *options)
    assert status == 2 and out == ""
    assert err.startswith("sharecrawl: error: ") and message in err and len(err.splitlines()) == 1


def test_the_check_out_of_memory_is_a_failure_not_a_traceback() -> None:
    """The parse-tree check runs on the process's own DuckDB: out of memory there is an
    SQLError (the command's one line, exit 1), not a traceback. In this process, since the
    limit is set on its DuckDB; the statement (2.5 MB) could not go in an argv anyway."""
    con = cursor()
    con.execute("SET memory_limit = '1MB'")
    try:
        values = ",".join([f"(1, '{'x' * 100}')"] * 20000)
        with pytest.raises(SQLError, match="Out of Memory Error"):
            checked_statement(f"SELECT * FROM (VALUES {values})")
    finally:
        con.execute("RESET memory_limit")
        con.close()

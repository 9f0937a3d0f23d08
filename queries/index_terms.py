"""The index's vocabulary and postings, made whole or replaced for some works.

- `terms` (term_id, term, df): df is the number of works holding the term;
- `postings` (term_id, work_id, weight, fields), sorted by term_id when made whole, so that
  a term's postings are one stretch of the file; an update appends, and readers sort;
- `term_keys` (key, term_id): the deletion keys of the terms for typo tolerance
  (queries.fuzzy), as CRC-32 hashes.

A term no work holds any more (df 0) is dropped with its keys, as a full build never makes it.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

from queries.fuzzy import term_key_rows


def create_vocabulary(con: duckdb.DuckDBPyConnection) -> None:
    """Tables terms, postings and term_keys from temp table `new_postings` (every work's)."""
    con.execute(
        """
        CREATE TABLE terms AS
        SELECT (row_number() OVER (ORDER BY term))::INTEGER AS term_id, term,
               count(*)::INTEGER AS df
        FROM new_postings GROUP BY term ORDER BY term
        """
    )
    con.execute(
        """
        CREATE TABLE postings AS
        SELECT t.term_id, p.work_id, p.weight, p.fields
        FROM new_postings p JOIN terms t USING (term)
        ORDER BY t.term_id, p.work_id
        """
    )
    con.execute("CREATE TABLE term_keys (key UINTEGER, term_id INTEGER)")
    _add_keys(con, "SELECT term, term_id FROM terms")
    con.execute("DROP TABLE new_postings")


def replace_postings(con: duckdb.DuckDBPyConnection, scope: str) -> None:
    """Replace the postings of the works in table `scope` (work_id) by temp table
    `new_postings` (theirs, computed anew), keeping df and the terms' keys right."""
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE df_change AS
        SELECT term, sum(n)::INTEGER AS n FROM (
            SELECT t.term, -count(*) AS n FROM postings p JOIN terms t USING (term_id)
            WHERE p.work_id IN (SELECT work_id FROM {scope}) GROUP BY t.term
            UNION ALL
            SELECT term, count(*) FROM new_postings GROUP BY term
        ) GROUP BY term HAVING sum(n) <> 0
        """
    )
    con.execute(f"DELETE FROM postings WHERE work_id IN (SELECT work_id FROM {scope})")
    first = con.execute("SELECT coalesce(max(term_id), 0) FROM terms").fetchone()[0]
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE added_terms AS
        SELECT ({first} + row_number() OVER (ORDER BY term))::INTEGER AS term_id, term
        FROM (SELECT DISTINCT term FROM new_postings WHERE term NOT IN (SELECT term FROM terms))
        """
    )
    con.execute("INSERT INTO terms SELECT term_id, term, 0 FROM added_terms")
    con.execute(
        """
        UPDATE terms SET df = terms.df + d.n FROM df_change d WHERE terms.term = d.term
        """
    )
    con.execute(
        """
        INSERT INTO postings
        SELECT t.term_id, p.work_id, p.weight, p.fields
        FROM new_postings p JOIN terms t USING (term)
        ORDER BY t.term_id, p.work_id
        """
    )
    con.execute("DELETE FROM term_keys WHERE term_id IN (SELECT term_id FROM terms WHERE df <= 0)")
    con.execute("DELETE FROM terms WHERE df <= 0")
    _add_keys(
        con, "SELECT term, term_id FROM added_terms WHERE term_id IN (SELECT term_id FROM terms)"
    )
    for table in ("df_change", "added_terms", "new_postings"):
        con.execute(f"DROP TABLE {table}")


def _add_keys(con: duckdb.DuckDBPyConnection, terms_sql: str) -> None:
    hashes, ids = term_key_rows(con.execute(terms_sql).fetchall())
    con.register("new_keys", pa.table({"key": hashes, "term_id": ids}))
    try:
        con.execute("INSERT INTO term_keys SELECT key, term_id FROM new_keys")
    finally:
        con.unregister("new_keys")

"""Build the search index of a crawldb version from scratch: every media row read, grouped
into works, weighed and posted (queries.index_works), into the tables a reader expects.

Tables in the index:
- `works`: copies grouped into works, with counts, the best copy and a static prior from
  the number of copies;
- `copies`: every media file with its work_id and what the index made of it (folder, stem,
  resolution, lossless, online): for listing copies, for analysts, and for updates;
- `terms`, `postings`, `term_keys`: the vocabulary and BM25F weights (queries.index_terms);
- `strings`: every distinct string met, with its words' terms (queries.index_sources);
- `words`: every word met, with its forms (so that an update stems only new words);
- `hosts`: host, url, online (to build URLs of copies);
- `meta`: key/value pairs: the crawldb version the index holds, the format, counts, and the
  version of its last full build.

guessit, the slowest step per name, runs in a child process while the rest goes on.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from crawl_io.host_parts import table_parts
from queries.index_sources import (
    add_row_strings,
    apply_guesses,
    create_strings,
    load_hosts,
    media_rows,
    prepare_rows,
    start_guesses,
)
from queries.index_store import FORMAT
from queries.index_terms import create_vocabulary
from queries.index_works import (
    assign_work_ids,
    copies_select,
    key_rows,
    work_postings,
    works_select,
)


def build(con: duckdb.DuckDBPyConnection, version_dir: Path) -> None:
    """Fill the empty database of `con` with the index of `version_dir`."""
    con.execute("SET enable_progress_bar = false")
    load_hosts(con, version_dir)
    prepare_rows(con, media_rows(con, table_parts(version_dir, "media")), "m")
    guesses = start_guesses(con, "m")
    create_strings(con)
    add_row_strings(con, "m")
    if apply_guesses(con, "m", guesses()):
        add_row_strings(con, "m")  # the titles and series guessed
    key_rows(con, "m", "mk")
    con.execute("DROP TABLE m")
    assign_work_ids(con, "mk", existing=False)
    # grouped by work; a full sort by path would cost seconds
    con.execute(f"CREATE TABLE copies AS {copies_select('mk')} ORDER BY work_id")
    con.execute("DROP TABLE mk")
    con.execute(f"CREATE TABLE works AS {works_select('keyed_ids')} ORDER BY work_id")
    con.execute("DROP TABLE keyed_ids")
    work_postings(con)
    create_vocabulary(con)
    con.execute("CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    write_meta(con, version_dir.name, full=True)


def write_meta(
    con: duckdb.DuckDBPyConnection, version: str, *, full: bool, changed: bool = True
) -> None:
    """Record the version the index now holds, its counts and format; `built_at` is when
    what it holds last changed (an update that changed nothing only relabels it)."""
    values = {
        "version": version,
        "format": FORMAT,
        "works": str(con.execute("SELECT count(*) FROM works").fetchone()[0]),
        "media": str(con.execute("SELECT count(*) FROM copies").fetchone()[0]),
    }
    if changed or full:
        values["built_at"] = con.execute("SELECT now()::VARCHAR").fetchone()[0]
    if full:
        values["full_version"] = version
    con.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", list(values.items()))

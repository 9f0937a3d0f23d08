"""The search index (index/search.duckdb) written: built in full from a crawldb version, or
brought up to a later one by an update that costs what changed (docs/DESIGN.md, Search), both
grouping with queries.index_works' SQL, and swapped in by rename (queries.index_store).
Works whose copies only went on or off line are relabelled, not regrouped: online counts move,
and the best copy is the first of the old best and their copies on switched hosts, unless the
old best went offline (then regrouped): a popular work has thousands of copies, few switched."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa

from sharecrawl.crawl_io.crawldb.atomic import (
    clone_file,
    start_writeback,
    temp_name,
    write_atomic,
)
from sharecrawl.crawl_io.crawldb.host_parts import changed_parts, table_parts
from sharecrawl.crawl_io.crawldb.media_changes import INDEXED_COLUMNS, recorded_changes
from sharecrawl.queries.fuzzy import term_key_rows
from sharecrawl.queries.index_store import FORMAT, identity_of
from sharecrawl.queries.index_works import (
    BEST_COPY,
    BEST_COPY_ORDER,
    assign_work_ids,
    best_columns,
    copies_select,
    create_strings,
    is_lossless,
    key_media,
    load_hosts,
    media_rows,
    mode_select,
    work_postings,
    works_select,
)
from sharecrawl.queries.search_file import arrays_path, read_tables, write_tables
from sharecrawl.queries.search_tables import index_tables

# The build's own bounds, not DuckDB's defaults (80 % of the RAM, a thread a core, spills
# beside the file): its pool spills past this, in a folder beside the new file, removed after.
# At 20 M media the process peaks at 2.4 GiB (bench/search.py).
MEMORY_LIMIT = 2 * 2**30  # bytes, or a quarter of the RAM where that is less
MAX_THREADS = 4  # more threads, more hash tables in the same pool: more spilled


def duckdb_config(spill_dir: Path) -> dict[str, str | int | bool]:
    """The settings of a build's or an update's DuckDB: its memory, threads and spill folder.
    Every table whose order matters is made with ORDER BY; the rest need not keep their input's
    order, which at 20 M media and 2 GiB makes the build 159 s rather than 243 s."""
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {
        "memory_limit": f"{min(MEMORY_LIMIT, ram // 4) // 2**20}MiB",
        "threads": max(1, min(os.cpu_count() or 1, MAX_THREADS)),
        "temp_directory": str(spill_dir),
        "preserve_insertion_order": False,
    }


def _write(
    out_path: Path,
    fill: Callable[[duckdb.DuckDBPyConnection], bool],
    start_from: Path | None = None,
) -> None:
    """Fill a new file, or a copy of `start_from`, with `fill`; rename it over `out_path`.
    `fill` says whether the search arrays of `start_from` still hold for the new file."""

    def write(tmp_path: Path) -> None:
        wal = Path(f"{tmp_path}.wal")  # DuckDB's log of a failed write
        # a temporary name of its own: what a crashed writer leaves, the next crawl removes
        spill = temp_name(out_path.with_name(f"{out_path.name}.spill"))
        tmp_path.unlink(missing_ok=True)
        writeback = None
        try:
            # a clone costs nothing and the update writes only the blocks it changes
            if start_from is not None and not clone_file(start_from, tmp_path):
                shutil.copyfile(start_from, tmp_path)
                writeback = start_writeback(tmp_path)
            with duckdb.connect(str(tmp_path), config=duckdb_config(spill)) as con:
                same_arrays = fill(con)
                con.execute("CHECKPOINT")
                meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
            _write_arrays(tmp_path, out_path, spill, meta, start_from if same_arrays else None)
        finally:
            wal.unlink(missing_ok=True)
            shutil.rmtree(spill, ignore_errors=True)
            if writeback is not None:
                writeback.join()

    write_atomic(out_path, write)


def _write_arrays(
    index_path: Path, out_path: Path, spill: Path, meta: dict[str, str], same_as: Path | None
) -> None:
    """Write the arrays file of the finished index file `index_path` (still under its temporary
    name), before that file is renamed to `out_path`: a reader then sees a pair or a mismatch
    (queries.search_file). It carries the index's `meta` (index_store.index_meta reads it
    there). `same_as`: an index file whose arrays hold for this one too, whose arrays file is
    copied when it reads whole, rather than read again from the index."""
    identity = identity_of(os.stat(index_path))
    tables = None
    if same_as is not None:
        tables = read_tables(arrays_path(same_as), identity_of(os.stat(same_as)), verify=True)
    if tables is None:
        config = duckdb_config(spill)
        with duckdb.connect(str(index_path), read_only=True, config=config) as con:
            tables = index_tables(con)
    tables.header["meta"] = meta
    write_atomic(arrays_path(out_path), lambda tmp: write_tables(tmp, tables, identity))


# A search's top works are read by work id: with an ART index a fresh process finds 20 of 679 K
# works in 23-50 ms rather than the 51-92 ms of a scan (20 M media, bench/search.py).
_WORK_ID_INDEX = "CREATE INDEX IF NOT EXISTS works_work_id ON works (work_id)"


def build_index(version_dir: Path, out_path: Path) -> None:
    """Build the index of `version_dir` from scratch into `out_path`, replacing it."""

    def fill(con: duckdb.DuckDBPyConnection) -> bool:
        _build(con, Path(version_dir))
        return False  # its arrays are made from it

    _write(Path(out_path), fill)


def update_index(index_path: Path, old_dir: Path, new_dir: Path) -> UpdateCounts:
    """Bring the index at `index_path`, which holds version `old_dir` in this FORMAT (the
    caller checks), up to `new_dir`."""
    index_path = Path(index_path)
    counts: list[UpdateCounts] = []

    def fill(con: duckdb.DuckDBPyConnection) -> bool:
        # One transaction: each commit's sync waits for every dirty page of the copy. A build
        # is not one: that holds more memory (1.9 GiB against 1.5 at 2 M media) for no gain.
        con.execute("BEGIN TRANSACTION")
        counts.append(_apply_update(con, Path(old_dir), Path(new_dir)))
        con.execute(_WORK_ID_INDEX)  # an index built before it was made had none
        changed = counts[0].parts > 0 or counts[0].hosts_switched > 0
        _write_meta(con, Path(new_dir).name, full=False, changed=changed)
        con.execute("COMMIT")
        return counts[0].same  # then the old file's search arrays hold for the new one

    _write(index_path, fill, start_from=index_path)
    return counts[0]


def _build(con: duckdb.DuckDBPyConnection, version_dir: Path) -> None:
    """Fill the empty database of `con` with the index of `version_dir`."""
    con.execute("SET enable_progress_bar = false")
    load_hosts(con, version_dir)
    create_strings(con)
    key_media(con, media_rows(con, table_parts(version_dir, "media")))
    assign_work_ids(con, "mk", existing=False)
    # grouped by work; a full sort by path would cost seconds
    con.execute(f"CREATE TABLE copies AS {copies_select('mk')} ORDER BY work_id")
    con.execute("DROP TABLE mk")
    con.execute(f"CREATE TABLE works AS {works_select('keyed_ids')} ORDER BY work_id")
    con.execute(_WORK_ID_INDEX)
    con.execute("DROP TABLE keyed_ids")
    work_postings(con)
    _create_vocabulary(con)
    con.execute("CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    _write_meta(con, version_dir.name, full=True)


def _write_meta(
    con: duckdb.DuckDBPyConnection, version: str, *, full: bool, changed: bool = True
) -> None:
    """Record the version, counts and format; `built_at` is when the content last changed."""
    values = {
        "version": version,
        "format": FORMAT,
        "works": str(_count(con, "works")),
        "media": str(_count(con, "copies")),
    }
    if changed or full:
        values["built_at"] = con.execute("SELECT now()::VARCHAR").fetchone()[0]
    if full:
        values["full_version"] = version
    con.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", list(values.items()))


@dataclass(frozen=True)
class UpdateCounts:
    parts: int  # media parts that differ (old and new)
    parts_read: int  # of those, the parts read to compare (no record of changes covers them)
    paths: int  # media paths added, deleted or changed
    rows_new: int  # media rows added or changed
    hosts_switched: int  # hosts that went on or off line
    works: int  # works grouped and posted anew
    works_relabelled: int  # works brought up to date for their copies' online state alone
    same: bool = False  # nothing a search reads changed: no media part, no host's row


def _apply_update(con: duckdb.DuckDBPyConnection, old_dir: Path, new_dir: Path) -> UpdateCounts:
    """Update the index open on `con` (built from `old_dir`) to `new_dir`."""
    con.execute("SET enable_progress_bar = false")
    diff = changed_parts(old_dir, new_dir, "media")
    # `hosts` replaced by the new version's; `switched`: the hosts whose copies' online state
    # changes (a host gone from the table counts as offline)
    con.execute("ALTER TABLE hosts RENAME TO hosts_before")
    load_hosts(con, new_dir)
    con.execute(
        """
        CREATE TEMP TABLE switched AS
        SELECT host FROM hosts_before b FULL JOIN hosts h USING (host)
        WHERE coalesce(b.online, false) <> coalesce(h.online, false)
        """
    )
    # most rounds of a quiet LAN: no media part and no host's row changed (name, URL, online
    # state: the display rows name the best copy's host), so the index stays as it is
    same_hosts = not con.execute(
        "SELECT EXISTS (FROM hosts_before EXCEPT ALL FROM hosts) "
        "OR EXISTS (FROM hosts EXCEPT ALL FROM hosts_before)"
    ).fetchone()[0]
    con.execute("DROP TABLE hosts_before")
    if same_hosts and not diff.removed and not diff.added:
        _drop(con, "switched")
        return UpdateCounts(0, 0, 0, 0, 0, 0, 0, same=True)

    recorded = recorded_changes(old_dir, new_dir, diff)
    rest = recorded.rest
    _compare_rows(con, media_rows(con, rest.removed), media_rows(con, rest.added))
    if recorded.rows.num_rows:
        con.register("recorded", recorded.rows)
        con.execute("INSERT INTO gone SELECT host, share, path FROM recorded WHERE NOT came")
        columns = ", ".join(INDEXED_COLUMNS)
        con.execute(f"INSERT INTO came SELECT {columns} FROM recorded WHERE came")
        con.unregister("recorded")
    # Works whose copies changed are grouped and posted anew (scope); those whose copies only
    # switched hosts keep their postings (relabel). The copies gone are found once, by row id,
    # for their works and their deletion: each is a pass over the paths of every copy.
    con.execute(
        """
        CREATE TEMP TABLE gone_copies AS
        SELECT c.rowid AS r, c.work_id FROM copies c
        SEMI JOIN gone g ON c.host = g.host AND c.share = g.share AND c.path = g.path
        """
    )
    con.execute("CREATE TEMP TABLE scope AS SELECT DISTINCT work_id FROM gone_copies")
    # `moved`: the copies on switched hosts as they will be (online as in `hosts`), and
    # `relabel`: their works; taken before copies change, whose works _relabel_works skips
    con.execute(
        """
        CREATE TEMP TABLE moved AS
        SELECT c.work_id, c.kind, c.series, c.season, c.episode, c.stem AS name, c.host,
               c.share, c.path, c.format, c.bitrate_kbps, c.size,
               coalesce(h.online, false) AS online, c.resolution, c.lossless
        FROM copies c JOIN switched s USING (host) LEFT JOIN hosts h USING (host)
        """
    )
    con.execute("CREATE TEMP TABLE relabel AS SELECT DISTINCT work_id FROM moved")
    con.execute("DELETE FROM copies WHERE rowid IN (SELECT r FROM gone_copies)")
    con.execute(
        """
        UPDATE copies SET online = coalesce(h.online, false)
        FROM switched s LEFT JOIN hosts h USING (host)
        WHERE copies.host = s.host
        """
    )

    key_media(con, "came", few=True)
    assign_work_ids(con, "mk", existing=True)
    con.execute(f"INSERT INTO copies {copies_select('mk')}")
    con.execute("INSERT INTO scope SELECT work_id FROM keyed_ids EXCEPT SELECT work_id FROM scope")
    con.execute("DELETE FROM relabel WHERE work_id IN (SELECT work_id FROM scope)")
    _relabel_works(con)

    con.execute(
        """
        CREATE TEMP TABLE scope_keys AS
        SELECT work_id, work_key FROM works
        WHERE work_id IN (SELECT work_id FROM scope UNION ALL SELECT work_id FROM regroup)
        UNION SELECT work_id, work_key FROM keyed_ids
        """
    )
    con.execute("DELETE FROM works WHERE work_id IN (SELECT work_id FROM scope_keys)")
    # read where they are, twice: copying them out first (a third of `copies`) cost more
    grouped = "(SELECT * FROM copies SEMI JOIN scope_keys USING (work_id))"
    con.execute(f"INSERT INTO works {works_select('scope_keys', grouped, materialize=True)}")
    work_postings(con, "(SELECT * FROM copies SEMI JOIN scope USING (work_id))")
    _replace_postings(con, "scope")
    counts = UpdateCounts(
        parts=len(diff.removed) + len(diff.added),
        parts_read=len(rest.removed) + len(rest.added),
        paths=_count(con, "gone"),
        rows_new=_count(con, "came"),
        hosts_switched=_count(con, "switched"),
        works=_count(con, "scope"),
        works_relabelled=_count(con, "relabel"),
    )
    _drop(con, "gone gone_copies came mk keyed_ids scope relabel regroup scope_keys switched")
    return counts


def _compare_rows(con: duckdb.DuckDBPyConnection, before: str, after: str) -> None:
    """Temp tables `gone` (host, share, path): paths whose rows (INDEXED_COLUMNS) differ between
    relations `before` and `after`, compared by a 64-bit hash with multiplicity; `came`: their
    new rows, read again rather than held."""
    columns = ", ".join(INDEXED_COLUMNS)
    con.execute(
        f"""
        CREATE TEMP TABLE gone AS SELECT DISTINCT host, share, path FROM (
            SELECT host, share, path, h FROM (
                SELECT host, share, path, hash({columns}) AS h, -1 AS side FROM {before}
                UNION ALL SELECT host, share, path, hash({columns}), 1 FROM {after}
            ) GROUP BY ALL HAVING sum(side) <> 0
        )
        """
    )
    con.execute(
        f"""
        CREATE TEMP TABLE came AS SELECT {columns} FROM {after} n
        SEMI JOIN gone g ON n.host = g.host AND n.share = g.share AND n.path = g.path
        """
    )


def _count(con: duckdb.DuckDBPyConnection, table: str) -> int:
    return con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def _drop(con: duckdb.DuckDBPyConnection, tables: str) -> None:
    for table in tables.split():  # DuckDB drops one table per statement
        con.execute(f"DROP TABLE IF EXISTS {table}")


def _relabel_works(con: duckdb.DuckDBPyConnection) -> None:
    """Update in `works` the works of temp table `relabel`, whose copies changed only in
    online state (temp table `moved`); temp table `regroup` gets those left to group anew."""
    con.execute(
        """
        CREATE TEMP TABLE regroup AS
        SELECT w.work_id FROM works w SEMI JOIN relabel USING (work_id)
        WHERE w.best_host IN (
            SELECT s.host FROM switched s LEFT JOIN hosts h USING (host)
            WHERE NOT coalesce(h.online, false)
        )
        """
    )
    # `lossless` as prepare_rows computes it from the format: the old best copy's is the
    # same value, and so is its place in BEST_COPY_ORDER.
    con.execute(
        "DELETE FROM moved WHERE work_id NOT IN (SELECT work_id FROM relabel) "
        "OR work_id IN (SELECT work_id FROM regroup)"
    )
    con.execute(
        f"""
        CREATE TEMP TABLE relabelled AS
        WITH counted AS (
            SELECT work_id,
                sum(CASE WHEN online THEN 1 ELSE -1 END) AS d_copies,
                count(DISTINCT host) FILTER (WHERE online)
                    - count(DISTINCT host) FILTER (WHERE NOT online) AS d_hosts
            FROM moved GROUP BY work_id
        ),
        candidates AS (
            SELECT *, true AS changed FROM moved
            UNION ALL
            SELECT w.work_id, w.kind, w.series, w.season, w.episode, NULL, w.best_host,
                   w.best_share, w.best_path, w.best_format, w.best_bitrate_kbps, w.best_size,
                   w.best_online, w.best_resolution,
                   {is_lossless("w.best_format")}, false
            FROM works w SEMI JOIN moved m USING (work_id)
            WHERE w.best_host NOT IN (SELECT host FROM switched)
        ),
        best AS (
            SELECT work_id,
                arg_min({{{", ".join(f"'{c}': {c}" for c in [*BEST_COPY, "lossless"])},
                          'changed': changed}}, {BEST_COPY_ORDER}) AS b
            FROM candidates GROUP BY work_id
        )
        SELECT work_id, d_copies, d_hosts, b FROM counted JOIN best USING (work_id)
        """
    )
    con.execute(
        f"""
        CREATE TEMP TABLE relabelled_titles AS
        WITH c AS (
            SELECT work_id, title FROM copies
            SEMI JOIN (SELECT work_id FROM relabelled WHERE b.changed) USING (work_id)
        )
        {mode_select("title")}
        """
    )
    # A work's row replaced whole: DuckDB updates string columns in place several times
    # slower than it deletes and appends rows.
    con.execute(
        f"""
        CREATE TEMP TABLE relabelled_works AS
        SELECT w.* REPLACE (
            w.online_copies + r.d_copies AS online_copies,
            w.online_hosts + r.d_hosts AS online_hosts,
            r.b.kind AS kind,
            CASE WHEN r.b.changed
                THEN coalesce(t.title, CASE WHEN r.b.series IS NULL THEN r.b.name END)
                ELSE w.title END AS title,
            r.b.series AS series, r.b.season AS season, r.b.episode AS episode,
            {best_columns("r.b")}
        )
        FROM works w JOIN relabelled r USING (work_id)
        LEFT JOIN relabelled_titles t USING (work_id)
        """
    )
    con.execute("DELETE FROM works WHERE work_id IN (SELECT work_id FROM relabelled)")
    con.execute("INSERT INTO works BY NAME SELECT * FROM relabelled_works")
    _drop(con, "relabelled_works moved relabelled relabelled_titles")


# The rows of `postings` from temp table `new_postings`, a term's postings together.
_NEW_POSTINGS = """
    SELECT t.term_id, p.work_id, p.weight, p.fields
    FROM new_postings p JOIN terms t USING (term)
    ORDER BY t.term_id, p.work_id
"""


def _create_vocabulary(con: duckdb.DuckDBPyConnection) -> None:
    """Tables terms, postings and term_keys from temp table `new_postings` (every work's)."""
    con.execute(
        """
        CREATE TABLE terms AS
        SELECT (row_number() OVER (ORDER BY term))::INTEGER AS term_id, term,
               count(*)::INTEGER AS df
        FROM new_postings GROUP BY term ORDER BY term
        """
    )
    con.execute(f"CREATE TABLE postings AS {_NEW_POSTINGS}")
    con.execute("CREATE TABLE term_keys (key UINTEGER, term_id INTEGER)")
    _add_keys(con, "SELECT term, term_id FROM terms")
    con.execute("DROP TABLE new_postings")


def _replace_postings(con: duckdb.DuckDBPyConnection, scope: str) -> None:
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
    con.execute(f"INSERT INTO postings {_NEW_POSTINGS}")
    con.execute("DELETE FROM term_keys WHERE term_id IN (SELECT term_id FROM terms WHERE df <= 0)")
    con.execute("DELETE FROM terms WHERE df <= 0")
    _add_keys(
        con, "SELECT term, term_id FROM added_terms WHERE term_id IN (SELECT term_id FROM terms)"
    )
    _drop(con, "df_change added_terms new_postings")


def _add_keys(con: duckdb.DuckDBPyConnection, terms_sql: str) -> None:
    hashes, ids = term_key_rows(con.execute(terms_sql).fetchall())
    con.from_arrow(pa.table({"key": hashes, "term_id": ids})).insert_into("term_keys")

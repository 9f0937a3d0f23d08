"""What searches need of one index file as numpy arrays, kept with the file (queries.index_store):
works' ids and filter columns, postings by term with impacts, deletion keys, display rows.
Impact = stored weight times Lucene's idf ln(1 + (N - df + 0.5) / (df + 0.5)), applied here so
an update need not rewrite postings. A first search reads its terms' postings; later ones all."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import duckdb
import numpy as np

from sharecrawl.queries.fuzzy import KeyTable, one_edit, query_hashes
from sharecrawl.queries.index_store import IndexFile
from sharecrawl.queries.querylang import KINDS
from sharecrawl.queries.work_values import load_pairs, works_with_sql

if TYPE_CHECKING:  # a cold search (a fresh process) never loads Arrow
    import pyarrow as pa

RESULT_COLUMNS = (
    "work_id, kind, artist, title, album, year, series, season, episode, copies, hosts, "
    "online_copies, online_hosts, best_host, best_share, best_path, best_format, "
    "best_bitrate_kbps, best_size, best_online, best_resolution, "
    "(SELECT name FROM hosts h WHERE h.host = best_host) AS best_host_name"
)
_FILTER_COLUMNS = f"""
    SELECT work_id, coalesce(list_position({list(KINDS)!r}, kind), 0)::TINYINT AS kind,
           year::DOUBLE AS year, season::DOUBLE AS season, episode::DOUBLE AS episode,
           copies
    FROM works
"""  # KINDS are our constants, not query text
_FILTERS = ("kind", "year", "season", "episode", "copies")


def fetch_arrays(
    cursor: duckdb.DuckDBPyConnection, sql: str, params: object = None
) -> dict[str, np.ndarray]:
    """A query's columns as plain arrays (fetchnumpy masks NULL: NaN for floats, else 0)."""
    columns = cursor.execute(sql, params).fetchnumpy()
    return {
        name: v.filled(np.nan if v.dtype.kind == "f" else 0)
        if isinstance(v, np.ma.MaskedArray)
        else np.asarray(v)
        for name, v in columns.items()
    }


def by_work_id(columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Columns of `works` fetched in storage order, put in work id order: a full build stores
    them so, and checking costs a fraction of an ORDER BY (an update appends works)."""
    ids = columns["work_id"]
    if bool(np.all(ids[1:] > ids[:-1])):
        return columns
    order = np.argsort(ids, kind="stable")
    return {name: values[order] for name, values in columns.items()}


def idf(df: np.ndarray, n_works: int) -> np.ndarray:
    return np.log1p((n_works - df + 0.5) / (df + 0.5))


@dataclass
class Postings:
    """Every posting, sorted by term id: a term's postings are one slice."""

    term_ids: dict[str, int]
    terms: np.ndarray  # object: term of each id (None where no term has it)
    starts: np.ndarray  # postings of term id t: starts[t] to starts[t + 1]
    rows: np.ndarray  # int32 row of the work in the works' arrays
    impacts: np.ndarray  # float32: weight * idf
    fields: np.ndarray  # uint8 mask of FIELD_BITS
    keys: KeyTable


@dataclass
class SearchArrays:
    file: IndexFile
    work_ids: np.ndarray  # int64, ascending
    online: np.ndarray  # bool per work: a copy on a host online now
    prior: np.ndarray  # float64 per work
    host_urls: dict[str, str]
    columns: dict[str, np.ndarray] = field(default_factory=dict)  # filters, on first use
    postings: Postings | None = None
    display: pa.Table | None = None  # the result columns of every work
    searches: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def rows_of(self, work_ids: np.ndarray) -> np.ndarray:
        """Rows in the works' arrays of the given (present) work ids."""
        return np.searchsorted(self.work_ids, work_ids).astype(np.int32)

    def column(self, name: str) -> np.ndarray:
        if name not in self.columns and name in _FILTERS:
            with self.lock:
                if name not in self.columns:
                    with self.file.cursor() as cursor:
                        fetched = by_work_id(fetch_arrays(cursor, _FILTER_COLUMNS))
                    del fetched["work_id"]
                    self.columns |= fetched
        return self.columns[name]

    def works_with(self, field: str, value: str, offline: bool) -> np.ndarray:
        """Rows of the works with a copy of that value (query fields host:, format:)."""
        if self.postings is None:  # a first search: ask the index
            with self.file.cursor() as cursor:
                ids = works_with_sql(cursor, field, value, offline)
        else:
            ids = pairs(self.file, field).works_with(value, offline)
        return self.rows_of(ids)

    def term_postings(self, terms: set[str]) -> dict[str, tuple[np.ndarray, ...]]:
        """term -> (rows, impacts, fields) of its postings, for the terms in the index."""
        p = self.postings
        if p is not None:
            found = {t: p.term_ids[t] for t in terms if t in p.term_ids}
            slices = {t: slice(int(p.starts[i]), int(p.starts[i + 1])) for t, i in found.items()}
            return {t: (p.rows[w], p.impacts[w], p.fields[w]) for t, w in slices.items()}
        wanted = sorted(terms)
        with self.file.cursor() as cursor:  # the terms travel as a parameter list
            hits = fetch_arrays(  # a posting's term as its place in `wanted`, not a string
                cursor,
                "SELECT t.i, t.df::DOUBLE AS df, p.work_id, p.weight, p.fields FROM ("
                "SELECT term_id, df, list_position($1, term) - 1 AS i FROM terms "
                "WHERE term = ANY($1)) t JOIN postings p USING (term_id)",
                [wanted],
            )
        term_of, fields, rows = hits["i"], hits["fields"], self.rows_of(hits["work_id"])
        impacts = (hits["weight"] * idf(hits["df"], len(self.work_ids))).astype(np.float32)
        result = {}
        for i in np.unique(term_of):
            mine = term_of == i
            result[wanted[i]] = (rows[mine], impacts[mine], fields[mine])
        return result

    def near_terms(self, surface: str) -> list[str]:
        """The index terms one edit away from a query word (queries.fuzzy)."""
        p = self.postings
        if p is not None:
            found = [p.terms[i] for i in p.keys.candidates(surface)]
        else:
            with self.file.cursor() as cursor:  # the hashes travel as a parameter list
                found = [
                    t
                    for (t,) in cursor.execute(
                        "SELECT DISTINCT t.term FROM term_keys k JOIN terms t USING (term_id) "
                        "WHERE k.key = ANY(?::UINTEGER[])",
                        [query_hashes(surface)],
                    ).fetchall()
                ]
        return sorted(t for t in found if t is not None and one_edit(surface, t))

    def note_search(self) -> None:
        """Count a search; on the second, load all postings and display rows."""
        with self.lock:
            self.searches += 1
            if self.searches == 2:
                self.postings = _load_postings(self)
                with self.file.cursor() as cursor:
                    table = cursor.sql(f"SELECT {RESULT_COLUMNS} FROM works ORDER BY work_id")
                    self.display = table.to_arrow_table().combine_chunks()


def pairs(file: IndexFile, field: str):
    """The file's (work, value) pairs of copy field `field`, loaded once per file."""

    def load(f: IndexFile):
        with f.cursor() as cursor:
            return load_pairs(cursor, field)

    return file.cached(f"pairs:{field}", load)


def search_arrays(file: IndexFile) -> SearchArrays:
    """The file's search arrays, made on first use."""
    return file.cached("search", _load)


def _load(file: IndexFile) -> SearchArrays:
    with file.cursor() as cursor:
        urls = dict(cursor.execute("SELECT host, url FROM hosts").fetchall())
        works = by_work_id(
            fetch_arrays(
                cursor,
                "SELECT work_id, online_copies > 0 AS online, prior::DOUBLE AS prior FROM works",
            )
        )
    return SearchArrays(file, works["work_id"], works["online"], works["prior"], urls)


def _load_postings(arrays: SearchArrays) -> Postings:
    with arrays.file.cursor() as cursor:
        terms = fetch_arrays(cursor, "SELECT term_id, term, df::DOUBLE AS df FROM terms")
        postings = fetch_arrays(cursor, "SELECT term_id, work_id, weight, fields FROM postings")
        keys = fetch_arrays(cursor, "SELECT key, term_id FROM term_keys")
    ids = terms["term_id"]
    size = int(ids.max()) + 2 if len(ids) else 1
    by_id = np.empty(size, dtype=object)
    by_id[ids] = terms["term"]
    term_idf = np.zeros(size)
    term_idf[ids] = idf(terms["df"], len(arrays.work_ids))
    term_of = postings["term_id"]
    if not np.all(term_of[1:] >= term_of[:-1]):  # an update appended: sort here
        order = np.argsort(term_of, kind="stable")
        postings = {name: values[order] for name, values in postings.items()}
        term_of = postings["term_id"]
    return Postings(
        term_ids={t: int(i) for t, i in zip(terms["term"], ids, strict=True)},
        terms=by_id,
        starts=np.searchsorted(term_of, np.arange(size + 1)),
        rows=arrays.rows_of(postings["work_id"]),
        impacts=(postings["weight"] * term_idf[term_of]).astype(np.float32),
        fields=postings["fields"],
        keys=KeyTable(keys["key"], keys["term_id"]),
    )

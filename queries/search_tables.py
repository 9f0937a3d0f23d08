"""The search arrays (queries.search_arrays) read from an index's DuckDB: in full for its
arrays file (queries.search_file) or a warm process without one, or a first search's part
of them. Impact = stored weight times the idf, applied here so an update need not rewrite
postings; a term's place is its rank in code point order (the arrays file's vocabulary)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from sharecrawl.queries.fuzzy import KeyTable
from sharecrawl.queries.querylang import COPY_FIELDS, KINDS
from sharecrawl.queries.search_file import Tables
from sharecrawl.queries.work_values import load_pairs

if TYPE_CHECKING:  # a cursor is handed in: a search by the arrays file never imports DuckDB
    from collections.abc import Iterable

    import duckdb

FILTERS = ("kind", "year", "season", "episode", "copies")  # the works' columns filters read

RESULT_COLUMNS = (
    "work_id, kind, artist, title, album, year, series, season, episode, copies, hosts, "
    "online_copies, online_hosts, best_host, best_share, best_path, best_format, "
    "best_bitrate_kbps, best_size, best_online, best_resolution, "
    "(SELECT name FROM hosts h WHERE h.host = best_host) AS best_host_name"
)
_FILTER_SQL = f"""
    SELECT work_id, coalesce(list_position({list(KINDS)!r}, kind), 0)::TINYINT AS kind,
           year::DOUBLE AS year, season::DOUBLE AS season, episode::DOUBLE AS episode,
           copies
    FROM works
"""  # KINDS are our constants, not query text
_WORKS_SQL = "SELECT work_id, online_copies > 0 AS online, prior::DOUBLE AS prior FROM works"
_DISPLAY_BATCH = 65_536  # rows fetched at a time while display rows are written


def idf(df: np.ndarray, n_works: int) -> np.ndarray:
    """Lucene's idf, ln(1 + (N - df + 0.5) / (df + 0.5)): the index stores weights without it."""
    return np.log1p((n_works - df + 0.5) / (df + 0.5))


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


def works_arrays(
    cursor: duckdb.DuckDBPyConnection,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, str]]:
    """Work ids (ascending), online and prior per work, and the hosts' URLs."""
    urls = dict(cursor.execute("SELECT host, url FROM hosts").fetchall())
    works = by_work_id(fetch_arrays(cursor, _WORKS_SQL))
    return works["work_id"], works["online"], works["prior"], urls


def filter_columns(cursor: duckdb.DuckDBPyConnection) -> dict[str, np.ndarray]:
    """The columns query filters read (FILTERS), in work id order."""
    fetched = by_work_id(fetch_arrays(cursor, _FILTER_SQL))
    return {name: fetched[name] for name in FILTERS}


def term_postings_sql(
    cursor: duckdb.DuckDBPyConnection, work_ids: np.ndarray, terms: set[str]
) -> dict[str, tuple[np.ndarray, ...]]:
    """SearchArrays.term_postings asked of the index (its works' ids, ascending): a first
    search reads its terms' postings alone."""
    wanted = sorted(terms)
    hits = fetch_arrays(  # the terms travel as a parameter list; a posting's term as its place
        cursor,
        "SELECT t.i, t.df::DOUBLE AS df, p.work_id, p.weight, p.fields FROM ("
        "SELECT term_id, df, list_position($1, term) - 1 AS i FROM terms "
        "WHERE term = ANY($1)) t JOIN postings p USING (term_id)",
        [wanted],
    )
    term_of, fields = hits["i"], hits["fields"]
    rows = np.searchsorted(work_ids, hits["work_id"]).astype(np.int32)
    impacts = (hits["weight"] * idf(hits["df"], len(work_ids))).astype(np.float32)
    result = {}
    for i in np.unique(term_of):
        mine = term_of == i
        result[wanted[i]] = (rows[mine], impacts[mine], fields[mine])
    return result


def index_tables(cursor: duckdb.DuckDBPyConnection) -> Tables:
    """Every search array of the index on `cursor` (what its arrays file holds)."""
    work_ids, online, prior, urls = works_arrays(cursor)
    arrays: dict[str, np.ndarray] = {
        "work_ids": work_ids.astype(np.int64),
        "online": online.astype(bool),
        "prior": prior.astype(np.float64),
        **filter_columns(cursor),
    }
    arrays |= _postings(cursor, work_ids)
    columns, arrays["display_text"], arrays["display_offsets"] = _display(cursor)
    names = {}
    for field in COPY_FIELDS:
        pairs = load_pairs(cursor, field)
        arrays[f"{field}_work_ids"], arrays[f"{field}_starts"] = pairs.work_ids, pairs.starts
        arrays[f"{field}_codes"], arrays[f"{field}_online"] = pairs.codes, pairs.online
        names[field] = pairs.names
    header = {"hosts": urls, "display_columns": columns, "pair_names": names}
    return Tables(header, arrays)


def _joined(texts: Iterable[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Byte strings in one buffer, and where each starts (plus the end)."""
    parts = list(texts)
    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in parts], out=offsets[1:])
    return np.frombuffer(b"".join(parts), dtype=np.uint8), offsets


def _postings(cursor: duckdb.DuckDBPyConnection, work_ids: np.ndarray) -> dict[str, np.ndarray]:
    """The vocabulary, postings by term with impacts, and deletion keys by hash."""
    terms = fetch_arrays(cursor, "SELECT term_id, term, df::DOUBLE AS df FROM terms")
    order = np.array(sorted(range(len(terms["term"])), key=terms["term"].__getitem__), np.int64)
    text, offsets = _joined(t.encode() for t in terms["term"][order])
    ids = terms["term_id"]
    size = int(ids.max()) + 2 if len(ids) else 1
    place = np.full(size, -1, dtype=np.int64)  # term id -> place in the vocabulary
    place[ids[order]] = np.arange(len(order))
    term_idf = np.zeros(size)
    term_idf[ids] = idf(terms["df"], len(work_ids))
    del terms

    postings = fetch_arrays(cursor, "SELECT term_id, work_id, weight, fields FROM postings")
    term_of = postings.pop("term_id")
    by_term = np.argsort(place[term_of], kind="stable")
    term_of = term_of[by_term]
    starts = np.searchsorted(place[term_of], np.arange(len(order) + 1))
    impacts = (postings.pop("weight")[by_term] * term_idf[term_of]).astype(np.float32)
    del term_of
    rows = np.searchsorted(work_ids, postings.pop("work_id")[by_term]).astype(np.int32)
    fields = postings.pop("fields")[by_term].astype(np.uint8)
    del by_term

    keys = fetch_arrays(cursor, "SELECT key, term_id FROM term_keys")
    table = KeyTable(keys["key"].astype(np.uint32), place[keys["term_id"]].astype(np.int32))
    return {
        "term_text": text,
        "term_offsets": offsets,
        "starts": starts.astype(np.int64),
        "rows": rows,
        "impacts": impacts,
        "fields": fields,
        "key_hashes": table.hashes,
        "key_terms": table.term_ids,
    }


def _display(cursor: duckdb.DuckDBPyConnection) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The result columns' names, and every work's values as JSON, in work id order: made by
    DuckDB's json_array in under a third of the time Python's encoder takes (2 M media)."""
    described = cursor.execute(f"SELECT {RESULT_COLUMNS} FROM works LIMIT 0").description
    columns = [d[0] for d in described]
    values = ", ".join(f'"{c}"' for c in columns)  # our column names, not query text
    result = cursor.execute(
        f"SELECT json_array({values})::VARCHAR AS j FROM (SELECT {RESULT_COLUMNS} FROM works) "
        "ORDER BY work_id"
    )
    texts: list[bytes] = []
    while batch := result.fetchmany(_DISPLAY_BATCH):
        texts.extend(row[0].encode() for row in batch)
    return columns, *_joined(texts)

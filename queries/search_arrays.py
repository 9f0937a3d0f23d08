"""What searches need of one index as numpy arrays (queries.search_tables makes them): works'
ids and filter columns, postings by term with impacts, deletion keys, display rows, copies'
values. They come mapped from the index's arrays file (queries.search_file) when it matches the
index file, else from the index itself: a first search reads its terms' postings in SQL,
a second loads every array into memory, as the arrays file would hold them."""

from __future__ import annotations

import json
import os
import threading
from bisect import bisect_left
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sharecrawl.queries.fuzzy import KeyTable, one_edit, query_hashes
from sharecrawl.queries.index_store import FORMAT, IndexFile, identity_of
from sharecrawl.queries.querylang import COPY_FIELDS
from sharecrawl.queries.search_file import Tables, arrays_path, read_tables
from sharecrawl.queries.search_tables import (
    FILTERS,
    filter_columns,
    index_tables,
    term_postings_sql,
    works_arrays,
)
from sharecrawl.queries.work_values import Pairs, load_pairs, works_with_sql


@dataclass
class Vocabulary:
    """The index terms in code point order, as UTF-8 in one buffer: term i is
    text[offsets[i]:offsets[i + 1]]."""

    text: np.ndarray  # uint8
    offsets: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> str:
        return self.text[self.offsets[i] : self.offsets[i + 1]].tobytes().decode()

    def find(self, term: str) -> int | None:
        i = bisect_left(self, term)
        return i if i < len(self) and self[i] == term else None


@dataclass
class Postings:
    """Every posting, grouped by term in vocabulary order: a term's postings are one slice."""

    vocabulary: Vocabulary
    starts: np.ndarray  # postings of term i: starts[i] to starts[i + 1]
    rows: np.ndarray  # int32 row of the work in the works' arrays
    impacts: np.ndarray  # float32: weight * idf
    fields: np.ndarray  # uint8 mask of FIELD_BITS
    keys: KeyTable  # deletion key hashes -> term (its place in the vocabulary)


@dataclass
class Display:
    """The result columns of every work, a JSON list a work (in work id order)."""

    columns: list[str]
    text: np.ndarray  # uint8
    offsets: np.ndarray  # int64

    def rows(self, rows: np.ndarray) -> list[dict]:
        starts, ends = self.offsets[rows].tolist(), self.offsets[rows + 1].tolist()
        return [
            dict(zip(self.columns, json.loads(self.text[a:b].tobytes()), strict=True))
            for a, b in zip(starts, ends, strict=True)
        ]


@dataclass
class SearchArrays:
    work_ids: np.ndarray  # int64, ascending
    online: np.ndarray  # bool per work: a copy on a host online now
    prior: np.ndarray  # float64 per work
    host_urls: dict[str, str]
    file: IndexFile | None = None  # the index read in SQL while the arrays below are missing
    columns: dict[str, np.ndarray] = field(default_factory=dict)  # filters, on first use
    postings: Postings | None = None
    display: Display | None = None
    pairs: dict[str, Pairs] = field(default_factory=dict)  # copy field -> its values
    searches: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def rows_of(self, work_ids: np.ndarray) -> np.ndarray:
        """Rows in the works' arrays of the given (present) work ids."""
        return np.searchsorted(self.work_ids, work_ids).astype(np.int32)

    def column(self, name: str) -> np.ndarray:
        if name not in self.columns and name in FILTERS:
            with self.lock:
                if name not in self.columns:
                    assert self.file is not None
                    with self.file.cursor() as cursor:
                        self.columns |= filter_columns(cursor)
        return self.columns[name]

    def works_with(self, field: str, value: str, offline: bool) -> np.ndarray:
        """Rows of the works with a copy of that value (query fields host:, format:)."""
        if field in self.pairs:
            return self.rows_of(self.pairs[field].works_with(value, offline))
        assert self.file is not None
        with self.file.cursor() as cursor:  # a first search: ask the index
            return self.rows_of(works_with_sql(cursor, field, value, offline))

    def term_postings(self, terms: set[str]) -> dict[str, tuple[np.ndarray, ...]]:
        """term -> (rows, impacts, fields) of its postings, for the terms in the index."""
        p = self.postings
        if p is None:
            assert self.file is not None
            with self.file.cursor() as cursor:
                return term_postings_sql(cursor, self.work_ids, terms)
        found = {t: i for t in terms if (i := p.vocabulary.find(t)) is not None}
        slices = {t: slice(int(p.starts[i]), int(p.starts[i + 1])) for t, i in found.items()}
        return {t: (p.rows[w], p.impacts[w], p.fields[w]) for t, w in slices.items()}

    def near_terms(self, surface: str) -> list[str]:
        """The index terms one edit away from a query word (queries.fuzzy)."""
        p = self.postings
        if p is not None:
            found = [p.vocabulary[i] for i in p.keys.candidates(surface).tolist() if i >= 0]
        else:
            assert self.file is not None
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
        """Count a search; on the second, load every array from the index (without a file)."""
        with self.lock:
            self.searches += 1
            if self.searches == 2 and self.postings is None:
                assert self.file is not None
                with self.file.cursor() as cursor:
                    full = from_tables(index_tables(cursor))
                self.columns, self.postings = full.columns, full.postings
                self.display, self.pairs = full.display, full.pairs


def from_tables(tables: Tables, file: IndexFile | None = None) -> SearchArrays:
    """The search arrays of `tables` (an arrays file's, or made from the index)."""
    a, header = tables.arrays, tables.header
    vocabulary = Vocabulary(a["term_text"], a["term_offsets"])
    return SearchArrays(
        work_ids=a["work_ids"],
        online=a["online"],
        prior=a["prior"],
        host_urls=header["hosts"],
        file=file,
        columns={name: a[name] for name in FILTERS},
        postings=Postings(
            vocabulary,
            a["starts"],
            a["rows"],
            a["impacts"],
            a["fields"],
            KeyTable.presorted(a["key_hashes"], a["key_terms"]),
        ),
        display=Display(header["display_columns"], a["display_text"], a["display_offsets"]),
        pairs={
            f: Pairs(
                a[f"{f}_work_ids"],
                a[f"{f}_starts"],
                a[f"{f}_codes"],
                a[f"{f}_online"],
                header["pair_names"][f],
            )
            for f in COPY_FIELDS
        },
    )


def pairs(file: IndexFile, field: str) -> Pairs:
    """The file's (work, value) pairs of copy field `field`, loaded once per file."""
    arrays = search_arrays(file)
    if field in arrays.pairs:
        return arrays.pairs[field]

    def load(f: IndexFile) -> Pairs:
        with f.cursor() as cursor:
            return load_pairs(cursor, field)

    return file.cached(f"pairs:{field}", load)


def search_arrays(file: IndexFile) -> SearchArrays:
    """The search arrays of an open index file, made on first use."""
    return file.cached("search", _load)


def _load(file: IndexFile) -> SearchArrays:
    # a process that stays (serve) checks every array once; a fresh one only the header
    tables = read_tables(arrays_path(file.path), file.identity, verify=True)
    if tables is not None:
        return from_tables(tables, file)
    with file.cursor() as cursor:
        work_ids, online, prior, urls = works_arrays(cursor)
    return SearchArrays(work_ids, online, prior, urls, file)


_mapped: dict[str, tuple[tuple[int, int, int], SearchArrays]] = {}
_mapped_lock = threading.Lock()


def mapped_arrays(index_path: Path) -> SearchArrays | None:
    """The arrays file of the index at `index_path` as this process mapped it, if it matches
    the file the path names now and is of this FORMAT (else None: read the index, which says
    what is wrong)."""
    key = os.path.abspath(index_path)
    try:
        identity = identity_of(os.stat(key))
    except OSError:
        return None
    with _mapped_lock:
        held = _mapped.get(key)
        if held is not None and held[0] == identity:
            return held[1]
        tables = read_tables(arrays_path(Path(key)), identity)
        if tables is None or tables.header.get("meta", {}).get("format") != FORMAT:
            _mapped.pop(key, None)  # an index of another format: opening it says what to do
            return None
        arrays = from_tables(tables)
        _mapped[key] = (identity, arrays)
        return arrays


def forget_mapped(index_path: Path) -> None:
    """Drop this process's mapping of the arrays file of `index_path` (it did not read)."""
    with _mapped_lock:
        _mapped.pop(os.path.abspath(index_path), None)

"""The values of works' copies (hosts, formats) in memory, for the query fields host: and
format: and the page's facets: distinct (work, value, online) of a column of `copies`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # a search by the index's arrays file never imports DuckDB
    import duckdb

# The copy columns whose values a work has, by query field (our SQL, never request text).
COPY_COLUMNS = {"host": "host", "format": "lower(format)"}

_PAIRS_SQL = """
    SELECT work_id, {column} AS value, bool_or(online) AS online
    FROM copies GROUP BY ALL ORDER BY work_id, value
"""


def distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values, ascending: np.unique without its import of numpy.ma (tens of
    milliseconds of a fresh process's search)."""
    ordered = np.sort(values)
    keep = np.ones(len(ordered), dtype=bool)
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def group_starts(sorted_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct ids of a sorted array and where each one's rows start (plus the end)."""
    ids, first = np.unique(sorted_ids, return_index=True)
    # int64, as the ids looked up are: a mixed comparison would copy the array every time
    return ids.astype(np.int64), np.append(first, len(sorted_ids)).astype(np.int64)


def gather(
    work_ids: np.ndarray, starts: np.ndarray, wanted: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(position in `wanted`, row) of the rows of every wanted work, without a Python loop."""
    found = np.searchsorted(work_ids, wanted)
    found = np.minimum(found, len(work_ids) - 1) if len(work_ids) else found
    present = (work_ids[found] == wanted) if len(work_ids) else np.zeros(len(wanted), bool)
    positions = np.flatnonzero(present)
    lo, hi = starts[found[positions]], starts[found[positions] + 1]
    lengths = hi - lo
    owner = np.repeat(positions, lengths)
    rows = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths - lo, lengths)
    return owner, rows.astype(np.int64)


@dataclass
class Pairs:
    """Distinct (work, value) pairs of one copy column, grouped by work."""

    work_ids: np.ndarray  # distinct work ids, ascending
    starts: np.ndarray  # pairs of work_ids[i]: starts[i] to starts[i + 1]
    codes: np.ndarray  # index into names
    online: np.ndarray  # bool per pair: a copy with that value is online
    names: list[str]

    def of(self, work_ids: np.ndarray, offline: bool) -> tuple[np.ndarray, np.ndarray]:
        """(position in `work_ids`, code) of every pair of those works (offline: all copies)."""
        owner, rows = gather(self.work_ids, self.starts, work_ids)
        if not offline:
            keep = self.online[rows]
            owner, rows = owner[keep], rows[keep]
        return owner, self.codes[rows]

    def codes_of(self, value: str) -> list[int]:
        """The codes of the names equal to `value`, compared casefolded."""
        wanted = value.casefold()
        return [i for i, name in enumerate(self.names) if name.casefold() == wanted]

    def works_with(self, value: str, offline: bool) -> np.ndarray:
        """The ids, ascending, of the works with a copy (online, unless `offline`) of `value`."""
        hit = np.isin(self.codes, self.codes_of(value))
        if not offline:
            hit &= self.online
        pair_work = np.repeat(self.work_ids, np.diff(self.starts))
        return distinct(pair_work[hit])


def load_pairs(con: duckdb.DuckDBPyConnection, field: str) -> Pairs:
    """The (work, value) pairs of query field `field` (COPY_COLUMNS) from the index."""
    table = con.sql(_PAIRS_SQL.format(column=COPY_COLUMNS[field])).to_arrow_table()
    values = table.column("value").combine_chunks().dictionary_encode()
    work_ids, starts = group_starts(table.column("work_id").to_numpy())
    return Pairs(
        work_ids=work_ids,
        starts=starts,
        codes=values.indices.to_numpy(zero_copy_only=False).astype(np.int32),
        online=table.column("online").to_numpy(zero_copy_only=False).astype(bool),
        names=[v if v is not None else "?" for v in values.dictionary.to_pylist()],
    )


def works_with_sql(
    con: duckdb.DuckDBPyConnection, field: str, value: str, offline: bool
) -> np.ndarray:
    """Pairs.works_with asked of the index: cheaper than loading every pair for one search."""
    online = "" if offline else "AND online"
    column = COPY_COLUMNS[field]
    rows = con.execute(  # the value travels as a parameter
        f"SELECT DISTINCT work_id FROM copies WHERE lower({column}) = ? {online} ORDER BY 1",
        [value.casefold()],
    ).fetchnumpy()["work_id"]
    return np.asarray(rows, dtype=np.int64)


def value_counts(pairs: Pairs, work_ids: np.ndarray, offline: bool) -> list[tuple[str, int]]:
    """How many of the works have a copy with each value, most first."""
    _, codes = pairs.of(work_ids, offline)
    if len(codes) == 0:
        return []
    counts = np.bincount(codes, minlength=len(pairs.names))
    order = np.lexsort((np.arange(len(counts)), -counts))
    return [(pairs.names[c], int(counts[c])) for c in order if counts[c]]

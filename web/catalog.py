"""What the page shows beside ranked results, read from a pinned index version: the copies
of each work, and the hosts and formats of the works for the facets.

The search itself is queries.search.search(); this module only reads the index's `copies`
and `hosts` tables (read-only), once per version, into memory: looking up the copies of 20
works with SQL costs 20-60 ms at 2 M copies (the table has no index on work_id), a slice
of arrays costs microseconds. Small functions over a cursor, so they can move to queries/.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa

from queries.index import LOSSLESS_FORMATS

# Copies of a work, best first: the order queries.index uses to choose a work's best copy
# (online, lossless, resolution, bitrate, size). The resolution is read from the name as
# the index builder reads it (three or four digits and p or i: 720p, 1080i).
_COPIES_SQL = """
    SELECT work_id, host, share, path, kind, format, bitrate_kbps, size, online,
           CASE WHEN regexp_matches(path, '\\d\\d\\d[pPiI]') THEN
               try_cast(regexp_extract(lower(path), '(?:^|[^0-9])(\\d{{3,4}})[pi](?:[^a-z]|$)', 1)
                        AS INTEGER)
           END AS resolution
    FROM idx.copies
    ORDER BY work_id, online DESC, lower(format) IN ({lossless}) DESC,
             coalesce(resolution, 0) DESC, coalesce(bitrate_kbps, 0) DESC,
             coalesce(size, 0) DESC, host, share, path
"""

_PAIRS_SQL = """
    SELECT work_id, {column} AS value, bool_or(online) AS online
    FROM idx.copies GROUP BY ALL ORDER BY work_id, value
"""


@dataclass
class Pairs:
    """Distinct (work, value) pairs of one copy column, grouped by work: the hosts or the
    formats of each work, and whether any copy with that value is online."""

    work_ids: np.ndarray  # distinct work ids, ascending
    starts: np.ndarray  # pairs of work_ids[i]: starts[i] to starts[i + 1]
    codes: np.ndarray  # index into names
    online: np.ndarray  # bool per pair
    names: list[str]

    def of(self, work_ids: np.ndarray, offline: bool) -> tuple[np.ndarray, np.ndarray]:
        """(position in `work_ids`, code) of every pair of those works; offline copies'
        values only when `offline`."""
        owner, rows = _gather(self.work_ids, self.starts, work_ids)
        if not offline:
            keep = self.online[rows]
            owner, rows = owner[keep], rows[keep]
        return owner, self.codes[rows]


@dataclass
class CopyTable:
    """Every copy of the version, grouped by work, best first within each work."""

    table: pa.Table
    work_ids: np.ndarray
    starts: np.ndarray
    hosts: Pairs
    formats: Pairs

    online_counts: np.ndarray  # online copies of work_ids[i] (they come first in its rows)

    def copies(self, work_ids: list[int], limit: int, offline: bool) -> dict[int, list[dict]]:
        """work id -> its first `limit` copies (online ones only unless `offline`), read
        with one take for all the works."""
        wanted = np.asarray(work_ids, dtype=np.int64)
        found = np.searchsorted(self.work_ids, wanted)
        found = np.minimum(found, max(len(self.work_ids) - 1, 0))
        present = (self.work_ids[found] == wanted) if len(self.work_ids) else wanted < 0
        out: dict[int, list[dict]] = {int(w): [] for w in wanted}
        positions = found[present]
        if len(positions) == 0:
            return out
        starts = self.starts[positions]
        available = self.starts[positions + 1] - starts
        if not offline:
            available = self.online_counts[positions]
        lengths = np.minimum(available, limit)
        rows = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths - starts, lengths)
        records = self.table.take(pa.array(rows, pa.int64())).to_pylist()
        at = 0
        for work_id, n in zip(wanted[present].tolist(), lengths.tolist(), strict=True):
            out[work_id] = records[at : at + n]
            at += n
        return out


def _gather(work_ids: np.ndarray, starts: np.ndarray, wanted: np.ndarray):
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


def _starts(sorted_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct ids of a sorted array and where each one's rows start (plus the end)."""
    ids, first = np.unique(sorted_ids, return_index=True)
    # int64, as the ids looked up are: a mixed comparison would copy the array every time
    return ids.astype(np.int64), np.append(first, len(sorted_ids)).astype(np.int64)


def _pairs(con: duckdb.DuckDBPyConnection, column: str) -> Pairs:
    # `column` is one of our two column names, never request text
    table = con.sql(_PAIRS_SQL.format(column=column)).to_arrow_table()
    values = table.column("value").combine_chunks().dictionary_encode()
    work_ids, starts = _starts(table.column("work_id").to_numpy())
    return Pairs(
        work_ids=work_ids,
        starts=starts,
        codes=values.indices.to_numpy(zero_copy_only=False).astype(np.int32),
        online=table.column("online").to_numpy(zero_copy_only=False).astype(bool),
        names=[v if v is not None else "?" for v in values.dictionary.to_pylist()],
    )


def load_copies(con: duckdb.DuckDBPyConnection) -> CopyTable:
    """Read the version's copies into memory (about 1 s and 200 MB at 2 M copies)."""
    lossless = ", ".join(f"'{f}'" for f in LOSSLESS_FORMATS)  # our constants
    table = con.sql(_COPIES_SQL.format(lossless=lossless)).to_arrow_table().combine_chunks()
    work_ids, starts = _starts(table.column("work_id").to_numpy())
    online = table.column("online").to_numpy(zero_copy_only=False).astype(np.int64)
    online_counts = np.add.reduceat(online, starts[:-1]) if len(work_ids) else online[:0]
    return CopyTable(
        table=table.drop_columns(["work_id"]),
        work_ids=work_ids,
        starts=starts,
        hosts=_pairs(con, "host"),
        formats=_pairs(con, "lower(format)"),
        online_counts=online_counts,
    )


def load_hosts(con: duckdb.DuckDBPyConnection) -> dict[str, tuple[str | None, bool]]:
    """host -> (its URL, online) in this version."""
    rows = con.execute("SELECT host, url, online FROM idx.hosts").fetchall()
    return {host: (url, bool(online)) for host, url, online in rows}


def value_counts(pairs: Pairs, work_ids: np.ndarray, offline: bool) -> list[tuple[str, int]]:
    """How many of the works have a copy with each value, most first."""
    _, codes = pairs.of(work_ids, offline)
    if len(codes) == 0:
        return []
    counts = np.bincount(codes, minlength=len(pairs.names))
    order = np.lexsort((np.arange(len(counts)), -counts))
    return [(pairs.names[c], int(counts[c])) for c in order if counts[c]]


def works_having(pairs: Pairs, work_ids: np.ndarray, value: str, offline: bool) -> np.ndarray:
    """A mask over `work_ids`: the works with a copy whose value is `value` (any case)."""
    wanted = [i for i, name in enumerate(pairs.names) if name.casefold() == value.casefold()]
    keep = np.zeros(len(work_ids), dtype=bool)
    if not wanted:
        return keep
    owner, codes = pairs.of(work_ids, offline)
    keep[owner[np.isin(codes, wanted)]] = True
    return keep

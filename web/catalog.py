"""The copies of each work, and the hosts and formats of the works for the facets, read from a
pinned index file into memory once per file: SQL for the copies of 20 works costs 20-60 ms at
2 M copies (no index on work_id), a slice of arrays microseconds."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from sharecrawl.queries.index_store import IndexFile
from sharecrawl.queries.index_works import BEST_COPY_ORDER
from sharecrawl.queries.search_arrays import pairs
from sharecrawl.queries.work_values import Pairs, group_starts

# Copies of a work, best first: the order in which the index chose the work's best copy.
_COPIES_SQL = f"""
    SELECT work_id, host, share, path, kind, format, bitrate_kbps, size, online, resolution
    FROM copies ORDER BY work_id, {BEST_COPY_ORDER}
"""


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
        starts, ends = self.starts[positions], self.starts[positions + 1]
        lengths = np.minimum(ends - starts if offline else self.online_counts[positions], limit)
        rows = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths - starts, lengths)
        records = self.table.take(pa.array(rows, pa.int64())).to_pylist()
        at = 0
        for work_id, n in zip(wanted[present].tolist(), lengths.tolist(), strict=True):
            out[work_id] = records[at : at + n]
            at += n
        return out


def load_copies(file: IndexFile) -> CopyTable:
    """Read the version's copies into memory (about 1 s and 200 MB at 2 M copies)."""
    with file.cursor() as con:
        table = con.sql(_COPIES_SQL).to_arrow_table().combine_chunks()
    work_ids, starts = group_starts(table.column("work_id").to_numpy())
    online = table.column("online").to_numpy(zero_copy_only=False).astype(np.int64)
    online_counts = np.add.reduceat(online, starts[:-1]) if len(work_ids) else online[:0]
    return CopyTable(
        table=table.drop_columns(["work_id"]),
        work_ids=work_ids,
        starts=starts,
        hosts=pairs(file, "host"),
        formats=pairs(file, "format"),
        online_counts=online_counts,
    )


def load_hosts(file: IndexFile) -> dict[str, tuple[str | None, bool, str]]:
    """host -> (its URL, online, the name people know it by) in this version."""
    with file.cursor() as con:
        rows = con.execute("SELECT host, url, online, name FROM idx.hosts").fetchall()
    return {host: (url, bool(online), name) for host, url, online, name in rows}

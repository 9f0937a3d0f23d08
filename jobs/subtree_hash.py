"""Per-partition hashes and sizes from a segment's listing parts (thesis §3.4.1).

Each mapper reads one listing part (one host), groups its rows by partition and feeds them in
canonical order to the same PartitionHasher the fetcher streams into, so the two must agree.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow.parquet as pq
from mrjob.job import MRJob
from mrjob.protocol import JSONProtocol, RawValueProtocol

from crawl_io.mediatypes import media_kind
from crawl_io.subtree_hash import PartitionHasher, canonical_key

COLUMNS = ["partition_id", "path", "name", "is_dir", "size", "mtime"]


def partition_summaries(part_path: str) -> Iterator[tuple[str, dict]]:
    table = pq.read_table(part_path, columns=COLUMNS)
    mtimes = table["mtime"].cast("int64").to_pylist()  # microseconds since the epoch
    rows = zip(*(table[c].to_pylist() for c in COLUMNS[:-1]), mtimes, strict=True)
    by_partition: dict[str, list[tuple]] = {}
    for pid, path, name, is_dir, size, mtime in rows:
        by_partition.setdefault(pid, []).append((path, name, is_dir, size, mtime))
    for pid, entries in by_partition.items():
        entries.sort(key=lambda e: canonical_key(e[0]))
        hasher = PartitionHasher()
        summary = {"n_folders": 0, "n_files": 0, "n_media": 0, "bytes": 0}
        for path, name, is_dir, size, mtime in entries:
            hasher.update(path, is_dir, size, mtime)
            if is_dir:
                summary["n_folders"] += 1
            else:
                summary["n_files"] += 1
                summary["bytes"] += size
                summary["n_media"] += media_kind(name) is not None
        summary["hash"] = hasher.hexdigest()
        yield pid, summary


class MRSubtreeHash(MRJob):
    INPUT_PROTOCOL = RawValueProtocol
    OUTPUT_PROTOCOL = JSONProtocol

    def mapper(self, _: None, part_path: str) -> Iterator[tuple[str, dict]]:
        yield from partition_summaries(part_path.strip())

    def reducer(self, partition_id: str, summaries: Iterator[dict]) -> Iterator[tuple[str, dict]]:
        # A partition is scanned by one fetcher, so it lives in one part: one summary.
        summary = next(summaries)
        if next(summaries, None) is not None:
            raise ValueError(f"partition {partition_id} appears in two listing parts")
        yield partition_id, summary


if __name__ == "__main__":
    MRSubtreeHash.run()

"""The subtree-hash job: per-partition hashes and sizes from a round's listing parts.

Input: a manifest of listing parts (jobs.runner). Each mapper reads one part (one host) and
summarises it with jobs.subtree_hash.summarize; the reducer checks that a partition came from
one part only. With `--folders-dir DIR` the mapper also writes one Parquet part per listing
part with every folder's Merkle and content hashes (jobs.subtree_hash.folder_summaries).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from mrjob.protocol import JSONProtocol, RawValueProtocol

from crawl_io.crawldir import write_parquet
from jobs.runner import ManifestJob
from jobs.subtree_hash import folder_summaries, folders_part_name, read_listing, summarize


class MRSubtreeHash(ManifestJob):
    INPUT_PROTOCOL = RawValueProtocol
    OUTPUT_PROTOCOL = JSONProtocol

    def configure_args(self) -> None:
        super().configure_args()
        self.add_passthru_arg(
            "--folders-dir", default=None,
            help="also write per-folder hashes as Parquet parts into this local folder",
        )  # fmt: skip

    def mapper(self, _: None, part_path: str) -> Iterator[tuple[str, dict]]:
        part_path = self.part_path(part_path)
        table = read_listing(part_path)
        if self.options.folders_dir:
            out = Path(self.options.folders_dir) / folders_part_name(part_path)
            write_parquet(folder_summaries(table), out)
        yield from summarize(table).items()

    def reducer(self, partition_id: str, summaries: Iterator[dict]) -> Iterator[tuple[str, dict]]:
        # A partition is scanned by one fetcher, so it lives in one part: one summary.
        summary = next(summaries)
        if next(summaries, None) is not None:
            raise ValueError(f"partition {partition_id} appears in two listing parts")
        yield partition_id, summary


if __name__ == "__main__":
    MRSubtreeHash.run()

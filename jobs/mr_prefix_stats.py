"""Per-prefix crawl statistics (jobs.prefix_stats) as an mrjob job over one JSON line a host
(host, new, old and media parts: changes compare new and old), and how Update runs it: in this
process on one machine (inline, local), where a runner start would only add its cost."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa
from mrjob.protocol import JSONProtocol, RawValueProtocol

from sharecrawl.crawl_io.crawldb.atomic import write_atomic
from sharecrawl.crawl_io.crawldb.host_parts import VersionParts
from sharecrawl.crawl_io.schema import PREFIX_STATS
from sharecrawl.jobs.prefix_stats import (
    COUNTS,
    KEY,
    carried_over,
    host_prefix_stats,
    is_complete_round,
    keep_row,
    prefix_rows,
    stats_table,
    sum_counts,
)
from sharecrawl.jobs.runner import (
    JobRunner,
    ManifestJob,
    manifest_path,
    run_job,
    runner_of,
)

PART_KEYS = ("new", "old", "media")  # the manifest's paths


class MRPrefixStats(ManifestJob):
    INPUT_PROTOCOL = RawValueProtocol
    INTERNAL_PROTOCOL = JSONProtocol
    OUTPUT_PROTOCOL = JSONProtocol

    def configure_args(self) -> None:
        super().configure_args()
        self.add_passthru_arg("--depth", type=int, default=3, help="deepest prefix, in folders")
        self.add_passthru_arg(
            "--min-entries", type=int, default=1, help="drop prefixes with fewer entries under them"
        )

    def mapper(self, _: None, line: str) -> Iterator[tuple[list, list]]:
        line = line.strip()
        if not line:
            return
        part = json.loads(line)
        sources = []
        for key in PART_KEYS:
            sources.append(part.get(key) and [self.resolve(p) for p in part[key]])
        for share, prefix, depth, *counts in prefix_rows(*sources, self.options.depth):
            # the key as one JSON string: Spark's harness groups by the decoded key (hashable)
            yield json.dumps([part["host"], share, prefix]), [depth, *counts]

    def combiner(self, key: str, values: Iterator[list]) -> Iterator[tuple[str, list]]:
        yield key, sum_counts(values)

    def reducer(self, key: str, values: Iterator[list]) -> Iterator[tuple[list, dict]]:
        total = sum_counts(values)
        row = dict(zip(("depth", *COUNTS), total, strict=True))
        if keep_row(row, self.options.min_entries):
            yield json.loads(key), row


def host_parts(
    version_dir: Path, prev_dir: Path | None, hosts: Iterable[str], damaged: Iterable[str] = ()
) -> list[dict]:
    """Manifest entries for `hosts` of `version_dir` against `prev_dir` (None: none). Absent parts,
    and the old parts of `damaged` hosts, are null; file-less hosts skipped."""
    damaged = set(damaged)
    stored = {vdir: VersionParts(vdir) for vdir in (version_dir, prev_dir) if vdir is not None}

    def part(vdir: Path | None, table: str, host: str) -> list[str] | None:
        groups = stored[vdir].groups(host, (table,)) if vdir is not None else []
        return [str(stored[vdir].path(table, host, g)) for g in groups] or None

    entries = []
    for host in sorted(set(hosts)):
        new = part(version_dir, "files", host)
        if new is not None:
            old = None if host in damaged else part(prev_dir, "files", host)
            entries.append(
                {"host": host, "new": new, "old": old, "media": part(version_dir, "media", host)}
            )
    return entries


def run_prefix_stats(
    host_parts: list[dict], runner: JobRunner | str, depth: int, min_entries: int, workdir: Path
) -> pa.Table:
    """MRPrefixStats over these hosts' parts (host_parts); PREFIX_STATS rows."""
    if not host_parts:
        return PREFIX_STATS.empty_table()
    workdir.mkdir(parents=True, exist_ok=True)
    manifest = workdir / "prefix_stats.manifest"
    lines = [
        {
            k: [manifest_path(x, manifest) for x in v] if k in PART_KEYS and v else v
            for k, v in p.items()
        }
        for p in host_parts
    ]
    write_atomic(manifest, "".join(json.dumps(line) + "\n" for line in lines))
    args = ("--depth", str(depth), "--min-entries", str(min_entries))
    pairs = run_job(MRPrefixStats, manifest, runner, *args, scratch=workdir / "cluster")
    rows = (
        {"host": host, "share": share, "prefix": prefix, **values}
        for (host, share, prefix), values in pairs
    )
    return stats_table(rows)


def prefix_stats_here(host_parts: list[dict], depth: int, min_entries: int) -> pa.Table:
    """The rows run_prefix_stats gives, in this process."""
    tables = [
        host_prefix_stats(p["host"], *(p[k] for k in PART_KEYS), depth, min_entries)
        for p in host_parts
    ]
    return pa.concat_tables([PREFIX_STATS.empty_table(), *tables])


def round_prefix_stats(
    *,
    round_: int,
    version_dir: Path,
    prev_dir: Path | None,
    old_stats: pa.Table,
    listed: Iterable[str],
    touched: Iterable[str],
    runner: str,
    depth: int,
    min_entries: int,
    stats_every: int,
    workdir: Path,
    damaged: Iterable[str] = (),
) -> pa.Table:
    """The `prefix_stats` table of `version_dir`: touched hosts recomputed (every host on a complete
    round), other listed hosts' rows carried over."""
    listed = set(listed)
    redo = listed if is_complete_round(round_, stats_every) else set(touched) & listed
    parts = host_parts(version_dir, prev_dir, redo, damaged)
    if runner_of(runner).on_cluster:
        fresh = run_prefix_stats(parts, runner, depth, min_entries, workdir)
    else:
        fresh = prefix_stats_here(parts, depth, min_entries)
    kept = carried_over(old_stats, listed - redo, min_entries)
    return pa.concat_tables([kept, fresh]).sort_by([(k, "ascending") for k in KEY])


if __name__ == "__main__":
    MRPrefixStats.run()

"""The round's listing jobs, one map-only job reading each listing part once: its partitions'
subtree hashes (jobs.subtree_hash.summarize) and, with `--state FILE` (write_state), its hosts'
re-partitioning plan (jobs.repartition_plan). `ListingResults.of` reads its records back."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from mrjob.protocol import JSONProtocol, RawValueProtocol

from sharecrawl.crawl_io.crawldb.atomic import write_atomic
from sharecrawl.jobs.repartition_plan import plan_repartition
from sharecrawl.jobs.runner import (
    JobRunner,
    ManifestJob,
    local_tasks,
    run_job,
    write_manifest,
)
from sharecrawl.jobs.scan_cost import HostCost, Limits
from sharecrawl.jobs.subtree_hash import COLUMNS, listing_columns, read_listing, summarize

JOBS = ("hash", "split")
STATE_COLUMNS = "partition_id host share root lo hi parent_id n_folders n_media mem_bytes".split()
PLAN_OPS = ("create", "delete", "merge", "reparent")


@dataclass
class SplitState:
    """What the plan needs beside the listings: the hosts' partitions, their costs, the limits, and
    the partitions found gone and those rescanned this round."""

    partitions: list[dict]
    host_costs: dict[str, HostCost]
    limits: Limits
    gone: set[str] = field(default_factory=set)
    rescanned: set[str] = field(default_factory=set)

    def by_host(self) -> dict[str, list[dict]]:
        hosts: dict[str, list[dict]] = defaultdict(list)
        for row in self.partitions:
            hosts[row["host"]].append(row)
        return hosts

    def to_json(self) -> str:
        partitions = [{c: p.get(c) for c in STATE_COLUMNS} for p in self.partitions]
        costs = {h: astuple(c) for h, c in self.host_costs.items()}
        state = {"partitions": partitions, "host_costs": costs, "limits": astuple(self.limits)}
        return json.dumps(state | {"gone": sorted(self.gone), "rescanned": sorted(self.rescanned)})

    @classmethod
    def from_json(cls, text: str) -> SplitState:
        state = json.loads(text)
        costs = {h: HostCost(*c) for h, c in state["host_costs"].items()}
        limits = Limits(*state["limits"])
        return cls(state["partitions"], costs, limits, set(state["gone"]), set(state["rescanned"]))


def split_state(
    partitions: Iterable[Mapping[str, Any]],
    hosts: Iterable[Mapping[str, Any]],
    rescanned: Iterable[str],
    limits: Limits,
) -> SplitState:
    """The side input from partitions rows and hosts rows (their measured costs)."""
    costs = {h["host"]: HostCost(h["list_s_per_folder"], h["tag_s_per_file"]) for h in hosts}
    rows = [{c: p.get(c) for c in STATE_COLUMNS} for p in partitions]
    return SplitState(rows, costs, limits, rescanned=set(rescanned))


def write_state(path: Path, state: SplitState) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, state.to_json())
    return path


def listing_records(
    listing: pa.Table,
    state: SplitState | None,
    by_host: Mapping[str, list[dict]],
    jobs: Iterable[str],
) -> Iterator[tuple[list[str], Any]]:
    """What one listing part gives: its partitions' summaries, and with `state` (`by_host`:
    state.by_host()) the plan of each of its hosts."""
    jobs = set(jobs)
    if "hash" in jobs:
        for pid, summary in summarize(listing).items():
            yield ["hash", pid], summary
    if "split" in jobs and state is not None:
        hosts = pc.unique(listing["host"]).to_pylist()
        for host in hosts:
            # a part is one host's (a fetch writes it): filtering would copy it whole
            rows = listing if len(hosts) == 1 else listing.filter(pc.equal(listing["host"], host))
            plan = plan_repartition(
                by_host.get(host, []),
                rows,
                limits=state.limits,
                host_costs=state.host_costs,
                gone=state.gone,
                rescanned=state.rescanned,
            )
            for op, items in plan.items():
                yield from ((["plan", op], item) for item in items)


@dataclass
class ListingResults:
    summaries: dict[str, dict]
    plan: dict[str, list]

    @classmethod
    def of(cls, records: Iterable[tuple[list[str], Any]]) -> ListingResults:
        summaries: dict[str, dict] = {}
        plan: dict[str, list] = {op: [] for op in PLAN_OPS}
        for (kind, name), record in records:
            if kind == "plan":
                plan[name].append(record)
            elif name in summaries:  # a partition is scanned by one fetcher: in one part
                raise ValueError(f"partition {name} appears in two listing parts")
            else:
                summaries[name] = record
        plan["create"].sort(key=lambda c: c["partition_id"])
        for op in ("delete", "merge", "reparent"):
            plan[op].sort()
        return cls(summaries, plan)


class MRListingJobs(ManifestJob):
    INPUT_PROTOCOL = RawValueProtocol
    OUTPUT_PROTOCOL = JSONProtocol

    def configure_args(self) -> None:
        super().configure_args()
        self.add_passthru_arg("--jobs", default="hash", help="hash, split or hash,split")
        self.add_file_arg("--state", help="the split's side input (write_state)")

    def mapper_init(self) -> None:
        self.jobs = self.options.jobs.split(",")
        if "split" in self.jobs and not self.options.state:
            raise ValueError("the split job needs --state FILE")
        state = self.options.state
        self.state = SplitState.from_json(Path(state).read_text()) if state else None
        self.by_host = self.state.by_host() if self.state else {}

    def mapper(self, _: None, line: str) -> Iterator[tuple[list[str], Any]]:
        for path in self.part_paths(line):
            listing = listing_columns(pq.read_table(path, columns=COLUMNS), path)
            yield from listing_records(listing, self.state, self.by_host, self.jobs)


def run_listing_jobs(
    parts: list[Path],
    workdir: Path,
    state: SplitState | None,
    runner: JobRunner,
    jobs: Iterable[str] = JOBS,
) -> ListingResults:
    """The listing jobs over these parts (the state given: with the split): in this process
    for the inline runner, else as one mrjob job (its manifest and state in `workdir`)."""
    jobs = [j for j in JOBS if j in set(jobs) and (j != "split" or state is not None)]
    if not parts or not jobs:
        return ListingResults.of(())
    if runner.name == "inline":
        by_host = state.by_host() if state else {}
        return ListingResults.of(
            record
            for part in parts
            for record in listing_records(read_listing(part), state, by_host, jobs)
        )
    # the local runner: one task a core, each a share of the parts
    groups = local_tasks() if runner.name == "local" else 0
    manifest = write_manifest(parts, workdir / "listing.manifest", groups)
    args = ["--jobs", ",".join(jobs)]
    if state is not None:
        args += ["--state", str(write_state(workdir / "split.state.json", state))]
    return ListingResults.of(
        run_job(MRListingJobs, manifest, runner, *args, scratch=workdir / "cluster")
    )


if __name__ == "__main__":
    MRListingJobs.run()

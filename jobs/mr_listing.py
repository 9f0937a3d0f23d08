"""The round's listing jobs in one runner start: per listing part, its partitions' subtree hashes
(jobs.subtree_hash.summarize) and its hosts' re-partitioning plan (jobs.repartition_plan).
One map-only job reads each part once for both. Input: a manifest of listing parts (one host
each) and, for the plan, `--state FILE` (write_state). Output: (["hash", id], summary) and
(["plan", id], {"op": ...}) records; `ListingResults.of` reads them back."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from mrjob.protocol import JSONProtocol, RawValueProtocol

from crawl_io.crawldb.atomic import write_atomic
from jobs.repartition_plan import plan_repartition
from jobs.runner import JobRunner, ManifestJob, local_tasks, read_part, run_job, write_manifest
from jobs.scan_cost import HostCost, Limits
from jobs.subtree_hash import COLUMNS, listing_columns, summarize

JOBS = ("hash", "split")
STATE_COLUMNS = (
    "partition_id",
    "host",
    "share",
    "root",
    "lo",
    "hi",
    "parent_id",
    "n_folders",
    "n_media",
    "mem_bytes",
)
PLAN_OPS = ("create", "delete", "merge", "reparent")


# -- the split's side input ----------------------------------------------------------------
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
        return json.dumps(
            {
                "partitions": [{c: p.get(c) for c in STATE_COLUMNS} for p in self.partitions],
                "host_costs": {
                    h: [c.list_s_per_folder, c.tag_s_per_file] for h, c in self.host_costs.items()
                },
                "limits": [self.limits.max_seconds, self.limits.max_bytes],
                "gone": sorted(self.gone),
                "rescanned": sorted(self.rescanned),
            }
        )

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
    gone: Iterable[str] = (),
) -> SplitState:
    """The side input from partitions rows and hosts rows (their measured costs)."""
    costs = {h["host"]: HostCost(h["list_s_per_folder"], h["tag_s_per_file"]) for h in hosts}
    rows = [{c: p.get(c) for c in STATE_COLUMNS} for p in partitions]
    return SplitState(rows, costs, limits, set(gone), set(rescanned))


def write_state(path: Path, state: SplitState) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, state.to_json())
    return path


# -- one part ------------------------------------------------------------------------------
def listing_records(
    listing: pa.Table,
    state: SplitState | None,
    by_host: Mapping[str, list[dict]] | None = None,
    jobs: Iterable[str] = ("hash",),
) -> Iterator[tuple[list[str], dict]]:
    """What one listing part gives: its partitions' summaries, and with `state` the plan
    of each of its hosts (`by_host`: state.by_host(), when the caller keeps it)."""
    jobs = set(jobs)
    if "hash" in jobs:
        for pid, summary in summarize(listing).items():
            yield ["hash", pid], summary
    if "split" in jobs and state is not None:
        by_host = by_host if by_host is not None else state.by_host()
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
            yield from plan_records(plan)


def plan_records(plan: Mapping[str, list]) -> Iterator[tuple[list[str], dict]]:
    for pid in plan["delete"]:
        yield ["plan", pid], {"op": "delete"}
    for pid, into in plan["merge"]:
        yield ["plan", pid], {"op": "merge", "into": into}
    for row in plan["create"]:
        yield ["plan", row["partition_id"]], {"op": "create", "partition": row}
    for pid, parent in plan["reparent"]:
        yield ["plan", pid], {"op": "reparent", "parent_id": parent}


@dataclass
class ListingResults:
    summaries: dict[str, dict]
    plan: dict[str, list]

    @classmethod
    def of(cls, records: Iterable[tuple[list[str], dict]]) -> ListingResults:
        summaries: dict[str, dict] = {}
        plan: dict[str, list] = {op: [] for op in PLAN_OPS}
        for (kind, pid), record in records:
            if kind == "hash":
                # a partition is scanned by one fetcher, so it lives in one part
                if pid in summaries:
                    raise ValueError(f"partition {pid} appears in two listing parts")
                summaries[pid] = record
                continue
            op = record["op"]
            if op == "delete":
                plan["delete"].append(pid)
            elif op == "merge":
                plan["merge"].append([pid, record["into"]])
            elif op == "create":
                plan["create"].append(record["partition"])
            elif op == "reparent":
                plan["reparent"].append([pid, record["parent_id"]])
            else:
                raise ValueError(f"unknown plan record {record!r}")
        plan["create"].sort(key=lambda c: c["partition_id"])
        for op in ("delete", "merge", "reparent"):
            plan[op].sort()
        return cls(summaries, plan)


# -- the mrjob shell -----------------------------------------------------------------------
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
        self.state = (
            SplitState.from_json(Path(self.options.state).read_text())
            if self.options.state
            else None
        )
        self.by_host = self.state.by_host() if self.state else {}

    def mapper(self, _: None, line: str) -> Iterator[tuple[list[str], dict]]:
        for path in self.part_paths(line):
            listing = listing_columns(read_part(path, COLUMNS), path)
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
    if runner.in_process:
        by_host = state.by_host() if state else {}
        return ListingResults.of(
            record
            for part in parts
            for record in listing_records(
                listing_columns(read_part(str(part), COLUMNS), part), state, by_host, jobs
            )
        )
    # the local runner starts a process per task: as many tasks as cores, each a share
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

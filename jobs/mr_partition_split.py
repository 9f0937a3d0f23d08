"""The B*-subtree split as an mrjob job (thesis §3.2.1, §3.3): its side input and its output.

Input: a manifest of listing parts (jobs.runner), one host each, and `--state FILE`, the
partitions, host costs and limits written by write_state. Each mapper plans one part's hosts
with jobs.bstar_split.plan_repartition and emits the plan as records; plan_from_output turns
the job's output back into the plan.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
from mrjob.protocol import JSONProtocol, RawValueProtocol

from crawl_io.atomic import write_atomic
from jobs.bstar_split import HostCost, Limits, plan_repartition
from jobs.runner import ManifestJob
from jobs.subtree_hash import read_listing


def write_state(
    path: Path,
    partitions: Iterable[Mapping[str, Any]],
    host_costs: Mapping[str, HostCost],
    limits: Limits,
    gone: Iterable[str] = (),
    rescanned: Iterable[str] = (),
) -> Path:
    """The job's side input: current partitions (the columns the plan reads), host costs,
    limits, the partitions found gone and those rescanned (changed or new) this round."""
    columns = ("partition_id", "host", "share", "root", "lo", "hi", "parent_id", "n_folders",
               "n_media", "mem_bytes")  # fmt: skip
    state = {
        "partitions": [{c: p.get(c) for c in columns} for p in partitions],
        "host_costs": {h: [c.list_s_per_folder, c.tag_s_per_file] for h, c in host_costs.items()},
        "limits": [limits.max_seconds, limits.max_bytes],
        "gone": sorted(gone),
        "rescanned": sorted(rescanned),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(state))
    return path


class MRPartitionSplit(ManifestJob):
    """Input: a manifest of listing parts (one host each). `--state FILE` (see write_state).
    Output: (partition_id, {"op": "delete"|"merge"|"create"|"reparent", ...}) per change;
    plan_from_output turns them back into plan_repartition's result."""

    INPUT_PROTOCOL = RawValueProtocol
    OUTPUT_PROTOCOL = JSONProtocol

    def configure_args(self) -> None:
        super().configure_args()
        self.add_file_arg("--state", help="JSON side input written by write_state")

    def mapper_init(self) -> None:
        if not self.options.state:
            raise ValueError("MRPartitionSplit needs --state FILE")
        state = json.loads(Path(self.options.state).read_text())
        self.by_host: dict[str, list[dict]] = defaultdict(list)
        for row in state["partitions"]:
            self.by_host[row["host"]].append(row)
        self.host_costs = {h: HostCost(*c) for h, c in state["host_costs"].items()}
        self.limits = Limits(*state["limits"])
        self.gone = set(state["gone"])
        self.rescanned = set(state.get("rescanned", ()))

    def mapper(self, _: None, part_path: str) -> Iterator[tuple[str, dict]]:
        listing = read_listing(self.part_path(part_path))
        for host in pc.unique(listing["host"]).to_pylist():
            rows = listing.filter(pc.equal(listing["host"], host))
            plan = plan_repartition(self.by_host.get(host, []), rows, limits=self.limits,
                                    host_costs=self.host_costs, gone=self.gone,
                                    rescanned=self.rescanned)  # fmt: skip
            yield from plan_records(plan)


def plan_records(plan: Mapping[str, list]) -> Iterator[tuple[str, dict]]:
    for pid in plan["delete"]:
        yield pid, {"op": "delete"}
    for pid, into in plan["merge"]:
        yield pid, {"op": "merge", "into": into}
    for row in plan["create"]:
        yield row["partition_id"], {"op": "create", "partition": row}
    for pid, parent in plan["reparent"]:
        yield pid, {"op": "reparent", "parent_id": parent}


def plan_from_output(pairs: Iterable[tuple[str, dict]]) -> dict[str, list]:
    plan: dict[str, list] = {"create": [], "delete": [], "merge": [], "reparent": []}
    for pid, record in pairs:
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
    for name in ("delete", "merge", "reparent"):
        plan[name].sort()
    return plan


if __name__ == "__main__":
    MRPartitionSplit.run()

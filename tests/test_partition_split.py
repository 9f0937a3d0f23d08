"""B*-subtree splitting and re-partitioning (thesis §3.2.1, §3.3): properties and the job."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import tempfile
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sharecrawl.crawl_io.connect import open_source
from sharecrawl.crawl_io.crawldb.crawldir import write_parquet
from sharecrawl.crawl_io.schema import LISTING
from sharecrawl.crawl_io.sources import parse_host_url
from sharecrawl.jobs.bstar_split import split_ranges
from sharecrawl.jobs.membership import (
    PartitionKey,
    Ranges,
    assign_partition_ids,
    partition_key,
    share_root,
)
from sharecrawl.jobs.mr_listing import (
    ListingResults,
    MRListingJobs,
    SplitState,
    run_listing_jobs,
    write_state,
)
from sharecrawl.jobs.repartition_plan import plan_repartition
from sharecrawl.jobs.runner import JobRunner, run_job, write_manifest
from sharecrawl.jobs.scan_cost import HostCost, Limits, listing_cost
from sharecrawl.jobs.walk import walk_partition

ROOT = Path(__file__).resolve().parents[1]
COST = HostCost(list_s_per_folder=0.1, tag_s_per_file=1.0)
LIMITS = Limits(max_seconds=50.0, max_bytes=1 << 30)  # about 50 media files a partition
T0 = datetime(2024, 1, 1, tzinfo=UTC)


# -- trees ---------------------------------------------------------------------------------
def tree_table(files: dict[str, int], folders: set[str] = frozenset(), host: str = "h") -> pa.Table:
    """LISTING rows of one share: `files` path -> size, every ancestor folder included."""
    dirs = set(folders)
    for path in files:
        parts = path.split("/")
        dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
    for folder in list(dirs):
        parts = folder.split("/")
        dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
    rows = [(p, True, 0) for p in sorted(dirs)] + [(p, False, s) for p, s in files.items()]
    root_id = share_root(host, "s").id
    return pa.table(
        {
            "host": [host] * len(rows),
            "share": ["s"] * len(rows),
            "path": [p for p, _, _ in rows],
            "name": [p.rsplit("/", 1)[-1] for p, _, _ in rows],
            "is_dir": [d for _, d, _ in rows],
            "size": [s for _, _, s in rows],
            "mtime": [T0] * len(rows),
            "partition_id": [root_id] * len(rows),
        }
    ).cast(LISTING)


def root_row(host: str = "h") -> dict:
    key = share_root(host, "s")
    return {
        "partition_id": key.id,
        "host": host,
        "share": "s",
        "root": "",
        "lo": None,
        "hi": None,
        "parent_id": None,
    }


def apply(partitions: list[dict], plan: dict, table: pa.Table) -> tuple[list[dict], pa.Table]:
    """What Update does with a plan: the partitions after it, and the rows reassigned."""
    gone = set(plan["delete"]) | {child for child, _ in plan["merge"]}
    parts = {p["partition_id"]: dict(p) for p in partitions if p["partition_id"] not in gone}
    for row in plan["create"]:
        parts[row["partition_id"]] = dict(row)
    for pid, parent in plan["reparent"]:
        parts[pid]["parent_id"] = parent
    keys = [partition_key(p) for p in parts.values()]
    table = table.set_column(
        table.schema.get_field_index("partition_id"),
        "partition_id",
        assign_partition_ids(table, keys),
    )
    for pid, part in parts.items():
        rows = table.filter(pc.equal(table["partition_id"], pid))
        n_media = sum(1 for r in rows.to_pylist() if not r["is_dir"] and r["name"].endswith(".mp3"))
        part.update(
            n_folders=pc.sum(rows["is_dir"].cast(pa.int64())).as_py() or 0,
            n_media=n_media,
            mem_bytes=listing_cost(rows, COST)[1],
        )
    return list(parts.values()), table


def split_tree(table: pa.Table, cost: HostCost = COST) -> tuple[list[dict], pa.Table, dict]:
    host = table["host"][0].as_py()
    plan = plan_repartition([root_row(host)], table, limits=LIMITS, host_costs={host: cost})
    parts, table = apply([root_row(host)], plan, table)
    return parts, table, plan


def loads(table: pa.Table, cost: HostCost = COST) -> dict[str, float]:
    return {
        pid: LIMITS.load(*listing_cost(table.filter(pc.equal(table["partition_id"], pid)), cost))
        for pid in pc.unique(table["partition_id"]).to_pylist()
    }


def own_loads(table: pa.Table) -> dict[str, float]:
    """Each folder's own load: its listing and the media directly in it."""
    media = Counter(
        p.rsplit("/", 1)[0] if "/" in p else ""
        for p, d in zip(table["path"].to_pylist(), table["is_dir"].to_pylist(), strict=True)
        if not d and p.endswith(".mp3")
    )
    folders = ["", *pc.filter(table["path"], table["is_dir"]).to_pylist()]
    return {
        f: LIMITS.load(COST.list_s_per_folder + media[f] * COST.tag_s_per_file, 0) for f in folders
    }


def check_partitioning(parts: list[dict], table: pa.Table) -> None:
    """Ranges at one root are disjoint; parents chain up to the share root; sizes in band."""
    by_root: dict[str, list[PartitionKey]] = {}
    for p in parts:
        key = partition_key(p)
        if not key.is_share_root:
            by_root.setdefault(key.root, []).append(key)
    for keys in by_root.values():
        keys.sort(key=lambda k: (k.lo is not None, k.lo or ""))
        for a, b in itertools.pairwise(keys):
            assert a.hi is not None and b.lo is not None and a.hi <= b.lo, (a, b)
    by_id = {p["partition_id"]: p for p in parts}
    roots = [p for p in parts if partition_key(p).is_share_root]
    assert len(roots) == 1
    for p in parts:
        seen, pid = set(), p["partition_id"]
        while by_id[pid]["parent_id"] is not None:
            assert pid not in seen
            seen.add(pid)
            pid = by_id[pid]["parent_id"]
        assert pid == roots[0]["partition_id"]
    # every range's parent holds its root folder
    owners = dict(zip(table["path"].to_pylist(), table["partition_id"].to_pylist(), strict=True))
    for p in parts:
        if p["parent_id"] is not None and p["root"]:
            assert owners[p["root"]] == p["parent_id"]
    # within the limits, but for what one folder's own files weigh (root exception)
    own = own_loads(table)
    max_own = {}
    for path, pid in owners.items():
        if path in own:
            max_own[pid] = max(max_own.get(pid, 0), own[path])
    for pid, load in loads(table).items():
        if pid != roots[0]["partition_id"]:
            assert 0.5 <= load <= 1.75 + max_own.get(pid, 0) + 0.01, (pid, load)


def random_tree(shape: list[tuple[int, int]]) -> dict[str, int]:
    """Folder i hangs under an earlier folder (or the root) and holds a few media files."""
    folders = [""]
    files = {}
    for i, (parent_pick, n_media) in enumerate(shape):
        parent = folders[parent_pick % len(folders)]
        name = f"n{parent_pick % 7}{i:03d}"
        folder = f"{parent}/{name}" if parent else name
        folders.append(folder)
        for j in range(n_media):
            files[f"{folder}/t{j}.mp3"] = 1000 + j
        files[f"{folder}/cover.jpg"] = 7
    return files


shapes = st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 5)), min_size=1, max_size=250)


# -- split ---------------------------------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(shapes)
def test_random_trees_split_into_a_tree_of_partitions_within_limits(shape) -> None:
    table = tree_table(random_tree(shape))
    parts, table, _ = split_tree(table)
    check_partitioning(parts, table)


@settings(max_examples=20, deadline=None)
@given(shapes, st.data())
def test_a_few_files_added_or_removed_repartition_nothing(shape, data) -> None:
    files = random_tree(shape)
    parts, table, _ = split_tree(tree_table(files))
    # rescanned unchanged: nothing to do
    assert plan_repartition(parts, table, limits=LIMITS, host_costs={"h": COST}) == {
        "create": [],
        "delete": [],
        "merge": [],
        "reparent": [],
    }
    media = sorted(p for p in files if p.endswith(".mp3"))
    removed = data.draw(st.lists(st.sampled_from(media), max_size=5, unique=True)) if media else []
    folders = sorted({p.rsplit("/", 1)[0] for p in files})
    added = data.draw(st.lists(st.sampled_from(folders), max_size=5))
    changed = {p: s for p, s in files.items() if p not in removed}
    changed.update({f"{f}/new{i}.mp3": 5 for i, f in enumerate(added)})
    keys = [partition_key(p) for p in parts]
    new_table = tree_table(changed)
    new_table = new_table.set_column(7, "partition_id", assign_partition_ids(new_table, keys))
    plan = plan_repartition(parts, new_table, limits=LIMITS, host_costs={"h": COST})
    assert plan == {"create": [], "delete": [], "merge": [], "reparent": []}


def test_natalie_tree_becomes_range_partitions() -> None:
    files = {f"singer{i:05d}/song.mp3": 3_000_000 for i in range(20_000)}
    parts, table, plan = split_tree(tree_table(files))
    ranges = [p for p in parts if p["root"] == "" and p["parent_id"] is not None]
    total = 20_000 * (COST.list_s_per_folder + COST.tag_s_per_file) / LIMITS.max_seconds
    assert total - 1 <= len(ranges) <= total * 1.05 + 1  # each about one limit
    assert all(p["root"] == "" for p in plan["create"])
    for pid, load in loads(table).items():
        assert load <= 1.05, pid  # one-file folders: every range at the limit, never far over
    check_partitioning(parts, table)


def test_right_weighted_tree() -> None:
    """§3.2.1: V_i holds A (100 media files) and B = V_(i+1), for i = 1..100."""
    files, folder = {}, ""
    for _ in range(100):
        for j in range(100):
            files[f"{folder}A/{j:03d}.mp3".lstrip("/")] = 10
        folder = f"{folder}/B" if folder else "B"
    limits = Limits(max_seconds=300.0, max_bytes=1 << 30)
    table = tree_table(files)
    plan = plan_repartition([root_row()], table, limits=limits, host_costs={"h": COST})
    parts, table = apply([root_row()], plan, table)
    assert 10_000 / 300 / 1.75 <= len(parts) <= 10_000 / 300 / 0.75 + 1
    for pid, cost in (
        (p, listing_cost(table.filter(pc.equal(table["partition_id"], p)), COST))
        for p in pc.unique(table["partition_id"]).to_pylist()
    ):
        assert limits.load(*cost) <= 2.0, pid


def test_thousand_deep_chain() -> None:
    chain = "/".join(f"d{i}" for i in range(1000))
    files = {"/".join(chain.split("/")[: i + 1]) + "/x.mp3": 1 for i in range(1000)}
    parts, table, _ = split_tree(tree_table(files))
    assert 1000 * 1.1 / 50 / 1.75 <= len(parts) <= 1000 * 1.1 / 50 / 0.75 + 1
    check_partitioning(parts, table)


def test_a_slow_host_gets_smaller_partitions() -> None:
    files = {f"a{i // 40:03d}/b{i:05d}/x.txt": 1 for i in range(8000)}
    sizes = {}
    for host, list_s in (("fast", 0.01), ("slow", 0.1)):
        cost = HostCost(list_s_per_folder=list_s, tag_s_per_file=1.0)
        parts, table, _ = split_tree(tree_table(files, host=host), cost)
        sizes[host] = table.num_rows / len(parts)
    assert sizes["slow"] * 5 < sizes["fast"]


def test_root_exception_a_folder_too_big_to_split_stays_whole() -> None:
    files = {f"big/{i:04d}.mp3": 1 for i in range(300)} | {"small/a.mp3": 1}
    parts, table, _ = split_tree(tree_table(files))
    big = table.filter(pc.equal(table["path"], "big"))["partition_id"][0].as_py()
    assert LIMITS.load(*listing_cost(table.filter(pc.equal(table["partition_id"], big)), COST)) > 2
    # rescanning it changes nothing: it cannot be split further
    assert plan_repartition(parts, table, limits=LIMITS, host_costs={"h": COST})["create"] == []
    # the share root's own files cannot be split either
    flat = tree_table({f"{i:04d}.mp3": 1 for i in range(300)})
    assert split_ranges(flat, cost=COST, limits=LIMITS, within=share_root("h", "s")) == []


# -- re-partitioning -----------------------------------------------------------------------
def rescan(parts: list[dict], files: dict[str, int]) -> pa.Table:
    table = tree_table(files)
    keys = [partition_key(p) for p in parts]
    return table.set_column(7, "partition_id", assign_partition_ids(table, keys))


def ops(plan: dict) -> int:
    return len(plan["create"]) + len(plan["delete"]) + len(plan["merge"])


def base_files() -> dict[str, int]:
    return {f"g{g:02d}/al{a:02d}/{t}.mp3": 1 for g in range(20) for a in range(6) for t in range(5)}


def test_partition_changes_grow_linearly_with_file_changes() -> None:
    files = base_files()
    parts, _, _ = split_tree(tree_table(files))
    counts = {}
    for n in (250, 500, 1000, 2000):
        grown = dict(files) | {f"new/al{i // 5:04d}/{i % 5}.mp3": 1 for i in range(n)}
        plan = plan_repartition(parts, rescan(parts, grown), limits=LIMITS, host_costs={"h": COST})
        counts[n] = ops(plan)
        added_load = n * 1.2 / LIMITS.max_seconds
        assert added_load / 1.75 - 1 <= counts[n] <= added_load / 0.75 + 2
    assert counts[2000] > counts[250]
    # removing files: each whole partition gone is one change, a handful none
    shrunk = {p: s for p, s in files.items() if not p.startswith(("g00/", "g01/", "g02/"))}
    plan = plan_repartition(
        parts,
        rescan(parts, shrunk),
        limits=LIMITS,
        host_costs={"h": COST},
        rescanned=[p["partition_id"] for p in parts],
    )
    assert 1 <= ops(plan) <= 3 * 150 * 1.1 / 50 / 0.75 + 2


def test_gone_root_is_deleted_small_merged_big_split(tmp_path: Path) -> None:
    files = base_files()
    parts, table, _ = split_tree(tree_table(files))
    ranges = sorted((p for p in parts if p["parent_id"]), key=lambda p: (p["root"], p["lo"] or ""))
    victim = ranges[1]
    first = table.filter(pc.equal(table["partition_id"], victim["partition_id"]))
    top = sorted({p.split("/")[0] for p in first["path"].to_pylist()})
    # delete: a range's root folder disappears (only for nested ranges; a top range's root is '')
    nested = [p for p in parts if p["root"]]
    if nested:
        gone_root = nested[0]["root"]
        left = {p: s for p, s in files.items() if not p.startswith(gone_root + "/")}
        plan = plan_repartition(parts, rescan(parts, left), limits=LIMITS, host_costs={"h": COST})
        assert nested[0]["partition_id"] in plan["delete"]
    plan = plan_repartition(
        parts,
        rescan(parts, files),
        limits=LIMITS,
        host_costs={"h": COST},
        gone=[victim["partition_id"]],
    )
    assert victim["partition_id"] in plan["delete"]
    # merge: most of a range's files removed
    keep_one = top[0]
    shrunk = {
        p: s
        for p, s in files.items()
        if p.split("/")[0] not in top or p.startswith(keep_one + "/al00/")
    }
    plan = plan_repartition(parts, rescan(parts, shrunk), limits=LIMITS, host_costs={"h": COST})
    assert [victim["partition_id"], victim["parent_id"]] in plan["merge"]
    # split: a range grown past twice the limits is cut, and replaced when its top level is
    grown = dict(files) | {f"{top[0]}/more{i:03d}/{j}.mp3": 1 for i in range(60) for j in range(5)}
    plan = plan_repartition(parts, rescan(parts, grown), limits=LIMITS, host_costs={"h": COST})
    assert plan["create"]
    new_parts, new_table = apply(parts, plan, tree_table(grown))
    check_partitioning(new_parts, new_table)


def test_walks_over_a_real_tree_cover_every_entry_once(tmp_path: Path) -> None:
    files = random_tree([(i * 7919 % 1000, i % 6) for i in range(300)])
    for path in files:
        target = tmp_path / "h" / "s" / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"x")
    parts, table, _ = split_tree(tree_table(files))
    assert len(parts) > 5
    keys = [partition_key(p) for p in parts]
    source = open_source(parse_host_url(f"file://{tmp_path / 'h'}"))
    owner = dict(zip(table["path"].to_pylist(), table["partition_id"].to_pylist(), strict=True))
    walked = Counter()
    for key in keys:
        for path, _ in walk_partition(source, key, Ranges(keys)):
            walked[path] += 1
            assert owner[path] == key.id
    assert walked == Counter(table["path"].to_pylist())


# -- the job ---------------------------------------------------------------------------------
def job_inputs(tmp_path: Path) -> tuple[list[Path], SplitState, dict]:
    """Two hosts, each a freshly injected share root rescanned with its whole tree."""
    listings, partitions, expected = (
        [],
        [],
        {"create": [], "delete": [], "merge": [], "reparent": []},
    )
    for host in ("a", "b"):
        table = tree_table(base_files(), host=host)
        write_parquet(table, tmp_path / f"{host}.parquet")
        listings.append(tmp_path / f"{host}.parquet")
        partitions.append(root_row(host))
        plan = plan_repartition([root_row(host)], table, limits=LIMITS, host_costs={host: COST})
        for name in expected:
            expected[name] += plan[name]
    expected["create"].sort(key=lambda c: c["partition_id"])
    return listings, SplitState(partitions, {"a": COST, "b": COST}, LIMITS), expected


@pytest.mark.parametrize("runner", ["inline", "local"])
def test_job_emits_the_plan(tmp_path: Path, runner: str) -> None:
    parts, state, expected = job_inputs(tmp_path)
    manifest = write_manifest(parts, tmp_path / "manifest")
    args = ("--jobs", "split", "--state", str(write_state(tmp_path / "state.json", state)))
    results = ListingResults.of(run_job(MRListingJobs, manifest, runner, *args))
    assert results.plan == expected and results.plan["create"]
    assert results.summaries == {}  # the split alone


@pytest.mark.parametrize("runner", ["inline", "local"])
def test_the_round_gets_hashes_and_plan_from_one_run(tmp_path: Path, runner: str) -> None:
    parts, state, expected = job_inputs(tmp_path)
    results = run_listing_jobs(parts, tmp_path / "jobs", state, JobRunner(runner))
    assert results.plan == expected
    assert set(results.summaries) == {share_root(h, "s").id for h in ("a", "b")}


def _spark_missing() -> str | None:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "java is not installed"
    return None


@pytest.mark.spark
@pytest.mark.skipif(_spark_missing() is not None, reason=str(_spark_missing()))
def test_job_runs_on_spark(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """... and leaves nothing in the temporary folder: mrjob's Spark runner would keep
    its scratch there (the job's whole output), one folder a job, for ever."""
    parts, state, expected = job_inputs(tmp_path)
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    try:
        results = run_listing_jobs(
            parts, tmp_path / "jobs", state, JobRunner("spark", spark_master="local[2]")
        )
    except subprocess.CalledProcessError as e:  # pragma: no cover - diagnostics only
        pytest.fail(f"spark-submit failed: {e}")
    assert results.plan == expected
    assert set(results.summaries) == {share_root(h, "s").id for h in ("a", "b")}
    assert sorted(p.name for p in temp.iterdir()) == []

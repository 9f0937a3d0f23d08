"""The listing jobs agree with the one hash definition, on every mrjob runner we use and in
this process."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mrjob.step import StepFailedException

from sharecrawl.crawl_io.crawldb.crawldir import write_parquet
from sharecrawl.crawl_io.mediatypes import media_kind
from sharecrawl.crawl_io.schema import LISTING
from sharecrawl.crawl_io.workers import server_pid
from sharecrawl.jobs.mr_listing import ListingResults, MRListingJobs, run_listing_jobs
from sharecrawl.jobs.runner import (
    JOB_TMP_PREFIX,
    JobRunner,
    run_job,
    write_manifest,
)
from sharecrawl.jobs.subtree_hash import (
    duplicate_folders_sql,
    folder_summaries,
    in_partition_order,
    media_mask,
    read_listing,
    summarize,
)
from tests.hash_reference import folder_hashes, partition_hash
from tests.job_failing import MRFailingTask
from tests.job_probe import MRTaskProbe
from tests.outcomes import outcomes_within

names = st.text(
    st.characters(blacklist_characters="/\0", blacklist_categories=("Cs",)), min_size=1, max_size=8
)
trees = st.dictionaries(
    st.lists(names, min_size=1, max_size=4).map("/".join),
    st.tuples(st.integers(0, 10**9), st.integers(0, 2 * 10**15)),
    min_size=1,
    max_size=40,
)


def listing(host: str, pid: str, files: dict[str, tuple[int, int]]) -> pa.Table:
    rows, folders = [], set()
    for path, (size, mtime) in files.items():
        parts = path.split("/")
        folders.update("/".join(parts[:i]) for i in range(1, len(parts)))
        rows.append((path, False, size, mtime))
    rows = [r for r in rows if r[0] not in folders]  # a path cannot be a file and a folder
    rows += [(f, True, 0, 0) for f in folders]
    return pa.Table.from_pylist(
        [
            {
                "host": host,
                "share": "s",
                "path": p,
                "name": p.rsplit("/", 1)[-1],
                "is_dir": d,
                "size": size,
                "mtime": datetime.fromtimestamp(m / 1e6, UTC),
                "partition_id": pid,
            }
            for p, d, size, m in rows
        ],
        LISTING,
    )


def expected(table: pa.Table) -> str:
    mtimes = table["mtime"].cast("int64").to_pylist()
    return partition_hash(
        zip(
            table["path"].to_pylist(),
            table["is_dir"].to_pylist(),
            table["size"].to_pylist(),
            mtimes,
            strict=True,
        )
    )


@settings(max_examples=40, deadline=None)
@given(trees)
def test_mapper_hash_is_the_hash_definition(tmp_path_factory, files) -> None:
    path = tmp_path_factory.mktemp("l") / "h.parquet"
    table = listing("h", "p1", files)
    write_parquet(table, path)
    ((pid, summary),) = summarize(read_listing(path)).items()
    assert pid == "p1" and summary["hash"] == expected(table)
    assert summary["n_files"] + summary["n_folders"] == table.num_rows


def two_parts(tmp_path: Path) -> tuple[list[Path], dict[str, pa.Table]]:
    a = listing("a", "pa", {"x/1.mp3": (5, 1), "x/2.txt": (7, 2), "y.flac": (9, 3)})
    b1 = listing("b", "pb1", {"q/r.ogg": (11, 4)})
    b2 = listing("b", "pb2", {"z/w.mp4": (13, 5)})
    write_parquet(a, tmp_path / "a.parquet")
    write_parquet(pa.concat_tables([b1, b2]), tmp_path / "b.parquet")
    return [tmp_path / "a.parquet", tmp_path / "b.parquet"], {"pa": a, "pb1": b1, "pb2": b2}


@pytest.mark.parametrize("runner", ["inline", "local"])
def test_job_runs_on_mrjob_runners(tmp_path: Path, runner: str) -> None:
    parts, tables = two_parts(tmp_path)
    manifest = write_manifest(parts, tmp_path / "m")
    out = ListingResults.of(run_job(MRListingJobs, manifest, runner)).summaries
    assert out == {
        "pa": {
            "hash": expected(tables["pa"]),
            "n_folders": 1,
            "n_files": 3,
            "n_media": 2,
            "bytes": 21,
        },
        "pb1": {
            "hash": expected(tables["pb1"]),
            "n_folders": 1,
            "n_files": 1,
            "n_media": 1,
            "bytes": 11,
        },
        "pb2": {
            "hash": expected(tables["pb2"]),
            "n_folders": 1,
            "n_files": 1,
            "n_media": 1,
            "bytes": 13,
        },
    }


def test_a_local_jobs_tasks_run_in_forked_workers_each_in_its_own_process(
    tmp_path: Path,
) -> None:
    """The local runner's tasks run in workers of this process's fork server, which has
    imported the jobs, so they start without importing them again; each still has its own
    process, working folder, environment and error file (jobs.runner.run_job)."""
    for name in ("one", "two"):
        (tmp_path / name).write_text("x\n")
    manifest = write_manifest([tmp_path / "one", tmp_path / "two"], tmp_path / "m")
    cwd, env = os.getcwd(), dict(os.environ)
    records = list(run_job(MRTaskProbe, manifest, "local"))
    got: dict[str, list] = {}
    for key, value in records:
        got.setdefault(key, []).append(value)
    server = server_pid()
    assert os.getpid() not in got["pid"] and got["parent pid"] == [server] * 2
    assert got["listing job imported"] == [True] * 2  # by the server, not by the task
    assert all(JOB_TMP_PREFIX in wd and wd != cwd for wd in got["cwd"])
    assert sorted(Path(p).name for p in got["map input"]) == ["m", "m"]
    assert os.getcwd() == cwd and dict(os.environ) == env
    assert all(JOB_TMP_PREFIX in e and Path(e).name == "stderr" for e in got["stderr"])


def test_a_local_job_writes_nothing_on_stderr(tmp_path: Path) -> None:
    """The local runner's workers keep mrjob's notices to errors, as the crawl process does:
    a round's output has no "No configs specified" per job. In a process of its own, whose
    fork server writes where it does."""
    (tmp_path / "one").write_text("x\n")
    manifest = write_manifest([tmp_path / "one"], tmp_path / "m")
    code = (
        "from pathlib import Path; from sharecrawl.jobs.runner import run_job; "
        "from tests.job_probe import MRTaskProbe; "
        f"print(len(list(run_job(MRTaskProbe, Path({str(manifest)!r}), 'local'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert (done.stdout, done.stderr) == ("6\n", "")


def test_a_failing_task_fails_its_job_with_the_cause(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for name in ("good", "bad"):
        (tmp_path / name).write_text("x\n")
    manifest = write_manifest([tmp_path / "good", tmp_path / "bad"], tmp_path / "m")
    with pytest.raises(StepFailedException, match="ValueError"):
        list(run_job(MRFailingTask, manifest, "local"))
    assert "a task that fails on line 'bad'" in caplog.text  # the task's traceback, logged


def test_a_task_killed_by_the_kernel_fails_its_job_rather_than_hang(tmp_path: Path) -> None:
    """A task whose process is killed (SIGKILL, as the out-of-memory killer does) fails its
    job, saying so, every time; multiprocessing.Pool would wait for its result for ever, and
    so did, now and then, a ProcessPoolExecutor (tests/test_workers.py). The jobs run in a
    thread of their own (tests/outcomes.py)."""
    for name in ("good", "die"):
        (tmp_path / name).write_text("x\n")
    manifest = write_manifest([tmp_path / "good", tmp_path / "die"], tmp_path / "m")
    outcomes = outcomes_within(lambda: list(run_job(MRFailingTask, manifest, "local")), 10)
    assert len(outcomes) == 10, f"job {len(outcomes) + 1} still waits for its killed task"
    assert all(isinstance(e, StepFailedException) for e in outcomes), outcomes
    assert "a task's process was killed by SIGKILL" in str(outcomes[0])


@pytest.mark.parametrize("runner", ["inline", "local"])
def test_the_round_runs_the_listing_jobs_in_process_or_as_one_job_alike(
    tmp_path: Path, runner: str
) -> None:
    """Inline: the pure functions in this process; local: one mrjob job whose manifest
    groups the parts into one line per task. Same summaries either way."""
    parts, tables = two_parts(tmp_path)
    got = run_listing_jobs(parts, tmp_path / "jobs", None, JobRunner(runner))
    assert got.summaries == {pid: summarize(t)[pid] for pid, t in tables.items()}
    manifest = tmp_path / "jobs" / "listing.manifest"
    assert manifest.exists() == (runner == "local")  # in process: no manifest, no job


def test_a_partition_in_two_listing_parts_is_an_error(tmp_path: Path) -> None:
    a = listing("a", "p", {"x/1.mp3": (5, 1)})
    write_parquet(a, tmp_path / "a.parquet")
    write_parquet(a, tmp_path / "b.parquet")
    with pytest.raises(ValueError, match="two listing parts"):
        run_listing_jobs(
            [tmp_path / "a.parquet", tmp_path / "b.parquet"], tmp_path, None, JobRunner("inline")
        )


@settings(max_examples=30, deadline=None)
@given(trees, st.randoms(use_true_random=False))
def test_rows_in_fetch_order_or_shuffled_hash_alike(files, rnd) -> None:
    """A fetch writes a partition's rows in canonical order, and summarize then does not
    sort them; any other order is sorted first. Both give the hashes of the definition."""
    table = pa.concat_tables([listing("h", "p1", files), listing("h", "p2", files)])
    ordered = in_partition_order(table)
    assert in_partition_order(ordered) is ordered  # in order: taken as it is
    rows = list(range(table.num_rows))
    rnd.shuffle(rows)
    shuffled = table.take(pa.array(rows))
    assert summarize(shuffled) == summarize(ordered)
    assert summarize(ordered)["p1"]["hash"] == expected(listing("h", "p1", files))


def reference_folders(table: pa.Table, with_times: bool) -> dict[str, str]:
    mtimes = table["mtime"].cast("int64").to_pylist()
    rows = zip(
        table["path"].to_pylist(),
        table["is_dir"].to_pylist(),
        table["size"].to_pylist(),
        mtimes,
        strict=True,
    )
    return folder_hashes(rows, with_times=with_times)


@settings(max_examples=40, deadline=None)
@given(trees)
def test_folder_hashes_are_the_hash_definition(files) -> None:
    table = listing("h", "p1", files)
    got = folder_summaries(table).to_pylist()
    folders = {
        p for p, d in zip(table["path"].to_pylist(), table["is_dir"].to_pylist(), strict=True) if d
    }
    assert {r["path"] for r in got} == folders
    with_times, content = reference_folders(table, True), reference_folders(table, False)
    for row in got:
        assert row["hash"] == with_times[row["path"]]
        assert row["content_hash"] == content[row["path"]]
        below = [
            f for f, _ in files.items() if f.startswith(row["path"] + "/") and f not in folders
        ]
        assert row["n_files"] == len(below)
        assert row["bytes"] == sum(files[f][0] for f in below)


def test_duplicate_folders_view_finds_an_album_on_two_hosts() -> None:
    album = {f"Album/{i:02d}.mp3": (1000 + i, 0) for i in range(4)}
    a = listing("a", "pa", {**album, "Other/x.mp3": (5, 1)})
    b = listing("b", "pb", {f"Music/{k}": (size, 99) for k, (size, _) in album.items()})
    c = listing("c", "pc", {"Small/1.mp3": (5, 1)})  # same as nothing: too few files
    con = duckdb.connect()
    con.register("folders", pa.concat_tables([folder_summaries(t) for t in (a, b, c)]))
    sql = duplicate_folders_sql("folders", min_files=3)
    rows = con.sql(f"SELECT n_hosts, n_files, hosts, copies FROM ({sql})").fetchall()
    assert rows == [
        (
            2,
            4,
            ["a", "b"],
            [
                {"host": "a", "share": "s", "path": "Album"},
                {"host": "b", "share": "s", "path": "Music/Album"},
            ],
        )
    ]


NAME_PARTS = st.sampled_from(
    [
        "mp3",
        "MP3",
        "flac",
        "Mkv",
        "txt",
        "jpg",
        ".",
        "..",
        "a",
        " ",
        "\n",
        "mp3\n",
        "m\u212av",
        "ｍｐ3",
        "ogg.txt",
        "tar.gz",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(NAME_PARTS, max_size=4).map("".join), max_size=30))
def test_media_mask_agrees_with_media_kind(names: list[str]) -> None:
    """The vectorised test the jobs use is the fetcher's media_kind, name for name."""
    assert media_mask(pa.array(names, pa.string())).to_pylist() == [
        media_kind(n) is not None for n in names
    ]


def test_a_killed_crawls_job_scratch_goes_with_the_next_job_that_uses_the_folder(
    tmp_path: Path,
) -> None:
    """A job's scratch folder (`scratch`, in the segment) is its own and goes with it; one
    that a killed crawl's job left is removed by the next job using the same folder, and
    a running job's is not."""
    (tmp_path / "one").write_text("x\n")
    manifest = write_manifest([tmp_path / "one"], tmp_path / "m")
    scratch = tmp_path / "cluster"
    dead = subprocess.Popen(["true"])
    dead.wait()
    killed = scratch / f"{JOB_TMP_PREFIX}{dead.pid}-abc" / "output"
    running = scratch / f"{JOB_TMP_PREFIX}{os.getppid()}-def" / "output"
    for folder in (killed, running):
        folder.mkdir(parents=True)
        (folder / "part-00000").write_text("row\n")
    assert list(run_job(MRTaskProbe, manifest, "local", scratch=scratch))
    assert sorted(p.name for p in scratch.iterdir()) == [running.parent.name]

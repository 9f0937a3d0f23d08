"""A round under Luigi's central scheduler: a real `luigid` on a loopback port, a crawl
process that names it in its config, the round's Fetch split into shard tasks."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir
from sharecrawl.crawl_io.crawldb.lock import CrawlLock
from sharecrawl.jobs.mr_listing import run_listing_jobs
from sharecrawl.jobs.runner import JobRunner
from sharecrawl.pipeline.fetch import FetchShard
from sharecrawl.pipeline.rounds import share_connection_cap
from sharecrawl.pipeline.settings import read_settings
from sharecrawl.pipeline.shards import shard_hosts
from tests.cliproc import cli_argv, run_cli
from tests.conftest import LAN
from tests.luigid import LUIGID, LuigidFailed
from tests.luigid import running_luigid as luigid_process
from tests.smbd import free_port
from tests.test_partition_split import job_inputs


@contextmanager
def running_luigid(home: Path, config: str) -> Iterator[int]:
    """tests.luigid's, skipped where luigid is not installed."""
    if not LUIGID.exists():
        pytest.skip(f"luigid is not installed next to {sys.executable}")
    try:
        with luigid_process(home, config) as port:
            yield port
    except LuigidFailed as e:
        pytest.fail(str(e))


@pytest.fixture
def luigid(tmp_path: Path) -> Iterator[int]:
    """A luigid capping SMB connections at 1, fewer than a shard's `crawlers`."""
    with running_luigid(tmp_path / "luigid", "[resources]\nsmb_connections = 1\n") as port:
        yield port


def resources(port: int) -> dict[str, int]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/resource_list") as r:
        return {x["name"]: x["num_total"] for x in json.load(r)["response"]}


def scheduler_tasks(port: int, status: str) -> dict[str, dict]:
    data = urllib.parse.quote(json.dumps({"status": status}))
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/task_list?data={data}") as r:
        return json.load(r)["response"]


def build(lan: LAN, hosts: int) -> list[str]:
    names = [f"pc{i:02d}" for i in range(hosts)]
    for i, name in enumerate(names):
        lan.media(name, f"Music/Artist {i}/{i:02d} song.mp3", "mp3", title=f"Song {i}")
        lan.media(name, "Video/clip.mp4", "mp4", title=f"Clip {i}")
    lan.write_hosts(*names)
    return names


def tables(crawl_dir: Path) -> dict[str, list]:
    """The crawl's partitions and files, in a stable order."""
    crawl = CrawlDir(crawl_dir)
    out = {}
    wanted = {
        "partitions": ["partition_id", "hash", "n_files", "n_media"],
        "files": ["host", "share", "path", "size", "partition_id"],
    }
    for name, columns in wanted.items():
        table = crawl.read(crawl.current(), name).select(columns)
        out[name] = sorted(table.to_pylist(), key=lambda r: json.dumps(r, sort_keys=True))
    return out


def test_a_round_under_luigid_runs_each_shard_once_and_matches_a_local_round(
    lan: LAN, luigid: int, tmp_path: Path
) -> None:
    hosts = build(lan, 6)
    cfg = tmp_path / "central.cfg"
    cfg.write_text(
        f"[core]\ndefault_scheduler_host = 127.0.0.1\ndefault_scheduler_port = {luigid}\n"
        "[sharecrawl]\nfetch_shards = 3\ncrawlers = 2\n"
    )
    central = tmp_path / "central-crawl"
    done = run_cli(
        "crawl",
        "--crawl-dir",
        str(central),
        "--hosts-file",
        str(lan.hosts_file),
        "--rounds",
        "1",
        "--runner",
        "inline",
        config=cfg,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (central / "crawldb" / "CURRENT").read_text().strip() == "v000001"

    # luigid ran the round: three fetch shards, each once, and every stage after them
    ran = scheduler_tasks(luigid, "DONE")
    shards = sorted(
        (t["params"]["shard"], t["params"]["shards"])
        for t in ran.values()
        if t["name"] == "FetchShard" and t["params"]["round"] == "1"
    )
    assert shards == [("0", "3"), ("1", "3"), ("2", "3")]
    # the visualiser shows each shard by its round and number (its display_name)
    names = sorted(t["display_name"] for t in ran.values() if t["name"] == "FetchShard")
    assert names == [
        f"FetchShard(crawl_dir={central}, round=1, shard={i}, shards=3)" for i in range(3)
    ]
    assert {"Generate", "Fetch", "Update", "Index"} <= {t["name"] for t in ran.values()}
    assert scheduler_tasks(luigid, "FAILED") == {}
    # luigid kept its own cap, and the shards asked for no more (or they would never run)
    assert resources(luigid) == {"smb_connections": 1}

    # each host fetched by its shard, once; the shards' markers count them
    seg = central / "segments" / "r000001"
    markers = sorted((seg / "fetch").iterdir())
    assert [m.name for m in markers] == ["shard-000-of-003", "shard-001-of-003", "shard-002-of-003"]
    per_shard = [int(m.read_text().split()[0]) for m in markers]
    assigned = shard_hosts(pq.read_table(seg / "fetchlist.parquet"), 3)
    assert sorted(assigned) == host_keys(seg, hosts)
    assert per_shard == [sum(s == i for s in assigned.values()) for i in range(3)]
    assert per_shard == [2, 2, 2]  # six new hosts, alike in cost: two a shard

    # the same tables as one process with the local scheduler
    lan.crawl()
    assert tables(central) == tables(lan.crawl_dir)
    assert len(tables(central)["files"]) == 3 * len(hosts)  # a folder and two media files


def test_two_crawl_processes_share_a_round_through_luigid(lan: LAN, tmp_path: Path) -> None:
    """The round's driver (`sharecrawl crawl --scheduler-url`, holding the crawl lock) and a
    fetch worker that joins it (`sharecrawl crawl --join`) share the shards; a second,
    independent crawl is still refused."""
    with running_luigid(tmp_path / "luigid", "[resources]\nsmb_connections = 4\n") as port:
        two_processes_share_a_round(lan, port, tmp_path)


def two_processes_share_a_round(lan: LAN, luigid: int, tmp_path: Path) -> None:
    hosts = build(lan, 8)
    cfg = tmp_path / "central.cfg"
    cfg.write_text("[sharecrawl]\nfetch_shards = 4\ncrawlers = 1\nround_seconds = 300\n")
    scheduler = ["--scheduler-url", f"http://127.0.0.1:{luigid}"]  # the CLI's flag
    central = tmp_path / "central-crawl"
    central.mkdir()
    env = {**os.environ, "LUIGI_CONFIG_PATH": str(cfg)}
    # the worker is configured otherwise: it takes the driver's shard count from luigid
    worker_cfg = tmp_path / "worker.cfg"
    worker_cfg.write_text(cfg.read_text().replace("fetch_shards = 4", "fetch_shards = 3"))
    repo = Path(__file__).resolve().parents[1]
    worker = subprocess.Popen(
        cli_argv("crawl", "--join", "--crawl-dir", str(central), *scheduler),
        cwd=repo,
        env={**env, "LUIGI_CONFIG_PATH": str(worker_cfg)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        driver = subprocess.Popen(
            cli_argv(
                "crawl",
                "--crawl-dir",
                str(central),
                "--hosts-file",
                str(lan.hosts_file),
                "--rounds",
                "1",
                "--runner",
                "inline",
                *scheduler,
            ),
            cwd=repo,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        # while the round runs, a second crawl of the same directory is refused
        deadline = time.monotonic() + 60
        while not (central / "LOCK").exists() or not (central / "LOCK").read_text():
            assert time.monotonic() < deadline and driver.poll() is None
            time.sleep(0.1)
        second = run_cli(
            "crawl",
            "--crawl-dir",
            str(central),
            "--hosts-file",
            str(lan.hosts_file),
            "--rounds",
            "1",
            config=cfg,
        )
        if driver.poll() is None:  # (the round may have ended meanwhile)
            assert second.returncode == 75 and "holds" in second.stderr
        out, err = driver.communicate(timeout=600)
        assert driver.returncode == 0, err[-3000:]
        w_out, w_err = worker.communicate(timeout=120)
        assert worker.returncode == 0, w_err[-3000:]
    finally:
        for proc in (worker, locals().get("driver")):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)
    assert "round 1: fetch shards done" in w_out
    assert (central / "crawldb" / "CURRENT").read_text().strip() == "v000001"

    seg = central / "segments" / "r000001"
    names = sorted(m.name for m in (seg / "fetch").iterdir())
    assert names == [f"shard-{i:03d}-of-004" for i in range(4)]
    markers = [(seg / "fetch" / name).read_text() for name in names]
    pids = {int(m.split("pid ")[1]) for m in markers}
    assert pids == {driver.pid, worker.pid}  # both fetched shards
    assert sum(int(m.split()[0]) for m in markers) == len(hosts)
    workers = pq.read_table(seg / "fetchlog.parquet", columns=["worker"])["worker"].to_pylist()
    assert all(re.fullmatch(rf"{re.escape(socket.gethostname())}:\d+", w or "") for w in workers)
    assert len(set(workers)) >= 2  # the fetch log names each partition's fetching process
    lan.crawl()
    assert tables(central) == tables(lan.crawl_dir)


def host_keys(seg: Path, names: list[str]) -> list[str]:
    """The host keys of a round's fetch list: one per host named."""
    keys = pq.read_table(seg / "fetchlist.parquet", columns=["host"])["host"].to_pylist()
    assert len(set(keys)) == len(names)
    return sorted(set(keys))


def test_a_central_scheduler_without_a_cap_is_told_ours(tmp_path: Path) -> None:
    with running_luigid(tmp_path / "bare", "") as port:
        assert resources(port) == {}
        ours = read_settings(scheduler_url=f"http://127.0.0.1:{port}/")
        assert share_connection_cap(ours) == ours  # no cap there: ours stands
        assert resources(port) == {"smb_connections": 64}  # luigi.cfg's


# -- the jobs on a Spark standalone cluster --------------------------------------------------


def test_the_zip_a_cluster_gets_is_enough_to_import_the_jobs(tmp_path: Path) -> None:
    """What `--py-files` ships (jobs.runner.packages_zip): the package's __init__, jobs and
    crawl_io, from which an interpreter with no sharecrawl installed imports the job modules
    Spark runs."""
    import sysconfig
    import zipfile

    from sharecrawl.jobs.runner import packages_zip

    shipped = packages_zip(tmp_path)
    names = set(zipfile.ZipFile(shipped).namelist())
    assert {
        "sharecrawl/__init__.py",
        "sharecrawl/jobs/mr_listing.py",
        "sharecrawl/jobs/mr_prefix_stats.py",
        "sharecrawl/crawl_io/schema.py",
        "sharecrawl/crawl_io/crawldb/atomic.py",
    } <= names
    assert not any(n.startswith(("sharecrawl/pipeline/", "sharecrawl/cli/")) for n in names)
    # -S: no site, so neither the venv's .pth files nor its editable install of sharecrawl;
    # the dependencies' folders (pyarrow, mrjob) named on the path alone
    deps = sorted({sysconfig.get_paths()[k] for k in ("purelib", "platlib")})
    probe = (
        "import sharecrawl.jobs.mr_listing as a, sharecrawl.jobs.mr_prefix_stats as b\n"
        "print(a.__file__)\nprint(b.MRPrefixStats.__module__)"
    )

    def run(*path: str) -> subprocess.CompletedProcess[str]:
        env = {"PYTHONPATH": os.pathsep.join(path), "PATH": os.environ.get("PATH", "")}
        argv = [sys.executable, "-S", "-P", "-c", probe]
        return subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True)

    alone = run(*deps)
    assert alone.returncode == 1 and "No module named 'sharecrawl'" in alone.stderr
    with_zip = run(str(shipped), *deps)
    assert with_zip.returncode == 0, with_zip.stderr
    assert with_zip.stdout.splitlines() == [
        str(shipped / "sharecrawl" / "jobs" / "mr_listing.py"),
        "sharecrawl.jobs.mr_prefix_stats",
    ]


SPARK_HOME = Path(sys.executable).parents[1] / "lib" / "python3.11" / "site-packages" / "pyspark"


def spark_missing() -> str | None:
    if not (SPARK_HOME / "bin" / "spark-class").exists():
        return "pyspark (its spark-class) is not installed"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "java is not installed"
    return None


def spark_json(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/", timeout=5) as r:
        return json.load(r)


@contextmanager
def spark_cluster(home: Path, workers: int = 1) -> Iterator[str]:
    """A Spark standalone master and `workers` workers on loopback ports, started with
    pyspark's own spark-class, each in its own session; ended by their pids."""
    home.mkdir()
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(home),
        "SPARK_WORKER_DIR": str(home / "work"),
    }
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    port, ui = free_port(), free_port()
    master = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen] = []

    def start(name: str, *args: str) -> None:
        with open(home / f"{name}.log", "w") as log:  # the child keeps its own descriptor
            procs.append(
                subprocess.Popen(
                    [spark_class, *args],
                    env=env,
                    cwd=home,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

    try:
        start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(ui),
        )
        for i in range(workers):
            start(
                f"worker{i}",
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                "127.0.0.1",
                "--cores",
                "1",
                "--memory",
                "1g",
                "--webui-port",
                str(free_port()),
                "--work-dir",
                str(home / f"work{i}"),
                master,
            )
        deadline = time.monotonic() + 120
        while True:
            try:
                alive = [w for w in spark_json(ui)["workers"] if w["state"] == "ALIVE"]
                if len(alive) == workers:
                    break
            except (OSError, ValueError):
                # ValueError: a master just up answered /json/ with an HTML page once, on
                # a loaded CI machine (likely before its JSON handler was attached)
                pass
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                logs = "".join(
                    (home / f).read_text()[-1500:] for f in os.listdir(home) if f.endswith(".log")
                )
                pytest.fail(f"the Spark cluster did not start:\n{logs}")
            time.sleep(0.5)
        yield master
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.skipif(spark_missing() is not None, reason=str(spark_missing()))
def test_the_listing_jobs_on_a_spark_standalone_cluster_equal_the_inline_runner(
    tmp_path: Path,
) -> None:
    parts, state, _ = job_inputs(tmp_path)
    inline = run_listing_jobs(parts, tmp_path / "inline", state, JobRunner("inline"))
    assert inline.plan["create"] and inline.summaries
    # the executors see the crawl dir mounted elsewhere (cluster_crawl_dir): here a symlink
    mount = tmp_path.parent / f"{tmp_path.name}-mount"
    mount.symlink_to(tmp_path, target_is_directory=True)
    with spark_cluster(tmp_path / "spark", workers=2) as master:
        runner = JobRunner(
            "spark", spark_master=master, crawl_root=str(tmp_path), cluster_root=str(mount)
        )
        assert runner.task_path(tmp_path / "jobs") == f"{mount}/jobs"
        on_spark = run_listing_jobs(parts, tmp_path / "jobs", state, runner)
    assert on_spark.summaries == inline.summaries
    assert on_spark.plan == inline.plan
    # the job's scratch in the crawl directory (uploads, output) went with it
    scratch = tmp_path / "jobs" / "cluster"
    assert scratch.is_dir() and list(scratch.iterdir()) == []


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.skipif(spark_missing() is not None, reason=str(spark_missing()))
def test_a_round_with_its_jobs_on_spark_equals_an_inline_round(
    lan: LAN, tmp_path: Path, run_json
) -> None:
    """`runner = spark` (luigi.cfg, or --runner) runs Update's jobs through mrjob's Spark
    runner, here on local[2]; the round's tables equal those of the inline runner."""
    build(lan, 3)
    lan.crawl(runner="spark")
    other = LAN(tmp_path / "again")
    other.hosts_dir, other.hosts_file = lan.hosts_dir, lan.hosts_file
    other.crawl_dir = tmp_path / "again-crawl"
    other.crawl(runner="inline")
    assert tables(lan.crawl_dir) == tables(other.crawl_dir)
    stats = "SELECT * FROM prefix_stats ORDER BY ALL"
    on_spark = run_json(lan, "sql", stats)
    assert on_spark == run_json(other, "sql", stats)
    assert {row["host"] for row in on_spark} == {f"pc{i:02d}" for i in range(3)}


@pytest.mark.parametrize(
    ("cap", "crawlers", "expected"),
    [(3, 5, {"smb_connections": 3}), (64, 5, {"smb_connections": 5}), (0, 5, {})],
)
def test_a_shard_holds_its_connections_within_the_cap(
    luigi_cfg, cap: int, crawlers: int, expected: dict
) -> None:
    """A shard asks for `crawlers` SMB connections, never more than the cap (it would never
    run); no cap, no resource (a scheduler caps an unknown resource at 1)."""
    luigi_cfg(f"[resources]\nsmb_connections = {cap}\n[sharecrawl]\ncrawlers = {crawlers}\n")
    shard = FetchShard(crawl_dir="/nowhere", round=1, shard=0, shards=1, settings=read_settings())
    assert shard.resources == expected


def test_a_worker_that_cannot_reach_the_scheduler_says_so_in_one_line(tmp_path: Path) -> None:
    crawl_dir = tmp_path / "crawl"
    (crawl_dir / "segments" / "r000001").mkdir(parents=True)
    (crawl_dir / "segments" / "r000001" / "fetchlist.parquet").touch()  # a round at its fetch
    cfg = tmp_path / "c.cfg"
    cfg.write_text(
        f"[core]\ndefault_scheduler_url = http://127.0.0.1:{free_port()}/\n"
        "rpc_retry_attempts = 1\nrpc_retry_wait = 0\n"
        "[sharecrawl]\nround_seconds = 5\n"  # how long a worker waits for the round
    )
    with CrawlLock(crawl_dir).acquire():  # its driver
        done = run_cli("crawl", "--join", "--crawl-dir", str(crawl_dir), config=cfg, timeout_s=120)
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1].startswith(
        "sharecrawl: error: cannot reach the central scheduler at http://127.0.0.1:"
    )
    assert "Traceback" not in done.stderr

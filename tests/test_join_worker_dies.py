"""A `crawl --join` fetch worker killed, or a driver interrupted, while a host part is
half-way into place, under a real luigid: the round still ends with every host fetched once,
no temporary file left, the tables of a one-process crawl; and the driver's cleanup never
takes a part that another machine's worker is still writing.

The crawl processes run with tests/join_shim first on PYTHONPATH: a host's fetchlog part
waits before its rename while the test's hold file exists (its listing and media parts are
in place by then: the host is half-written), and a worker can be another machine."""

from __future__ import annotations

import functools
import os
import signal
import socket
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from sharecrawl.crawl_io.crawldb.tempfiles import TEMP_NAME
from tests.cliproc import cli_argv
from tests.conftest import LAN
from tests.test_scale_out import build, host_keys, running_luigid, tables
from tests.test_scale_out_retry import RETRY_LUIGID, group_members, wait_for

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
SHIM = Path(__file__).with_name("join_shim")
OTHER = "otherbox.test"  # the joining worker's machine in the second test


def crawl_process(
    args: list[str], cfg: Path, log: Path, hold: Path, machine: str = ""
) -> subprocess.Popen:
    """`sharecrawl crawl ARGS` in a session of its own; as `machine` when given: in a host
    name and pid namespace of its own where the system allows it (pids there mean nothing
    here, as on another machine), else only by the name the shim gives it."""
    env = {
        **os.environ,
        "LUIGI_CONFIG_PATH": str(cfg),
        "PYTHONPATH": str(SHIM),
        "SHARECRAWL_TEST_HOLD": str(hold),
    }
    prefix: list[str] = []
    if machine and other_machine_works():
        prefix = [*UNSHARE, "sh", "-c", f'hostname {machine} && exec "$@"', "sh"]
    elif machine:
        env["SHARECRAWL_TEST_MACHINE"] = machine
    with open(log, "w") as out:  # the child keeps its own descriptor
        return subprocess.Popen(
            [*prefix, *cli_argv("crawl", *args)],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


UNSHARE = ["unshare", "--uts", "--pid", "--fork", "--mount-proc"]


@functools.cache
def other_machine_works() -> bool:
    try:
        done = subprocess.run([*UNSHARE, "hostname", OTHER], capture_output=True, timeout=30)
    except OSError:
        return False
    return done.returncode == 0


def temp_files(root: Path) -> list[Path]:
    return [
        Path(d, n) for d, dirs, files in os.walk(root) for n in dirs + files if TEMP_NAME.match(n)
    ]


def held_part(seg: Path, pids: set[int] | None = None, machine: str | None = None) -> Path | None:
    """A fetchlog part's temporary file in `seg`, of a writer among `pids` or of `machine`."""
    for path in temp_files(seg / "fetchlog"):
        match = TEMP_NAME.match(path.name)
        assert match is not None
        if (pids is not None and int(match["pid"]) in pids) or match["machine"] == machine:
            return path
    return None


def fetching_workers(log: list[dict]) -> dict[str, str]:
    """host -> the one worker whose fetch every fetchlog row of the host comes from."""
    workers: dict[str, set[str]] = {}
    for row in log:
        workers.setdefault(row["host"], set()).add(row["worker"])
    assert all(len(w) == 1 for w in workers.values()), workers
    return {host: w.pop() for host, w in workers.items()}


def setup(lan: LAN, tmp_path: Path, port: int) -> tuple[Path, Path, list[str], Path]:
    """Four file:// hosts, alike in cost (two shards of two hosts); a shard fetches one host
    at a time. Returns the config, the crawl dir, the crawl's common arguments, the hold."""
    build(lan, 4)
    cfg = tmp_path / "central.cfg"
    cfg.write_text("[sharecrawl]\nfetch_shards = 2\ncrawlers = 1\nround_seconds = 300\n")
    central = tmp_path / "central-crawl"
    central.mkdir()
    hold = tmp_path / "hold"
    hold.touch()
    return (
        cfg,
        central,
        ["--crawl-dir", str(central), "--scheduler-url", f"http://127.0.0.1:{port}"],
        hold,
    )


def driver_args(lan: LAN) -> list[str]:
    return ["--hosts-file", str(lan.hosts_file), "--rounds", "1", "--runner", "inline"]


def end(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def test_a_join_worker_killed_mid_write_leaves_no_trace_and_its_shard_is_fetched(
    lan: LAN, tmp_path: Path
) -> None:
    with running_luigid(tmp_path / "luigid", RETRY_LUIGID) as port:
        cfg, central, common, hold = setup(lan, tmp_path, port)
        seg = central / "segments" / "r000001"
        driver = crawl_process([*common, *driver_args(lan)], cfg, tmp_path / "driver.log", hold)
        joiner = crawl_process([*common, "--join"], cfg, tmp_path / "joiner.log", hold)
        procs = [driver, joiner]
        try:
            # both shards start (the driver's is held too, so the joiner surely has one)
            part = wait_for(
                "the joiner's half-written host",
                lambda: held_part(seg, group_members(joiner.pid)),
                procs,
            )
            assert isinstance(part, Path)
            host_file = part.name.split(".tmp")[0][1:]
            assert (seg / "listing" / host_file).exists()  # in place: the host is half-written
            assert not (seg / "fetchlog" / host_file).exists()
            joiners = group_members(joiner.pid)
            os.killpg(joiner.pid, signal.SIGKILL)
            joiner.wait(10)
            hold.unlink()
            assert driver.wait(300) == 0, (tmp_path / "driver.log").read_text()[-3000:]
        finally:
            end(procs)

    assert (central / "crawldb" / "CURRENT").read_text().strip() == "v000001"
    # nothing the dead worker began is left: no temporary file anywhere in the crawl dir
    assert temp_files(central) == []
    # the driver ran both shards, and fetched every host once, the half-written one again
    markers = [m.read_text() for m in sorted((seg / "fetch").iterdir())]
    assert len(markers) == 2 and all(f"pid {driver.pid}\n" in m for m in markers), markers
    log = pq.read_table(seg / "fetchlog.parquet", columns=["host", "worker"]).to_pylist()
    workers = fetching_workers(log)
    assert sorted(workers) == host_keys(seg, [f"pc{i:02d}" for i in range(4)])
    assert not {int(w.rsplit(":", 1)[1]) for w in workers.values()} & joiners
    lan.crawl()
    assert tables(central) == tables(lan.crawl_dir)
    assert len(tables(central)["files"]) == 3 * 4  # a folder and two media files a host


def test_the_drivers_cleanup_keeps_what_another_machines_worker_is_writing(
    lan: LAN, tmp_path: Path
) -> None:
    """The driver, interrupted while a worker of another machine has a part half-way into
    place, removes its own dead writer's temporary file and not the other machine's: that
    worker then puts its part in place, and the driver run again finishes the round."""
    with running_luigid(tmp_path / "luigid", RETRY_LUIGID) as port:
        cfg, central, common, hold = setup(lan, tmp_path, port)
        seg = central / "segments" / "r000001"
        driver = crawl_process([*common, *driver_args(lan)], cfg, tmp_path / "driver.log", hold)
        joiner = crawl_process([*common, "--join"], cfg, tmp_path / "joiner.log", hold, OTHER)
        procs = [driver, joiner]
        try:
            theirs = wait_for("their held part", lambda: held_part(seg, machine=OTHER), procs)
            ours = wait_for(
                "our held part", lambda: held_part(seg, group_members(driver.pid)), procs
            )
            assert isinstance(theirs, Path) and isinstance(ours, Path)
            driver.send_signal(signal.SIGTERM)
            assert driver.wait(60) == 128 + signal.SIGTERM
            log = (tmp_path / "driver.log").read_text()
            assert "interrupted: no version is live yet; run the same command again" in log
            assert theirs.exists() and not ours.exists()
            hold.unlink()  # their part goes into place; their shard is done
            assert joiner.wait(120) == 0, (tmp_path / "joiner.log").read_text()[-3000:]
            assert not theirs.exists()
            again = crawl_process([*common, *driver_args(lan)], cfg, tmp_path / "again.log", hold)
            procs.append(again)
            assert again.wait(300) == 0, (tmp_path / "again.log").read_text()[-3000:]
        finally:
            end(procs)

    assert (central / "crawldb" / "CURRENT").read_text().strip() == "v000001"
    assert temp_files(central) == []
    markers = sorted(m.read_text().split(", ")[1] for m in (seg / "fetch").iterdir())
    # the joiner's shard is its own (its pid is that of its machine), the other the driver's
    assert [m.rsplit(" pid ", 1)[0] for m in markers] == sorted(
        [f"worker {socket.gethostname()}", f"worker {OTHER}"]
    )
    assert f"worker {socket.gethostname()} pid {again.pid}\n" in markers
    log = pq.read_table(seg / "fetchlog.parquet", columns=["host", "worker"]).to_pylist()
    machines = sorted(w.rsplit(":", 1)[0] for w in fetching_workers(log).values())
    assert machines == sorted([OTHER, OTHER, socket.gethostname(), socket.gethostname()])
    lan.crawl()
    assert tables(central) == tables(lan.crawl_dir)

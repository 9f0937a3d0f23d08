"""A fetch worker that dies in the middle of its shard: luigid marks the shard FAILED once
the worker has stopped pinging for `worker_disconnect_delay`, returns it to PENDING after
`retry_delay`, and the round's driver, kept alive by the round's pending tasks, runs it.

The hosts are real smbd servers, paused (SIGSTOP) while the shards start so that the
joining worker is surely in the middle of its shard when it is killed."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.cliproc import cli_argv
from tests.conftest import LAN
from tests.media import make_media
from tests.smbd import SmbServer, make_base_dir
from tests.test_scale_out import running_luigid, scheduler_tasks, tables

pytestmark = [pytest.mark.slow, pytest.mark.smb]

REPO = Path(__file__).resolve().parents[1]

# luigid prunes (notices dead workers, returns failed tasks to pending) on a fixed 60 s
# timer, and also on every get_work when prune_on_get_work is set: the driver asks for work
# every [worker] wait_interval while it waits for other workers' shards.
RETRY_LUIGID = """[scheduler]
worker_disconnect_delay = 5
retry_delay = 2
prune_on_get_work = true
[resources]
smb_connections = 8
"""


@pytest.fixture
def smb_hosts(lan: LAN, smbd_factory: Callable[..., SmbServer]) -> Iterator[list[SmbServer]]:
    """Three smbd hosts (new hosts, alike in cost: two shards hold two and one of them); the
    hosts file lists their media shares."""
    servers: list[SmbServer] = []
    roots: list[Path] = []
    for i in range(3):
        root = make_base_dir() / "tree"  # pytest's tmp_path is closed to smbd's guest user
        roots.append(root.parent)
        make_media(root / "media" / f"Artist {i}" / "song.mp3", "mp3", title=f"Song {i}")
        make_media(root / "media" / "Video" / "clip.mp4", "mp4", title=f"Clip {i}")
        (root / "private").mkdir()
        servers.append(smbd_factory(root_dir=root))
    lan.hosts_file.write_text("".join(f"{s.url}/media\n" for s in servers))
    yield servers
    for server in servers:
        server.resume()  # (smbd_factory stops them; a stopped one would not hear SIGTERM)
    for root in roots:
        shutil.rmtree(root, ignore_errors=True)


def host_key(server: SmbServer) -> str:
    return f"127.0.0.1:{server.port}"


def crawl_process(args: list[str], cfg: Path, log: Path) -> subprocess.Popen:
    with open(log, "w") as out:  # the child keeps its own descriptor
        return subprocess.Popen(
            cli_argv("crawl", *args),
            cwd=REPO,
            env={**os.environ, "LUIGI_CONFIG_PATH": str(cfg)},
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )


def running_shard_of(port: int, pid: int) -> dict | None:
    """The FetchShard that luigid shows running on the worker of process `pid`."""
    for task in scheduler_tasks(port, "RUNNING").values():
        if task["name"] == "FetchShard" and f"pid={pid})" in (task["worker_running"] or ""):
            return task
    return None


def group_members(pgid: int) -> set[int]:
    """The processes of a process group (/proc/PID/stat's fifth field)."""
    members = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # ended meanwhile
            continue
        if int(stat.rsplit(")", 1)[1].split()[2]) == pgid:
            members.add(int(entry.name))
    return members


def wait_for(what: str, check: Callable[[], object], procs: list, limit_s: float = 120) -> object:
    deadline = time.monotonic() + limit_s
    while not (found := check()):
        dead = [p.args[-1] for p in procs if p.poll() is not None]
        assert not dead and time.monotonic() < deadline, f"waiting for {what}; ended: {dead}"
        time.sleep(0.1)
    return found


def test_a_dead_workers_shard_is_run_again_by_the_driver(
    lan: LAN, smb_hosts: list[SmbServer], tmp_path: Path
) -> None:
    home = tmp_path / "luigid"
    with running_luigid(home, RETRY_LUIGID) as port:
        cfg = tmp_path / "central.cfg"
        cfg.write_text(
            "[sharecrawl]\nfetch_shards = 2\ncrawlers = 2\nround_seconds = 300\n"
            "host_timeout_s = 120\n"
        )
        central = tmp_path / "central-crawl"
        central.mkdir()
        scheduler = ["--crawl-dir", str(central), "--scheduler-url", f"http://127.0.0.1:{port}"]
        for server in smb_hosts:
            server.pause()  # the shards' hosts answer nothing: each shard hangs in its fetch
        driver = crawl_process(
            [
                *scheduler,
                "--hosts-file",
                str(lan.hosts_file),
                "--rounds",
                "1",
                "--runner",
                "inline",
            ],
            cfg,
            tmp_path / "driver.log",
        )
        joiner = crawl_process([*scheduler, "--join"], cfg, tmp_path / "joiner.log")
        procs = [driver, joiner]
        try:
            shard = wait_for(
                "the joiner's shard", lambda: running_shard_of(port, joiner.pid), procs
            )
            joiners = group_members(joiner.pid)  # the worker, its fork server, fetch processes
            assert len(joiners) > 1
            os.killpg(joiner.pid, signal.SIGKILL)
            joiner.wait(10)
            killed = time.monotonic()
            for server in smb_hosts:
                server.resume()
            seg = central / "segments" / "r000001"
            marker = seg / "fetch" / f"shard-{int(shard['params']['shard']):03d}-of-002"
            wait_for("the shard run again", marker.exists, [driver], limit_s=300)
            retried_s = time.monotonic() - killed
            assert driver.wait(300) == 0, (tmp_path / "driver.log").read_text()[-3000:]
        finally:
            for proc in procs:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)
        print(f"the dead worker's shard was done {retried_s:.1f} s after the kill")
        done = scheduler_tasks(port, "DONE")
        luigid_log = (home / "luigi-server.log").read_text()  # (luigid --logdir)

    # luigid failed the dead worker's shard, then the driver ran it to DONE
    failed = re.findall(r"Task '?(\S+?)'? is marked as running by disconnected worker", luigid_log)
    assert shard_id(shard, done) in failed, luigid_log[-3000:]
    assert {t["params"]["shard"] for t in done.values() if t["name"] == "FetchShard"} == {"0", "1"}
    assert (central / "crawldb" / "CURRENT").read_text().strip() == "v000001"

    # every shard's marker names the driver; every host was fetched once, by a fetch process
    # of the driver's (none of the dead worker's wrote anything)
    markers = [m.read_text() for m in sorted((seg / "fetch").iterdir())]
    assert len(markers) == 2 and all(f"pid {driver.pid}\n" in m for m in markers), markers
    log = pq.read_table(seg / "fetchlog.parquet", columns=["host", "worker"]).to_pylist()
    assert sorted(r["host"] for r in log) == sorted(host_key(s) for s in smb_hosts)
    for row in log:
        machine, pid = row["worker"].rsplit(":", 1)
        assert machine == socket.gethostname() and int(pid) not in joiners

    # the same tables as one process with the local scheduler
    lan.crawl()
    assert tables(central) == tables(lan.crawl_dir)
    assert len(tables(central)["files"]) == 4 * len(smb_hosts)  # 2 folders, 2 media files


def shard_id(shard: dict, done: dict[str, dict]) -> str:
    """The scheduler's id of the task `shard` (a task_list entry)."""
    (task_id,) = [k for k, t in done.items() if t["display_name"] == shard["display_name"]]
    return task_id

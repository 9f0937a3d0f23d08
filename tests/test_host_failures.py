"""Every host not crawled in a round is named with its reason, over real Samba servers: in
the crawl's closing lines, in `status` (text and --json) and in `hosts.status`. Hosts
switched off never fail a round; a wrong password is `auth_failed`, not offline (its files
stay searchable); a round in which every host that answered refused us exits 1."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cliproc import fork_server_workers, run_cli
from tests.conftest import LAN
from tests.media import make_media
from tests.smbd import SmbServer, free_port, make_base_dir

pytestmark = pytest.mark.smb

SHORT = "[sharecrawl]\nhost_timeout_s = 3\nliveness_timeout_s = 1\n"


def smb_host(server: SmbServer) -> str:
    return f"127.0.0.1:{server.port}"


def smb_name(server: SmbServer) -> str:
    """The name its report lines give it: its NetBIOS name (tests/smbd.py)."""
    return f"SCTEST{server.port}"


def hosts_by_name(lan: LAN, run_json) -> dict[str, dict]:
    rows = run_json(lan, "sql", "SELECT host, online, status, last_error FROM hosts")
    return {r["host"]: r for r in rows}


def test_unreachable_hosts_are_named_with_their_reason(
    lan: LAN, smbd_factory: Callable[..., SmbServer], luigi_cfg, run_json, capsys
) -> None:
    luigi_cfg(SHORT)
    root = make_base_dir() / "tree"
    make_media(root / "media" / "Kino" / "track.ogg", "ogg", artist="Kino", title="Kukushka")
    (root / "private").mkdir(parents=True)
    server = smbd_factory(root_dir=root)
    refused_port = free_port()  # nothing listens there
    lan.media("alpha", "music/song.mp3", artist="Madonna", title="Music")
    lan.hosts_file.write_text(
        f"file://{lan.host('alpha')}\nfile://{lan.hosts_dir / 'switched-off'}\n"
        f"{server.url}/media\nsmb://127.0.0.1:{refused_port}/media\nsmb://nas.invalid/media\n"
    )
    lan.crawl()
    server.pause()  # the kernel still accepts its port; SMB never answers
    try:
        capsys.readouterr()
        assert lan.cli("crawl", "--rounds", "1") == 0  # hosts switched off fail no round
        out = capsys.readouterr().out
    finally:
        server.resume()
    expected = {
        "switched-off": "offline",
        smb_host(server): "timed_out",
        f"127.0.0.1:{refused_port}": "refused",
        "nas.invalid": "unknown_name",
    }
    assert "hosts not crawled this round: 4" in out
    names = {h: smb_name(server) if h == smb_host(server) else h for h in expected}
    for host, status in expected.items():
        assert f"    {names[host]}: {status.replace('_', ' ')}: " in out, (host, out)

    rows = hosts_by_name(lan, run_json)
    assert {h: r["status"] for h, r in rows.items()} == {"alpha": "ok", **expected}
    assert not any(rows[h]["online"] for h in expected) and rows["alpha"]["online"]
    assert all(rows[h]["last_error"] for h in expected)
    status = run_json(lan, "status")
    assert {h["host"]: h["status"] for h in status["hosts_not_crawled"]} == expected
    assert status["hosts"]["not_crawled"] == 4 and status["hosts"]["by_status"]["ok"] == 1
    assert not status["config_failure"]
    capsys.readouterr()
    assert lan.cli("status") == 0
    text = capsys.readouterr().out
    assert all(f"{names[host]}: {s.replace('_', ' ')}" in text for host, s in expected.items())
    # the timed-out host's copies are hidden, not lost
    assert run_json(lan, "search", "kukushka") == []
    assert run_json(lan, "search", "--all-hosts", "kukushka")[0]["online_copies"] == 0


def test_share_refused_to_the_guest_is_access_denied(
    lan: LAN, smbd_factory: Callable[..., SmbServer], luigi_cfg, run_json, capsys
) -> None:
    """The guest session is set up, the `private` share refuses it: access_denied, online
    (the host is there); alone, that round exits 1 and still publishes."""
    luigi_cfg(SHORT)
    server = smbd_factory()
    lan.media("alpha", "music/song.mp3", artist="Madonna", title="Music")
    lan.hosts_file.write_text(f"file://{lan.host('alpha')}\n{server.url}/private\n")
    lan.crawl()
    row = hosts_by_name(lan, run_json)[smb_host(server)]
    assert row["status"] == "access_denied" and row["online"]
    assert "access denied" in row["last_error"]
    lan.hosts_file.write_text(f"{server.url}/private\n")
    capsys.readouterr()
    assert lan.cli("crawl", "--rounds", "1") == 1
    captured = capsys.readouterr()
    assert f"{smb_name(server)}: access denied: " in captured.out
    lines = [ln for ln in captured.err.splitlines() if ln.startswith("sharecrawl:")]
    assert len(lines) == 1 and "1 access denied" in lines[0]
    assert (lan.crawl_dir / "crawldb" / "CURRENT").read_text().strip() == "v000002"


@pytest.fixture
def private_lan(lan: LAN, smbd_factory: Callable[..., SmbServer], tmp_path: Path) -> tuple:
    """A file host and the `private` share of an smbd (user root), with a song each."""
    root = make_base_dir() / "tree"
    make_media(root / "private" / "Kino" / "track.ogg", "ogg", artist="Kino", title="Kukushka")
    (root / "media").mkdir(parents=True)
    server = smbd_factory(root_dir=root)
    lan.media("alpha", "music/song.mp3", artist="Madonna", title="Music")
    lan.hosts_file.write_text(f"file://{lan.host('alpha')}\n{server.url}/private\n")
    cfg = tmp_path / "short.cfg"
    cfg.write_text(SHORT)
    return lan, server, cfg


def crawl(lan: LAN, cfg: Path, password: str, user: str = "root"):
    env = {"SHARECRAWL_SMB_USER": user, "SHARECRAWL_SMB_PASSWORD": password}
    return run_cli(
        "crawl",
        "--crawl-dir",
        str(lan.crawl_dir),
        "--hosts-file",
        str(lan.hosts_file),
        "--runner",
        "inline",
        env=env,
        config=cfg,
    )


def test_wrong_password_is_auth_failed_and_stays_searchable(private_lan, run_json) -> None:
    lan, server, cfg = private_lan
    first = crawl(lan, cfg, server.password)
    assert first.returncode == 0, first.stderr
    assert run_json(lan, "search", "kukushka")[0]["online_copies"] == 1

    wrong = "not-" + server.password
    second = crawl(lan, cfg, wrong)
    assert second.returncode == 0, second.stderr  # the file host was crawled
    assert f"    {smb_name(server)}: auth failed: " in second.stdout
    assert "its files stay searchable" in second.stdout
    row = hosts_by_name(lan, run_json)[smb_host(server)]
    assert row["status"] == "auth_failed" and row["online"] and "logon failure" in row["last_error"]
    status = run_json(lan, "status")
    expected = {"host": smb_host(server), "name": smb_name(server), "status": "auth_failed"}
    expected["error"] = row["last_error"]
    assert status["hosts_not_crawled"] == [expected]
    text = run_cli("status", "--crawl-dir", str(lan.crawl_dir)).stdout
    assert f"    {smb_name(server)}: auth failed: logon failure" in text
    found = run_json(lan, "search", "kukushka")  # its copies are still shown, online
    assert found and found[0]["online_copies"] == 1
    secret = wrong.encode()
    assert not [p for p in lan.crawl_dir.rglob("*") if p.is_file() and secret in p.read_bytes()]
    assert wrong not in second.stdout + second.stderr


def test_round_where_every_reachable_host_refuses_exits_1(private_lan, run_json) -> None:
    lan, server, cfg = private_lan
    assert crawl(lan, cfg, server.password).returncode == 0
    media_before = run_json(lan, "sql", "SELECT host, path FROM media ORDER BY ALL")
    # only the Samba host, and a host switched off (which never counts either way)
    lan.hosts_file.write_text(f"{server.url}/private\nsmb://127.0.0.1:{free_port()}/media\n")
    done = crawl(lan, cfg, "not-" + server.password)
    assert done.returncode == 1, done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("sharecrawl:")]
    assert len(lines) == 1 and "every host that answered refused the crawler" in lines[0]
    assert "1 auth failed" in lines[0] and "Traceback" not in done.stderr
    # the round is still published, whole: the Samba host's media stay
    assert (lan.crawl_dir / "crawldb" / "CURRENT").read_text().strip() == "v000002"
    after = run_json(lan, "sql", "SELECT host, path FROM media ORDER BY ALL")
    assert after == [r for r in media_before if r["host"] == smb_host(server)] and after
    status = run_json(lan, "status")
    assert status["config_failure"] and status["round"] == 2
    assert run_json(lan, "search", "kukushka")[0]["online_copies"] == 1


def test_status_json_of_a_round_before_the_status_column(lan: LAN, run_json) -> None:
    """Versions written before hosts.status: status derives it from `online`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sharecrawl.crawl_io.crawldb.version_manifest import write_manifest

    lan.media("alpha", "music/song.mp3", artist="Madonna", title="Music")
    lan.write_hosts("alpha")
    lan.crawl()
    path = lan.crawl_dir / "crawldb" / "v000001" / "hosts.parquet"
    table = pq.read_table(path)
    old = table.drop_columns(["status"]).set_column(
        table.schema.get_field_index("online"), "online", pa.array([False])
    )
    pq.write_table(old, path)
    write_manifest(path.parent, {})  # as the older release published it: consistent
    status = run_json(lan, "status")
    assert status["hosts_not_crawled"][0]["status"] == "offline"
    assert json.dumps(status)


def sockets_to(port: int) -> set[int]:
    """The inodes of the TCP sockets connected to `port` on this machine."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[2].rsplit(":", 1)[1], 16) == port:
                inodes.add(int(fields[9]))
    return inodes


def worker_connected_to(port: int) -> int | None:
    """The fork server's child that holds a connection to `port`: the fetch worker of the
    host listening there."""
    inodes = sockets_to(port)
    for pid in fork_server_workers(os.getpid()):  # the crawl command's workers
        try:
            targets = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
        except OSError:  # gone meanwhile
            continue
        if any(t.startswith("socket:[") and int(t[8:-1]) in inodes for t in targets):
            return pid
    return None


def kill_worker_of(port: int, killed: list[int], done: threading.Event) -> None:
    """SIGKILL the fetch worker connected to `port` once it has waited there for a second,
    as the out-of-memory killer would."""
    seen: dict[int, float] = {}
    while not done.wait(0.1):
        pid = worker_connected_to(port)
        if pid is not None and time.monotonic() - seen.setdefault(pid, time.monotonic()) >= 1:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            return


def test_a_host_whose_fetch_process_is_killed_fails_alone_and_is_fetched_next_round(
    lan: LAN, smbd_factory: Callable[..., SmbServer], luigi_cfg, run_json, capsys
) -> None:
    """The kernel kills the worker fetching one host: that host is named as not crawled,
    with why, its files stay searchable, the round goes on for the others and ends well,
    and the next round fetches it. (With a pool of workers, its death broke the pool and
    the round, every round it happened in.)"""
    luigi_cfg("[sharecrawl]\nhost_timeout_s = 120\nliveness_timeout_s = 5\n")
    root = make_base_dir() / "tree"
    make_media(root / "media" / "Kino" / "track.ogg", "ogg", artist="Kino", title="Kukushka")
    server = smbd_factory(root_dir=root)
    lan.media("alpha", "music/song.mp3", artist="Madonna", title="Music")
    lan.hosts_file.write_text(f"file://{lan.host('alpha')}\n{server.url}/media\n")
    lan.crawl()
    lan.media("alpha", "music/other.mp3", artist="Björk", title="Hyperballad")
    make_media(root / "media" / "Kino" / "blood.ogg", "ogg", artist="Kino", title="Gruppa krovi")
    killed: list[int] = []
    done = threading.Event()
    killer = threading.Thread(target=kill_worker_of, args=(server.port, killed, done))
    server.pause()  # the kernel still accepts its port; its worker waits for an answer
    killer.start()
    try:
        capsys.readouterr()
        assert lan.cli("crawl", "--rounds", "1") == 0
        out = capsys.readouterr().out
    finally:
        done.set()
        killer.join()
        server.resume()
    assert len(killed) == 1
    assert f"    {smb_name(server)}: error: its fetch process was killed by SIGKILL" in out, out
    rows = hosts_by_name(lan, run_json)
    assert rows["alpha"]["status"] == "ok" and rows[smb_host(server)]["status"] == "error"
    assert "out-of-memory killer" in rows[smb_host(server)]["last_error"]
    assert rows[smb_host(server)]["online"]  # not known to be off: its files stay found
    assert run_json(lan, "search", "hyperballad")  # the round went on for the others
    assert run_json(lan, "search", "kukushka") and not run_json(lan, "search", "krovi")

    lan.crawl()
    assert hosts_by_name(lan, run_json)[smb_host(server)]["status"] == "ok"
    assert run_json(lan, "search", "krovi")

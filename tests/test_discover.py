"""Ranges in the hosts file: parsed or refused in one line, swept on loopback addresses only,
and the machines found keep their identity when their address changes (docs/DESIGN.md,
Sources)."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from sharecrawl.crawl_io.discover import sweep
from sharecrawl.crawl_io.sources import ConfigError, parse_range_url, read_hosts_lines
from sharecrawl.pipeline.discovery import Sweeper
from sharecrawl.pipeline.settings import read_settings
from tests.conftest import LAN
from tests.smbd import SmbServer, make_base_dir, make_tree, start_smbd
from tests.test_web_lan import Server
from tests.watchtools import WatchProcess, hinted_paths, wait_for


def test_range_lines_read_as_ranges_and_hosts_as_before(tmp_path) -> None:
    net = parse_range_url("smb://bob@127.0.0.0:4455/24?notify=trusted")
    assert net is not None and (str(net.first), str(net.last), net.size) == (
        "127.0.0.0",
        "127.0.0.255",
        256,
    )
    assert (net.host.port, net.host.user, net.host.notify_trusted) == (4455, "bob", True)
    span = parse_range_url("smb://10.20.0.1-10.20.3.254")
    assert span is not None and span.size == 1022 and span.host.port is None
    assert parse_range_url("smb://10.20.3.17/music") is None  # a share, as before
    assert parse_range_url("smb://nas/16") is None
    for bad in ("smb://10.20.0.5/16", "smb://127.0.0.0/33", "smb://1.2.3.9-1.2.3.1"):
        with pytest.raises(ConfigError):
            parse_range_url(bad)
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("smb://10.0.0.0/8\nsmb://nas/music\n")
    with pytest.raises(ConfigError, match="allow-wide-ranges"):
        read_hosts_lines(hosts)
    listed, ranges = read_hosts_lines(hosts, allow_wide=True)
    assert [h.host for h in listed] == ["nas"] and ranges[0].size == 1 << 24


def test_a_malformed_or_wide_range_is_exit_2_and_nothing_written(lan: LAN, capsys) -> None:
    for line in ("smb://127.0.0.7/24", "smb://10.0.0.0/15"):
        lan.hosts_file.write_text(line + "\n")
        assert lan.cli("crawl") == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and line in err
        assert not lan.crawl_dir.exists()


def test_sweep_finds_exactly_the_listeners() -> None:
    addresses = ["127.0.0.21", "127.0.0.99", "127.0.0.200"]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    listeners = []
    for address in addresses:
        sock = socket.socket()
        sock.bind((address, port))
        sock.listen(8)
        listeners.append(sock)
    try:
        net = parse_range_url(f"smb://127.0.0.0:{port}/24")
        assert net is not None
        assert sweep(net.addresses(), port, 1.0, concurrency=64, rate=0) == addresses
        assert sweep(net.addresses(), port, 1.0, concurrency=8, rate=2000) == addresses
    finally:
        for sock in listeners:
            sock.close()


@pytest.mark.parametrize(
    ("minutes_ago", "swept"), [(58, True), (60, True), (53, False), (1, False)]
)
def test_an_hourly_sweep_is_due_though_the_timer_started_the_round_a_little_early(
    minutes_ago: int, swept: bool
) -> None:
    """Rounds an hourly timer starts come up to its random delay apart (README's units: two
    minutes) early or late: a sweep 58 minutes after the last is that round's, not the next
    one's; 53 minutes after is not yet due (nothing listens on the range: all refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    r = parse_range_url(f"smb://127.0.0.70-127.0.0.71:{port}")
    assert r is not None
    settings = replace(read_settings(), liveness_timeout_s=1.0, discover_every_s=3600.0)
    now = datetime(2030, 1, 1, tzinfo=UTC)
    last = {r.line: now - timedelta(minutes=minutes_ago)}
    rows, sweeps = Sweeper([], last, set(), settings, now=now).rows([r], set())
    assert rows == []
    assert [(s["swept"], s["n_addresses"]) for s in sweeps] == [(swept, 2 if swept else 0)]


def _free_on_all(addresses: list[str]) -> int:
    for _ in range(50):
        with socket.socket() as s:
            s.bind((addresses[0], 0))
            port = s.getsockname()[1]
        try:
            for address in addresses[1:]:
                with socket.socket() as s:
                    s.bind((address, port))
            return port
        except OSError:
            continue
    raise RuntimeError("no port free on every address")


@pytest.fixture
def machines(smbd_factory) -> Iterator[Callable[..., SmbServer]]:
    """start(name, address, base=None): a machine; the same base is the same machine."""
    port = _free_on_all([f"127.0.0.{n}" for n in (5, 6, 7, 9)])
    started: list[SmbServer] = []

    def start(name: str, address: str, base=None) -> SmbServer:
        if base is None:
            base = make_base_dir()
            make_tree(base / "tree")
        server = start_smbd(
            base / "server", base / "tree", port=port, host=address, netbios_name=name
        )
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


pytestmark = pytest.mark.smb


def test_sweep_finds_machines_and_a_moved_one_keeps_its_identity(
    lan: LAN, machines, luigi_cfg, run_json, capsys
) -> None:
    luigi_cfg("[sharecrawl]\nliveness_timeout_s = 1\ndiscover_every_s = 0\n")
    alpha = machines("ALPHA", "127.0.0.5")
    machines("BRAVO", "127.0.0.6")
    machines("CHARLIE", "127.0.0.7")
    port = alpha.port
    lan.hosts_file.write_text(f"smb://127.0.0.0:{port}/24\n")
    lan.crawl()
    hosts = run_json(lan, "sql", "SELECT * FROM hosts ORDER BY host")
    assert [(h["host"], h["address"], h["netbios_name"]) for h in hosts] == [
        (f"ALPHA:{port}", "127.0.0.5", "ALPHA"),
        (f"BRAVO:{port}", "127.0.0.6", "BRAVO"),
        (f"CHARLIE:{port}", "127.0.0.7", "CHARLIE"),
    ]
    assert all(h["online"] and h["server_guid"] and h["dialect"] for h in hosts)
    assert {h["discovered_by"] for h in hosts} == {f"smb://127.0.0.0:{port}/24"}
    sweep_row = run_json(lan, "status")["sweeps"][0]
    assert (sweep_row["n_addresses"], sweep_row["n_smb"], sweep_row["n_new"]) == (256, 3, 3)
    works = run_json(lan, "sql", "SELECT * FROM works ORDER BY ALL")
    files = run_json(lan, "sql", "SELECT host, share, path FROM files ORDER BY ALL")

    alpha.stop()  # ALPHA gets another lease: same machine (state directory, name)
    machines("ALPHA", "127.0.0.9", base=alpha.base.parent)
    capsys.readouterr()
    lan.crawl()
    assert "  ALPHA moved: 127.0.0.5 -> 127.0.0.9" in capsys.readouterr().out  # by its name
    row = run_json(lan, "sql", f"SELECT * FROM hosts WHERE host = 'ALPHA:{port}'")[0]
    assert row["address"] == "127.0.0.9" and row["online"]
    assert row["addresses_seen"] == ["127.0.0.5", "127.0.0.9"]
    assert len(run_json(lan, "sql", "SELECT host FROM hosts")) == 3  # no ghost
    tags = run_json(
        lan,
        "sql",
        f"SELECT coalesce(sum(n_tags_read), 0) AS n FROM fetchlog "
        f"WHERE round = 2 AND host = 'ALPHA:{port}'",
    )
    assert tags == [{"n": 0}]
    assert run_json(lan, "sql", "SELECT * FROM works ORDER BY ALL") == works
    assert run_json(lan, "sql", "SELECT host, share, path FROM files ORDER BY ALL") == files

    machines("DELTA", "127.0.0.5")  # the old lease, another machine: a new host
    lan.crawl()
    hosts = run_json(lan, "sql", "SELECT host, address, online FROM hosts ORDER BY host")
    assert [h["host"] for h in hosts] == [
        f"{n}:{port}" for n in ("ALPHA", "BRAVO", "CHARLIE", "DELTA")
    ]
    assert hosts[0]["address"] == "127.0.0.9" and hosts[3]["address"] == "127.0.0.5"


def test_a_listed_host_is_named_as_people_know_it(
    lan: LAN, machines, luigi_cfg, run_json, capsys
) -> None:
    luigi_cfg("[sharecrawl]\nliveness_timeout_s = 1\n")
    dorm = machines("DORM5-PC", "127.0.0.5")
    key = f"127.0.0.5:{dorm.port}"
    lan.hosts_file.write_text(f"smb://{key}/media\n")
    lan.crawl()
    best = run_json(lan, "search", "madonna song")[0]["best"]
    assert (best["host"], best["host_name"]) == (key, "DORM5-PC")
    assert best["url"].startswith(f"smb://{key}/media/")  # URLs keep the address
    capsys.readouterr()
    assert lan.cli("search", "madonna song") == 0
    assert f"  DORM5-PC  smb://{key}/media/" in capsys.readouterr().out
    page = Server(lan.crawl_dir)
    try:
        code, _, html = page.get("/?q=madonna+song")
    finally:
        page.stop()
    assert code == 200 and '<span class="host">DORM5-PC</span>' in html
    assert "\\\\127.0.0.5\\media\\Music\\" in html  # Explorer reaches the address

    dorm.stop()
    assert lan.cli("crawl") == 1  # its one host switched off: no host answered at all
    status = run_json(lan, "status")
    assert [(h["host"], h["name"]) for h in status["hosts_not_crawled"]] == [(key, "DORM5-PC")]
    capsys.readouterr()
    assert lan.cli("status") == 0
    assert "\n    DORM5-PC: refused: " in capsys.readouterr().out


def test_watch_follows_the_hosts_a_range_found(lan: LAN, machines, luigi_cfg, tmp_path) -> None:
    luigi_cfg("[sharecrawl]\nliveness_timeout_s = 1\ndiscover_every_s = 0\n")
    echo = machines("ECHO", "127.0.0.6")
    line = f"smb://127.0.0.0:{echo.port}/24"
    lan.hosts_file.write_text(line + "\n")
    lan.crawl()
    watch = WatchProcess(tmp_path / "watch", [line], crawl_dir=lan.crawl_dir)
    try:
        watch.wait_watching(f"ECHO:{echo.port}", ["media"])  # its key, at 127.0.0.6
        (echo.root_dir / "media" / "new.txt").write_text("n")
        wait_for(lambda: "new.txt" in hinted_paths(watch), 30, "a hint", watch)
        assert {r["host"] for r in watch.hints()} == {f"ECHO:{echo.port}"}
        assert watch.stop() == 0
    finally:
        watch.kill()


def test_a_damaged_sweep_record_is_one_line_and_the_range_is_swept(
    lan: LAN, luigi_cfg, run_json, capsys
) -> None:
    """The last round's discover.parquet damaged (a bad disk, a careless hand): the next round
    says so in one line and sweeps every range now; `status` still reads."""
    luigi_cfg("[sharecrawl]\nliveness_timeout_s = 1\n")
    with socket.socket() as s:  # a port nothing listens on: every address refuses
        s.bind(("127.0.0.93", 0))
        port = s.getsockname()[1]
    (lan.host("plain") / "music").mkdir(parents=True)
    (lan.host("plain") / "music" / "a.txt").write_text("a")
    line = f"smb://127.0.0.92-127.0.0.93:{port}"
    lan.hosts_file.write_text(f"file://{lan.host('plain')}\n{line}\n")
    lan.crawl()
    record = lan.crawl_dir / "segments" / "r000001" / "discover.parquet"
    record.write_bytes(record.read_bytes()[:40])
    capsys.readouterr()
    assert lan.cli("crawl", "--rounds", "1") == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert [x for x in err.splitlines() if "discover.parquet" in x] == [
        f"sharecrawl: {record}: damaged (Parquet magic bytes not found in footer. Either the "
        "file is corrupted or this is not a parquet file.): every range is swept now"
    ]
    sweep = run_json(lan, "status")["sweeps"][0]
    assert (sweep["line"], sweep["swept"], sweep["n_addresses"]) == (line, True, 2)
    record = lan.crawl_dir / "segments" / "r000002" / "discover.parquet"
    record.write_bytes(b"not parquet")
    assert "sweeps" not in run_json(lan, "status")
